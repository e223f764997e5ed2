//! Turning one page into a [`Row`]: every series of the vitals families summed as the figures
//! sum it, for the upstream as a whole and for each rank and process shown.
//!
//! - **Gauges**: copies of one number (series that differ only in a copy label: a process, a
//!   tensor-parallel replica) count once, with their largest value; the rest add up (KV cache
//!   usage: their mean).
//! - **Counters and buckets**: each series' increase since the last page (a drop is a reset:
//!   its new value is the increase, as Prometheus adds back the value before the drop), the
//!   largest of copies, added up into the group's running total. A series seen for the first
//!   time adds nothing (Prometheus' `rate()` counts a series from its first sample); a group
//!   seen for the first time starts at the sum of its series' values.
//!
//! What is kept between pages is the last value of each series (what tells an increase and a
//! reset), replaced whole at every page: a label that changes at every check costs nothing once
//! its page is summed.

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Instant;

use super::row::{Group, Hist, Layout, Plain, Row};
use crate::expfmt::{Exposition, Kind};
use crate::model::{FamilyKey, Preset};

/// Ranks shown apart, at most (the lowest ids); the total holds every rank.
pub(crate) const MAX_RANKS: usize = 32;
/// Processes shown apart, at most.
pub(crate) const MAX_PIDS: usize = 8;
/// Buckets kept per histogram, at most (a histogram with more keeps bounds spread evenly over
/// its range, `+Inf` among them: a coarser histogram, still the engine's).
pub(crate) const MAX_BUCKETS: usize = 32;

/// What one page left out of the groups and buckets kept.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct LeftOut {
    pub ranks: usize,
    pub pids: usize,
    pub buckets: usize,
}

/// One upstream's summing state.
#[derive(Debug, Default)]
pub(crate) struct Summer {
    /// The last value of every series of the last page, by its hash.
    last: HashMap<u64, f64>,
    layout: Arc<Layout>,
    /// Rank and process ids, each held once while a kept row has it.
    ids: HashMap<Box<str>, Arc<str>>,
}

/// A family a figure is read from.
#[derive(Debug, Clone, Copy)]
enum Source<'a> {
    Plain(Plain, &'a FamilyKey),
    Histogram(Hist, &'static str),
}

/// The families of `preset` the vitals read.
fn sources(preset: &Preset) -> Vec<Source<'_>> {
    let v = &preset.vitals;
    let plain = [
        (Plain::Running, Some(&v.running)),
        (Plain::Waiting, Some(&v.waiting)),
        (Plain::KvUsage, v.kv_usage.as_ref()),
        (Plain::Requests, v.requests.as_ref()),
        (Plain::PromptTokens, v.prompt_tokens.as_ref()),
        (Plain::GenerationTokens, v.generation_tokens.as_ref()),
        (Plain::Preemptions, v.preemptions.as_ref()),
        (Plain::PrefixHits, v.prefix_hits.as_ref()),
        (Plain::PrefixQueries, v.prefix_queries.as_ref()),
    ];
    let histograms = [(Hist::Ttft, v.ttft), (Hist::Itl, v.itl), (Hist::E2e, v.e2e)];
    plain
        .into_iter()
        .filter_map(|(p, f)| Some(Source::Plain(p, f?)))
        .chain(
            histograms
                .into_iter()
                .filter_map(|(h, name)| Some(Source::Histogram(h, name?))),
        )
        .collect()
}

/// Every family name the vitals of `preset` may be written under (renames and spellings
/// included): what a health check asks the engine for.
pub(crate) fn names(preset: &Preset) -> Vec<String> {
    let mut names: Vec<String> = sources(preset)
        .into_iter()
        .flat_map(|s| match s {
            Source::Plain(_, f) => preset.names_of(&f.name),
            Source::Histogram(_, h) => preset.names_of(h),
        })
        .collect();
    names.sort_unstable();
    names.dedup();
    names
}

/// One series of a page, as the summing needs it.
struct Sample<'a> {
    /// The plain figure, or the histogram and bucket bound.
    what: What,
    series: u64,
    /// The series' hash without its copy labels: equal for copies of one number.
    copies: u64,
    rank: Option<&'a [u8]>,
    pid: Option<&'a [u8]>,
    value: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum What {
    Plain(Plain),
    Bucket(Hist, f64),
}

