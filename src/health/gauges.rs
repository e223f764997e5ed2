//! The engine gauges and canary counters of each upstream, written from its state by the latch
//! (which alone writes `dynamo_sysport_health_ready`).

use std::time::Instant;

use super::upstream::State;
use crate::canary::{Kind, Outcome};
use crate::config::UpstreamConfig;
use crate::telemetry::Telemetry;

/// Sets `engine_stalled` and `engine_progress_age_seconds` of an upstream with stall detection,
/// as of its last check.
pub(super) fn set_engine_gauges(name: &str, state: &State, telemetry: &Telemetry) {
    let Some(watch) = &state.stall else {
        return;
    };
    let status = watch.status(Instant::now());
    telemetry
        .engine_stalled
        .with_label_values(&[name])
        .set(i64::from(status.stalled));
    if let Some(age) = status.progress_age {
        telemetry
            .engine_progress_age
            .with_label_values(&[name])
            .set(age.as_secs_f64());
    }
}

/// Starts the series of a new configuration: `engine_stalled` for every upstream with stall
/// detection (absent for the others: a reload may have turned it off), and every canary result
/// at 0 for each upstream with canaries. The gauges of an upstream the reload keeps are set
/// again from its state ([`set_engine_gauges`]).
pub(super) fn register_metrics(upstreams: &[UpstreamConfig], telemetry: &Telemetry) {
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
        if u.canary.is_some() {
            for kind in Kind::ALL {
                telemetry
                    .canary_requests
                    .with_label_values(&[&u.name, kind.label()]);
            }
        }
    }
}

/// Counts a finished canary of `upstream`.
pub(super) fn count_canary(telemetry: &Telemetry, upstream: &str, outcome: &Outcome) {
    telemetry.for_current(upstream, |t| {
        t.canary_requests
            .with_label_values(&[upstream, outcome.kind.label()])
            .inc();
        t.canary_duration
            .with_label_values(&[upstream])
            .observe(outcome.took.as_secs_f64());
    });
}
