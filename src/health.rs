//! Readiness: background checks of every upstream, and the state `/health` reports.
//!
//! Each upstream is checked every `health.interval`: its `health_url` when it has one (any 2xx
//! is healthy), else a scrape of its metrics URL (shared with `/metrics` through the scraper's
//! single-flight). sysport is ready when every `required` upstream is healthy. Before an
//! upstream's first check its state is `DYN_SYSTEM_STARTING_HEALTH_STATUS`. Once shutdown begins
//! it is never ready again. `/live` never looks at any of this.
//!
//! An upstream with `stall_after` is also not ready while its engine is stalled (see
//! [`crate::stall`]); each check feeds its stall [`Watch`]. An upstream with `canary_after` is
//! not ready while its last canary failed (see [`crate::canary`]); each check feeds its canary
//! [`Tracker`] and sends the canaries that are due. With the vitals on (`vitals.window`), each
//! check's reading of the engine's vitals families goes to [`crate::vitals`]. One read per
//! check serves all three: the page a readiness scrape fetched, or a `name[]` read of the
//! families they need, made while the health URL is asked.

use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use crate::canary::{self, CanaryStatus, EngineReading, Outcome, Seen, Tracker};
use crate::config::{HealthConfig, StartingStatus, UpstreamConfig};
use crate::scrape::ScrapeError;
use crate::scrape::{Scraper, UpstreamResult};
use crate::stall::{self, Reading, StallStatus, Unread, Watch};
use crate::telemetry::Telemetry;
use crate::vitals::Vitals;

/// Why a check of an upstream failed, with the facts of the failure.
#[derive(Debug, Clone, thiserror::Error)]
pub(crate) enum CheckError {
    /// The health URL answered other than 2xx, or not at all.
    #[error("health check failed: {0}")]
    Health(ScrapeError),
    /// The scrape of the metrics URL (the check of an upstream without a health URL) failed.
    #[error("scrape failed: {0}")]
    Scrape(ScrapeError),
    /// The scrape gave nothing for the upstream.
    #[error("no scrape result")]
    NoResult,
}

/// One upstream's last check.
#[derive(Debug, Clone, Default)]
struct Check {
    /// `None` until the first check finishes.
    healthy: Option<bool>,
    last_error: Option<CheckError>,
    last_check: Option<SystemTime>,
    /// With `stall_after`: the stall judgement.
    stall: Option<Watch>,
    /// With `canary_after`: the canary schedule and judgement.
    canary: Option<Tracker>,
}

/// One upstream's readiness, as `/health` and the status page report it.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamReadiness {
    /// The upstream's name.
    pub name: String,
    /// Whether readiness needs it.
    pub required: bool,
    /// Its last check passed (before the first: the starting status).
    pub ready: bool,
    /// Whether it has been checked yet.
    pub checked: bool,
    /// Whether its last check passed (then a failed canary is why it is not ready).
    pub healthy: bool,
    /// `health_url`, or `scrape` (a scrape of its metrics URL).
    pub check: &'static str,
    /// When the last check finished.
    pub last_check: Option<SystemTime>,
    /// The error of the last failed check, kept after it passes again.
    pub last_error: Option<CheckError>,
    /// With `stall_after`: the stall judgement now.
    pub stall: Option<StallStatus>,
    /// With `canary_after`: the canaries' state now.
    pub canary: Option<CanaryStatus>,
}

/// The readiness state machine, written by the check task and read by `/health`.
#[derive(Debug)]
pub(crate) struct Readiness {
    starting: StartingStatus,
    upstreams: Vec<(String, bool, bool)>,
    checks: Mutex<Vec<Check>>,
    shutting_down: AtomicBool,
    ready: AtomicBool,
}

impl Readiness {
    /// A state for these upstreams, none checked yet.
    pub(crate) fn new(health: &HealthConfig, upstreams: &[UpstreamConfig]) -> Readiness {
        let r = Readiness {
            starting: health.starting_status,
            upstreams: upstreams
                .iter()
                .map(|u| (u.name.clone(), u.required, u.health_url.is_some()))
                .collect(),
            checks: Mutex::new(
                upstreams
                    .iter()
                    .map(|u| Check {
                        stall: u.stall.as_ref().map(|s| Watch::new(s.after)),
                        canary: u
                            .canary
                            .as_ref()
                            .map(|c| Tracker::new(c.after, c.live_failures)),
                        ..Check::default()
                    })
                    .collect(),
            ),
            shutting_down: AtomicBool::new(false),
            ready: AtomicBool::new(false),
        };
        r.ready.store(
            r.compute(&r.checks.lock().expect("checks lock")),
            Ordering::Release,
        );
        r
    }

