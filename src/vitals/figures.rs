//! The figures of one group (the upstream, one rank, one process) over a window of summed
//! readings, and the figures a number cannot honestly be given for.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::quantile::{Bucket, bucket_quantile};
use super::rate::{Point, rate};
use super::row::{Group, Hist, Plain, Row};

/// The quantiles of one latency histogram, in seconds; `null` without observations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Quantiles {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

/// Every figure; `None` (`null`) where there is too little data, never 0, or where the engine's
/// numbers cannot be a figure (then `not_available` says why).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Figures {
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    /// 0 to 1; the mean over ranks.
    pub kv_cache_usage: Option<f64>,
    pub requests_per_second: Option<f64>,
    pub prompt_tokens_per_second: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub preemptions_per_second: Option<f64>,
    /// Prefix-cache hits over queries in the window, 0 to 1.
    pub prefix_cache_hit_rate: Option<f64>,
    pub time_to_first_token_seconds: Quantiles,
    pub inter_token_latency_seconds: Quantiles,
    pub e2e_request_latency_seconds: Quantiles,
    /// Each figure the engine's numbers cannot be (not finite, a negative count, a usage
    /// outside 0 to 1), by its key, and why.
    pub not_available: BTreeMap<&'static str, String>,
}

/// sysport's own canaries over the window: what the upstream's request and generation-token
/// rates leave out.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct CanaryRates {
    pub requests_per_second: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
}

/// The figures the status page's sparklines draw, at one reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct SparkPoint {
    pub running: Option<f64>,
    pub waiting: Option<f64>,
    pub kv_cache_usage: Option<f64>,
    pub generation_tokens_per_second: Option<f64>,
    pub ttft_p99_seconds: Option<f64>,
}

/// The readings of one window, ending at `end`.
pub(crate) struct Window<'a> {
    /// The readings in `(end - range, end]`, oldest first.
    pub rows: &'a [Row],
    pub end: Instant,
    pub range: Duration,
}

/// What a number must be to be a figure.
#[derive(Clone, Copy)]
enum Kind {
    /// A count of requests: not below zero.
    Count,
    /// A fraction: 0 to 1.
    Fraction,
    /// A rate: not below zero.
    Rate,
    /// A latency in seconds: not below zero.
    Seconds,
}

