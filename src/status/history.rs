//! What one upstream's scrapes did lately, for the status page: the last scrape, the last
//! failure, and the last few minutes in one bucket per second.
//!
//! The buckets are a ring allocated once, so the memory is the same whether the upstream is
//! scraped every 15 s by Prometheus or every 25 ms for endpoint pickers.

use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

use crate::model::{Read, Recorder, ScrapeRecord};

/// How far back the chart reaches, in seconds (one bucket each).
pub(crate) const WINDOW_SECONDS: usize = 300;

/// The recent scrapes of every upstream of one configuration: recorded from the scrapes'
/// records (it is one of the scraper's [`Recorder`]s), read by the status page.
#[derive(Debug)]
pub(crate) struct History {
    upstreams: Vec<Mutex<Recorded>>,
}

/// What the status page reads of one upstream's history.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The last scrape.
    pub last: Option<LastScrape>,
    /// When the last failed scrape finished.
    pub last_error_at: Option<SystemTime>,
    /// Since when the scrapes have succeeded, or failed, as the last one did.
    pub state_since: Option<SystemTime>,
    /// The decoded size of the last full page that arrived.
    pub response_bytes: Option<u64>,
    /// The seconds of the last few minutes that saw scrapes, oldest first.
    pub points: Vec<Point>,
}

impl History {
    /// Nothing recorded yet, for `upstreams` upstreams.
    pub(crate) fn new(upstreams: usize) -> History {
        History {
            upstreams: (0..upstreams)
                .map(|_| Mutex::new(Recorded::default()))
                .collect(),
        }
    }

    /// Upstream `i`'s history as of `now`.
    pub(crate) fn of(&self, i: usize, now: Instant) -> Seen {
        let r = self.upstreams[i].lock().expect("history lock");
        Seen {
            last: r.last(),
            last_error_at: r.last_error_at(),
            state_since: r.since(),
            response_bytes: r.response_bytes(),
            points: r.points(now),
        }
    }
}

/// Every result but a request's own deadline (the fetch it waited for is recorded when it ends).
impl Recorder for History {
    fn scraped(&self, r: &ScrapeRecord<'_>) {
        if r.read == Read::Deadline {
            return;
        }
        if let Some(recorded) = self.upstreams.get(r.upstream) {
            recorded.lock().expect("history lock").record(Outcome {
                result: r.result,
                took: r.took,
                selective: r.read == Read::Selective,
                kept: r.series.map(|s| s.kept),
                body_bytes: r.body_bytes,
            });
        }
    }
}

/// One scrape, as [`Recorded::record`] takes it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outcome {
    /// `success` or the failure's `result` label.
    pub result: &'static str,
    /// How long the fetch took.
    pub took: Duration,
    /// A fetch of selected families (`name[]`), not the full page: its time and series are not
    /// the page's.
    pub selective: bool,
    /// Series the page kept, when it was read.
    pub kept: Option<u64>,
    /// The decoded body's size, when one arrived.
    pub body_bytes: Option<u64>,
}

/// The last scrape of an upstream.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LastScrape {
    /// When it finished.
    pub at: SystemTime,
    /// How long it took.
    pub took: Duration,
    /// `success` or the failure's `result` label.
    pub result: &'static str,
    /// Whether it fetched selected families only.
    pub selective: bool,
}

/// One second of the chart: the scrapes that finished in it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Point {
    /// How long ago the second was (0: the current one).
    pub seconds_ago: u32,
    /// Scrapes, full and selective.
    pub scrapes: u32,
    /// Those that failed.
    pub failures: u32,
    /// The longest full-page scrape, when there was one.
    pub max_duration_seconds: Option<f64>,
    /// Series kept by the last successful full-page scrape.
    pub kept: Option<u64>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Bucket {
    /// Seconds from the origin; a bucket left from an earlier lap of the ring is stale.
    second: u64,
    scrapes: u32,
    failures: u32,
    max_duration: Option<f64>,
    kept: Option<u64>,
}