impl Summer {
    /// Sums the vitals families of `exp` (the engine `preset`'s page), read at `at`, after
    /// `before` (the last row kept, for the running totals). Returns the row, the label that
    /// tells ranks apart on this page, and what was left out.
    pub(crate) fn sum(
        &mut self,
        exp: &Exposition,
        preset: &Preset,
        at: Instant,
        before: Option<&Row>,
    ) -> (Row, Option<&'static str>, LeftOut) {
        let copies = preset.copy_labels();
        let rank_label = preset.rank_labels.iter().copied().find(|l| {
            exp.families()
                .iter()
                .flat_map(|f| exp.samples(f))
                .take(64)
                .any(|s| exp.label_pairs(s).any(|(k, _)| k == l.as_bytes()))
        });
        let pid_label = preset.process_labels.first().copied();
        let samples = read(exp, preset, &copies, rank_label, pid_label);
        let mut left_out = LeftOut::default();
        self.extend_layout(&samples, &mut left_out);
        let ranks = shown(
            samples.iter().filter_map(|s| s.rank),
            MAX_RANKS,
            &mut left_out.ranks,
        );
        let pids = shown(
            samples.iter().filter_map(|s| s.pid),
            MAX_PIDS,
            &mut left_out.pids,
        );
        let mut groups: Vec<Group> = vec![Group::All];
        groups.extend(ranks.iter().map(|r| Group::Rank(self.id(r))));
        groups.extend(pids.iter().map(|p| Group::Pid(self.id(p))));
        let width = self.layout.len();
        // Per group and place: gauges by copy set (largest), counters by copy set (largest
        // increase, largest value).
        let mut gauges: HashMap<(usize, usize, u64), f64> = HashMap::new();
        let mut counters: HashMap<(usize, usize, u64), (f64, f64)> = HashMap::new();
        let mut last = HashMap::with_capacity(samples.len());
        for s in &samples {
            let place = match s.what {
                What::Plain(p) => Layout::plain(p),
                What::Bucket(h, le) => match self.layout.bucket(h, le) {
                    Some(place) => place,
                    None => continue,
                },
            };
            let of = |id: Option<&[u8]>, ids: &[&[u8]], offset: usize| {
                id.and_then(|id| ids.iter().position(|x| *x == id))
                    .map(|i| i + offset)
            };
            let member = [
                Some(0),
                of(s.rank, &ranks, 1),
                of(s.pid, &pids, 1 + ranks.len()),
            ];
            let increase = match self.last.get(&s.series) {
                Some(&before) if s.value >= before => s.value - before,
                Some(_) => s.value,
                None => 0.0,
            };
            last.insert(s.series, s.value);
            for g in member.into_iter().flatten() {
                let key = (g, place, s.copies);
                if matches!(s.what, What::Plain(p) if p.is_gauge()) {
                    let slot = gauges.entry(key).or_insert(f64::NEG_INFINITY);
                    *slot = slot.max(s.value);
                } else {
                    let slot = counters
                        .entry(key)
                        .or_insert((f64::NEG_INFINITY, f64::NEG_INFINITY));
                    slot.0 = slot.0.max(increase);
                    slot.1 = slot.1.max(s.value);
                }
            }
        }
        self.last = last;
        let mut numbers: Vec<Box<[f64]>> = vec![vec![f64::NAN; width].into(); groups.len()];
        let mut kv_copies = vec![0usize; groups.len()];
        for ((g, place, _), v) in gauges {
            let n = &mut numbers[g][place];
            *n = if n.is_nan() { v } else { *n + v };
            if place == Layout::plain(Plain::KvUsage) {
                kv_copies[g] += 1;
            }
        }
        for (g, n) in kv_copies.into_iter().enumerate() {
            let kv = &mut numbers[g][Layout::plain(Plain::KvUsage)];
            if n > 0 {
                *kv /= n as f64;
            }
        }
        // Sums of increases and of values, then the running totals.
        let mut sums: HashMap<(usize, usize), (f64, f64)> = HashMap::new();
        for ((g, place, _), (increase, value)) in counters {
            let sum = sums.entry((g, place)).or_insert((0.0, 0.0));
            sum.0 += increase;
            sum.1 += value;
        }
        for ((g, place), (increase, value)) in sums {
            let total = before.and_then(|row| previous(row, &self.layout, &groups[g], place));
            numbers[g][place] = match total {
                Some(total) => total + increase,
                None => value,
            };
        }
        let mut groups: Vec<(Group, Box<[f64]>)> = groups.into_iter().zip(numbers).collect();
        groups.sort_by(|a, b| a.0.cmp(&b.0));
        let row = Row {
            at,
            layout: self.layout.clone(),
            groups,
        };
        (row, rank_label, left_out)
    }

    /// How many series the last page had (their last values are what is kept of it).
    #[cfg(test)]
    pub(crate) fn series(&self) -> usize {
        self.last.len()
    }

    /// Lets go of the ids no kept row holds.
    pub(crate) fn prune(&mut self) {
        self.ids.retain(|_, id| Arc::strong_count(id) > 1);
    }

    /// The one copy of id `raw`.
    fn id(&mut self, raw: &[u8]) -> Arc<str> {
        let text = String::from_utf8_lossy(raw);
        if let Some(id) = self.ids.get(&*text) {
            return id.clone();
        }
        let id: Arc<str> = Arc::from(&*text);
        self.ids.insert(Box::from(&*text), id.clone());
        id
    }

