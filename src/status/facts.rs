//! The facts the status page shows, gathered from sysport's own state, and their JSON form
//! (`GET /status`, whose schema the README documents and `tests/status.rs` pins).

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;
use serde::ser::SerializeMap;

use super::history::{History, Point};
use crate::config::Config;
use crate::health::{Badge, Health, Verdict};
use crate::model::{ShownUrl, routes};
use crate::scrape::Scraper;
use crate::telemetry::Telemetry;
use crate::views::Views;
use crate::vitals::{Report, Vitals};

/// What the facts are read from: the running configuration's parts and sysport's own metrics.
#[derive(Debug, Clone)]
pub(crate) struct Sources<'a> {
    pub config: &'a Config,
    pub scraper: &'a Scraper,
    /// The scrapes' recent history.
    pub history: &'a History,
    /// Readiness and each upstream's verdict.
    pub health: &'a Health,
    pub views: &'a Views,
    pub telemetry: &'a Telemetry,
    /// The engines' vitals.
    pub vitals: &'a Vitals,
    /// Where the main port listens, as a URL (`http://0.0.0.0:8081`).
    pub listen: &'a str,
    /// The OTLP export, when on.
    pub otlp: Option<crate::otlp::Report>,
}

/// Everything `/status` answers and `/` shows.
#[derive(Debug, Serialize)]
pub(crate) struct Facts {
    pub version: &'static str,
    pub uptime_seconds: f64,
    /// Whether `/health` answers 200.
    pub ready: bool,
    /// Why not: shutting down, or each required upstream that fails and its error.
    pub not_ready_reason: Option<String>,
    pub shutting_down: bool,
    pub listen: String,
    /// The configuration file, when there is one.
    pub config_file: Option<String>,
    pub paths: Paths,
    pub upstreams: Vec<UpstreamFacts>,
    /// The OTLP export, when on (`null` when off).
    pub otlp: Option<OtlpFacts>,
    /// The latest incidents (at most [`LATEST_INCIDENTS`]), newest first, as `/incidents`
    /// lists them.
    pub incidents: Vec<serde_json::Value>,
    /// The effective configuration as `check-config` prints it (URL passwords as `***`).
    #[serde(skip)]
    pub config: String,
}

/// The OTLP export: where it goes and how its last exports went.
#[derive(Debug, Serialize)]
pub(crate) struct OtlpFacts {
    pub endpoint: String,
    pub protocol: String,
    pub last_success_at: Option<Timestamp>,
    /// Data points in the last export that succeeded.
    pub last_points: u64,
    pub last_error: Option<String>,
    pub last_error_at: Option<Timestamp>,
}
/// How many incidents the status page lists.
pub(crate) const LATEST_INCIDENTS: usize = 5;

/// The routes this sysport serves.
#[derive(Debug, Serialize)]
pub(crate) struct Paths {
    pub metrics: &'static str,
    pub health: String,
    pub live: String,
    pub status: &'static str,
    /// `/metrics/<name>` of every view, `/metrics/router` first unless configured away.
    pub views: Vec<String>,
}

/// One upstream.
#[derive(Debug, Serialize)]
pub(crate) struct UpstreamFacts {
    pub name: String,
    /// The configured URL, its password (if any) as `***`.
    pub url: String,
    pub engine: &'static str,
    /// Whether the upstream keeps its engine's own families (the preset's first prefix):
    /// an LMCache upstream under the vLLM preset does not, and is not shown as vLLM.
    #[serde(skip)]
    pub engine_families: bool,
    /// The family-name prefixes it keeps.
    #[serde(skip)]
    pub keep: Vec<String>,
    pub required: bool,
    /// Whether the last scrape succeeded; `None` before the first.
    pub up: Option<bool>,
    /// The verdict's badge (the last scrape is beside it, in `up` and `last_scrape`).
    pub state: Badge,
    /// Since when the upstream has been up, or down.
    pub state_since: Option<Timestamp>,
    /// The error of the last failed scrape, kept after the upstream recovers.
    pub last_error: Option<String>,
    pub last_error_at: Option<Timestamp>,
    pub last_scrape: Option<LastScrapeFacts>,
    pub series: Series,
    pub response_bytes: Option<u64>,
    /// Seconds since the last successful scrape.
    pub data_age_seconds: Option<f64>,
    pub health: HealthFacts,
    /// The seconds of the last few minutes that saw scrapes, oldest first.
    pub history: Vec<Point>,
    /// What the engine is doing over `vitals.window` (see `docs/vitals.md`); `null` when the
    /// vitals are off.
    pub vitals: Option<Report>,
}

