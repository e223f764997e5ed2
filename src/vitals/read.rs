//! What one health check reads for the vitals: every series of the engine's vitals families,
//! as the engine wrote them (histograms by their `_bucket` series).

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use crate::expfmt::{Exposition, Kind};
use crate::model::{FamilyKey, Preset};

/// Which number a series is part of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Fig {
    Running,
    Waiting,
    KvUsage,
    Requests,
    PromptTokens,
    GenerationTokens,
    Preemptions,
    PrefixHits,
    PrefixQueries,
    Ttft,
    Itl,
    E2e,
}

/// One series of one reading: its figure and its labels (sorted, values as written). Once
/// recorded, equal label sets of one upstream are one allocation ([`Labels::intern`]): five
/// minutes of readings hold each once, and the figures tell series apart by its address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    pub fig: Fig,
    pub labels: Arc<[(String, String)]>,
}

impl Key {
    /// The value of label `name`.
    pub(crate) fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Every vitals series one check read, at the time the check was due.
#[derive(Debug, Clone)]
pub(crate) struct Reading {
    pub at: Instant,
    /// Sorted by key (so by figure first).
    pub series: Vec<(Key, f64)>,
    /// The sparkline point of the window that ends at this reading, once computed: it does
    /// not change while no older reading arrives after it.
    pub spark: OnceLock<SparkPoint>,
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

impl Reading {
    /// The series of figure `fig`.
    pub(crate) fn of(&self, fig: Fig) -> &[(Key, f64)] {
        let from = self.series.partition_point(|(k, _)| k.fig < fig);
        let to = self.series.partition_point(|(k, _)| k.fig <= fig);
        &self.series[from..to]
    }
}

/// The label sets of one upstream's kept readings, each held once.
#[derive(Debug, Default)]
pub(crate) struct Labels(HashSet<Arc<[(String, String)]>>);

impl Labels {
    /// Makes every label set of `reading` the one already held when there is one.
    pub(crate) fn intern(&mut self, reading: &mut Reading) {
        for (key, _) in &mut reading.series {
            match self.0.get(&*key.labels) {
                Some(held) => key.labels = held.clone(),
                None => {
                    self.0.insert(key.labels.clone());
                }
            }
        }
    }

    /// Lets go of the label sets no kept reading has.
    pub(crate) fn prune(&mut self) {
        self.0.retain(|labels| Arc::strong_count(labels) > 1);
    }
}

/// A family a figure is read from: a gauge or counter, or a histogram.
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    Plain(&'a FamilyKey),
    Histogram(&'static str),
}

/// The families of `preset` the vitals read, with their figures.
fn sources(preset: &Preset) -> Vec<(Fig, Source<'_>)> {
    let v = &preset.vitals;
    let plain = [
        (Fig::Running, Some(&v.running)),
        (Fig::Waiting, Some(&v.waiting)),
        (Fig::KvUsage, v.kv_usage.as_ref()),
        (Fig::Requests, v.requests.as_ref()),
        (Fig::PromptTokens, v.prompt_tokens.as_ref()),
        (Fig::GenerationTokens, v.generation_tokens.as_ref()),
        (Fig::Preemptions, v.preemptions.as_ref()),
        (Fig::PrefixHits, v.prefix_hits.as_ref()),
        (Fig::PrefixQueries, v.prefix_queries.as_ref()),
    ];
    let histograms = [(Fig::Ttft, v.ttft), (Fig::Itl, v.itl), (Fig::E2e, v.e2e)];
    plain
        .into_iter()
        .filter_map(|(f, r)| Some((f, Source::Plain(r?))))
        .chain(
            histograms
                .into_iter()
                .filter_map(|(f, h)| Some((f, Source::Histogram(h?)))),
        )
        .collect()
}

/// Every family name the vitals of `preset` may be written under (renames and spellings
/// included): what a health check asks the engine for.
pub(crate) fn names(preset: &Preset) -> Vec<String> {
    let mut names: Vec<String> = sources(preset)
        .into_iter()
        .flat_map(|(_, s)| match s {
            Source::Plain(r) => preset.names_of(&r.name),
            Source::Histogram(h) => preset.names_of(h),
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// Reads the vitals series of `preset` from an engine page, as of `at`.
pub(crate) fn read(exp: &Exposition, preset: &Preset, at: Instant) -> Reading {
    let mut series = Vec::new();
    for (fig, source) in sources(preset) {
        let (name, select, tail): (&str, &[(String, String)], &[u8]) = match source {
            Source::Plain(r) => (&r.name, &r.select, b""),
            Source::Histogram(h) => (h, &[], b"_bucket"),
        };
        // The first name the page has: renamed families and other spellings are read too.
        let Some(family) = crate::numbers::find_engine_family(exp, preset, name) else {
            continue;
        };
        let histogram = family.kind == Kind::Histogram;
        if matches!(source, Source::Histogram(_)) != histogram {
            continue;
        }
        for s in exp.samples(family) {
            if crate::numbers::sample_tail(exp, family, s) != tail {
                continue;
            }
            let mut labels: Vec<(String, String)> = exp
                .label_pairs(s)
                .map(|(k, v)| {
                    (
                        String::from_utf8_lossy(k).into_owned(),
                        String::from_utf8_lossy(v).into_owned(),
                    )
                })
                .collect();
            if !select
                .iter()
                .all(|(k, v)| labels.iter().any(|(lk, lv)| lk == k && lv == v))
            {
                continue;
            }
            labels.sort_unstable();
            let value = exp.value(s);
            if value.is_nan() {
                continue;
            }
            series.push((
                Key {
                    fig,
                    labels: labels.into(),
                },
                value,
            ));
        }
    }
    series.sort_unstable_by(|a, b| a.0.cmp(&b.0));
    series.dedup_by(|a, b| a.0 == b.0);
    Reading {
        at,
        series,
        spark: OnceLock::new(),
    }
}
