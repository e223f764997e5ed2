//! What the verdicts answer: `/health` (whole, or cut down for a caller without credentials),
//! `/live/engine`, the `dynamo_sysport_engine_*` gauges and canary counters, and each upstream's
//! health as `/status` and the status page show it. All of it is read from [`Health`]; nothing
//! here changes it.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value, json};

use super::latch::Health;
use super::upstream::CheckKind;
use super::verdict::{NotLive, SHUTTING_DOWN, Verdict, named_reasons};
use crate::canary::{CanaryStatus, Next};
use crate::stall::StallStatus;

/// One upstream's health as of now, for `/status` and the status page.
#[derive(Debug, Clone)]
pub(crate) struct UpstreamView {
    pub name: String,
    pub verdict: Verdict,
    pub required: bool,
    pub check: CheckKind,
    pub last_check: Option<SystemTime>,
    /// The error of the last failed check, kept after it passes again.
    pub last_error: Option<String>,
    /// With stall detection: its judgement now.
    pub stall: Option<StallStatus>,
    /// With canaries: their state now.
    pub canary: Option<CanaryStatus>,
}

impl UpstreamView {
    /// Whether it has been checked yet.
    pub(crate) fn checked(&self) -> bool {
        !matches!(self.verdict, Verdict::Unchecked(_))
    }
}

impl Health {
    /// Why `/health` is 503, in words: shutting down, or each required upstream that is not
    /// ready, named once, with its reason. `None` when ready.
    pub(crate) fn not_ready_reason(&self) -> Option<String> {
        if self.is_shutting_down() {
            return Some(SHUTTING_DOWN.to_owned());
        }
        let board = self.board();
        let now = Instant::now();
        let reasons = board.each(|u, state| {
            let why = Verdict::of(state, board.starting, now).reason();
            (u.name().to_owned(), why.filter(|_| state.required))
        });
        named_reasons(
            reasons
                .iter()
                .filter_map(|(name, why)| Some((name.as_str(), why.clone()?))),
        )
    }

    /// The `/health` answer: Dynamo's `status`, `uptime` and `endpoints`; with `whole`, each
    /// upstream's detail and the reason too.
    pub(crate) fn report(&self, uptime_seconds: f64, whole: bool) -> (bool, Value) {
        let ready = self.is_ready();
        let status = if ready { "ready" } else { "notready" };
        let views = self.views();
        let endpoints: Map<String, Value> = views
            .iter()
            .map(|v| (v.name.clone(), Value::from(word(v.verdict.ready()))))
            .collect();
        if !whole {
            return (ready, json!({ "status": status, "endpoints": endpoints }));
        }
        let now = Instant::now();
        let detail: Map<String, Value> = views
            .iter()
            .map(|v| {
                let mut upstream = json!({
                    "status": word(v.verdict.ready()),
                    "required": v.required,
                    "checked": v.checked(),
                    "check": v.check.word(),
                    "last_check_unix_seconds": v.last_check.and_then(unix_seconds),
                    "last_error": v.last_error,
                });
                if let Some(stall) = &v.stall {
                    upstream["stall"] = stall_json(stall);
                }
                if let Some(canary) = &v.canary {
                    upstream["canary"] = canary_json(canary, now);
                }
                (v.name.clone(), upstream)
            })
            .collect();
        let mut body = json!({
            "status": status,
            "uptime": uptime_seconds,
            "endpoints": endpoints,
            "upstreams": detail,
        });
        if let Some(reason) = self.not_ready_reason().filter(|_| !ready) {
            body["reason"] = Value::from(reason);
        }
        (ready, body)
    }

