//! What one health check reads for the vitals: every series of the engine's vitals families,
//! as the engine wrote them (histograms by their `_bucket` series).

use std::sync::Arc;
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

/// One series of one reading: its figure and its labels (sorted, values as written). The
/// labels are shared with the same series of the reading before ([`Reading::share_keys`]), so
/// five minutes of readings hold each label set once.
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
    /// Sorted by key.
    pub series: Vec<(Key, f64)>,
}

impl Reading {
    /// Takes the label sets of series that `before` (an earlier reading of the same upstream)
    /// has too, so that equal label sets are held once however many readings are kept.
    pub(crate) fn share_keys(&mut self, before: &Reading) {
        for (key, _) in &mut self.series {
            if let Ok(i) = before.series.binary_search_by(|(k, _)| k.cmp(key)) {
                key.labels = before.series[i].0.labels.clone();
            }
        }
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
        let Some(family) = preset
            .names_of(name)
            .iter()
            .find_map(|n| crate::numbers::find_family(exp, n))
        else {
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
    Reading { at, series }
}
