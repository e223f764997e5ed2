//! One upstream's health: what its checks, its stall watch and its canaries left. It outlives a
//! reload that keeps the upstream (same name, URL and engine): a reload is not a new start,
//! so the verdict, the stall clock, the canary schedule and a canary in flight carry over. The
//! [`Board`] holds those of one configuration.

use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use crate::canary::{Seen, Tracker};
use crate::config::{CanaryConfig, StartingStatus, UpstreamConfig};
use crate::model::{Engine, Reading, Url};
use crate::scrape::ScrapeError;
use crate::stall::{CheckedAt, Unread, Watch};

/// The upstreams of one configuration, in its order, and how they start.
#[derive(Debug)]
pub(crate) struct Board {
    pub(super) starting: StartingStatus,
    pub(super) upstreams: Vec<Arc<UpstreamHealth>>,
}

impl std::ops::Index<usize> for Board {
    type Output = Arc<UpstreamHealth>;
    fn index(&self, i: usize) -> &Arc<UpstreamHealth> {
        &self.upstreams[i]
    }
}

impl Board {
    /// How many upstreams.
    pub(crate) fn len(&self) -> usize {
        self.upstreams.len()
    }

    /// Each upstream with its state, locked one at a time, in configuration order.
    pub(super) fn each<T>(&self, mut f: impl FnMut(&UpstreamHealth, &State) -> T) -> Vec<T> {
        self.upstreams
            .iter()
            .map(|u| f(u, &u.state.lock().expect("health lock")))
            .collect()
    }
}

/// What a reload must keep for an upstream to keep its health.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Identity {
    name: String,
    url: Url,
    engine: Engine,
}

/// One upstream's health, shared by every configuration that keeps it.
#[derive(Debug)]
pub(crate) struct UpstreamHealth {
    identity: Identity,
    pub(super) state: Mutex<State>,
    /// Set when a reload drops the upstream: its canary in flight is cancelled, so that one
    /// engine never has the canaries of two configurations at once.
    retired: tokio::sync::watch::Sender<bool>,
}

/// Why a check of an upstream failed, with the facts of the failure (its words, a reason of
/// the verdict, are in `verdict.rs`).
#[derive(Debug, Clone)]
pub(crate) enum CheckError {
    /// The health URL answered other than 2xx, or not at all.
    Health(ScrapeError),
    /// The scrape of the metrics URL (the check of an upstream without a health URL) failed.
    Scrape(ScrapeError),
    /// The scrape gave nothing for the upstream.
    NoResult,
}

/// How the upstream is checked: its health URL, or a scrape of its metrics URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckKind {
    HealthUrl,
    Scrape,
}

impl CheckKind {
    /// As `/health` and `/status` name it.
    pub(crate) fn word(self) -> &'static str {
        match self {
            CheckKind::HealthUrl => "health_url",
            CheckKind::Scrape => "scrape",
        }
    }
}

/// What the checks left.
#[derive(Debug)]
pub(crate) struct State {
    /// Whether readiness needs the upstream (the configuration's, replaced by a reload).
    pub required: bool,
    pub check: CheckKind,
    /// The canary as configured, to tell whether a reload changed it.
    canary_config: Option<CanaryConfig>,
    /// `None` until the first check finishes.
    pub healthy: Option<bool>,
    /// Until the first check: the upstream replaced one of the same name (a reload changed its
    /// URL or engine) that was ready, so it counts as ready until checked.
    pub ready_until_checked: bool,
    /// The error of the last failed check, kept after it passes again.
    pub last_error: Option<CheckError>,
    pub last_check: Option<SystemTime>,
    /// The engine said it sleeps at the last check.
    pub asleep: bool,
    /// With `stall_after`: the stall judgement.
    pub stall: Option<Watch>,
    /// With `canary_after`: the canary schedule and judgement.
    pub canary: Option<Tracker>,
}

