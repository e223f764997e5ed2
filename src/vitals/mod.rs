//! Engine vitals: what the engine is doing, over a window, for people (the status page) and
//! programs (`/status`).
//!
//! Every health check reads the vitals families of the upstream's engine (see
//! [`crate::model::engine::VitalsFamilies`]) from the page it fetched, or with a `name[]` read of
//! them alone, and keeps the reading, summed as the figures sum it ([`sum`]: for the upstream,
//! each rank and each process shown, never per series), with the time the check was due. From
//! the readings of the last `vitals.window`:
//!
//! - **now**: requests running and waiting, KV cache usage, from the last reading;
//! - **rates**: Prometheus' `sum(rate(x[window]))` over the family's series ([`rate`]);
//! - **prefix-cache hit rate**: the rate of hits over the rate of queries;
//! - **quantiles**: `histogram_quantile(q, sum by (le) (rate(x_bucket[window])))`
//!   ([`quantile`]).
//!
//! Too little data (fewer than two readings of a series in the window, no observation) is
//! `None`, never 0; so is a number that cannot be a figure (not finite, a negative count, a
//! usage outside 0 to 1), with the reason in `not_available`. The same figures are given per
//! data-parallel rank (the preset's rank labels) and per process (`pid`), where the engine has
//! them.
//!
//! What is kept is bounded whatever the page holds (docs/vitals.md, "What it costs"): at most
//! [`MAX_POINTS`] readings in the window, each of at most 1 + [`sum::MAX_RANKS`] + [`sum::MAX_PIDS`]
//! groups of at most 9 + 3 × [`sum::MAX_BUCKETS`] numbers, [`MAX_SPARKS`] sparkline points, and the
//! last value of each series of the last page. The figures are computed when a reading is
//! recorded (off the runtime thread, by the health check), so `/status` and the status page
//! only copy them.

pub(crate) mod config;
mod figures;
mod quantile;
mod rate;
mod row;
mod sum;

use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::Serialize;

pub(crate) use figures::{CanaryRates, Figures, SparkPoint, Window};
pub(crate) use sum::{MAX_BUCKETS, MAX_PIDS, MAX_RANKS, names};

pub(crate) use row::Canaries;
use row::{Group, Row};
use sum::{LeftOut, Summer};

use crate::config::Config;
use crate::expfmt::Exposition;
use crate::model::Preset;

/// How long readings are kept at least: the status page's sparklines span five minutes.
pub(crate) const HISTORY: Duration = Duration::from_secs(300);
/// Readings kept in a window, at most: when checks come more often than `window / MAX_POINTS`,
/// the newest reading replaces the one before it until they are that far apart.
pub(crate) const MAX_POINTS: usize = 120;
/// Sparkline points kept, at most (one a second over five minutes).
pub(crate) const MAX_SPARKS: usize = 300;

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
    kept: Mutex<Kept>,
    /// sysport's canaries the engine answered, so far.
    canaries: Mutex<Canaries>,
    /// The figures as of the last reading (or of the last check, once readings stop coming).
    report: Mutex<Report>,
}

/// One upstream's readings, oldest first, and what sums them.
#[derive(Debug, Default)]
struct Kept {
    summer: Summer,
    rows: Vec<Row>,
    sparks: Vec<(Instant, SparkPoint)>,
    rank_label: Option<&'static str>,
    left_out: LeftOut,
    /// Readings recorded so far.
    recorded: u64,
}

/// The vitals of one upstream, as `/status` gives them.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Report {
    pub window_seconds: f64,
    /// When the window ends (the last reading's due time, or the check that aged the figures
    /// out), as Unix seconds: the time to evaluate the same PromQL at.
    pub as_of_unix_seconds: f64,
    /// Readings in the window.
    pub readings: usize,
    /// Readings recorded since sysport (or its configuration) started: the figures are as of
    /// the last of them, so two reports with the same number agree.
    pub readings_total: u64,
    #[serde(flatten)]
    pub total: Figures,
    /// sysport's own canaries, which `requests_per_second` and `generation_tokens_per_second`
    /// leave out.
    pub canaries: CanaryRates,
    /// The label that tells data-parallel ranks apart (`engine`, `dp_rank`), when the page
    /// has it.
    pub rank_label: Option<&'static str>,
    pub ranks: Vec<Part>,
    pub pids: Vec<Part>,
    /// What the last reading had that is not shown apart (it is in the total): ranks beyond
    /// the first [`sum::MAX_RANKS`], processes beyond [`sum::MAX_PIDS`], bucket bounds beyond
    /// [`sum::MAX_BUCKETS`] per histogram.
    pub left_out: LeftOutFacts,
    /// The bytes the kept readings and sparkline points hold (docs/vitals.md's formula).
    pub kept_bytes: usize,
    /// The last five minutes, one point per reading, for the status page's sparklines.
    pub history: Sparks,
}

