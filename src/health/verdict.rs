//! The verdict on one upstream, and on sysport as a whole: the one place that decides whether an
//! engine is OK, the precedence between the reasons it is not, and their words.
//!
//! Precedence, for an upstream: not checked yet (the starting status decides) → down (its last
//! check failed) → stalled (busy with no progress for `stall_after`) → canary failed (an idle
//! engine that could not generate) → asleep (vLLM's sleep mode: ready, neither stalled nor
//! canaried) → up. For sysport: shutting down, else each required upstream that is not ready,
//! with its reason. For the engine container (`/live/engine`): stalled, or `live_failures`
//! canaries failed in a row.

use serde::Serialize;

use super::upstream::{CheckError, State};
use crate::canary::CanaryStatus;
use crate::config::StartingStatus;
use crate::stall::StallStatus;

/// What one upstream is, as of its last check.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// Not checked yet: the starting status says whether it counts as ready.
    Unchecked(StartingStatus),
    /// Its last check passed, and nothing else says otherwise.
    Up,
    /// Its last check passed and the engine says it sleeps.
    Asleep,
    /// Its last check failed.
    Down(CheckError),
    /// Busy with no progress for `stall_after`.
    Stalled(StallStatus),
    /// Its last canary failed, and no progress or passing canary came since.
    CanaryFailed(String),
}

/// What the status page's badge and `/status`' `state` say of an upstream.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Badge {
    Up,
    /// Up, but its engine is stalled (`stall_after`: busy with no progress).
    Stalled,
    /// Up, but its last canary failed (`canary_after`: an idle engine that cannot generate).
    CanaryFailed,
    /// Up, and the engine says it sleeps (vLLM's sleep mode): neither stalled nor canaried.
    Sleeping,
    Down,
    /// Not checked yet since sysport (or its configuration) started.
    Unknown,
}

impl Verdict {
    /// The verdict of an upstream's state: the precedence between reasons.
    pub(crate) fn of(state: &State, starting: StartingStatus, now: std::time::Instant) -> Verdict {
        match state.healthy {
            None if state.ready_until_checked => Verdict::Unchecked(StartingStatus::Ready),
            None => Verdict::Unchecked(starting),
            Some(false) => Verdict::Down(state.last_error.clone().unwrap_or(CheckError::NoResult)),
            Some(true) => {
                if let Some(watch) = state.stall.as_ref().filter(|w| w.is_stalled()) {
                    Verdict::Stalled(watch.status(now))
                } else if let Some(c) = state.canary.as_ref().filter(|c| c.is_failed()) {
                    Verdict::CanaryFailed(c.status().failed.unwrap_or_default())
                } else if state.asleep {
                    Verdict::Asleep
                } else {
                    Verdict::Up
                }
            }
        }
    }

    /// Whether the upstream of `state` counts as ready: `Verdict::of(..).ready()` without
    /// building the verdict, as readiness is put together at every check of every upstream.
    pub(crate) fn ready_of(state: &State, starting: StartingStatus) -> bool {
        match state.healthy {
            None => state.ready_until_checked || starting == StartingStatus::Ready,
            Some(false) => false,
            Some(true) => {
                !state.stall.as_ref().is_some_and(|w| w.is_stalled())
                    && !state.canary.as_ref().is_some_and(|c| c.is_failed())
            }
        }
    }

    /// Whether the upstream counts as ready.
    pub(crate) fn ready(&self) -> bool {
        match self {
            Verdict::Unchecked(starting) => *starting == StartingStatus::Ready,
            Verdict::Up | Verdict::Asleep => true,
            Verdict::Down(_) | Verdict::Stalled(_) | Verdict::CanaryFailed(_) => false,
        }
    }

    /// Why it is not ready, in words (`None` while ready).
    pub(crate) fn reason(&self) -> Option<String> {
        match self {
            Verdict::Up | Verdict::Asleep => None,
            Verdict::Unchecked(StartingStatus::Ready) => None,
            Verdict::Unchecked(starting) => {
                Some(format!("not checked yet (starting status {starting})"))
            }
            Verdict::Down(err) => Some(err.to_string()),
            Verdict::Stalled(stall) => Some(format!("engine stalled: {}", stall.describe())),
            Verdict::CanaryFailed(why) => Some(format!("canary failed: {why}")),
        }
    }