impl UpstreamHealth {
    /// A new upstream, not checked yet; with `ready_until_checked`, it replaces a ready one.
    pub(super) fn new(u: &UpstreamConfig, ready_until_checked: bool) -> UpstreamHealth {
        UpstreamHealth {
            identity: Identity {
                name: u.name.clone(),
                url: u.url.clone(),
                engine: u.engine,
            },
            state: Mutex::new(State {
                required: u.required,
                check: check_kind(u),
                canary_config: u.canary.clone(),
                healthy: None,
                ready_until_checked,
                last_error: None,
                last_check: None,
                asleep: false,
                stall: u.stall.as_ref().map(|s| Watch::new(s.after)),
                canary: u
                    .canary
                    .as_ref()
                    .map(|c| Tracker::new(c.after, c.live_failures)),
            }),
            retired: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Cancels what is in flight for the upstream: a reload dropped it.
    pub(super) fn retire(&self) {
        self.retired.send_replace(true);
    }

    /// Resolves once the upstream is retired.
    pub(crate) fn retired(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut retired = self.retired.subscribe();
        async move {
            let _ = retired.wait_for(|r| *r).await;
        }
    }

    /// The upstream's name.
    pub(crate) fn name(&self) -> &str {
        &self.identity.name
    }

    /// Whether `u` is this upstream, as a reload may keep it.
    pub(super) fn is(&self, u: &UpstreamConfig) -> bool {
        self.identity.name == u.name
            && self.identity.url == u.url
            && self.identity.engine == u.engine
    }

    /// Takes `u`'s settings (a reload that keeps this upstream), keeping what the checks left:
    /// a stall watch keeps its clock under a new `stall_after`, canaries keep their schedule and
    /// what is in flight. Stall detection or canaries that the reload turns on start afresh.
    pub(super) fn reconfigure(&self, u: &UpstreamConfig) {
        let mut state = self.state.lock().expect("health lock");
        state.required = u.required;
        let check = check_kind(u);
        if state.check != check {
            // A check of another kind has not been made yet.
            state.check = check;
        }
        state.stall = match (state.stall.take(), &u.stall) {
            (_, None) => None,
            (Some(mut watch), Some(s)) => {
                watch.set_after(s.after);
                Some(watch)
            }
            (None, Some(s)) => Some(Watch::new(s.after)),
        };
        let changed =
            state.canary_config.as_ref().map(without_after) != u.canary.as_ref().map(without_after);
        state.canary = match (state.canary.take(), &u.canary) {
            (_, None) => None,
            (Some(mut tracker), Some(c)) => {
                tracker.reconfigure(c.after, c.live_failures, changed);
                Some(tracker)
            }
            (None, Some(c)) => Some(Tracker::new(c.after, c.live_failures)),
        };
        state.canary_config = u.canary.clone();
    }
}

impl State {
    /// Records a check made at `at`: its result, and its reading of the engine (or why there
    /// is none) for the stall watch and the canaries. Returns whether a canary is due.
    pub(super) fn observe(
        &mut self,
        at: CheckedAt,
        result: Result<(), CheckError>,
        reading: Option<Result<Reading, Unread>>,
    ) -> bool {
        let healthy = result.is_ok();
        self.healthy = Some(healthy);
        self.last_check = Some(SystemTime::now());
        if let Err(e) = result {
            self.last_error = Some(e);
        }
        self.asleep = matches!(&reading, Some(Ok(r)) if r.asleep);
        if let (Some(watch), Some(reading)) = (self.stall.as_mut(), &reading) {
            watch.observe(at, reading.clone());
        }
        let Some(tracker) = self.canary.as_mut() else {
            return false;
        };
        let seen = match &reading {
            Some(Ok(r)) if healthy && r.asleep => Seen::Asleep,
            Some(Ok(r)) if healthy => Seen::Read(*r),
            _ => Seen::Down,
        };
        tracker.observe(at.due, seen)
    }
}

/// How `u` is checked.
fn check_kind(u: &UpstreamConfig) -> CheckKind {
    if u.health_url.is_some() {
        CheckKind::HealthUrl
    } else {
        CheckKind::Scrape
    }
}

/// A canary's configuration but for its idle time: what a reload must keep for a stopped canary
/// to stay stopped and a looked-up model to stay known.
fn without_after(c: &CanaryConfig) -> CanaryConfig {
    let mut c = c.clone();
    c.after = std::time::Duration::ZERO;
    c.live_failures = 0;
    c.idle.after = std::time::Duration::ZERO;
    c
}
