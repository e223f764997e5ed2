//! The verdict, as a table: checks and canaries over time (the clock paused, one check a
//! second), and the verdict, the reason, `/health` and `/live/engine` each must give.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use serde_json::Value;

use super::latch::Health;
use super::upstream::Board;
use super::upstream::CheckError;
use crate::canary::{Kind, Outcome};
use crate::config::{CanaryConfig, Config, StallConfig, StartingStatus, UpstreamConfig};
use crate::model::{Engine, Reading, Url};
use crate::scrape::ScrapeError;
use crate::stall::CheckedAt;
use crate::telemetry::Telemetry;

/// What happens at a second of the table.
#[derive(Debug, Clone)]
enum Event {
    /// A check that passed and read the engine: running, waiting, the progress counters' sum.
    Read(f64, f64, f64),
    /// A check that passed and found the engine asleep.
    Asleep,
    /// A check that failed: connection refused.
    Refused,
    /// The canary in flight ends with this result (at the same second as the check that sent
    /// it).
    Canary(Kind),
}

/// One row: at second `at`, `event`; then the upstream's verdict word, sysport's reason for
/// not being ready (`None`: ready) and `/live/engine`'s status word.
struct Row {
    at: u64,
    event: Event,
    /// Whether that check made a canary due.
    due: bool,
    verdict: &'static str,
    reason: Option<&'static str>,
    live: &'static str,
}

const fn row(
    at: u64,
    event: Event,
    due: bool,
    verdict: &'static str,
    reason: Option<&'static str>,
    live: &'static str,
) -> Row {
    Row {
        at,
        event,
        due,
        verdict,
        reason,
        live,
    }
}

/// One vLLM upstream, `stall_after` 3 s, `canary_after` 2 s, `live_failures` 2.
fn config() -> Config {
    let mut u = UpstreamConfig::new(
        "vllm",
        Url::parse("http://127.0.0.1:1/metrics").expect("url"),
    );
    u.stall = Some(StallConfig::preset(Engine::Vllm, Duration::from_secs(3)));
    let mut canary = CanaryConfig::preset(&u, Duration::from_secs(2));
    canary.live_failures = 2;
    u.canary = Some(canary);
    let mut c = Config {
        upstreams: vec![u],
        ..Config::default()
    };
    c.health.starting_status = StartingStatus::NotReady;
    c
}

/// `dynamo_sysport_health_ready` as a page renders it.
fn health_ready(telemetry: &Telemetry) -> i64 {
    let mut out = Vec::new();
    let only = crate::expfmt::Selection::new(["dynamo_sysport_health_ready"]);
    telemetry.render_text(Some(&only), &[], std::time::Instant::now(), &mut out);
    let text = String::from_utf8(out).expect("utf-8");
    let line = text
        .lines()
        .find(|l| !l.starts_with('#'))
        .expect("the gauge");
    line.split(' ')
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("a value")
}

fn health() -> (Arc<Health>, Arc<Board>, Telemetry) {
    let telemetry = Telemetry::new();
    telemetry.register_upstream("vllm");
    let health = Arc::new(Health::new(telemetry.clone()));
    let board = health.configure(&config());
    (health, board, telemetry)
}

fn outcome(kind: Kind) -> Outcome {
    let detail = match kind {
        Kind::Success => String::new(),
        Kind::Timeout => "timed out after 3s".to_owned(),
        Kind::Unauthorized => "answered HTTP 401: the engine wants credentials".to_owned(),
        _ => kind.label().to_owned(),
    };
    Outcome {
        kind,
        detail,
        at: SystemTime::now(),
        took: Duration::from_millis(5),
    }
}