    /// Whether `/health` answers 200.
    pub(crate) fn is_ready(&self) -> bool {
        !self.shutting_down.load(Ordering::Acquire) && self.ready.load(Ordering::Acquire)
    }

    /// From now on never ready (SIGTERM).
    pub(crate) fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
    }

    /// Whether shutdown has begun.
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    fn upstream_ready(&self, check: &Check) -> bool {
        check
            .healthy
            .unwrap_or(self.starting == StartingStatus::Ready)
            && !check.stall.as_ref().is_some_and(Watch::is_stalled)
            && !check.canary.as_ref().is_some_and(Tracker::is_failed)
    }

    fn compute(&self, checks: &[Check]) -> bool {
        self.upstreams
            .iter()
            .zip(checks)
            .all(|((_, required, _), c)| !required || self.upstream_ready(c))
    }

    /// Records a check of upstream `i`; returns the new overall readiness.
    pub(crate) fn record(&self, i: usize, result: Result<(), CheckError>) -> bool {
        let mut checks = self.checks.lock().expect("checks lock");
        let c = &mut checks[i];
        let healthy = result.is_ok();
        if c.healthy != Some(healthy) {
            let name = &self.upstreams[i].0;
            match &result {
                Ok(()) => tracing::info!(upstream = %name, "upstream healthy"),
                Err(e) => tracing::warn!(upstream = %name, error = %e, "upstream not healthy"),
            }
        }
        c.healthy = Some(healthy);
        c.last_check = Some(SystemTime::now());
        if let Err(e) = result {
            c.last_error = Some(e);
        }
        self.update(&checks)
    }

    /// Feeds upstream `i`'s stall watch (if it has one) with what the check scheduled `at`
    /// read, or why it read nothing; returns the new overall readiness.
    pub(crate) fn observe_stall(
        &self,
        i: usize,
        at: Instant,
        reading: Result<Reading, Unread>,
    ) -> bool {
        let mut checks = self.checks.lock().expect("checks lock");
        if let Some(watch) = checks[i].stall.as_mut() {
            let was = watch.is_stalled();
            if watch.observe(at, reading) != was {
                let name = &self.upstreams[i].0;
                let detail = watch.status(Instant::now()).describe();
                if was {
                    tracing::info!(upstream = %name, %detail, "engine progressing again");
                } else {
                    tracing::warn!(upstream = %name, %detail, "engine stalled");
                }
            }
        }
        self.update(&checks)
    }

    /// Feeds upstream `i`'s canary tracker (if it has one) with what the check made `at` saw;
    /// returns whether a canary is due (the caller sends it and calls [`Self::finish_canary`]).
    pub(crate) fn observe_canary(&self, i: usize, at: Instant, seen: Seen) -> bool {
        let mut checks = self.checks.lock().expect("checks lock");
        let Some(tracker) = checks[i].canary.as_mut() else {
            return false;
        };
        let was = tracker.is_failed();
        let due = tracker.observe(at, seen);
        if was && !tracker.is_failed() {
            let name = &self.upstreams[i].0;
            tracing::info!(upstream = %name, "engine progressing: canary failure cleared");
        }
        self.update(&checks);
        due
    }

    /// The model upstream `i`'s engine named for its last canary.
    pub(crate) fn canary_model(&self, i: usize) -> Option<String> {
        let checks = self.checks.lock().expect("checks lock");
        checks[i].canary.as_ref().and_then(|t| t.model.clone())
    }

    /// Records upstream `i`'s canary sent at `sent`; returns the new overall readiness.
    pub(crate) fn finish_canary(
        &self,
        i: usize,
        sent: Instant,
        outcome: Outcome,
        model: Option<String>,
    ) -> bool {
        let mut checks = self.checks.lock().expect("checks lock");
        let Some(tracker) = checks[i].canary.as_mut() else {
            return self.update(&checks);
        };
        let name = &self.upstreams[i].0;
        match outcome.kind {
            canary::Kind::Success if tracker.is_failed() => {
                tracing::info!(upstream = %name, "canary passed again");
            }
            canary::Kind::Success => {}
            _ => tracing::warn!(upstream = %name, error = %outcome.detail, "canary failed"),
        }
        tracker.model = model;
        tracker.finish(sent, outcome);
        if tracker.is_failed() {
            // Ask the engine for its model again next time.
            tracker.model = None;
        }
        self.update(&checks)
    }

    /// The canary state of every upstream with `canary_after`, in configuration order.
    pub(crate) fn canaries(&self) -> Vec<(String, CanaryStatus)> {
        let checks = self.checks.lock().expect("checks lock");
        self.upstreams
            .iter()
            .zip(checks.iter())
            .filter_map(|((name, ..), c)| Some((name.clone(), c.canary.as_ref()?.status())))
            .collect()
    }

    /// The stall judgement of every upstream with `stall_after`, in configuration order: the
    /// read-only view `/live/engine`, the gauges and the status page share.
    pub(crate) fn stalls(&self) -> Vec<(String, StallStatus)> {
        let now = Instant::now();
        let checks = self.checks.lock().expect("checks lock");
        self.upstreams
            .iter()
            .zip(checks.iter())
            .filter_map(|((name, ..), c)| Some((name.clone(), c.stall.as_ref()?.status(now))))
            .collect()
    }

    fn update(&self, checks: &[Check]) -> bool {
        let ready = self.compute(checks);
        if self.ready.swap(ready, Ordering::AcqRel) != ready {
            tracing::info!(ready, "readiness changed");
        }
        ready
    }

    /// Each upstream's readiness, in configuration order.
    pub(crate) fn upstreams(&self) -> Vec<UpstreamReadiness> {
        let now = Instant::now();
        let checks = self.checks.lock().expect("checks lock");
        self.upstreams
            .iter()
            .zip(checks.iter())
            .map(|((name, required, has_url), c)| UpstreamReadiness {
                name: name.clone(),
                required: *required,
                ready: self.upstream_ready(c),
                checked: c.healthy.is_some(),
                healthy: c.healthy == Some(true),
                check: if *has_url { "health_url" } else { "scrape" },
                last_check: c.last_check,
                last_error: c.last_error.clone(),
                stall: c.stall.as_ref().map(|w| w.status(now)),
                canary: c.canary.as_ref().map(Tracker::status),
            })
            .collect()
    }

    /// Why `/health` is 503, in words: shutting down, or each required upstream that is not
    /// ready and its error. `None` when ready.
    pub(crate) fn not_ready_reason(&self) -> Option<String> {
        if self.is_shutting_down() {
            return Some("shutting down".to_owned());
        }
        if self.is_ready() {
            return None;
        }
        let failing: Vec<String> = self
            .upstreams()
            .into_iter()
            .filter(|u| u.required && !u.ready)
            .map(|u| match (&u.last_error, u.checked) {
                _ if u.stall.as_ref().is_some_and(|s| s.stalled) => {
                    let stall = u.stall.as_ref().expect("stalled");
                    format!("{} is stalled: {}", u.name, stall.describe())
                }
                _ if u.healthy && u.canary.as_ref().is_some_and(|c| c.failed.is_some()) => {
                    let failed = u.canary.as_ref().and_then(|c| c.failed.as_deref());
                    format!("{}: canary failed: {}", u.name, failed.unwrap_or_default())
                }
                (Some(err), true) => format!("{} is not ready: {err}", u.name),
                _ => format!(
                    "{} is not checked yet (starting status {})",
                    u.name, self.starting
                ),
            })
            .collect();
        // Empty only while a check is being recorded.
        (!failing.is_empty()).then(|| failing.join("; "))
    }

    /// The `/health` body: Dynamo's `status`, `uptime`, `endpoints`, plus per-upstream detail.
    pub(crate) fn report(&self, uptime_seconds: f64) -> (bool, Value) {
        let ready = self.is_ready();
        let mut endpoints = Map::new();
        let mut detail = Map::new();
        let mut stalled = Vec::new();
        let mut failed = Vec::new();
        let now = Instant::now();
        for u in self.upstreams() {
            let status = if u.ready { "ready" } else { "notready" };
            endpoints.insert(u.name.clone(), Value::from(status));
            let mut upstream = json!({
                "status": status,
                "required": u.required,
                "checked": u.checked,
                "check": u.check,
                "last_check_unix_seconds": u.last_check.and_then(|t| t.duration_since(UNIX_EPOCH).ok()).map(|d| d.as_secs_f64()),
                "last_error": u.last_error.as_ref().map(ToString::to_string),
            });
            if let Some(status) = &u.stall {
                if status.stalled && u.required {
                    stalled.push(format!("{}: {}", u.name, status.describe()));
                }
                upstream["stall"] = stall::status_json(status);
            }
            if let Some(status) = &u.canary {
                if let (Some(why), true) = (&status.failed, u.required && u.healthy) {
                    failed.push(format!("{}: canary failed: {why}", u.name));
                }
                upstream["canary"] = canary::status_json(status, now);
            }
            detail.insert(u.name, upstream);
        }
        let mut body = json!({
            "status": if ready { "ready" } else { "notready" },
            "uptime": uptime_seconds,
            "endpoints": endpoints,
            "upstreams": detail,
        });
        if self.is_shutting_down() {
            body["reason"] = Value::from("shutting down");
        } else {
            let mut reasons = Vec::new();
            if !stalled.is_empty() {
                reasons.push(format!("engine stalled: {}", stalled.join("; ")));
            }
            reasons.extend(failed);
            if !reasons.is_empty() {
                body["reason"] = Value::from(reasons.join("; "));
            }
        }
        (ready, body)
    }
}

