//! Stall detection end to end: sysport on a loopback port in front of an engine page the test
//! changes, judged through `/health`, `/live/engine`, `/live` and the gauges.

mod common;

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::{Reply, Running, Upstream, config, eventually, metric, upstream_config};
use sysport::config::{Config, StallConfig};
use sysport::model::Engine;

const INTERVAL: Duration = Duration::from_millis(100);
const STALL_AFTER: Duration = Duration::from_millis(600);
/// What a check may take beyond its judgement on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(5);

/// A vLLM page: requests running, and the engine-step histogram's count.
fn page(running: u32, steps: u64) -> Reply {
    Reply::text(format!(
        "# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_sum{{engine=\"0\",model_name=\"m\"}} {sum}.0
vllm:iteration_tokens_total_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {steps}.0
vllm:iteration_tokens_total_count{{engine=\"0\",model_name=\"m\"}} {steps}.0
",
        sum = steps * 8
    ))
}

/// sysport in front of `engine` with vLLM's stall families and `after`.
fn stall_config(engine: &Upstream, health_url: bool) -> Config {
    let mut u = upstream_config("vllm", &engine.metrics_url(), &["vllm:"]);
    if health_url {
        u.health_url = Some(engine.health_url().parse().expect("url"));
    }
    u.stall = Some(StallConfig::preset(Engine::Vllm, STALL_AFTER));
    let mut c = config(vec![u]);
    c.health.interval = INTERVAL;
    c
}

async fn status(sp: &Running, path: &str) -> StatusCode {
    sp.get(path).await.0
}

/// `/health`'s JSON body.
async fn health(sp: &Running) -> serde_json::Value {
    serde_json::from_str(&sp.get("/health").await.1).expect("JSON")
}

/// The vllm upstream's `stall` detail of `/health`, as a number.
async fn stall_detail(sp: &Running, key: &str) -> Option<f64> {
    health(sp).await["upstreams"]["vllm"]["stall"][key].as_f64()
}

async fn gauge(sp: &Running, name: &str) -> Option<f64> {
    let (_, body) = sp.get(&format!("/metrics?name={name}")).await;
    let m = metric(&body, name).label("upstream", "vllm");
    (m.count() == 1).then(|| m.value())
}

/// Polls until `/live/engine` answers `code`, and returns how long that took.
async fn until_live_engine(sp: &Running, code: StatusCode, within: Duration) -> Duration {
    let started = Instant::now();
    eventually(within, &format!("/live/engine {code}"), || async {
        status(sp, "/live/engine").await == code
    })
    .await;
    started.elapsed()
}

/// Asserts at every poll that `/live/engine` is 200 and the engine is not stalled, until the
/// checks have seen the progress counters stand still (or move) for `window`: checks ran all
/// that time, and none called a stall.
async fn never_stalls_for(sp: &Running, window: Duration, progress_stands: bool) {
    let started = Instant::now();
    loop {
        assert_eq!(status(sp, "/live/engine").await, StatusCode::OK);
        assert_eq!(gauge(sp, "dynamo_sysport_engine_stalled").await, Some(0.0));
        let done = if progress_stands {
            stall_detail(sp, "progress_age_seconds")
                .await
                .is_some_and(|age| age >= window.as_secs_f64())
        } else {
            started.elapsed() >= window
        };
        if done {
            return;
        }
        assert!(started.elapsed() < window + MARGIN, "checks did not run");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn busy_and_frozen_turns_health_and_live_engine_503_until_progress() {
    let engine = Upstream::start(page(3, 100)).await;
    let started = Instant::now();
    let sp = Running::start(stall_config(&engine, false)).await;
    until_live_engine(&sp, StatusCode::SERVICE_UNAVAILABLE, STALL_AFTER + MARGIN).await;
    // Judged at a check, from checks that all saw requests running and the same count for
    // stall_after: never sooner.
    let took = started.elapsed();
    assert!(took >= STALL_AFTER, "stalled after {took:?}");
    let (code, body) = sp.get("/health").await;
    assert_eq!(code, StatusCode::SERVICE_UNAVAILABLE, "{body}");
    let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
    let reason = body["reason"].as_str().expect("a reason");
    assert!(
        reason.starts_with("vllm: engine stalled: 3 requests running, no progress for"),
        "{reason}"
    );
    assert_eq!(body["endpoints"]["vllm"], "notready");
    let stall = &body["upstreams"]["vllm"]["stall"];
    // Every key of the stall detail (docs/readiness.md), in /health and /status alike.
    let stall_keys: std::collections::BTreeSet<String> = [
        "stalled",
        "stall_after_seconds",
        "running",
        "no_progress_seconds",
        "progress_age_seconds",
        "unread",
        "waiting",
    ]
    .map(String::from)
    .into();
    let keys = |v: &serde_json::Value| -> std::collections::BTreeSet<String> {
        v.as_object().expect("an object").keys().cloned().collect()
    };
    assert_eq!(keys(stall), stall_keys, "{stall}");
    assert_eq!(stall["stalled"], true);
    assert!(stall["no_progress_seconds"].as_f64().expect("seconds") >= STALL_AFTER.as_secs_f64());
    let (_, engine_body) = sp.get("/live/engine").await;
    assert!(
        engine_body.contains("\"status\":\"stalled\""),
        "{engine_body}"
    );
    assert!(
        engine_body.contains("vllm: engine stalled: 3 requests running"),
        "{engine_body}"
    );
    // sysport itself is fine: its own liveness does not follow the engine's.
    assert_eq!(status(&sp, "/live").await, StatusCode::OK);
    assert_eq!(gauge(&sp, "dynamo_sysport_engine_stalled").await, Some(1.0));
    let age = gauge(&sp, "dynamo_sysport_engine_progress_age_seconds").await;
    assert!(age.expect("an age") >= STALL_AFTER.as_secs_f64(), "{age:?}");
    let (_, metrics) = sp.get("/metrics").await;
    assert_eq!(metric(&metrics, "dynamo_sysport_health_ready").value(), 0.0);
    // The status page and its JSON say it too: up (it answers), but stalled.
    let (_, status_json) = sp.get("/status").await;
    let status_json: serde_json::Value = serde_json::from_str(&status_json).expect("JSON");
    let vllm = &status_json["upstreams"][0];
    assert_eq!(vllm["state"], "stalled", "{vllm}");
    assert_eq!(vllm["up"], true, "{vllm}");
    assert_eq!(vllm["health"]["stall"]["stalled"], true, "{vllm}");
    assert_eq!(keys(&vllm["health"]["stall"]), stall_keys, "{vllm}");
    let not_ready = status_json["not_ready_reason"].as_str().expect("a reason");
    assert!(
        not_ready.starts_with("vllm: engine stalled: 3 requests running"),
        "{not_ready}"
    );
    let (_, html) = sp.get("/").await;
    assert!(html.contains(">stalled</span>"), "{html}");
    assert!(
        html.contains("engine stalled: 3 requests running"),
        "{html}"
    );

    // One more engine step: the next check clears it.
    engine.set(page(3, 101));
    until_live_engine(&sp, StatusCode::OK, INTERVAL + MARGIN).await;
    eventually(MARGIN, "/health 200", || async {
        status(&sp, "/health").await == StatusCode::OK
    })
    .await;
    assert_eq!(gauge(&sp, "dynamo_sysport_engine_stalled").await, Some(0.0));
    assert!(health(&sp).await.get("reason").is_none());
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn the_status_page_counts_a_stall_from_when_progress_stopped() {
    let engine = Upstream::start(page(3, 0)).await;
    let started = Instant::now();
    let sp = Running::start(stall_config(&engine, false)).await;
    // Three seconds of progress, then the engine freezes.
    let mut steps = 0;
    while started.elapsed() < Duration::from_secs(3) {
        steps += 1;
        engine.set(page(3, steps));
        tokio::time::sleep(INTERVAL / 2).await;
    }
    let frozen = Instant::now();
    until_live_engine(&sp, StatusCode::SERVICE_UNAVAILABLE, STALL_AFTER + MARGIN).await;
    let (_, html) = sp.get("/").await;
    let since_frozen = frozen.elapsed().as_secs_f64();
    let since_start = started.elapsed().as_secs_f64();
    // "stalled ... for N s": the seconds without progress, not the seconds since it came up.
    let shown: f64 = html
        .split("<span class=\"since\">for ")
        .nth(1)
        .and_then(|rest| rest.split(" s</span>").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no 'for N s' on the card: {html}"));
    assert!(
        shown <= since_frozen + 1.0 && shown < since_start - 2.0,
        "stalled for {shown} s: frozen {since_frozen:.1} s ago, up {since_start:.1} s"
    );
}

#[tokio::test]
async fn an_idle_engine_with_frozen_counters_never_stalls() {
    let engine = Upstream::start(page(0, 100)).await;
    let sp = Running::start(stall_config(&engine, false)).await;
    eventually(MARGIN, "ready", || async {
        status(&sp, "/health").await == StatusCode::OK
    })
    .await;
    never_stalls_for(&sp, STALL_AFTER * 3, true).await;
    assert_eq!(stall_detail(&sp, "running").await, Some(0.0));
    assert_eq!(status(&sp, "/health").await, StatusCode::OK);
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_counter_that_keeps_going_down_is_not_a_stall() {
    // An engine restarting over and over: its counters only ever go down.
    let engine = Upstream::start(page(2, 10_000)).await;
    let sp = Running::start(stall_config(&engine, false)).await;
    let started = Instant::now();
    let mut steps = 10_000;
    while started.elapsed() < STALL_AFTER * 3 {
        steps -= 1;
        engine.set(page(2, steps));
        assert_eq!(status(&sp, "/live/engine").await, StatusCode::OK);
        assert_eq!(gauge(&sp, "dynamo_sysport_engine_stalled").await, Some(0.0));
        tokio::time::sleep(INTERVAL / 2).await;
    }
    // The same engine frozen is caught: the test above could have seen a stall.
    until_live_engine(&sp, StatusCode::SERVICE_UNAVAILABLE, STALL_AFTER + MARGIN).await;
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn an_engine_that_cannot_be_scraped_is_down_not_stalled() {
    let mut engine = Upstream::start(page(3, 100)).await;
    let sp = Running::start(stall_config(&engine, false)).await;
    eventually(MARGIN, "first reading", || async {
        stall_detail(&sp, "running").await == Some(3.0)
    })
    .await;
    engine.stop().await;
    eventually(MARGIN, "down", || async {
        status(&sp, "/health").await == StatusCode::SERVICE_UNAVAILABLE
    })
    .await;
    never_stalls_for(&sp, STALL_AFTER * 3, false).await;
    let body = health(&sp).await;
    assert_eq!(body["upstreams"]["vllm"]["stall"]["stalled"], false);
    let unread = body["upstreams"]["vllm"]["stall"]["unread"]
        .as_str()
        .expect("why");
    assert!(
        unread.contains("cannot read the stall families"),
        "{unread}"
    );
    assert_eq!(
        body["reason"], "vllm: scrape failed: connection refused",
        "down, not stalled: {body}"
    );

    // Back with the very same page: the stall clock starts over from the first reading (whose
    // check may have been due a moment before the engine was back: an interval of slack).
    engine.restart().await;
    let took = until_live_engine(&sp, StatusCode::SERVICE_UNAVAILABLE, STALL_AFTER + MARGIN).await;
    assert!(took >= STALL_AFTER - INTERVAL, "stalled after {took:?}");
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_green_engine_health_url_does_not_hide_a_stall_read_with_name_selection() {
    // The engine's own /health stays 200 while it is stuck (gonka-ai/gonka #1421).
    let engine = Upstream::start(page(4, 7)).await;
    engine.set_selected(page(4, 7).body);
    let sp = Running::start(stall_config(&engine, true)).await;
    until_live_engine(&sp, StatusCode::SERVICE_UNAVAILABLE, STALL_AFTER + MARGIN).await;
    assert_eq!(
        status(&sp, "/health").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The stall reads asked the engine for the two families only.
    let queries = engine.queries();
    let selective = queries.iter().filter(|q| q.contains("name%5B%5D=")).count();
    assert!(selective >= 2, "{queries:?}");
    assert!(
        queries
            .iter()
            .any(|q| q.contains("name%5B%5D=vllm%3Anum_requests_running")
                && q.contains("name%5B%5D=vllm%3Aiteration_tokens_total_count")),
        "{queries:?}"
    );
    engine.set_selected(page(4, 8).body);
    until_live_engine(&sp, StatusCode::OK, INTERVAL + MARGIN).await;
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn without_stall_after_live_engine_is_always_200_and_there_are_no_stall_gauges() {
    let engine = Upstream::start(page(3, 100)).await;
    let sp = Running::start(config(vec![upstream_config(
        "vllm",
        &engine.metrics_url(),
        &["vllm:"],
    )]))
    .await;
    eventually(MARGIN, "ready", || async {
        status(&sp, "/health").await == StatusCode::OK
    })
    .await;
    assert_eq!(status(&sp, "/live/engine").await, StatusCode::OK);
    let (_, body) = sp.get("/metrics").await;
    assert!(!body.contains("dynamo_sysport_engine_stalled{"), "{body}");
    assert!(
        health(&sp).await["upstreams"]["vllm"]
            .get("stall")
            .is_none()
    );
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_reload_that_turns_stall_detection_off_frees_a_stalled_engine() {
    let engine = Upstream::start(page(3, 100)).await;
    let sp = Running::start(stall_config(&engine, false)).await;
    until_live_engine(&sp, StatusCode::SERVICE_UNAVAILABLE, STALL_AFTER + MARGIN).await;
    let mut off = stall_config(&engine, false);
    off.upstreams[0].stall = None;
    sp.handle.reload(off);
    assert_eq!(status(&sp, "/live/engine").await, StatusCode::OK);
    assert_eq!(gauge(&sp, "dynamo_sysport_engine_stalled").await, None);
    assert_eq!(
        gauge(&sp, "dynamo_sysport_engine_progress_age_seconds").await,
        None
    );
    eventually(MARGIN, "/health 200", || async {
        status(&sp, "/health").await == StatusCode::OK
    })
    .await;
    sp.shutdown().await.expect("clean shutdown");
}

/// A vLLM page with requests waiting too.
fn queued_page(running: u32, waiting: u32, steps: u64) -> Reply {
    let mut reply = page(running, steps);
    let mut body = String::from_utf8(reply.body).expect("text");
    body.push_str(&format!(
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine=\"0\",model_name=\"m\"}} {waiting}.0
"
    ));
    reply.body = body.into_bytes();
    reply
}

#[tokio::test]
async fn requests_queued_with_none_running_and_frozen_counters_are_a_stall() {
    // A scheduler that stopped with requests waiting and none running (vllm-project/vllm PR
    // #46811: /health 200 for hours, num_requests_running 0) is busy, and stuck.
    let engine = Upstream::start(queued_page(0, 5, 40)).await;
    let started = Instant::now();
    let sp = Running::start(stall_config(&engine, false)).await;
    eventually(STALL_AFTER + INTERVAL + MARGIN, "a stall", || async {
        health(&sp).await["reason"]
            .as_str()
            .is_some_and(|r| r.contains("engine stalled"))
    })
    .await;
    assert!(started.elapsed() >= STALL_AFTER, "{:?}", started.elapsed());
    let body = health(&sp).await;
    let reason = body["reason"].as_str().expect("a reason");
    assert!(
        reason.starts_with("vllm: engine stalled: 0 requests running, 5 waiting, no progress for"),
        "{reason}"
    );
    assert_eq!(body["upstreams"]["vllm"]["stall"]["waiting"], 5.0);
    assert_eq!(
        status(&sp, "/live/engine").await,
        StatusCode::SERVICE_UNAVAILABLE
    );
    // The queue drains: idle, however long the counters stand.
    engine.set(queued_page(0, 0, 40));
    until_live_engine(&sp, StatusCode::OK, INTERVAL + MARGIN).await;
    never_stalls_for(&sp, STALL_AFTER * 2, true).await;
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn one_slow_check_does_not_fail_the_engine_liveness() {
    // A check that times out is the upstream down for that check, not a stall and not a
    // failed canary: /live/engine (which restarts the engine) needs stall_after of busy checks
    // without progress, or live_failures canaries in a row.
    let engine = Upstream::start(page(2, 10)).await;
    let mut c = stall_config(&engine, false);
    c.upstreams[0].timeout = Duration::from_millis(300);
    let sp = Running::start(c).await;
    eventually(MARGIN, "ready", || async {
        status(&sp, "/health").await == StatusCode::OK
    })
    .await;
    let mut steps = 10;
    let mut next = |delay: Duration| {
        steps += 1;
        Reply {
            delay,
            ..page(2, steps)
        }
    };
    // Progress at every check, then one answer slower than the timeout, then progress again.
    engine.set(next(Duration::from_millis(700)));
    let slow_until = Instant::now() + Duration::from_millis(700);
    let mut saw_down = false;
    while Instant::now() < slow_until + STALL_AFTER * 2 {
        assert_eq!(status(&sp, "/live/engine").await, StatusCode::OK);
        saw_down |= status(&sp, "/health").await == StatusCode::SERVICE_UNAVAILABLE;
        if Instant::now() >= slow_until {
            engine.set(next(Duration::ZERO));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        saw_down,
        "the slow check made the upstream down for a moment"
    );
    assert_eq!(status(&sp, "/health").await, StatusCode::OK);
    sp.shutdown().await.expect("clean shutdown");
}
