//! The figures of one upstream (or one rank, or one process of it) over a window of readings.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::quantile::{Bucket, bucket_quantile};
use super::rate::{Point, rate};
use super::read::{Fig, Key, Reading, SparkPoint};

/// The quantiles of one latency histogram, in seconds; `null` without observations.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct Quantiles {
    pub p50: Option<f64>,
    pub p90: Option<f64>,
    pub p99: Option<f64>,
}

/// Every figure; `None` (`null`) where there is too little data, never 0.
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
}

/// Which series a figure is made of.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Group<'a> {
    All,
    /// Series whose label `.0` is `.1` (a data-parallel rank, or a process).
    Label(&'a str, &'a str),
}

impl Group<'_> {
    fn holds(&self, key: &Key) -> bool {
        match self {
            Group::All => true,
            Group::Label(name, value) => key.label(name) == Some(value),
        }
    }
}

/// The readings of one window, ending at `end`, and how copies of one number are told apart.
pub(crate) struct Window<'a> {
    /// The readings in `(end - range, end]`, oldest first.
    pub readings: &'a [Reading],
    pub end: Instant,
    pub range: Duration,
    /// Labels whose series are copies of one gauge (processes, replicas of a rank).
    pub copies: &'a [&'a str],
}

impl Window<'_> {
    /// Every figure of the series in `group`.
    pub(crate) fn figures(&self, group: Group<'_>) -> Figures {
        let hits = self.rate(Fig::PrefixHits, group);
        let queries = self.rate(Fig::PrefixQueries, group);
        Figures {
            running: self.gauge(Fig::Running, group, false),
            waiting: self.gauge(Fig::Waiting, group, false),
            kv_cache_usage: self.gauge(Fig::KvUsage, group, true),
            requests_per_second: self.rate(Fig::Requests, group),
            prompt_tokens_per_second: self.rate(Fig::PromptTokens, group),
            generation_tokens_per_second: self.rate(Fig::GenerationTokens, group),
            preemptions_per_second: self.rate(Fig::Preemptions, group),
            prefix_cache_hit_rate: match (hits, queries) {
                (Some(h), Some(q)) if q > 0.0 => Some(h / q),
                _ => None,
            },
            time_to_first_token_seconds: self.quantiles(Fig::Ttft, group),
            inter_token_latency_seconds: self.quantiles(Fig::Itl, group),
            e2e_request_latency_seconds: self.quantiles(Fig::E2e, group),
        }
    }

    /// The figures the sparklines draw, of every series.
    pub(crate) fn spark(&self) -> SparkPoint {
        SparkPoint {
            running: self.gauge(Fig::Running, Group::All, false),
            waiting: self.gauge(Fig::Waiting, Group::All, false),
            kv_cache_usage: self.gauge(Fig::KvUsage, Group::All, true),
            generation_tokens_per_second: self.rate(Fig::GenerationTokens, Group::All),
            ttft_p99_seconds: self.quantile(Fig::Ttft, Group::All, 0.99),
        }
    }

    fn series(&self, fig: Fig, group: Group<'_>) -> impl Iterator<Item = (&Key, f64, &Reading)> {
        self.readings.iter().flat_map(move |r| {
            r.of(fig)
                .iter()
                .filter(move |(k, _)| group.holds(k))
                .map(move |(k, v)| (k, *v, r))
        })
    }

    /// A gauge at the last reading: copies of one number count once (their largest), the
    /// rest add up, or (`mean`) are averaged, as `/metrics/router` combines them.
    fn gauge(&self, fig: Fig, group: Group<'_>, mean: bool) -> Option<f64> {
        let last = self.readings.last()?;
        let in_group = last.of(fig).iter().filter(|(k, _)| group.holds(k));
        let numbers = self.without_copies(in_group.map(|(k, v)| (k, *v)));
        if numbers.is_empty() {
            return None;
        }
        let sum: f64 = numbers.iter().sum();
        Some(if mean {
            sum / numbers.len() as f64
        } else {
            sum
        })
    }

    /// One number per series that is not a copy of another: series that differ only in a
    /// copy label (a process, a tensor-parallel replica of a rank's scheduler) count once,
    /// with their largest value.
    fn without_copies<'k>(&self, series: impl Iterator<Item = (&'k Key, f64)>) -> Vec<f64> {
        let mut numbers: BTreeMap<Vec<&(String, String)>, f64> = BTreeMap::new();
        for (k, v) in series {
            let rest: Vec<&(String, String)> = k
                .labels
                .iter()
                .filter(|(name, _)| !self.copies.contains(&name.as_str()))
                .collect();
            let slot = numbers.entry(rest).or_insert(f64::NEG_INFINITY);
            *slot = slot.max(v);
        }
        numbers.into_values().collect()
    }

    /// `rate()` of every series. A series is its label set's address: recorded readings
    /// hold each label set once ([`super::read::Labels`]).
    fn rates(&self, fig: Fig, group: Group<'_>) -> Vec<(&Key, f64)> {
        let mut points: BTreeMap<*const (String, String), (&Key, Vec<Point>)> = BTreeMap::new();
        for (k, v, r) in self.series(fig, group) {
            let t = -(self.end.saturating_duration_since(r.at).as_secs_f64());
            points
                .entry(k.labels.as_ptr())
                .or_insert_with(|| (k, Vec::with_capacity(self.readings.len())))
                .1
                .push(Point { t, v });
        }
        points
            .into_values()
            .filter_map(|(k, p)| Some((k, rate(&p, 0.0, self.range.as_secs_f64())?)))
            .collect()
    }

    /// `sum(max without (copies) (rate(x[range])))` over the group's series: copies of one
    /// counter (each tensor-parallel scheduler of SGLang counts the same retractions) count
    /// once. `None` when no series has two readings.
    fn rate(&self, fig: Fig, group: Group<'_>) -> Option<f64> {
        self.without_copies(self.rates(fig, group).into_iter())
            .into_iter()
            .reduce(|a, b| a + b)
    }

    /// `histogram_quantile(q, sum by (le) (rate(x_bucket[range])))` for p50, p90, p99.
    fn quantiles(&self, fig: Fig, group: Group<'_>) -> Quantiles {
        let buckets = self.buckets(fig, group);
        let q = |q: f64| bucket_quantile(q, buckets.clone()).filter(|v| v.is_finite());
        Quantiles {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
        }
    }

    /// One quantile, as [`Window::quantiles`] computes it.
    fn quantile(&self, fig: Fig, group: Group<'_>, q: f64) -> Option<f64> {
        bucket_quantile(q, self.buckets(fig, group)).filter(|v| v.is_finite())
    }

    /// `sum by (le) (rate(x_bucket[range]))`.
    fn buckets(&self, fig: Fig, group: Group<'_>) -> Vec<Bucket> {
        let mut by_le: BTreeMap<&str, f64> = BTreeMap::new();
        for (k, r) in self.rates(fig, group) {
            if let Some(le) = k.label("le") {
                *by_le.entry(le).or_default() += r;
            }
        }
        by_le
            .into_iter()
            .filter_map(|(le, count)| {
                Some(Bucket {
                    le: le.parse::<f64>().ok().filter(|le| !le.is_nan())?,
                    count,
                })
            })
            .collect()
    }
}