/// Checks every upstream once, concurrently, and records the results as of `at`, when the
/// check was due: stall detection, canaries and the vitals measure their windows between due
/// times, as Prometheus stamps a scrape with its scheduled time, so a fetch that answers late
/// does not shorten one.
pub(crate) async fn check_all(
    scraper: &Scraper,
    readiness: &Readiness,
    vitals: &Vitals,
    client: &reqwest::Client,
    telemetry: &Telemetry,
    at: Instant,
) -> Vec<usize> {
    let checks = scraper
        .upstreams()
        .iter()
        .enumerate()
        .map(|(i, u)| async move {
            match &u.health_url {
                // The families stall detection, canaries and the vitals read are a fetch of
                // their own, made while the health URL answers.
                Some(url) => {
                    let (result, page) = tokio::join!(
                        check_url(client, url, u.timeout),
                        read_families(scraper, i, vitals.names(i))
                    );
                    (i, result, page)
                }
                None => {
                    let page = scraper
                        .scrape(&[i], None, None)
                        .await
                        .pop()
                        .map(|s| s.result);
                    let result = match &page {
                        Some(Ok(_)) => Ok(()),
                        Some(Err(e)) => Err(CheckError::Scrape(e.clone())),
                        None => Err(CheckError::NoResult),
                    };
                    (i, result, page)
                }
            }
        });
    let mut due = Vec::new();
    for (i, result, page) in futures_util::future::join_all(checks).await {
        let u = &scraper.upstreams()[i];
        let healthy = result.is_ok();
        readiness.record(i, result);
        let reading = canary::read(u, page.as_ref());
        let seen = match &reading {
            Some(Ok(r)) if healthy && r.asleep => Seen::Asleep,
            Some(Ok(r)) if healthy => Seen::Read(r.reading),
            _ => Seen::Down,
        };
        if let Some(reading) = reading {
            readiness.observe_stall(i, at, reading.map(EngineReading::for_stall));
        }
        if readiness.observe_canary(i, at, seen) {
            due.push(i);
        }
        if let Some(Ok(page)) = page.as_ref().filter(|_| vitals.reads(i)) {
            vitals.record(i, crate::vitals::read(&page.parsed, u.engine.preset(), at));
        }
    }
    telemetry.health_ready.set(readiness.is_ready() as i64);
    stall::set_gauges(&readiness.stalls(), telemetry);
    due
}

