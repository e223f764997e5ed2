//! What one scrape of an upstream left, as plain data, and the one interface it is recorded
//! through: `scrape` tells every [`Recorder`] it was given about each result; sysport's own
//! metrics (`telemetry`) and the status page's history (`status::history`) are the recorders,
//! and `scrape` knows neither. [`UpstreamRecord`] is what an upstream's reads left, kept by the
//! scraper (`scrape::record` alone writes it) and read by whoever shows it.

use std::time::{Duration, Instant};

/// What a result came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
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

/// What became of an upstream's series (`dynamo_sysport_upstream_series{outcome}`): the parse's
/// figures of its last full page, then the merge's of the last full `/metrics` rendering.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SeriesOutcomes {
    pub kept: u64,
    pub dropped: u64,
    pub conflict: u64,
    pub duplicate: u64,
    pub malformed: u64,
    pub aliased: u64,
    pub relabel_dropped: u64,
}

impl SeriesOutcomes {
    /// Each outcome with its label value, in the order sysport's own metrics list them.
    pub fn by_outcome(&self) -> [(&'static str, u64); 7] {
        [
            ("kept", self.kept),
            ("dropped", self.dropped),
            ("conflict", self.conflict),
            ("duplicate", self.duplicate),
            ("malformed", self.malformed),
            ("aliased", self.aliased),
            ("relabel_dropped", self.relabel_dropped),
        ]
    }
}

/// The last read of one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LastRead {
    /// When it ended.
    pub at: Instant,
    /// `success`, or the failure's `result` label.
    pub result: &'static str,
    /// How long the fetch (or the wait) took.
    pub took: Duration,
}

impl LastRead {
    pub fn succeeded(&self) -> bool {
        self.result == "success"
    }
}

/// What an upstream's reads left: the one record of it. The scraper of a configuration keeps
/// one per upstream and `scrape::record` alone writes it; sysport's own metrics, the status page
/// and the control routes read it. Whether the upstream is *healthy* is not here: that is its
/// verdict (`health`), made from its checks.
#[derive(Debug, Clone, Default)]
pub struct UpstreamRecord {
    /// The last read of each kind: a full page, selected families, a request's deadline.
    pub full: Option<LastRead>,
    pub selective: Option<LastRead>,
    pub deadline: Option<LastRead>,
    /// The error of the last failed read, kept after the upstream recovers.
    pub last_error: Option<String>,
    /// When the upstream last answered with a page.
    pub last_success: Option<Instant>,
    /// The decoded size of the last full page.
    pub response_bytes: Option<u64>,
    /// What became of its series.
    pub series: SeriesOutcomes,
}

impl UpstreamRecord {
    /// The last read of any kind, and its kind.
    pub fn last(&self) -> Option<(Read, LastRead)> {
        [
            (Read::Full, self.full),
            (Read::Selective, self.selective),
            (Read::Deadline, self.deadline),
        ]
        .into_iter()
        .filter_map(|(read, last)| Some((read, last?)))
        .max_by_key(|(read, last)| (last.at, *read))
    }

    /// Whether the last read succeeded; `None` before the first.
    pub fn up(&self) -> Option<bool> {
        self.last().map(|(_, last)| last.succeeded())
    }

    /// The last read of kind `read`.
    pub fn slot(&mut self, read: Read) -> &mut Option<LastRead> {
        match read {
            Read::Full => &mut self.full,
            Read::Selective => &mut self.selective,
            Read::Deadline => &mut self.deadline,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(at: Instant, result: &'static str) -> Option<LastRead> {
        Some(LastRead {
            at,
            result,
            took: Duration::from_millis(5),
        })
    }

    #[test]
    fn the_last_read_of_any_kind_says_whether_the_upstream_answered() {
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut r = UpstreamRecord::default();
        assert_eq!((r.up(), r.last()), (None, None));
        *r.slot(Read::Full) = read(t0, "success");
        assert_eq!(r.up(), Some(true));
        // A request stopped waiting for the shared fetch: for that scrape the upstream timed out.
        *r.slot(Read::Deadline) = read(t0 + ms(10), "timeout");
        assert_eq!(r.up(), Some(false));
        assert_eq!(r.last().map(|(kind, _)| kind), Some(Read::Deadline));
        // The fetch it stopped waiting for ends, and answered.
        *r.slot(Read::Full) = read(t0 + ms(20), "success");
        assert_eq!(r.up(), Some(true));
        assert_eq!(r.deadline.map(|d| d.result), Some("timeout"));
        *r.slot(Read::Selective) = read(t0 + ms(30), "connect_error");
        assert_eq!(r.last().map(|(kind, _)| kind), Some(Read::Selective));
        assert_eq!(r.up(), Some(false));
    }
}
