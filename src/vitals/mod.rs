//! Engine vitals: what the engine is doing, over a window, for people (the status page) and
//! programs (`/status`).
//!
//! Every health check reads the vitals families of the upstream's engine (see
//! [`crate::model::engine::VitalsFamilies`]) from the page it fetched, or with a `name[]` read of
//! them alone, and keeps the reading with the time the check was due. From the readings of
//! the last `vitals.window`:
//!
//! - **now**: requests running and waiting, KV cache usage, from the last reading;
//! - **rates**: Prometheus' `sum(rate(x[window]))` over the family's series ([`rate`]);
//! - **prefix-cache hit rate**: the rate of hits over the rate of queries;
//! - **quantiles**: `histogram_quantile(q, sum by (le) (rate(x_bucket[window])))`
//!   ([`quantile`]).
//!
//! Too little data (fewer than two readings of a series in the window, no observation) is
//! `None`, never 0. The same figures are given per data-parallel rank (the preset's rank
//! labels) and per process (`pid`), where the engine has them.

mod figures;
mod quantile;
mod rate;
mod read;

use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

pub(crate) use figures::{Figures, Group, Window};
pub(crate) use read::{Reading, names, read};

use read::Labels;

use crate::config::Config;
use crate::model::Preset;

/// How long readings are kept at least: the status page's sparklines span five minutes.
pub(crate) const HISTORY: Duration = Duration::from_secs(300);

/// The readings of every upstream.
#[derive(Debug)]
pub(crate) struct Vitals {
    window: Duration,
    /// `health.interval`: how often a reading comes.
    interval: Duration,
    upstreams: Vec<Upstream>,
}

#[derive(Debug)]
struct Upstream {
    preset: &'static Preset,
    /// The vitals families a check asks the engine for (every name they may be written
    /// under); none when the vitals are off or the upstream keeps none of them (an LMCache
    /// upstream under the vLLM preset).
    names: Vec<String>,
    readings: Mutex<Kept>,
    /// Readings recorded so far.
    recorded: std::sync::atomic::AtomicU64,
}

/// One upstream's readings, oldest first, and their label sets.
#[derive(Debug, Default)]
struct Kept {
    readings: VecDeque<Reading>,
    labels: Labels,
}

/// The vitals of one upstream, as `/status` gives them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Report {
    pub window_seconds: f64,
    /// Readings in the window.
    pub readings: usize,
    /// Readings recorded since sysport (or its configuration) started: the figures are as of
    /// the last of them, so two reports with the same number agree.
    pub readings_total: u64,
    #[serde(flatten)]
    pub total: Figures,
    /// The label that tells data-parallel ranks apart (`engine`, `dp_rank`), when the page
    /// has it.
    pub rank_label: Option<&'static str>,
    pub ranks: Vec<Part>,
    pub pids: Vec<Part>,
    /// The last five minutes, one point per reading, for the status page's sparklines.
    pub history: Sparks,
}

/// The figures of one rank or process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Part {
    /// The label's value.
    pub id: String,
    #[serde(flatten)]
    pub figures: Figures,
}

/// One point of a sparkline: seconds before now, and the figure then.
pub(crate) type Spark = Vec<(f64, Option<f64>)>;

/// The five-minute history the status page draws.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Sparks {
    pub running: Spark,
    pub waiting: Spark,
    pub kv_cache_usage: Spark,
    pub generation_tokens_per_second: Spark,
    pub ttft_p99_seconds: Spark,
}

impl Vitals {
    /// Empty readings for every upstream of `config`.
    pub(crate) fn new(config: &Config) -> Vitals {
        Vitals {
            window: config.vitals.window,
            interval: config.health.interval,
            upstreams: config
                .upstreams
                .iter()
                .map(|u| {
                    let names = names(u.engine.preset());
                    let read = !config.vitals.window.is_zero()
                        && names
                            .iter()
                            .any(|name| u.keep.iter().any(|k| name.starts_with(k.as_str())));
                    Upstream {
                        preset: u.engine.preset(),
                        names: if read { names } else { Vec::new() },
                        readings: Mutex::new(Kept::default()),
                        recorded: std::sync::atomic::AtomicU64::new(0),
                    }
                })
                .collect(),
        }
    }

    /// The family names a check of upstream `i` asks for its vitals: none when they are not
    /// read (the vitals are off, or the upstream keeps none of its engine's vitals families).
    pub(crate) fn names(&self, i: usize) -> &[String] {
        self.upstreams.get(i).map_or(&[], |u| &u.names)
    }

    /// Whether upstream `i`'s vitals are read.
    pub(crate) fn reads(&self, i: usize) -> bool {
        !self.names(i).is_empty()
    }