/// The last scrape.
#[derive(Debug, Serialize)]
pub(crate) struct LastScrapeFacts {
    pub at: Timestamp,
    pub duration_seconds: f64,
    /// `success`, or the `result` label of `dynamo_sysport_upstream_scrapes_total`.
    pub result: &'static str,
    /// `full` (the page) or `selective` (`name[]`, for `?name=` reads and views).
    pub read: &'static str,
}

/// The upstream's readiness check, as `/health` reports it.
#[derive(Debug, Serialize)]
pub(crate) struct HealthFacts {
    pub ready: bool,
    pub checked: bool,
    /// `health_url` or `scrape`.
    pub check: &'static str,
    pub last_check_at: Option<Timestamp>,
    pub last_error: Option<String>,
    /// Why the upstream is not ready, in its verdict's words (`engine stalled: ...`,
    /// `canary failed: ...`, `health check failed: ...`); `null` while ready.
    pub reason: Option<String>,
    /// With `stall_after`: the stall judgement, as `/health` reports it; `null` without.
    pub stall: Option<serde_json::Value>,
    /// While stalled: what it is, in words.
    pub stalled: Option<String>,
    /// With `canary_after`: the canaries' state, as `/health` reports it; `null` without.
    pub canary: Option<serde_json::Value>,
    /// While its last canary failed: why, in words.
    pub canary_failed: Option<String>,
    /// Why its canaries pause (the engine refused their credentials, or does not generate
    /// on their route), and the setting that fixes it; `null` while they run.
    pub canary_stopped: Option<String>,
    /// Until when they pause: the next canary is tried then; `null` while they run.
    pub canary_paused_until: Option<Timestamp>,
}

/// `dynamo_sysport_upstream_series` of one upstream, by outcome.
#[derive(Debug, Default)]
pub(crate) struct Series(pub Vec<(&'static str, u64)>);

impl Serialize for Series {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(Some(self.0.len()))?;
        for (outcome, n) in &self.0 {
            map.serialize_entry(outcome, n)?;
        }
        map.end()
    }
}

/// A wall-clock time, written as RFC 3339 in UTC with milliseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Timestamp(pub SystemTime);

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&rfc3339(self.0))
    }
}