    /// The `/live/engine` answer: live (200) unless an upstream's engine is stalled or its
    /// canaries failed `live_failures` times in a row (503, naming each); with `whole`, the
    /// reason and each stall's detail, else each engine's word.
    pub(crate) fn live_engine(&self, whole: bool) -> (bool, Value) {
        let now = Instant::now();
        let board = self.board();
        let watched: Vec<(String, Option<NotLive>)> = board
            .each(|u, state| {
                let watched = state.stall.is_some() || state.canary.is_some();
                watched.then(|| (u.name().to_owned(), NotLive::of(state, now)))
            })
            .into_iter()
            .flatten()
            .collect();
        let not_live: Vec<(&str, &NotLive)> = watched
            .iter()
            .filter_map(|(name, n)| Some((name.as_str(), n.as_ref()?)))
            .collect();
        let live = not_live.is_empty();
        let status = match not_live.first() {
            None => "live",
            Some(_)
                if not_live
                    .iter()
                    .any(|(_, n)| matches!(n, NotLive::Stalled(_))) =>
            {
                "stalled"
            }
            Some((_, n)) => n.word(),
        };
        if !whole {
            let endpoints: Map<String, Value> = watched
                .iter()
                .map(|(name, n)| {
                    (
                        name.clone(),
                        Value::from(n.as_ref().map_or("live", NotLive::word)),
                    )
                })
                .collect();
            return (live, json!({ "status": status, "endpoints": endpoints }));
        }
        if live {
            return (true, json!({ "status": status }));
        }
        let stalled: Map<String, Value> = not_live
            .iter()
            .filter_map(|(name, n)| match n {
                NotLive::Stalled(s) => Some(((*name).to_owned(), stall_json(s))),
                NotLive::CanaryDead(_) => None,
            })
            .collect();
        let reason = named_reasons(not_live.iter().map(|(name, n)| (*name, n.reason())));
        (
            false,
            json!({ "status": status, "reason": reason, "stalled": stalled }),
        )
    }

    /// Each upstream of the current configuration, as of now.
    pub(crate) fn views(&self) -> Vec<UpstreamView> {
        let board = self.board();
        let now = Instant::now();
        board.each(|u, state| UpstreamView {
            name: u.name().to_owned(),
            verdict: Verdict::of(state, board.starting, now),
            required: state.required,
            check: state.check,
            last_check: state.last_check,
            last_error: state.last_error.as_ref().map(ToString::to_string),
            stall: state.stall.as_ref().map(|w| w.status(now)),
            canary: state.canary.as_ref().map(crate::canary::Tracker::status),
        })
    }
}

fn word(ready: bool) -> &'static str {
    if ready { "ready" } else { "notready" }
}

fn unix_seconds(t: SystemTime) -> Option<f64> {
    t.duration_since(UNIX_EPOCH).ok().map(|d| d.as_secs_f64())
}

/// One upstream's stall detail, as `/health` and `/status` show it.
pub(crate) fn stall_json(status: &StallStatus) -> Value {
    json!({
        "stalled": status.stalled,
        "stall_after_seconds": status.after.as_secs_f64(),
        "running": status.running,
        "waiting": status.waiting,
        "no_progress_seconds": status.quiet_for.map(|d| d.as_secs_f64()),
        "progress_age_seconds": status.progress_age.map(|d| d.as_secs_f64()),
        "unread": status.unread.as_ref().map(ToString::to_string),
    })
}

/// One upstream's canary detail, as `/health` and `/status` show it.
pub(crate) fn canary_json(status: &CanaryStatus, now: Instant) -> Value {
    let (next, why) = match status.next {
        Next::At(at) => (Some(at.saturating_duration_since(now).as_secs_f64()), None),
        Next::Busy => (None, Some("busy")),
        Next::Asleep => (None, Some("sleeping")),
        Next::Down => (None, Some("down")),
        Next::InFlight => (None, Some("in flight")),
        Next::Paused(_) => (None, Some("paused")),
    };
    let last = status.last.as_ref().map(|o| {
        json!({
            "result": o.kind.label(),
            "error": (!o.detail.is_empty()).then_some(&o.detail),
            "unix_seconds": unix_seconds(o.at),
            "duration_seconds": o.took.as_secs_f64(),
        })
    });
    json!({
        "canary_after_seconds": status.after.as_secs_f64(),
        "failed": status.failed,
        "failures_in_a_row": status.failures,
        "live_failed": status.dead,
        "stopped": status.stopped,
        "paused_until_unix_seconds": status.paused.and_then(|(until, _)| {
            unix_seconds(SystemTime::now() + until.saturating_duration_since(now))
        }),
        "pause_seconds": status.paused.map(|(_, pause)| pause.as_secs_f64()),
        "last": last,
        "next_in_seconds": next,
        "none_because": why,
    })
}