    /// Keeps upstream `i`'s reading; readings older than the window (or five minutes) go.
    pub(crate) fn record(&self, i: usize, mut reading: Reading) {
        let Some(u) = self.upstreams.get(i) else {
            return;
        };
        let keep = self.window.max(HISTORY);
        let mut kept = u.readings.lock().expect("vitals lock");
        u.recorded
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        kept.labels.intern(&mut reading);
        let at = reading.at;
        let readings = &mut kept.readings;
        // Out of order only if a check finished after a later one: keep time order, and the
        // later readings' windows now hold this one.
        let pos = readings.partition_point(|r| r.at <= at);
        readings.insert(pos, reading);
        for later in readings.iter_mut().skip(pos + 1) {
            later.spark = std::sync::OnceLock::new();
        }
        let mut dropped = false;
        while readings
            .front()
            .is_some_and(|r| at.saturating_duration_since(r.at) > keep)
        {
            readings.pop_front();
            dropped = true;
        }
        if dropped {
            kept.labels.prune();
        }
    }

    /// When the window ends: at the last reading while readings come (the check due now may
    /// still be fetching; ending the window at `now` would count that as the series ending, and
    /// `rate()` would extrapolate only half a spacing there), else at `now`, so that the figures
    /// of an upstream that stopped answering age out.
    fn end(&self, all: &[Reading], now: Instant) -> Instant {
        match all.last() {
            Some(last) if last.at <= now && now - last.at <= self.interval * 2 => last.at,
            _ => now,
        }
    }

    /// Upstream `i`'s vitals as of `now` (its last reading); `None` when they are not read
    /// ([`Vitals::reads`]).
    pub(crate) fn report(&self, i: usize, now: Instant) -> Option<Report> {
        if !self.reads(i) {
            return None;
        }
        let u = self.upstreams.get(i)?;
        let mut kept = u.readings.lock().expect("vitals lock");
        let all: &[Reading] = kept.readings.make_contiguous();
        let end = self.end(all, now);
        let in_window = in_window(all, end, self.window);
        let copies = u.preset.copy_labels();
        let window = Window {
            readings: in_window,
            end,
            range: self.window,
            copies: &copies,
        };
        let last = in_window.last();
        let rank_label = u
            .preset
            .rank_labels
            .iter()
            .copied()
            .find(|l| last.is_some_and(|r| r.series.iter().any(|(k, _)| k.label(l).is_some())));
        let parts = |label: &str| -> Vec<Part> {
            let mut ids: Vec<&str> = in_window
                .iter()
                .flat_map(|r| r.series.iter().filter_map(|(k, _)| k.label(label)))
                .collect();
            ids.sort_unstable_by(|a, b| numeric_first(a, b));
            ids.dedup();
            ids.into_iter()
                .map(|id| Part {
                    id: id.to_owned(),
                    figures: window.figures(Group::Label(label, id)),
                })
                .collect()
        };
        let pids = u
            .preset
            .process_labels
            .first()
            .map(|l| parts(l))
            .unwrap_or_default();
        Some(Report {
            window_seconds: self.window.as_secs_f64(),
            readings: in_window.len(),
            readings_total: u.recorded.load(std::sync::atomic::Ordering::Relaxed),
            total: window.figures(Group::All),
            rank_label,
            ranks: rank_label.map(parts).unwrap_or_default(),
            pids,
            history: sparks(all, now, self.window, &copies),
        })
    }
}

/// The last five minutes of time-ordered `readings` as of `now`, one point per reading, each
/// over the window that ended at it (computed once per reading).
fn sparks(all: &[Reading], now: Instant, range: Duration, copies: &[&str]) -> Sparks {
    let mut sparks = Sparks {
        running: Vec::new(),
        waiting: Vec::new(),
        kv_cache_usage: Vec::new(),
        generation_tokens_per_second: Vec::new(),
        ttft_p99_seconds: Vec::new(),
    };
    for (n, r) in all.iter().enumerate() {
        let ago = now.saturating_duration_since(r.at);
        if ago > HISTORY || r.at > now {
            continue;
        }
        let p = r.spark.get_or_init(|| {
            let window = Window {
                readings: in_window(&all[..=n], r.at, range),
                end: r.at,
                range,
                copies,
            };
            window.spark()
        });
        let t = -ago.as_secs_f64();
        sparks.running.push((t, p.running));
        sparks.waiting.push((t, p.waiting));
        sparks.kv_cache_usage.push((t, p.kv_cache_usage));
        sparks
            .generation_tokens_per_second
            .push((t, p.generation_tokens_per_second));
        sparks.ttft_p99_seconds.push((t, p.ttft_p99_seconds));
    }
    sparks
}

/// The readings in `(end - range, end]` of time-ordered `readings`.
fn in_window(readings: &[Reading], end: Instant, range: Duration) -> &[Reading] {
    let last = readings.partition_point(|r| r.at <= end);
    let first = readings[..last].partition_point(|r| end.saturating_duration_since(r.at) >= range);
    &readings[first..last]
}

/// Rank and process ids in numeric order where they are numbers.
fn numeric_first(a: &str, b: &str) -> std::cmp::Ordering {
    match (a.parse::<u64>(), b.parse::<u64>()) {
        (Ok(x), Ok(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

#[cfg(test)]
mod tests;
