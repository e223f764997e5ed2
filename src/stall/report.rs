//! What stall detection shows: `/live/engine`, the `stall` detail of `/health`, and the
//! `dynamo_sysport_engine_*` gauges.

use serde_json::{Map, Value, json};

use super::watch::StallStatus;
use crate::config::UpstreamConfig;
use crate::telemetry::Telemetry;

/// One upstream's stall detail, as `/health` and `/live/engine` show it.
pub(crate) fn status_json(status: &StallStatus) -> Value {
    json!({
        "stalled": status.stalled,
        "stall_after_seconds": status.after.as_secs_f64(),
        "running": status.running,
        "no_progress_seconds": status.quiet_for.map(|d| d.as_secs_f64()),
        "progress_age_seconds": status.progress_age.map(|d| d.as_secs_f64()),
        "unread": status.unread.as_ref().map(ToString::to_string),
    })
}

/// The `/live/engine` answer: live (200) unless an engine is stalled (503, naming each one
/// and for how long).
pub(crate) fn live_engine(stalls: &[(String, StallStatus)]) -> (bool, Value) {
    let stalled: Map<String, Value> = stalls
        .iter()
        .filter(|(_, s)| s.stalled)
        .map(|(name, s)| (name.clone(), status_json(s)))
        .collect();
    if stalled.is_empty() {
        return (true, json!({ "status": "live" }));
    }
    let reason: Vec<String> = stalls
        .iter()
        .filter(|(_, s)| s.stalled)
        .map(|(name, s)| format!("{name}: {}", s.describe()))
        .collect();
    let body = json!({
        "status": "stalled",
        "reason": format!("engine stalled: {}", reason.join("; ")),
        "stalled": stalled,
    });
    (false, body)
}

/// Sets `engine_stalled` and `engine_progress_age_seconds` for every upstream with stall
/// detection.
pub(crate) fn set_gauges(stalls: &[(String, StallStatus)], telemetry: &Telemetry) {
    for (name, status) in stalls {
        // The stalls of a configuration a reload replaced name no upstream of the new one.
        telemetry.for_current(name, |t| {
            t.engine_stalled
                .with_label_values(&[name])
                .set(i64::from(status.stalled));
            if let Some(age) = status.progress_age {
                t.engine_progress_age
                    .with_label_values(&[name])
                    .set(age.as_secs_f64());
            }
        });
    }
}

/// Starts the gauges of a new configuration: `engine_stalled` at 0 for every upstream with
/// stall detection, absent for the others (a reload may have turned it off), and no progress
/// age until a check reads one (a reload starts every watch afresh).
pub(crate) fn register_gauges(upstreams: &[UpstreamConfig], telemetry: &Telemetry) {
    for u in upstreams {
        let _ = telemetry
            .engine_progress_age
            .remove_label_values(&[&u.name]);
        if u.stall.is_some() {
            telemetry
                .engine_stalled
                .with_label_values(&[&u.name])
                .set(0);
        } else {
            let _ = telemetry.engine_stalled.remove_label_values(&[&u.name]);
        }
    }
}