/// What a reading had that is not shown apart.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize)]
pub(crate) struct LeftOutFacts {
    pub ranks: usize,
    pub pids: usize,
    pub buckets: usize,
}

/// The figures of one rank or process.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Part {
    /// The label's value.
    pub id: String,
    #[serde(flatten)]
    pub figures: Figures,
}

/// One point of a sparkline: seconds before the report's time, and the figure then.
pub(crate) type Spark = Vec<(f64, Option<f64>)>;

/// The five-minute history the status page draws.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
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
        let window = config.vitals.window;
        Vitals {
            window,
            interval: config.health.interval,
            upstreams: config
                .upstreams
                .iter()
                .map(|u| {
                    let names = names(u.engine.preset());
                    let read = !window.is_zero()
                        && names
                            .iter()
                            .any(|name| u.keep.iter().any(|k| name.starts_with(k.as_str())));
                    Upstream {
                        preset: u.engine.preset(),
                        names: if read { names } else { Vec::new() },
                        kept: Mutex::new(Kept::default()),
                        canaries: Mutex::new(Canaries::default()),
                        report: Mutex::new(build(&Kept::default(), None, window)),
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

    /// Counts one of sysport's canaries that upstream `i`'s engine answered, asking it for
    /// `tokens` generated tokens: the engine counts it among its requests, and the vitals leave
    /// it out of them.
    pub(crate) fn count_canary(&self, i: usize, tokens: f64) {
        if let Some(u) = self.upstreams.get(i) {
            let mut c = u.canaries.lock().expect("canaries lock");
            c.requests += 1.0;
            c.generation_tokens += tokens;
        }
    }

    /// Upstream `i`'s canaries answered so far, for the reading of a check that begins now.
    pub(crate) fn canaries(&self, i: usize) -> Canaries {
        self.upstreams
            .get(i)
            .map(|u| *u.canaries.lock().expect("canaries lock"))
            .unwrap_or_default()
    }

    /// Keeps upstream `i`'s reading of `exp`, made by the check due `at` (which began with
    /// `canaries` answered), and computes the figures as of it. Readings older than the window
    /// (sparkline points older than five minutes) go.
    pub(crate) fn record(&self, i: usize, exp: &Exposition, at: Instant, canaries: Canaries) {
        let Some(u) = self.upstreams.get(i).filter(|u| !u.names.is_empty()) else {
            return;
        };
        let mut kept = u.kept.lock().expect("vitals lock");
        let kept = &mut *kept;
        if kept.rows.last().is_some_and(|last| last.at >= at) {
            // A check that finished after a later one: its reading is already superseded.
            return;
        }
        kept.recorded += 1;
        let (mut row, rank_label, left_out) = kept.summer.sum(exp, u.preset, at, kept.rows.last());
        row.canaries = canaries;
        kept.rank_label = rank_label;
        kept.left_out = left_out;
        let spacing = self.window / MAX_POINTS as u32;
        push_spaced(&mut kept.rows, row, spacing, |r| r.at);
        let old = kept
            .rows
            .partition_point(|r| at.saturating_duration_since(r.at) >= self.window);
        kept.rows.drain(..old);
        kept.summer.prune();
        let point = Window {
            rows: in_window(&kept.rows, at, self.window),
            end: at,
            range: self.window,
        }
        .spark();
        push_spaced(
            &mut kept.sparks,
            (at, point),
            HISTORY / MAX_SPARKS as u32,
            |s| s.0,
        );
        let old = kept
            .sparks
            .partition_point(|s| at.saturating_duration_since(s.0) > HISTORY);
        kept.sparks.drain(..old);
        let report = build(kept, Some(at), self.window);
        *u.report.lock().expect("report lock") = report;
    }

    /// Upstream `i`'s figures as of a check made `now` that brought no reading (the upstream
    /// did not answer): once no reading has come for two health intervals, the window ends at
    /// `now`, so that old figures age out.
    pub(crate) fn age(&self, i: usize, now: Instant) {
        let Some(u) = self.upstreams.get(i).filter(|u| !u.names.is_empty()) else {
            return;
        };
        let kept = u.kept.lock().expect("vitals lock");
        let fresh = kept
            .rows
            .last()
            .is_some_and(|last| last.at <= now && now - last.at <= self.interval * 2);
        if !fresh {
            *u.report.lock().expect("report lock") = build(&kept, Some(now), self.window);
        }
    }

    /// Upstream `i`'s vitals, as of its last reading; `None` when they are not read
    /// ([`Vitals::reads`]).
    pub(crate) fn report(&self, i: usize) -> Option<Report> {
        let u = self.upstreams.get(i).filter(|u| !u.names.is_empty())?;
        Some(u.report.lock().expect("report lock").clone())
    }
}

/// Appends `item` to time-ordered `items`, or puts it in the place of the last one while that
/// is closer than `spacing` to the one before it: the items stay `spacing` apart, but for the
/// newest.
fn push_spaced<T>(items: &mut Vec<T>, item: T, spacing: Duration, at: impl Fn(&T) -> Instant) {
    match items.len() {
        n if n >= 2 && at(&items[n - 1]).saturating_duration_since(at(&items[n - 2])) < spacing => {
            items[n - 1] = item;
        }
        _ => items.push(item),
    }
}

/// The figures of `kept` over the window that ends at `end` (`None`: nothing read yet).
fn build(kept: &Kept, end: Option<Instant>, window: Duration) -> Report {
    let end = end.unwrap_or_else(Instant::now);
    let rows = in_window(&kept.rows, end, window);
    let w = Window {
        rows,
        end,
        range: window,
    };
    // The ranks and processes of the last reading, each over the whole window.
    let parts = |rank: bool| -> Vec<Part> {
        let mut parts: Vec<Part> = rows
            .last()
            .map(|last| &last.groups[..])
            .unwrap_or_default()
            .iter()
            .filter_map(|(g, _)| match g {
                Group::Rank(id) if rank => Some((g, id)),
                Group::Pid(id) if !rank => Some((g, id)),
                _ => None,
            })
            .map(|(g, id)| Part {
                id: id.to_string(),
                figures: w.figures(g),
            })
            .collect();
        parts.sort_by(|a, b| sum::numeric_first(a.id.as_bytes(), b.id.as_bytes()));
        parts
    };
    let kept_bytes = kept.rows.iter().map(Row::bytes).sum::<usize>()
        + kept.sparks.len() * std::mem::size_of::<(Instant, SparkPoint)>();
    let ago = Instant::now().saturating_duration_since(end);
    let as_of = std::time::SystemTime::now()
        .checked_sub(ago)
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0.0, |d| d.as_secs_f64());
    Report {
        window_seconds: window.as_secs_f64(),
        as_of_unix_seconds: as_of,
        readings: rows.len(),
        readings_total: kept.recorded,
        total: w.figures(&Group::All),
        canaries: w.canaries(),
        rank_label: kept.rank_label.filter(|_| !rows.is_empty()),
        ranks: parts(true),
        pids: parts(false),
        left_out: LeftOutFacts {
            ranks: kept.left_out.ranks,
            pids: kept.left_out.pids,
            buckets: kept.left_out.buckets,
        },
        kept_bytes,
        history: sparks(&kept.sparks, end),
    }
}

/// The sparkline points of the last five minutes before `end`.
fn sparks(points: &[(Instant, SparkPoint)], end: Instant) -> Sparks {
    let mut sparks = Sparks::default();
    for (at, p) in points {
        let ago = end.saturating_duration_since(*at);
        if ago > HISTORY || *at > end {
            continue;
        }
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

/// The readings in `(end - range, end]` of time-ordered `rows`.
fn in_window(rows: &[Row], end: Instant, range: Duration) -> &[Row] {
    let last = rows.partition_point(|r| r.at <= end);
    let first = rows[..last].partition_point(|r| end.saturating_duration_since(r.at) >= range);
    &rows[first..last]
}

#[cfg(test)]
mod tests;