/// A read of the families stall detection and canaries (see [`canary::names`]) and the vitals
/// (`vitals`, their names) need from upstream `i`: the engine's `name[]` selection where it
/// has been shown faithful, else the full page, shared with `/metrics`. `None` when none is
/// wanted or the scrape gave no result.
async fn read_families(scraper: &Scraper, i: usize, vitals: &[String]) -> Option<UpstreamResult> {
    let u = &scraper.upstreams()[i];
    let mut names = canary::names(u);
    names.extend_from_slice(vitals);
    if names.is_empty() {
        return None;
    }
    let selection = crate::expfmt::Selection::new(names.iter().map(String::as_str));
    scraper
        .scrape(&[i], Some(&selection), None)
        .await
        .pop()
        .map(|s| s.result)
}

/// Sends upstream `i`'s canary and records how it ended.
async fn send_canary(
    scraper: std::sync::Arc<Scraper>,
    readiness: std::sync::Arc<Readiness>,
    client: reqwest::Client,
    telemetry: Telemetry,
    i: usize,
) {
    let u = &scraper.upstreams()[i];
    let Some(config) = &u.canary else { return };
    let sent = Instant::now();
    let (outcome, model) = canary::send(&client, config, readiness.canary_model(i)).await;
    canary::count(&telemetry, &u.name, &outcome);
    let ready = readiness.finish_canary(i, sent, outcome, model);
    telemetry.health_ready.set(ready as i64);
}