    /// One word for the verdict, as the log's `verdict` field writes it.
    pub(crate) fn word(&self) -> &'static str {
        match self {
            Verdict::Unchecked(_) => "unchecked",
            Verdict::Up => "up",
            Verdict::Asleep => "asleep",
            Verdict::Down(_) => "down",
            Verdict::Stalled(_) => "stalled",
            Verdict::CanaryFailed(_) => "canary_failed",
        }
    }

    /// The status page's badge: the verdict alone, as `/health` has it (the last scrape is
    /// shown beside it, never mixed in: a request that stopped waiting for a fetch does not
    /// make a ready upstream look down).
    pub(crate) fn badge(&self) -> Badge {
        match self {
            Verdict::Stalled(_) => Badge::Stalled,
            Verdict::CanaryFailed(_) => Badge::CanaryFailed,
            Verdict::Asleep => Badge::Sleeping,
            Verdict::Down(_) => Badge::Down,
            Verdict::Up => Badge::Up,
            Verdict::Unchecked(_) => Badge::Unknown,
        }
    }

    /// The log line of a change from `before` to this verdict (nothing when only its details
    /// changed).
    pub(crate) fn log_change(&self, upstream: &str, before: &Verdict) {
        if self.word() == before.word() {
            return;
        }
        let was = before.word();
        match self {
            Verdict::Unchecked(_) => {}
            Verdict::Up => tracing::info!(upstream, was, verdict = "up", "upstream healthy"),
            Verdict::Asleep => tracing::info!(upstream, was, verdict = "asleep", "engine sleeps"),
            Verdict::Down(error) => {
                tracing::warn!(upstream, was, verdict = "down", %error, "upstream not healthy");
            }
            Verdict::Stalled(stall) => {
                let detail = stall.describe();
                tracing::warn!(upstream, was, verdict = "stalled", %detail, "engine stalled");
            }
            Verdict::CanaryFailed(error) => {
                tracing::warn!(upstream, was, verdict = "canary_failed", %error, "canary failed");
            }
        }
    }
}

/// Why `/live/engine` is 503 for an upstream: its engine is stalled, or `live_failures`
/// canaries failed in a row with no progress between them.
#[derive(Debug, Clone)]
pub(crate) enum NotLive {
    Stalled(StallStatus),
    CanaryDead(CanaryStatus),
}

impl NotLive {
    /// The engine container's verdict on an upstream: stalled first.
    pub(crate) fn of(state: &State, now: std::time::Instant) -> Option<NotLive> {
        if let Some(watch) = state.stall.as_ref().filter(|w| w.is_stalled()) {
            return Some(NotLive::Stalled(watch.status(now)));
        }
        let canary = state.canary.as_ref()?.status();
        canary.dead.then_some(NotLive::CanaryDead(canary))
    }

    /// `/live/engine`'s word for it.
    pub(crate) fn word(&self) -> &'static str {
        match self {
            NotLive::Stalled(_) => "stalled",
            NotLive::CanaryDead(_) => "canary failed",
        }
    }

    /// Why, in words.
    pub(crate) fn reason(&self) -> String {
        match self {
            NotLive::Stalled(stall) => format!("engine stalled: {}", stall.describe()),
            NotLive::CanaryDead(c) => format!(
                "canary failed: {} canaries failed in a row, last: {}",
                c.failures,
                c.failed.as_deref().unwrap_or_default()
            ),
        }
    }
}

impl std::fmt::Display for CheckError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CheckError::Health(err) => write!(f, "health check failed: {err}"),
            CheckError::Scrape(err) => write!(f, "scrape failed: {err}"),
            CheckError::NoResult => f.write_str("no scrape result"),
        }
    }
}

impl std::error::Error for CheckError {}

/// The reasons of several upstreams, each named once: `vllm: engine stalled: ...; sglang: ...`.
pub(crate) fn named_reasons<'a>(
    reasons: impl Iterator<Item = (&'a str, String)>,
) -> Option<String> {
    let all: Vec<String> = reasons
        .map(|(name, why)| format!("{name}: {why}"))
        .collect();
    (!all.is_empty()).then(|| all.join("; "))
}

/// Why sysport is shutting down, in words: `/health`'s reason from SIGTERM on.
pub(crate) const SHUTTING_DOWN: &str = "shutting down";
