//! Readiness: the verdicts of the current configuration's upstreams put together, the latch that
//! shutdown closes for good, and the flag `/health` answers from, set here and nowhere else
//! (`dynamo_sysport_health_ready` reads it, see `gauges`).
//!
//! One [`Health`] lives as long as sysport. A reload hands it the new configuration
//! ([`Health::configure`]), which keeps the health of every upstream it keeps; a canary that
//! finishes after a reload reports to that same health, and counts only where its upstream is
//! still configured.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use super::gauges::{self, Gauges};
use super::upstream::{Board, CheckError, State, UpstreamHealth};
use super::verdict::Verdict;
use crate::canary::Outcome;
use crate::config::{Config, StartingStatus};
use crate::incidents::Incidents;
use crate::model::Reading;
use crate::stall::{CheckedAt, Unread};
use crate::telemetry::Telemetry;

/// sysport's readiness.
#[derive(Debug)]
pub(crate) struct Health {
    board: Arc<RwLock<Arc<Board>>>,
    shutting_down: AtomicBool,
    /// What `/health` answers (and `health_ready` says); written under `recompute`.
    ready: Arc<AtomicBool>,
    recompute: Mutex<()>,
    telemetry: Telemetry,
    /// Told of every verdict change, check and canary (the evidence kept when an engine wedges).
    pub(crate) incidents: Arc<Incidents>,
}

impl Health {
    /// Readiness with no upstream yet: [`Health::configure`] gives it its first configuration.
    pub(crate) fn new(telemetry: Telemetry) -> Health {
        let board = Arc::new(RwLock::new(Arc::new(Board {
            starting: StartingStatus::NotReady,
            upstreams: Vec::new(),
        })));
        let ready = Arc::new(AtomicBool::new(false));
        Gauges::register(&telemetry, board.clone(), ready.clone());
        Health {
            board,
            shutting_down: AtomicBool::new(false),
            ready,
            recompute: Mutex::new(()),
            incidents: Incidents::shared(&telemetry),
            telemetry,
        }
    }

    /// Puts `config` in force: its upstreams, keeping the health of each that the last
    /// configuration had with the same name, URL and engine; their gauges and counters. An
    /// upstream of the same name but another URL or engine starts afresh, ready until its first
    /// check if the one it replaces was; the canary of one no longer configured is cancelled.
    pub(crate) fn configure(&self, config: &Config) -> Arc<Board> {
        let old = self.board();
        let now = Instant::now();
        let by_name: std::collections::HashMap<&str, &Arc<UpstreamHealth>> =
            old.upstreams.iter().map(|h| (h.name(), h)).collect();
        let upstreams: Vec<Arc<UpstreamHealth>> = config
            .upstreams
            .iter()
            .map(|u| match by_name.get(u.name.as_str()) {
                Some(kept) if kept.is(u) => {
                    kept.reconfigure(u);
                    (*kept).clone()
                }
                Some(replaced) => {
                    let state = replaced.state.lock().expect("health lock");
                    let ready = Verdict::of(&state, old.starting, now).ready();
                    Arc::new(UpstreamHealth::new(u, ready))
                }
                None => Arc::new(UpstreamHealth::new(u, false)),
            })
            .collect();
        for gone in &old.upstreams {
            if !upstreams.iter().any(|u| Arc::ptr_eq(u, gone)) {
                gone.retire();
            }
        }
        let board = Arc::new(Board {
            starting: config.health.starting_status,
            upstreams,
        });
        gauges::register_metrics(&config.upstreams, &self.telemetry);
        let ports = (config.upstreams.iter())
            .filter_map(|u| Some((u.name.clone(), u.url.port_or_known_default()?)))
            .collect();
        (self.incidents).configure(&config.incidents, config.render().to_string(), ports);
        *self.board.write().expect("board lock") = board.clone();
        self.recompute();
        board
    }

    /// The current configuration's upstreams.
    pub(crate) fn board(&self) -> Arc<Board> {
        self.board.read().expect("board lock").clone()
    }

    /// Whether `/health` answers 200.
    pub(crate) fn is_ready(&self) -> bool {
        self.ready.load(Ordering::Acquire)
    }

    /// From now on never ready (SIGTERM).
    pub(crate) fn begin_shutdown(&self) {
        self.shutting_down.store(true, Ordering::Release);
        self.recompute();
    }

    /// Whether shutdown has begun.
    pub(crate) fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::Acquire)
    }

    /// Whether `u` is one of the current configuration's upstreams.
    fn is_current(&self, u: &UpstreamHealth) -> bool {
        self.board()
            .upstreams
            .iter()
            .any(|c| std::ptr::eq(Arc::as_ptr(c), u))
    }

    /// Records a check of `u` made at `at`; returns whether a canary is due (the caller sends
    /// it and calls [`Health::finish_canary`]).
    pub(crate) fn observe(
        &self,
        u: &UpstreamHealth,
        at: CheckedAt,
        result: Result<(), CheckError>,
        reading: Option<Result<Reading, Unread>>,
    ) -> bool {
        self.update(u, |state| state.observe(at, result, reading))
    }

    /// The model `u`'s engine named for its last canary.
    pub(crate) fn canary_model(&self, u: &UpstreamHealth) -> Option<String> {
        let state = u.state.lock().expect("health lock");
        state.canary.as_ref().and_then(|t| t.model.clone())
    }

    /// Records `u`'s canary sent at `sent`, and counts it where `u` is still configured.
    pub(crate) fn finish_canary(
        &self,
        u: &UpstreamHealth,
        sent: Instant,
        outcome: Outcome,
        model: Option<String>,
    ) {
        if self.is_current(u) {
            gauges::count_canary(&self.telemetry, u.name(), &outcome);
            self.incidents
                .canary(u.name(), crate::incidents::CanaryRun::of(&outcome));
        }
        self.update(u, |state| {
            let Some(tracker) = state.canary.as_mut() else {
                return;
            };
            if outcome.kind.stops() && !tracker.backing_off() {
                tracing::warn!(upstream = u.name(), reason = %outcome.detail, "canaries paused");
            }
            tracker.model = model;
            tracker.finish(sent, outcome);
        });
    }

    /// Changes `u`'s state with `change`: logs a changed verdict and puts readiness together
    /// again.
    fn update<T>(&self, u: &UpstreamHealth, change: impl FnOnce(&mut State) -> T) -> T {
        let current = self.is_current(u);
        let starting = self.board().starting;
        let out = {
            let mut state = u.state.lock().expect("health lock");
            let now = Instant::now();
            let before = Verdict::of(&state, starting, now);
            let out = change(&mut state);
            let after = Verdict::of(&state, starting, now);
            if current {
                after.log_change(u.name(), &before);
                if after.word() != before.word() {
                    let bad = !after.ready() && !matches!(after, Verdict::Unchecked(_));
                    (self.incidents).verdict(u.name(), after.word(), bad, after.reason());
                }
            }
            out
        };
        self.recompute();
        out
    }

    /// Puts readiness together: every required upstream of the current configuration ready,
    /// and not shutting down. Sets the flag `/health` answers from.
    fn recompute(&self) {
        let _one_at_a_time = self.recompute.lock().expect("recompute lock");
        let board = self.board();
        let all = board.upstreams.iter().all(|u| {
            let state = u.state.lock().expect("health lock");
            !state.required || Verdict::ready_of(&state, board.starting)
        });
        let ready = all && !self.is_shutting_down();
        if self.ready.swap(ready, Ordering::AcqRel) != ready {
            tracing::info!(ready, "readiness changed");
        }
    }
}
