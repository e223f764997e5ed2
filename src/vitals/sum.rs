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
    /// The map the next page's values go into (kept, with its room, between pages).
    spare: HashMap<u64, f64>,
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
    /// The series' hash without its copy labels, when it has one: equal for copies of one
    /// number. `None`: the series is a number of its own.
    copies: Option<u64>,
    rank: Option<&'a [u8]>,
    pid: Option<&'a [u8]>,
    value: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum What {
    Plain(Plain),
    Bucket(Hist, f64),
}

/// The numbers of one group and place, as the series of a page add to them.
#[derive(Clone, Copy)]
struct Acc {
    /// A gauge's sum; a counter's sum of increases.
    sum: f64,
    /// A counter's sum of values (a group's start); a gauge's count of numbers (KV's mean).
    values: f64,
    seen: bool,
}

const EMPTY: Acc = Acc {
    sum: 0.0,
    values: 0.0,
    seen: false,
};

impl Summer {
    /// Sums the vitals families of `exp` (the engine `preset`'s page), read at `at`, after
    /// `before` (the last row kept, for the running totals). Returns the row, the label that
    /// tells ranks apart on this page, and what was left out. The page is walked twice (the
    /// groups and bounds first, then the numbers) and nothing of it is held but the last value
    /// of each series.
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
        let labels = Labels {
            copies: &copies,
            rank: rank_label,
            pid: pid_label,
        };
        // First walk: the ranks and processes, and the bucket bounds.
        let mut rank_ids = std::collections::HashSet::new();
        let mut pid_ids = std::collections::HashSet::new();
        let mut les: [Vec<f64>; 3] = Default::default();
        walk(exp, preset, &labels, |s| {
            rank_ids.extend(s.rank);
            pid_ids.extend(s.pid);
            if let What::Bucket(h, le) = s.what
                && !les[h as usize].contains(&le)
            {
                les[h as usize].push(le);
            }
        });
        let mut left_out = LeftOut::default();
        self.extend_layout(les, &mut left_out);
        let ranks = shown(rank_ids, MAX_RANKS, &mut left_out.ranks);
        let pids = shown(pid_ids, MAX_PIDS, &mut left_out.pids);
        let mut groups: Vec<Group> = vec![Group::All];
        groups.extend(ranks.iter().map(|r| Group::Rank(self.id(r))));
        groups.extend(pids.iter().map(|p| Group::Pid(self.id(p))));
        let width = self.layout.len();
        // Second walk: each series into its groups; copies of one number through `copied`.
        let mut acc = vec![EMPTY; groups.len() * width];
        let mut copied: HashMap<(usize, usize, u64), (f64, f64)> = HashMap::new();
        let mut next = std::mem::take(&mut self.spare);
        next.clear();
        let layout = self.layout.clone();
        walk(exp, preset, &labels, |s| {
            let place = match s.what {
                What::Plain(p) => Layout::plain(p),
                What::Bucket(h, le) => match layout.bucket(h, le) {
                    Some(place) => place,
                    None => return,
                },
            };
            let gauge = matches!(s.what, What::Plain(p) if p.is_gauge());
            let increase = match self.last.get(&s.series) {
                Some(&before) if s.value >= before => s.value - before,
                Some(_) => s.value,
                None => 0.0,
            };
            next.insert(s.series, s.value);
            let of = |id: Option<&[u8]>, ids: &[&[u8]], offset: usize| {
                id.and_then(|id| ids.iter().position(|x| *x == id))
                    .map(|i| i + offset)
            };
            let member = [
                Some(0),
                of(s.rank, &ranks, 1),
                of(s.pid, &pids, 1 + ranks.len()),
            ];
            for g in member.into_iter().flatten() {
                match s.copies {
                    Some(set) => {
                        let slot = copied
                            .entry((g, place, set))
                            .or_insert((f64::NEG_INFINITY, f64::NEG_INFINITY));
                        let (a, b) = if gauge {
                            (s.value, 0.0)
                        } else {
                            (increase, s.value)
                        };
                        *slot = (slot.0.max(a), slot.1.max(b));
                    }
                    None => add(&mut acc[g * width + place], gauge, s.value, increase),
                }
            }
        });
        for ((g, place, _), (a, b)) in copied {
            let gauge = place < Plain::ALL.len() && Plain::ALL[place].is_gauge();
            let (value, increase) = if gauge { (a, 0.0) } else { (b, a) };
            add(&mut acc[g * width + place], gauge, value, increase);
        }
        self.spare = std::mem::replace(&mut self.last, next);
        let mut rows: Vec<(Group, Box<[f64]>)> = Vec::with_capacity(groups.len());
        for (g, group) in groups.into_iter().enumerate() {
            let mut numbers: Box<[f64]> = vec![f64::NAN; width].into();
            for (place, a) in acc[g * width..(g + 1) * width].iter().enumerate() {
                if !a.seen {
                    continue;
                }
                numbers[place] = if place == Layout::plain(Plain::KvUsage) {
                    a.sum / a.values
                } else if place < Plain::ALL.len() && Plain::ALL[place].is_gauge() {
                    a.sum
                } else {
                    // The running total: the last one plus this page's increases; a group
                    // seen for the first time starts at the sum of its series' values.
                    let total = before.and_then(|row| previous(row, &layout, &group, place));
                    total.map_or(a.values, |total| total + a.sum)
                };
            }
            rows.push((group, numbers));
        }
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        let row = Row {
            at,
            layout,
            groups: rows,
            canaries: super::row::Canaries::default(),
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

    /// Takes a page's bucket bounds into the layout while there is room (the first time a
    /// histogram is seen, an even spread of its bounds when it has too many).
    fn extend_layout(&mut self, mut les: [Vec<f64>; 3], left_out: &mut LeftOut) {
        let mut layout = (*self.layout).clone();
        for h in Hist::ALL {
            let seen = &mut les[h as usize];
            seen.sort_by(f64::total_cmp);
            seen.dedup();
            let kept = &mut layout.les[h as usize];
            if kept.is_empty() && seen.len() > MAX_BUCKETS {
                let n = seen.len();
                *kept = (0..MAX_BUCKETS)
                    .map(|i| seen[i * (n - 1) / (MAX_BUCKETS - 1)])
                    .collect();
            } else {
                for le in seen.iter() {
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

/// Adds one number to a group's place: a gauge's value, or a counter's increase and value.
fn add(acc: &mut Acc, gauge: bool, value: f64, increase: f64) {
    if gauge {
        acc.sum += value;
        acc.values += 1.0;
    } else {
        acc.sum += increase;
        acc.values += value;
    }
    acc.seen = true;
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
    ids: std::collections::HashSet<&'a [u8]>,
    max: usize,
    left_out: &mut usize,
) -> Vec<&'a [u8]> {
    let mut ids: Vec<&[u8]> = ids.into_iter().collect();
    ids.sort_unstable_by(|a, b| numeric_first(a, b));
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

/// The labels that say which number a series is part of.
struct Labels<'a> {
    copies: &'a [&'static str],
    rank: Option<&'static str>,
    pid: Option<&'static str>,
}

/// Calls `each` with every vitals series of `exp`.
fn walk<'a>(
    exp: &'a Exposition,
    preset: &Preset,
    labels: &Labels<'_>,
    mut each: impl FnMut(Sample<'a>),
) {
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
        let tag = match source {
            Source::Plain(p, _) => p as u64,
            Source::Histogram(h, _) => 100 + h as u64,
        };
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
            let mut series = std::collections::hash_map::DefaultHasher::new();
            let mut copy_set = std::collections::hash_map::DefaultHasher::new();
            tag.hash(&mut series);
            tag.hash(&mut copy_set);
            let (mut rank, mut pid, mut le, mut copy) = (None, None, None, false);
            for (k, v) in exp.label_pairs(s) {
                (k, v).hash(&mut series);
                if labels.copies.iter().any(|c| c.as_bytes() == k) {
                    copy = true;
                } else {
                    (k, v).hash(&mut copy_set);
                }
                if labels.rank.is_some_and(|l| l.as_bytes() == k) {
                    rank = Some(v);
                }
                if labels.pid.is_some_and(|l| l.as_bytes() == k) {
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
            each(Sample {
                what,
                series: series.finish(),
                copies: copy.then(|| copy_set.finish()),
                rank,
                pid,
                value,
            });
        }
    }
}