impl Window<'_> {
    /// Every figure of `group`.
    pub(crate) fn figures(&self, group: &Group) -> Figures {
        let mut not_available = BTreeMap::new();
        let mut check = |key: &'static str, kind: Kind, value: Option<f64>| {
            value.and_then(|v| match why_not(kind, v) {
                None => Some(v),
                Some(why) => {
                    not_available.insert(key, why);
                    None
                }
            })
        };
        let hits = self.rate(group, Plain::PrefixHits);
        let queries = self.rate(group, Plain::PrefixQueries);
        let hit_rate = match (hits, queries) {
            (Some(h), Some(q)) if q > 0.0 => Some(h / q),
            _ => None,
        };
        let running = check("running", Kind::Count, self.gauge(group, Plain::Running));
        let waiting = check("waiting", Kind::Count, self.gauge(group, Plain::Waiting));
        let kv_cache_usage = check(
            "kv_cache_usage",
            Kind::Fraction,
            self.gauge(group, Plain::KvUsage),
        );
        let mut rate = |key, v| check(key, Kind::Rate, v);
        let requests_per_second =
            rate("requests_per_second", self.net_rate(group, Plain::Requests));
        let prompt_tokens_per_second = rate(
            "prompt_tokens_per_second",
            self.rate(group, Plain::PromptTokens),
        );
        let generation_tokens_per_second = rate(
            "generation_tokens_per_second",
            self.net_rate(group, Plain::GenerationTokens),
        );
        let preemptions_per_second = rate(
            "preemptions_per_second",
            self.rate(group, Plain::Preemptions),
        );
        let prefix_cache_hit_rate = check("prefix_cache_hit_rate", Kind::Fraction, hit_rate);
        let mut quantiles = |keys: [&'static str; 3], h| {
            let buckets = self.buckets(group, h);
            let mut q =
                |key, q: f64| check(key, Kind::Seconds, bucket_quantile(q, buckets.clone()));
            Quantiles {
                p50: q(keys[0], 0.5),
                p90: q(keys[1], 0.9),
                p99: q(keys[2], 0.99),
            }
        };
        let time_to_first_token_seconds = quantiles(
            [
                "time_to_first_token_seconds.p50",
                "time_to_first_token_seconds.p90",
                "time_to_first_token_seconds.p99",
            ],
            Hist::Ttft,
        );
        let inter_token_latency_seconds = quantiles(
            [
                "inter_token_latency_seconds.p50",
                "inter_token_latency_seconds.p90",
                "inter_token_latency_seconds.p99",
            ],
            Hist::Itl,
        );
        let e2e_request_latency_seconds = quantiles(
            [
                "e2e_request_latency_seconds.p50",
                "e2e_request_latency_seconds.p90",
                "e2e_request_latency_seconds.p99",
            ],
            Hist::E2e,
        );
        Figures {
            running,
            waiting,
            kv_cache_usage,
            requests_per_second,
            prompt_tokens_per_second,
            generation_tokens_per_second,
            preemptions_per_second,
            prefix_cache_hit_rate,
            time_to_first_token_seconds,
            inter_token_latency_seconds,
            e2e_request_latency_seconds,
            not_available,
        }
    }

    /// The figures the sparklines draw, of the whole upstream; one that cannot be a figure is
    /// a gap.
    pub(crate) fn spark(&self) -> SparkPoint {
        let all = Group::All;
        let ok = |kind, v: Option<f64>| v.filter(|&v| why_not(kind, v).is_none());
        SparkPoint {
            running: ok(Kind::Count, self.gauge(&all, Plain::Running)),
            waiting: ok(Kind::Count, self.gauge(&all, Plain::Waiting)),
            kv_cache_usage: ok(Kind::Fraction, self.gauge(&all, Plain::KvUsage)),
            generation_tokens_per_second: ok(
                Kind::Rate,
                self.net_rate(&all, Plain::GenerationTokens),
            ),
            ttft_p99_seconds: ok(
                Kind::Seconds,
                bucket_quantile(0.99, self.buckets(&all, Hist::Ttft)),
            ),
        }
    }

    /// A gauge of `group` at the last reading.
    fn gauge(&self, group: &Group, p: Plain) -> Option<f64> {
        self.rows.last()?.plain(group, p)
    }

    /// `rate()` of one running total of `group`, read by `value`.
    fn rate_of(&self, value: impl Fn(&Row) -> Option<f64>) -> Option<f64> {
        let points: Vec<Point> = self
            .rows
            .iter()
            .filter_map(|r| {
                Some(Point {
                    t: -(self.end.saturating_duration_since(r.at).as_secs_f64()),
                    v: value(r)?,
                })
            })
            .collect();
        rate(&points, 0.0, self.range.as_secs_f64())
    }

    /// `sum(max without (copies) (rate(x[range])))` over the group's series (summed when
    /// read, see `sum`). `None` when there are fewer than two readings.
    fn rate(&self, group: &Group, p: Plain) -> Option<f64> {
        self.rate_of(|r| r.plain(group, p))
    }

    /// The rate of `p` (requests or generation tokens) without sysport's own canaries, for the
    /// whole upstream (a rank's or a process' is as read: which one a canary reached is not
    /// known): the engine's rate scaled by the share of its increase over the window that was
    /// not canaries, so that it is 0 for an engine that served nothing else.
    fn net_rate(&self, group: &Group, p: Plain) -> Option<f64> {
        let all = self.rate(group, p)?;
        if *group != Group::All {
            return Some(all);
        }
        let canary = |r: &Row| match p {
            Plain::Requests => r.canaries.requests,
            _ => r.canaries.generation_tokens,
        };
        let read: Vec<(f64, f64)> = self
            .rows
            .iter()
            .filter_map(|r| Some((r.plain(group, p)?, canary(r))))
            .collect();
        let (Some(first), Some(last)) = (read.first(), read.last()) else {
            return Some(all);
        };
        // The engine's increase, a drop counted as a reset, as `rate()` counts it.
        let increase = last.0 - first.0
            + read
                .windows(2)
                .filter(|w| w[1].0 < w[0].0)
                .map(|w| w[0].0)
                .sum::<f64>();
        let canaries = last.1 - first.1;
        if increase <= 0.0 || canaries <= 0.0 {
            return Some(all);
        }
        Some(all * ((increase - canaries).max(0.0) / increase))
    }

    /// sysport's canaries over the window, as rates.
    pub(crate) fn canaries(&self) -> CanaryRates {
        CanaryRates {
            requests_per_second: self.rate_of(|r| Some(r.canaries.requests)),
            generation_tokens_per_second: self.rate_of(|r| Some(r.canaries.generation_tokens)),
        }
    }

    /// `sum by (le) (rate(x_bucket[range]))`, for every bound the last reading keeps.
    fn buckets(&self, group: &Group, h: Hist) -> Vec<Bucket> {
        let Some(last) = self.rows.last() else {
            return Vec::new();
        };
        last.layout.les[h as usize]
            .iter()
            .filter_map(|&le| {
                Some(Bucket {
                    le,
                    count: self.rate_of(|r| r.bucket(group, h, le))?,
                })
            })
            .collect()
    }
}

/// Why `v` cannot be a figure of `kind`, in words; `None` when it can.
fn why_not(kind: Kind, v: f64) -> Option<String> {
    if !v.is_finite() {
        return Some(format!(
            "the engine's numbers give {v}, not a finite number"
        ));
    }
    match kind {
        Kind::Count if v < 0.0 => Some(format!(
            "the engine reports {v}, and a count of requests cannot be negative"
        )),
        Kind::Fraction if !(0.0..=1.0 + 1e-9).contains(&v) => Some(format!(
            "the engine reports {v}, and a fraction lies between 0 and 1"
        )),
        Kind::Rate if v < 0.0 => Some(format!(
            "the engine's counter gives a rate of {v}, and a rate cannot be negative"
        )),
        Kind::Seconds if v < 0.0 => Some(format!(
            "the engine's histogram gives {v} s, and a latency cannot be negative"
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_that_cannot_be_figures_say_why() {
        assert!(why_not(Kind::Count, 3.0).is_none());
        assert!(
            why_not(Kind::Count, -10.0)
                .expect("negative")
                .contains("cannot be negative")
        );
        assert!(
            why_not(Kind::Fraction, -5.0)
                .expect("below 0")
                .contains("between 0 and 1")
        );
        assert!(why_not(Kind::Fraction, 1.0).is_none());
        assert!(why_not(Kind::Fraction, 1.5).is_some());
        assert!(
            why_not(Kind::Rate, f64::NEG_INFINITY)
                .expect("infinite")
                .contains("-inf")
        );
        assert!(why_not(Kind::Seconds, f64::INFINITY).is_some());
    }
}