/// An upstream's recent scrapes.
#[derive(Debug)]
pub(crate) struct Recorded {
    origin: Instant,
    last: Option<LastScrape>,
    last_error_at: Option<SystemTime>,
    /// Whether the last scrape succeeded, and since when they have (or have failed).
    since: Option<(bool, SystemTime)>,
    response_bytes: Option<u64>,
    buckets: Box<[Bucket]>,
}

impl Default for Recorded {
    fn default() -> Self {
        Recorded::new(Instant::now())
    }
}

impl Recorded {
    /// Nothing recorded yet; seconds are counted from `origin`.
    pub(crate) fn new(origin: Instant) -> Recorded {
        Recorded {
            origin,
            last: None,
            last_error_at: None,
            since: None,
            response_bytes: None,
            buckets: vec![Bucket::default(); WINDOW_SECONDS].into_boxed_slice(),
        }
    }

    /// Records a scrape that finished now.
    pub(crate) fn record(&mut self, outcome: Outcome) {
        self.record_at(Instant::now(), SystemTime::now(), outcome);
    }

    fn record_at(&mut self, now: Instant, wall: SystemTime, outcome: Outcome) {
        let failed = outcome.result != "success";
        self.last = Some(LastScrape {
            at: wall,
            took: outcome.took,
            result: outcome.result,
            selective: outcome.selective,
        });
        if failed {
            self.last_error_at = Some(wall);
        }
        if self.since.map(|(ok, _)| ok) != Some(!failed) {
            self.since = Some((!failed, wall));
        }
        if !outcome.selective && outcome.body_bytes.is_some() {
            self.response_bytes = outcome.body_bytes;
        }
        let second = now.saturating_duration_since(self.origin).as_secs();
        let bucket = &mut self.buckets[(second % WINDOW_SECONDS as u64) as usize];
        if bucket.second > second {
            // From a lap ago, finished after a newer scrape: too old for the chart.
            return;
        }
        if bucket.second < second || bucket.scrapes == 0 {
            *bucket = Bucket {
                second,
                ..Bucket::default()
            };
        }
        bucket.scrapes = bucket.scrapes.saturating_add(1);
        bucket.failures = bucket.failures.saturating_add(failed as u32);
        if !outcome.selective {
            let took = outcome.took.as_secs_f64();
            bucket.max_duration = Some(bucket.max_duration.map_or(took, |d| d.max(took)));
            if outcome.kept.is_some() {
                bucket.kept = outcome.kept;
            }
        }
    }

    /// The last scrape, if any finished.
    pub(crate) fn last(&self) -> Option<LastScrape> {
        self.last
    }

    /// When the last failed scrape finished.
    pub(crate) fn last_error_at(&self) -> Option<SystemTime> {
        self.last_error_at
    }

    /// When the scrapes began to succeed, or to fail, as the last one did.
    pub(crate) fn since(&self) -> Option<SystemTime> {
        self.since.map(|(_, at)| at)
    }

    /// The decoded size of the last full page that arrived.
    pub(crate) fn response_bytes(&self) -> Option<u64> {
        self.response_bytes
    }

