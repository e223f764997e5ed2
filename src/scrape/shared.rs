//! What the files of `scrape` share: a fetch's results, the scraper's common state, each
//! upstream's record.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::error::ScrapeError;
use crate::config::UpstreamConfig;
use crate::expfmt::{Malformed, PairHasher};
use crate::model::{Recorder, UpstreamRecord};
use crate::relabel::{Page, RuleSet};

/// What one upstream got from one fetch: its page as parsed and as its rules leave it.
pub(crate) type UpstreamResult = Result<Arc<Page>, ScrapeError>;

/// One completed fetch of a URL, parsed for every upstream that shares it.
#[derive(Debug)]
pub(crate) struct Fetch {
    /// Unique per fetch: equal generations mean the very same results.
    pub generation: u64,
    /// When the fetch finished.
    pub at: Instant,
    /// How long it took.
    pub took: Duration,
    /// Per upstream of the target, in the order of `Target::upstreams`.
    pub results: Vec<UpstreamResult>,
}

static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// A new fetch generation, never used before in this process.
pub(super) fn next_generation() -> u64 {
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// What every fetch of one scraper needs: the client, the recorders, the upstreams and their
/// limits, rules and records.
pub(super) struct Inner {
    pub(super) client: reqwest::Client,
    /// Told about every result ([`record::record`]).
    pub(super) recorders: Vec<Arc<dyn Recorder>>,
    pub(super) upstreams: Vec<UpstreamConfig>,
    pub(super) keep: Vec<Vec<String>>,
    pub(super) records: Vec<Mutex<Entry>>,
    pub(super) limits: crate::config::Limits,
    pub(super) added_names: Vec<Vec<u8>>,
    pub(super) hasher: PairHasher,
    /// Per upstream: its `metric_relabel_configs` and the top-level ones, if any.
    pub(super) rules: Vec<Option<RuleSet>>,
}

/// An upstream's record, and what `record` needs to log a change once.
#[derive(Debug, Default)]
pub(super) struct Entry {
    pub(super) record: UpstreamRecord,
    /// The first malformed line of the last full page, logged when it changes.
    pub(super) first_malformed: Option<Malformed>,
}