/// Plays `rows` and checks each.
async fn play(rows: &[Row]) {
    let (health, board, telemetry) = health();
    let start = tokio::time::Instant::now();
    let mut sent = None;
    for (n, r) in rows.iter().enumerate() {
        let at = start + Duration::from_secs(r.at);
        if at > tokio::time::Instant::now() {
            tokio::time::advance(at - tokio::time::Instant::now()).await;
        }
        let at: Instant = at.into_std();
        let read = |running, waiting, progress| Reading {
            running: Some(running),
            waiting: Some(waiting),
            progress: Some(progress),
            asleep: false,
        };
        let due = match r.event.clone() {
            Event::Read(running, waiting, progress) => {
                let reading = read(running, waiting, progress);
                health.observe(&board[0], CheckedAt::instant(at), Ok(()), Some(Ok(reading)))
            }
            Event::Asleep => {
                let reading = Reading {
                    asleep: true,
                    ..read(0.0, 0.0, 1.0)
                };
                health.observe(&board[0], CheckedAt::instant(at), Ok(()), Some(Ok(reading)))
            }
            Event::Refused => {
                let down = Err(CheckError::Health(ScrapeError::Refused));
                let unread = Some(Err(crate::stall::Unread::Scrape(ScrapeError::Refused)));
                health.observe(&board[0], CheckedAt::instant(at), down, unread)
            }
            Event::Canary(kind) => {
                let at = sent.take().expect("a canary in flight");
                health.finish_canary(&board[0], at, outcome(kind), Some("m".into()));
                false
            }
        };
        if due {
            sent = Some(at);
        }
        let ctx = format!("row {n} (t={} s, {:?})", r.at, r.event);
        assert_eq!(due, r.due, "{ctx}: canary due");
        let view = &health.views()[0];
        assert_eq!(view.verdict.word(), r.verdict, "{ctx}: verdict");
        let reason = health.not_ready_reason();
        assert_eq!(
            reason.as_deref().map(|s| s.split(" (").next().unwrap_or(s)),
            r.reason,
            "{ctx}: reason {reason:?}"
        );
        let (ready, body) = health.report(0.0, true);
        assert_eq!(ready, r.reason.is_none(), "{ctx}: /health");
        assert_eq!(
            body.get("reason").and_then(Value::as_str),
            reason.as_deref(),
            "{ctx}"
        );
        assert_eq!(
            health_ready(&telemetry),
            i64::from(ready),
            "{ctx}: the gauge says what /health says"
        );
        let (live, body) = health.live_engine(true);
        assert_eq!(body["status"], r.live, "{ctx}: /live/engine {body}");
        assert_eq!(live, r.live == "live", "{ctx}");
        let (_, cut) = health.live_engine(false);
        assert_eq!(
            cut["endpoints"]["vllm"], r.live,
            "{ctx}: /live/engine cut down {cut}"
        );
    }
}

use Event::*;

#[tokio::test(start_paused = true)]
async fn an_idle_engine_that_cannot_generate_then_queues_and_freezes() {
    const TIMEOUT: Option<&str> = Some("vllm: canary failed: timed out after 3s");
    const STALLED: Option<&str> =
        Some("vllm: engine stalled: 0 requests running, 5 waiting, no progress for 3.0 s");
    play(&[
        // Idle: nothing running or waiting, nothing moving.
        row(0, Read(0.0, 0.0, 10.0), false, "up", None, "live"),
        row(1, Read(0.0, 0.0, 10.0), false, "up", None, "live"),
        // Idle for canary_after: a canary goes out, and times out.
        row(2, Read(0.0, 0.0, 10.0), true, "up", None, "live"),
        row(
            2,
            Canary(Kind::Timeout),
            false,
            "canary_failed",
            TIMEOUT,
            "live",
        ),
        // The canary's own step is not traffic: it heals nothing.
        row(
            3,
            Read(0.0, 0.0, 11.0),
            false,
            "canary_failed",
            TIMEOUT,
            "live",
        ),
        // Two failed in a row (live_failures): the engine container is not live either.
        row(
            4,
            Read(0.0, 0.0, 11.0),
            true,
            "canary_failed",
            TIMEOUT,
            "live",
        ),
        row(
            4,
            Canary(Kind::Timeout),
            false,
            "canary_failed",
            TIMEOUT,
            "canary failed",
        ),
        // Requests queue and none runs: busy, so no canary; frozen for stall_after: stalled,
        // which comes before the canary's failure.
        row(
            5,
            Read(0.0, 5.0, 11.0),
            false,
            "canary_failed",
            TIMEOUT,
            "canary failed",
        ),
        row(
            6,
            Read(0.0, 5.0, 11.0),
            false,
            "canary_failed",
            TIMEOUT,
            "canary failed",
        ),
        row(
            7,
            Read(0.0, 5.0, 11.0),
            false,
            "canary_failed",
            TIMEOUT,
            "canary failed",
        ),
        row(
            8,
            Read(0.0, 5.0, 11.0),
            false,
            "stalled",
            STALLED,
            "stalled",
        ),
        // Down comes before everything, and is not a stall.
        row(
            9,
            Refused,
            false,
            "down",
            Some("vllm: health check failed: connection refused"),
            "canary failed",
        ),
        // Progress heals the stall and the canaries alike.
        row(10, Read(2.0, 0.0, 12.0), false, "up", None, "live"),
    ])
    .await;
}

#[tokio::test(start_paused = true)]
async fn refused_credentials_pause_the_canaries_with_a_back_off_and_leave_readiness_to_the_health_check()
 {
    play(&[
        row(0, Read(0.0, 0.0, 1.0), false, "up", None, "live"),
        row(2, Read(0.0, 0.0, 1.0), true, "up", None, "live"),
        row(2, Canary(Kind::Unauthorized), false, "up", None, "live"),
        // Paused for canary_after (2 s), then twice as long after each refusal; ready all along.
        row(3, Read(0.0, 0.0, 1.0), false, "up", None, "live"),
        row(4, Read(0.0, 0.0, 1.0), true, "up", None, "live"),
        row(4, Canary(Kind::Unauthorized), false, "up", None, "live"),
        row(7, Read(0.0, 0.0, 1.0), false, "up", None, "live"),
        row(8, Read(0.0, 0.0, 1.0), true, "up", None, "live"),
        row(8, Canary(Kind::CannotGenerate), false, "up", None, "live"),
        // Down and up again: the engine restarted, and is asked at the usual time.
        row(
            9,
            Refused,
            false,
            "down",
            Some("vllm: health check failed: connection refused"),
            "live",
        ),
        row(10, Read(0.0, 0.0, 1.0), false, "up", None, "live"),
        row(12, Read(0.0, 0.0, 1.0), true, "up", None, "live"),
        row(12, Canary(Kind::Success), false, "up", None, "live"),
    ])
    .await;
}

