//! Each upstream's verdict, decided in one place: is this engine OK?
//!
//! Every `health.interval`, each upstream is checked ([`check`]): its `health_url` when it has
//! one (any 2xx is healthy), else a scrape of its metrics URL (shared with `/metrics` through
//! the scraper's single flight); and one read of the engine's families ([`read`]: which
//! families, and the [`crate::model::Reading`] made of them) goes to the upstream's stall watch
//! ([`crate::stall`]) and canaries ([`crate::canary`]), pure judges that know nothing of HTTP or
//! of each other, and its page to the vitals ([`crate::vitals`]). Canaries that come due are
//! sent from here ([`send`]).
//!
//! What the checks, the watch and the canaries left is one upstream's state ([`upstream`]),
//! kept across a reload that keeps the upstream. From it, [`verdict`] decides: the [`Verdict`]
//! (not checked yet, up, asleep, down, stalled, canary failed), its reason in words, the
//! precedence between reasons, the `/live/engine` verdict, the status page's badge and the log
//! line when it changes. [`latch`] puts the upstreams' verdicts together into readiness (every
//! `required` upstream ready, and not shutting down, for good once it is) and alone sets
//! `dynamo_sysport_health_ready`. [`answers`] builds what is read from it: `/health`,
//! `/live/engine`, the engine gauges and what `/status` shows. Nothing else decides or words
//! whether an engine is OK, and `GET /metrics` changes none of it. `/live` never looks at it.

mod answers;
mod check;
mod gauges;
mod latch;
mod read;
mod send;
mod upstream;
mod verdict;

pub(crate) use answers::{canary_json, stall_json};
pub(crate) use check::{Checks, Summing, run};
pub(crate) use latch::Health;
pub(crate) use read::Families;
pub(crate) use verdict::{Badge, Verdict};

#[cfg(test)]
mod tests;