    /// The seconds of the window that saw scrapes, oldest first.
    pub(crate) fn points(&self, now: Instant) -> Vec<Point> {
        let current = now.saturating_duration_since(self.origin).as_secs();
        let mut points: Vec<Point> = self
            .buckets
            .iter()
            .filter(|b| b.scrapes > 0 && b.second <= current)
            .map(|b| (current - b.second, b))
            .filter(|&(ago, _)| ago < WINDOW_SECONDS as u64)
            .map(|(ago, b)| Point {
                seconds_ago: ago as u32,
                scrapes: b.scrapes,
                failures: b.failures,
                max_duration_seconds: b.max_duration,
                kept: b.kept,
            })
            .collect();
        points.sort_unstable_by_key(|p| std::cmp::Reverse(p.seconds_ago));
        points
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full(result: &'static str, ms: u64, kept: Option<u64>) -> Outcome {
        Outcome {
            result,
            took: Duration::from_millis(ms),
            selective: false,
            kept,
            body_bytes: kept.map(|n| n * 10),
        }
    }

    #[test]
    fn scrapes_of_one_second_share_a_point() {
        let origin = Instant::now();
        let mut r = Recorded::new(origin);
        let at = |ms| origin + Duration::from_millis(ms);
        let wall = |s| SystemTime::UNIX_EPOCH + Duration::from_secs(s);
        r.record_at(at(10), wall(1), full("success", 4, Some(100)));
        assert_eq!(r.since(), Some(wall(1)));
        r.record_at(at(500), wall(2), full("timeout", 900, None));
        assert_eq!(r.since(), Some(wall(2)));
        r.record_at(at(990), wall(3), full("success", 7, Some(120)));
        let selective = Outcome {
            selective: true,
            took: Duration::from_secs(3),
            ..full("success", 0, Some(5))
        };
        r.record_at(at(995), SystemTime::now(), selective);
        r.record_at(at(2_100), wall(4), full("success", 5, Some(121)));
        assert_eq!(
            r.since(),
            Some(wall(3)),
            "up since the first success after the failure"
        );
        let points = r.points(at(2_500));
        assert_eq!(points.len(), 2, "{points:?}");
        let first = points[0];
        assert_eq!(first.seconds_ago, 2);
        assert_eq!((first.scrapes, first.failures), (4, 1));
        // The slowest full-page scrape; the selective one's time is not the page's.
        assert_eq!(first.max_duration_seconds, Some(0.9));
        assert_eq!(first.kept, Some(120));
        assert_eq!(points[1].seconds_ago, 0);
        assert_eq!(points[1].kept, Some(121));
        let last = r.last().expect("a last scrape");
        assert_eq!(
            (last.result, last.took),
            ("success", Duration::from_millis(5))
        );
        assert!(r.last_error_at().is_some());
        assert_eq!(r.response_bytes(), Some(1210));
    }

    #[test]
    fn the_window_stays_the_same_size_whatever_the_scrape_rate() {
        let origin = Instant::now();
        let mut r = Recorded::new(origin);
        // Twenty minutes at one scrape every 25 ms: 48 000 scrapes.
        for i in 0..48_000u64 {
            let failed = (i / 40) % 60 == 0;
            let result = if failed { "connect_error" } else { "success" };
            r.record_at(
                origin + Duration::from_millis(i * 25),
                SystemTime::now(),
                full(result, 2, (!failed).then_some(i)),
            );
        }
        assert_eq!(r.buckets.len(), WINDOW_SECONDS);
        // What the README says an upstream's ring costs.
        assert!(std::mem::size_of::<Bucket>() * WINDOW_SECONDS <= 15 << 10);
        let points = r.points(origin + Duration::from_millis(1_199_990));
        assert_eq!(points.len(), WINDOW_SECONDS);
        assert_eq!(points[0].seconds_ago as usize, WINDOW_SECONDS - 1);
        assert_eq!(points[WINDOW_SECONDS - 1].seconds_ago, 0);
        assert!(points.iter().all(|p| p.scrapes == 40), "{points:?}");
        // One second a minute failed, whole.
        assert_eq!(points.iter().filter(|p| p.failures == 40).count(), 5);
        // Five minutes later, with no scrapes, nothing is left.
        assert!(r.points(origin + Duration::from_secs(1500)).is_empty());
    }

    #[test]
    fn a_scrape_finishing_a_lap_late_is_left_out_of_the_chart() {
        let origin = Instant::now();
        let mut r = Recorded::new(origin);
        let late = origin + Duration::from_secs(WINDOW_SECONDS as u64 + 3);
        r.record_at(late, SystemTime::now(), full("success", 1, Some(1)));
        r.record_at(
            origin + Duration::from_secs(3),
            SystemTime::now(),
            full("timeout", 2_000, None),
        );
        let points = r.points(late);
        assert_eq!(points.len(), 1);
        assert_eq!(points[0].failures, 0);
        assert_eq!(r.last().expect("recorded").result, "timeout");
    }
}