    /// Takes the bucket bounds of `samples` into the layout while there is room (the first
    /// time a histogram is seen, an even spread of its bounds when it has too many).
    fn extend_layout(&mut self, samples: &[Sample<'_>], left_out: &mut LeftOut) {
        let mut layout = (*self.layout).clone();
        for h in Hist::ALL {
            let mut seen: Vec<f64> = samples
                .iter()
                .filter_map(|s| match s.what {
                    What::Bucket(of, le) if of == h => Some(le),
                    _ => None,
                })
                .collect();
            seen.sort_by(f64::total_cmp);
            seen.dedup();
            let kept = &mut layout.les[h as usize];
            if kept.is_empty() && seen.len() > MAX_BUCKETS {
                let n = seen.len();
                *kept = (0..MAX_BUCKETS)
                    .map(|i| seen[i * (n - 1) / (MAX_BUCKETS - 1)])
                    .collect();
            } else {
                for le in &seen {
                    if !kept.contains(le) && kept.len() < MAX_BUCKETS {
                        kept.push(*le);
                    }
                }
                kept.sort_by(f64::total_cmp);
            }
            left_out.buckets += seen.iter().filter(|le| !kept.contains(le)).count();
        }
        if layout != *self.layout {
            self.layout = Arc::new(layout);
        }
    }
}

/// The running total of `place` (in `layout`) for `group` in `row`, whose layout may be older.
fn previous(row: &Row, layout: &Layout, group: &Group, place: usize) -> Option<f64> {
    let numbers = row.group(group)?;
    let at = if place < Plain::ALL.len() {
        place
    } else {
        let (h, le) = Hist::ALL.iter().find_map(|&h| {
            let le = layout.les[h as usize]
                .iter()
                .find(|&&le| layout.bucket(h, le) == Some(place))?;
            Some((h, *le))
        })?;
        row.layout.bucket(h, le)?
    };
    numbers.get(at).copied().filter(|v| !v.is_nan())
}

/// The ids to show apart: the first `max` in numeric order; how many more there were goes to
/// `left_out`.
fn shown<'a>(
    ids: impl Iterator<Item = &'a [u8]>,
    max: usize,
    left_out: &mut usize,
) -> Vec<&'a [u8]> {
    let mut ids: Vec<&[u8]> = ids.collect();
    ids.sort_unstable_by(|a, b| numeric_first(a, b));
    ids.dedup();
    *left_out = ids.len().saturating_sub(max);
    ids.truncate(max);
    ids
}

/// Ids in numeric order where they are numbers.
pub(crate) fn numeric_first(a: &[u8], b: &[u8]) -> std::cmp::Ordering {
    let number = |x: &[u8]| std::str::from_utf8(x).ok()?.parse::<u64>().ok();
    match (number(a), number(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => a.cmp(b),
    }
}

/// Every vitals series of `exp`.
fn read<'a>(
    exp: &'a Exposition,
    preset: &Preset,
    copies: &[&str],
    rank_label: Option<&str>,
    pid_label: Option<&str>,
) -> Vec<Sample<'a>> {
    let mut out = Vec::new();
    for source in sources(preset) {
        let (name, select, tail): (&str, &[(String, String)], &[u8]) = match source {
            Source::Plain(_, f) => (&f.name, &f.select, b""),
            Source::Histogram(_, h) => (h, &[], b"_bucket"),
        };
        // The first name the page has: renamed families and other spellings are read too.
        let Some(family) = crate::numbers::find_engine_family(exp, preset, name) else {
            continue;
        };
        if matches!(source, Source::Histogram(..)) != (family.kind == Kind::Histogram) {
            continue;
        }
        for s in exp.samples(family) {
            if crate::numbers::sample_tail(exp, family, s) != tail {
                continue;
            }
            let value = exp.value(s);
            if value.is_nan() {
                continue;
            }
            let selected = select.iter().all(|(k, v)| {
                exp.label_pairs(s)
                    .any(|(lk, lv)| lk == k.as_bytes() && lv == v.as_bytes())
            });
            if !selected {
                continue;
            }
            let what_tag = match source {
                Source::Plain(p, _) => p as u64,
                Source::Histogram(h, _) => 100 + h as u64,
            };
            let mut series = std::collections::hash_map::DefaultHasher::new();
            let mut copy_set = std::collections::hash_map::DefaultHasher::new();
            what_tag.hash(&mut series);
            what_tag.hash(&mut copy_set);
            let (mut rank, mut pid, mut le) = (None, None, None);
            for (k, v) in exp.label_pairs(s) {
                (k, v).hash(&mut series);
                if !copies.iter().any(|c| c.as_bytes() == k) {
                    (k, v).hash(&mut copy_set);
                }
                if rank_label.is_some_and(|l| l.as_bytes() == k) {
                    rank = Some(v);
                }
                if pid_label.is_some_and(|l| l.as_bytes() == k) {
                    pid = Some(v);
                }
                if k == b"le" {
                    le = std::str::from_utf8(v)
                        .ok()
                        .and_then(|t| t.parse::<f64>().ok());
                }
            }
            let what = match source {
                Source::Plain(p, _) => What::Plain(p),
                Source::Histogram(h, _) => match le.filter(|le| !le.is_nan()) {
                    Some(le) => What::Bucket(h, le),
                    None => continue,
                },
            };
            out.push(Sample {
                what,
                series: series.finish(),
                copies: copy_set.finish(),
                rank,
                pid,
                value,
            });
        }
    }
    out
}
