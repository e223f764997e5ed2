//! sysport's own families of the upstreams' health: `health_ready`, `engine_stalled` and
//! `engine_progress_age_seconds`, read from readiness and each upstream's stall watch when a
//! page is made ([`Gauges`], a collector in sysport's registry), and the canary counters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Instant;

use prometheus::core::{Collector, Desc};
use prometheus::proto::MetricFamily;

use super::upstream::Board;
use crate::canary::{Kind, Outcome};
use crate::config::UpstreamConfig;
use crate::telemetry::{Telemetry, desc, family, gauge};

const READY: (&str, &str) = (
    "dynamo_sysport_health_ready",
    "1 if /health reports ready, else 0.",
);
const STALLED: (&str, &str) = (
    "dynamo_sysport_engine_stalled",
    "1 while the upstream's engine is stalled: requests ran at every health check for \
     stall_after while its progress counters never moved; else 0.",
);
const PROGRESS_AGE: (&str, &str) = (
    "dynamo_sysport_engine_progress_age_seconds",
    "Seconds since a health check last saw the upstream engine's progress counters \
     move (grows while idle too; absent before the first reading).",
);

/// Readiness, the flag `/health` answers from, and the engine gauges of every upstream of the
/// current configuration with stall detection, each as of its last check.
pub(super) struct Gauges {
    pub(super) board: Arc<RwLock<Arc<Board>>>,
    pub(super) ready: Arc<AtomicBool>,
    descs: [Desc; 3],
}

impl Gauges {
    /// Registers the gauges of `board` and `ready` in sysport's registry.
    pub(super) fn register(
        telemetry: &Telemetry,
        board: Arc<RwLock<Arc<Board>>>,
        ready: Arc<AtomicBool>,
    ) {
        let descs = [
            desc(READY.0, READY.1, &[]),
            desc(STALLED.0, STALLED.1, &["upstream"]),
            desc(PROGRESS_AGE.0, PROGRESS_AGE.1, &["upstream"]),
        ];
        telemetry.register(Box::new(Gauges {
            board,
            ready,
            descs,
        }));
    }
}

impl Collector for Gauges {
    fn desc(&self) -> Vec<&Desc> {
        self.descs.iter().collect()
    }

    fn collect(&self) -> Vec<MetricFamily> {
        let ready = f64::from(u8::from(self.ready.load(Ordering::Acquire)));
        let board = self.board.read().expect("board lock").clone();
        let (mut stalled, mut ages) = (Vec::new(), Vec::new());
        for u in &board.upstreams {
            let state = u.state.lock().expect("health lock");
            let Some(watch) = &state.stall else {
                continue;
            };
            let status = watch.status(watch.checked().unwrap_or_else(Instant::now));
            let upstream = [("upstream", u.name())];
            stalled.push(gauge(&upstream, f64::from(u8::from(status.stalled))));
            if let Some(age) = status.progress_age {
                ages.push(gauge(&upstream, age.as_secs_f64()));
            }
        }
        [
            family(READY.0, READY.1, vec![gauge(&[], ready)]),
            family(STALLED.0, STALLED.1, stalled),
            family(PROGRESS_AGE.0, PROGRESS_AGE.1, ages),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Starts the canary counters of a new configuration: every result at 0 for each upstream
/// with canaries.
pub(super) fn register_metrics(upstreams: &[UpstreamConfig], telemetry: &Telemetry) {
    for u in upstreams {
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