impl Facts {
    /// Reads the facts; touches no upstream.
    pub(crate) fn gather(src: Sources<'_>) -> Facts {
        let now = Instant::now();
        let views = src.health.views();
        let upstreams = src
            .config
            .upstreams
            .iter()
            .enumerate()
            .map(|(i, u)| {
                let s = src.scraper.record(i);
                let h = src.history.of(i, now);
                let check = &views[i];
                let stalled = match &check.verdict {
                    Verdict::Stalled(stall) => Some(stall),
                    _ => None,
                };
                UpstreamFacts {
                    name: u.name.clone(),
                    url: ShownUrl(&u.url).to_string(),
                    engine: u.engine.name(),
                    engine_families: u.engine.preset().keep.first().is_some_and(|own| {
                        u.keep
                            .iter()
                            .any(|k| k.starts_with(own) || own.starts_with(k.as_str()))
                    }),
                    keep: u.keep.clone(),
                    required: u.required,
                    up: s.up(),
                    state: check.verdict.badge(),
                    // Stalled counts from when progress stopped, not from when it came up.
                    state_since: match stalled.and_then(|st| st.quiet_for) {
                        Some(quiet) => SystemTime::now().checked_sub(quiet).map(Timestamp),
                        None => h.state_since.map(Timestamp),
                    },
                    last_error: s.last_error.clone(),
                    last_error_at: h.last_error_at.map(Timestamp),
                    last_scrape: h.last.map(|l| LastScrapeFacts {
                        at: Timestamp(l.at),
                        duration_seconds: l.took.as_secs_f64(),
                        result: l.result,
                        read: if l.selective { "selective" } else { "full" },
                    }),
                    series: Series(s.series.by_outcome().to_vec()),
                    response_bytes: h.response_bytes,
                    data_age_seconds: s
                        .last_success
                        .map(|at| now.saturating_duration_since(at).as_secs_f64()),
                    health: HealthFacts {
                        ready: check.verdict.ready(),
                        reason: check.verdict.reason(),
                        checked: check.checked(),
                        check: check.check.word(),
                        last_check_at: check.last_check.map(Timestamp),
                        last_error: check.last_error.clone(),
                        stall: check.stall.as_ref().map(crate::health::stall_json),
                        stalled: stalled.map(|st| st.describe()),
                        canary: check
                            .canary
                            .as_ref()
                            .map(|c| crate::health::canary_json(c, now)),
                        canary_failed: match &check.verdict {
                            Verdict::CanaryFailed(why) => Some(why.clone()),
                            _ => None,
                        },
                        canary_stopped: check.canary.as_ref().and_then(|c| c.stopped.clone()),
                        canary_paused_until: check.canary.as_ref().and_then(|c| c.paused).map(
                            |(until, _)| {
                                Timestamp(SystemTime::now() + until.saturating_duration_since(now))
                            },
                        ),
                    },
                    history: h.points,
                    // The health checks stamp readings with tokio's clock (paused in tests).
                    vitals: src.vitals.report(i),
                }
            })
            .collect();
        let health = &src.config.health;
        Facts {
            version: env!("CARGO_PKG_VERSION"),
            uptime_seconds: src.telemetry.uptime_seconds(),
            ready: src.health.is_ready(),
            not_ready_reason: src.health.not_ready_reason(),
            shutting_down: src.health.is_shutting_down(),
            listen: src.listen.to_owned(),
            config_file: src.config.source.as_ref().map(|p| p.display().to_string()),
            paths: Paths {
                metrics: routes::METRICS,
                health: health.path.clone(),
                live: health.live_path.clone(),
                status: routes::STATUS,
                views: src.views.names().map(routes::view).collect(),
            },
            upstreams,
            otlp: src.otlp.map(|r| OtlpFacts {
                endpoint: r.endpoint,
                protocol: r.protocol,
                last_success_at: r.last_success.map(Timestamp),
                last_points: r.last_points,
                last_error: r.last_error,
                last_error_at: r.last_error_at.map(Timestamp),
            }),
            incidents: match src.health.incidents.list() {
                serde_json::Value::Array(all) => all.into_iter().take(LATEST_INCIDENTS).collect(),
                _ => Vec::new(),
            },
            config: src.config.to_string(),
        }
    }

    /// The JSON body of `/status`.
    pub(crate) fn to_json(&self) -> String {
        serde_json::to_string(self).expect("the facts are plain data")
    }
}

/// `2026-11-03T12:00:00.123Z`.
pub(crate) fn rfc3339(t: SystemTime) -> String {
    let since = t.duration_since(UNIX_EPOCH).unwrap_or(Duration::ZERO);
    let secs = since.as_secs();
    let (year, month, day) = civil_from_days((secs / 86_400) as i64);
    let of_day = secs % 86_400;
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        of_day / 3600,
        of_day / 60 % 60,
        of_day % 60,
        since.subsec_millis()
    )
}

/// Year, month and day of the proleptic Gregorian calendar, `days` after 1970-01-01 (Howard
/// Hinnant's `civil_from_days`).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_rfc3339_in_utc() {
        let at = |secs: u64, ms: u64| {
            rfc3339(UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms))
        };
        assert_eq!(at(0, 0), "1970-01-01T00:00:00.000Z");
        assert_eq!(at(951_782_400, 5), "2000-02-29T00:00:00.005Z");
        assert_eq!(at(1_700_000_000, 123), "2023-11-14T22:13:20.123Z");
        assert_eq!(at(4_107_542_399, 999), "2100-02-28T23:59:59.999Z");
        assert_eq!(at(4_107_542_400, 0), "2100-03-01T00:00:00.000Z");
    }
}