#[tokio::test(start_paused = true)]
async fn unchecked_follows_the_starting_status_and_asleep_is_ready_without_canaries() {
    let (health, _, telemetry) = health();
    assert_eq!(health.views()[0].verdict.word(), "unchecked");
    assert_eq!(
        health.not_ready_reason().as_deref(),
        Some("vllm: not checked yet (starting status notready)")
    );
    assert_eq!(health_ready(&telemetry), 0);
    play(&[
        row(0, Asleep, false, "asleep", None, "live"),
        // Asleep for longer than canary_after: no canary, and busy gauges count for nothing.
        row(5, Asleep, false, "asleep", None, "live"),
        row(6, Read(0.0, 0.0, 1.0), false, "up", None, "live"),
    ])
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_reload_that_keeps_an_upstream_keeps_its_verdict_and_its_canary_in_flight() {
    let (health, board, telemetry) = health();
    let at = tokio::time::Instant::now().into_std();
    let idle = Reading {
        running: Some(0.0),
        waiting: Some(0.0),
        progress: Some(1.0),
        asleep: false,
    };
    health.observe(&board[0], CheckedAt::instant(at), Ok(()), Some(Ok(idle)));
    let later = at + Duration::from_secs(2);
    assert!(
        health.observe(&board[0], CheckedAt::instant(later), Ok(()), Some(Ok(idle))),
        "due"
    );
    // A reload keeps the upstream (same name, URL, engine): the canary is still in flight, so
    // the new configuration's checks send no second one.
    let mut kept = config();
    kept.upstreams[0].stall.as_mut().expect("on").after = Duration::from_secs(9);
    let reloaded = health.configure(&kept);
    assert!(Arc::ptr_eq(&board[0], &reloaded[0]), "the same health");
    let much_later = later + Duration::from_secs(10);
    assert!(
        !health.observe(
            &reloaded[0],
            CheckedAt::instant(much_later),
            Ok(()),
            Some(Ok(idle))
        ),
        "in flight"
    );
    // It ends after the reload: its failure counts, and the gauge says what /health says.
    health.finish_canary(&board[0], later, outcome(Kind::Timeout), None);
    assert!(!health.is_ready());
    assert_eq!(health_ready(&telemetry), 0);
    // A reload that changes the URL is a new upstream: not checked yet.
    let mut moved = config();
    moved.upstreams[0].url = Url::parse("http://127.0.0.1:2/metrics").expect("url");
    let fresh = health.configure(&moved);
    assert!(!Arc::ptr_eq(&board[0], &fresh[0]));
    assert_eq!(health.views()[0].verdict.word(), "unchecked");
    // The old upstream's canary, ending now, changes nothing of the new one's readiness.
    health.finish_canary(&board[0], later, outcome(Kind::Success), None);
    assert_eq!(health.views()[0].verdict.word(), "unchecked");
    health.begin_shutdown();
    assert_eq!(health.not_ready_reason().as_deref(), Some("shutting down"));
    assert_eq!(health_ready(&telemetry), 0);
}

#[test]
fn only_required_upstreams_gate_readiness_and_each_is_named_once() {
    let telemetry = Telemetry::new();
    let health = Health::new(telemetry.clone());
    let mut c = config();
    let mut side = UpstreamConfig::new("lmcache", Url::parse("http://127.0.0.1:3/m").expect("url"));
    side.required = false;
    c.upstreams.push(side);
    let board = health.configure(&c);
    let now = Instant::now();
    health.observe(
        &board[1],
        CheckedAt::instant(now),
        Err(CheckError::Scrape(ScrapeError::Refused)),
        None,
    );
    assert_eq!(
        health.not_ready_reason().as_deref(),
        Some("vllm: not checked yet (starting status notready)")
    );
    health.observe(&board[0], CheckedAt::instant(now), Ok(()), None);
    assert!(health.is_ready());
    let (ready, body) = health.report(1.5, true);
    assert!(ready);
    assert_eq!(body["endpoints"]["lmcache"], "notready");
    assert_eq!(
        body["upstreams"]["lmcache"]["last_error"],
        "scrape failed: connection refused"
    );
    assert_eq!(body["upstreams"]["lmcache"]["check"], "scrape");
    assert_eq!(body["uptime"], 1.5);
    assert_eq!(body.get("reason"), None);
    // Cut down for a caller without credentials: the status and each upstream's word.
    let (_, cut) = health.report(1.5, false);
    let keys: Vec<&String> = cut.as_object().expect("object").keys().collect();
    assert_eq!(keys, ["endpoints", "status"]);
}