/// A GET of a health URL: any 2xx is healthy.
async fn check_url(
    client: &reqwest::Client,
    url: &crate::model::Url,
    timeout: Duration,
) -> Result<(), CheckError> {
    match client.get(url.clone()).timeout(timeout).send().await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => Err(CheckError::Health(ScrapeError::from_status(&resp))),
        Err(e) => Err(CheckError::Health(ScrapeError::from_reqwest(e, timeout))),
    }
}

/// Runs [`check_all`] every `interval` until `stop` fires.
pub(crate) async fn run(
    scraper: std::sync::Arc<Scraper>,
    readiness: std::sync::Arc<Readiness>,
    vitals: std::sync::Arc<Vitals>,
    client: reqwest::Client,
    telemetry: Telemetry,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let at = tokio::select! {
            at = tick.tick() => at.into_std(),
            _ = stop.changed() => return,
        };
        let due = tokio::select! {
            due = check_all(&scraper, &readiness, &vitals, &client, &telemetry, at) => due,
            _ = stop.changed() => return,
        };
        for i in due {
            tokio::spawn(send_canary(
                scraper.clone(),
                readiness.clone(),
                client.clone(),
                telemetry.clone(),
                i,
            ));
        }
        if *stop.borrow() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Url;

    fn upstream(name: &str, required: bool) -> UpstreamConfig {
        UpstreamConfig {
            keep: vec!["vllm:".into()],
            timeout: Duration::from_secs(1),
            required,
            ..UpstreamConfig::new(
                name,
                Url::parse("http://127.0.0.1:1/metrics").expect("valid"),
            )
        }
    }

    fn health(starting: StartingStatus) -> HealthConfig {
        HealthConfig {
            path: "/health".into(),
            live_path: "/live".into(),
            starting_status: starting,
            interval: Duration::from_secs(1),
        }
    }

    #[test]
    fn starting_status_decides_until_the_first_check() {
        let ups = [upstream("vllm", true)];
        assert!(!Readiness::new(&health(StartingStatus::NotReady), &ups).is_ready());
        let r = Readiness::new(&health(StartingStatus::Ready), &ups);
        assert!(r.is_ready());
        assert!(!r.record(0, Err(CheckError::NoResult)));
        assert!(r.record(0, Ok(())));
    }

    #[test]
    fn only_required_upstreams_gate_readiness() {
        let ups = [upstream("vllm", true), upstream("lmcache", false)];
        let r = Readiness::new(&health(StartingStatus::NotReady), &ups);
        assert!(!r.record(1, Ok(())));
        assert!(r.record(0, Ok(())));
        assert!(r.record(1, Err(CheckError::Scrape(ScrapeError::Refused))));
        let (ready, body) = r.report(1.5);
        assert!(ready);
        assert_eq!(body["status"], "ready");
        assert_eq!(body["endpoints"]["lmcache"], "notready");
        assert_eq!(
            body["upstreams"]["lmcache"]["last_error"],
            "scrape failed: connection refused"
        );
        assert_eq!(body["uptime"], 1.5);
    }

    #[test]
    fn not_ready_says_which_required_upstream_fails_and_why() {
        let ups = [
            upstream("vllm", true),
            upstream("lmcache", false),
            upstream("sglang", true),
        ];
        let r = Readiness::new(&health(StartingStatus::NotReady), &ups);
        assert_eq!(
            r.not_ready_reason().as_deref(),
            Some(
                "vllm is not checked yet (starting status notready); \
                 sglang is not checked yet (starting status notready)"
            )
        );
        r.record(0, Err(CheckError::Health(ScrapeError::Refused)));
        r.record(1, Err(CheckError::NoResult));
        r.record(2, Ok(()));
        assert_eq!(
            r.not_ready_reason().as_deref(),
            Some("vllm is not ready: health check failed: connection refused")
        );
        r.record(0, Ok(()));
        assert_eq!(r.not_ready_reason(), None);
        let lmcache = &r.upstreams()[1];
        assert!(!lmcache.ready && !lmcache.required && lmcache.checked);
        assert_eq!(lmcache.check, "scrape");
        r.begin_shutdown();
        assert_eq!(r.not_ready_reason().as_deref(), Some("shutting down"));
    }

    #[test]
    fn a_stalled_engine_is_not_ready_and_says_why_unless_not_required() {
        let stalling = |name: &str, required: bool| UpstreamConfig {
            stall: Some(crate::config::StallConfig::preset(
                crate::model::Engine::Vllm,
                Duration::ZERO,
            )),
            ..upstream(name, required)
        };
        let busy = |progress: f64| {
            Ok(Reading {
                running: Some(2.0),
                progress: Some(progress),
            })
        };
        let ups = [stalling("vllm", true), stalling("side", false)];
        let r = Readiness::new(&health(StartingStatus::NotReady), &ups);
        assert!(!r.record(1, Ok(())));
        assert!(r.record(0, Ok(())));
        // stall_after 0: the first busy reading without progress already counts.
        assert!(
            r.observe_stall(1, Instant::now(), busy(5.0)),
            "a side upstream's stall"
        );
        assert!(!r.observe_stall(0, Instant::now(), busy(5.0)));
        let (ready, body) = r.report(1.0);
        assert!(!ready);
        assert_eq!(body["endpoints"]["vllm"], "notready");
        assert_eq!(body["upstreams"]["vllm"]["stall"]["stalled"], true);
        assert_eq!(body["upstreams"]["vllm"]["stall"]["running"], 2.0);
        let reason = body["reason"].as_str().expect("a reason");
        assert!(
            reason.starts_with("engine stalled: vllm: 2 requests running, no progress for"),
            "{reason}"
        );
        assert!(!reason.contains("side"), "not required: {reason}");
        assert_eq!(body["upstreams"]["side"]["stall"]["stalled"], true);
        let stalled: Vec<String> = r
            .stalls()
            .into_iter()
            .filter(|(_, s)| s.stalled)
            .map(|(n, _)| n)
            .collect();
        assert_eq!(stalled, ["vllm", "side"]);
        // Nothing running clears it (with stall_after 0 any busy check would be a stall).
        let idle = Ok(Reading {
            running: Some(0.0),
            progress: Some(6.0),
        });
        assert!(r.observe_stall(0, Instant::now(), idle));
        assert_eq!(
            r.report(2.0).1["upstreams"]["vllm"]["stall"]["stalled"],
            false
        );
    }

    #[test]
    fn a_failed_canary_is_not_ready_and_a_down_engine_says_so_instead() {
        let mut u = upstream("vllm", true);
        let mut canary = crate::config::CanaryConfig::preset(&u, Duration::from_secs(1));
        canary.live_failures = 1;
        u.canary = Some(canary);
        let r = Readiness::new(&health(StartingStatus::NotReady), &[u]);
        assert!(r.record(0, Ok(())));
        let idle = Seen::Read(Reading {
            running: Some(0.0),
            progress: Some(1.0),
        });
        let start = Instant::now();
        assert!(!r.observe_canary(0, start, idle));
        assert!(r.observe_canary(0, start + Duration::from_secs(1), idle));
        let failed = Outcome {
            kind: canary::Kind::Timeout,
            detail: "timed out after 3s".into(),
            at: SystemTime::now(),
            took: Duration::from_secs(3),
        };
        assert!(!r.finish_canary(0, start, failed, Some("m".into())));
        assert_eq!(r.canary_model(0), None, "looked up again after a failure");
        let (ready, body) = r.report(1.0);
        assert!(!ready);
        assert_eq!(body["reason"], "vllm: canary failed: timed out after 3s");
        assert_eq!(
            r.not_ready_reason().as_deref(),
            Some("vllm: canary failed: timed out after 3s")
        );
        assert!(r.canaries()[0].1.dead);
        r.record(0, Err(CheckError::Health(ScrapeError::Refused)));
        assert_eq!(
            r.not_ready_reason().as_deref(),
            Some("vllm is not ready: health check failed: connection refused")
        );
        assert_eq!(r.report(2.0).1.get("reason"), None);
    }

    #[test]
    fn shutdown_is_never_ready_again() {
        let r = Readiness::new(&health(StartingStatus::Ready), &[upstream("vllm", true)]);
        r.begin_shutdown();
        assert!(!r.is_ready());
        r.record(0, Ok(()));
        let (ready, body) = r.report(0.0);
        assert!(!ready);
        assert_eq!(body["reason"], "shutting down");
    }
}
