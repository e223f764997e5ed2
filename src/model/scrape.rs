//! What one scrape of an upstream left, as plain data, and the one interface it is recorded
//! through: `scrape` tells every [`Recorder`] it was given about each result; sysport's own
//! metrics (`telemetry`) and the status page's history (`status::history`) are the recorders,
//! and `scrape` knows neither.

use std::time::Duration;

/// What a result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// A fetch of the full page.
    Full,
    /// A fetch of selected families (`name[]`): a request to the engine, but its duration,
    /// size and series are not the full page's.
    Selective,
    /// A request whose deadline came before the shared fetch ended: for that scrape the
    /// upstream timed out. The fetch itself is recorded when it ends.
    Deadline,
}

/// The series of a page that was read, as parsed and relabelled.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PageSeries {
    /// Series kept: the parse's count less what the rules dropped (until a full `/metrics`
    /// read merges the page and takes out conflicts and duplicates, the best count there is).
    pub kept: u64,
    /// Series of families outside the upstream's `keep` prefixes.
    pub dropped: u64,
    /// Malformed lines dropped.
    pub malformed: u64,
    /// Series `metric_relabel_configs` dropped.
    pub relabel_dropped: u64,
}

/// One result of one upstream.
#[derive(Debug, Clone, Copy)]
pub struct ScrapeRecord<'a> {
    /// The upstream's place in the configuration.
    pub upstream: usize,
    /// Its name.
    pub name: &'a str,
    /// What the result came from.
    pub read: Read,
    /// `success`, or the failure's `result` label (`timeout`, `connect_error`, ...).
    pub result: &'static str,
    /// How long the fetch (or the wait) took.
    pub took: Duration,
    /// The decoded body's size, when one arrived.
    pub body_bytes: Option<u64>,
    /// The page's series, when a page was read.
    pub series: Option<PageSeries>,
}

impl ScrapeRecord<'_> {
    /// Whether the upstream answered with a page.
    pub fn succeeded(&self) -> bool {
        self.series.is_some()
    }
}

/// Takes what scrapes leave.
pub trait Recorder: Send + Sync {
    /// One result of an upstream: a fetch ended, or a request stopped waiting for one.
    fn scraped(&self, record: &ScrapeRecord<'_>);

    /// Upstream `upstream` (named `name`) sent a `Content-Type` naming the other exposition
    /// format than its body's: the body was read as what it is.
    fn mislabelled(&self, upstream: usize, name: &str) {
        let _ = (upstream, name);
    }
}
