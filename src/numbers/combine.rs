//! Combining the series of one family of one upstream: copies of one number (processes,
//! tensor-parallel workers) with `max` first, then data-parallel ranks with the family's
//! operation. Every other label stays.

use std::collections::HashMap;

use crate::expfmt::{Exposition, Family, Sample};

use crate::model::Op;

/// Which labels go, and how.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Labels<'a> {
    /// Copies of one number: combined with `max`.
    pub(crate) copies: &'a [&'a str],
    /// Data-parallel ranks: combined with the family's operation.
    pub(crate) ranks: &'a [&'a str],
}

/// One output series: its name after the family's (`_bucket`, or nothing), its labels (values
/// escaped), its value.
#[derive(Debug, Clone)]
pub(crate) struct Series<'a> {
    pub(crate) tail: &'a [u8],
    pub(crate) pairs: Vec<Pair<'a>>,
    value: Value<'a>,
    /// The sample of a series that passes as it is (`Op::Pass`: its timestamp goes along).
    pub(crate) sample: Option<&'a crate::expfmt::Sample>,
}

/// A value being combined: the text of a lone member (written back as it was), or the running
/// total or extreme and how many members made it.
#[derive(Debug, Clone, Copy)]
struct Value<'a> {
    raw: Option<&'a [u8]>,
    acc: f64,
    n: u32,
}

impl Series<'_> {
    /// The value as a number: the lone member's, or what combining made.
    pub(crate) fn number(&self) -> f64 {
        self.value.acc
    }

    /// Appends the value: as the engine wrote it when nothing was combined, else computed.
    pub(crate) fn write_value(&self, op: Op, out: &mut Vec<u8>) {
        match self.value.raw {
            Some(raw) => out.extend_from_slice(raw),
            None if op == Op::Avg => {
                crate::expfmt::write_value(self.value.acc / f64::from(self.value.n), out)
            }
            None => crate::expfmt::write_value(self.value.acc, out),
        }
    }
}

/// The series of `family` (of `exp`) that carry every `select` pair, combined.
pub(crate) fn combine<'a>(
    exp: &'a Exposition,
    family: &'a Family,
    select: &[(String, Vec<u8>)],
    op: Op,
    labels: Labels<'_>,
) -> Vec<Series<'a>> {
    let mut copies = Grouping::default();
    for s in exp.samples(family) {
        let pairs: Vec<Pair<'_>> = exp.label_pairs(s).collect();
        let picked = select.iter().all(|(k, v)| {
            pairs
                .iter()
                .any(|(pk, pv)| *pk == k.as_bytes() && *pv == v.as_slice())
        });
        if !picked {
            continue;
        }
        let tail = sample_tail(exp, family, s);
        let value = Value {
            raw: Some(exp.value_text(s)),
            acc: exp.value(s),
            n: 1,
        };
        let series = Series {
            tail,
            pairs,
            value,
            sample: Some(s),
        };
        if op == Op::Pass {
            copies.out.push(series);
        } else {
            copies.add(series, labels.copies, Op::Max);
        }
    }
    if op == Op::Pass {
        return copies.out;
    }
    let mut ranks = Grouping::default();
    for mut series in copies.out {
        // Each rank counts once in a mean, however many copies of it there were.
        series.value.n = 1;
        ranks.add(series, labels.ranks, op);
    }
    ranks.out
}

/// What a sample's name adds to its family's: a type suffix (`_bucket`), or nothing.
pub(crate) fn sample_tail<'a>(exp: &'a Exposition, family: &Family, sample: &Sample) -> &'a [u8] {
    let (base, suffix) = exp.family_name(family);
    let (name, renamed) = exp.sample_name(family, sample);
    // A sample's name is its family's plus a type suffix, or a recovered one.
    if renamed.is_empty() {
        name.get(base.len() + suffix.len()..).unwrap_or_default()
    } else {
        renamed.get(suffix.len()..).unwrap_or_default()
    }
}

/// A label name and its escaped value.
type Pair<'a> = (&'a [u8], &'a [u8]);

/// Series being grouped by name and remaining labels, in order of first appearance.
#[derive(Default)]
struct Grouping<'a> {
    out: Vec<Series<'a>>,
    /// Name tail and sorted labels → index into `out`.
    index: HashMap<(&'a [u8], Vec<Pair<'a>>), usize>,
}

impl<'a> Grouping<'a> {
    /// Adds `series` without the labels in `drop`, combining it with `op` into the series with
    /// the same name and remaining labels.
    fn add(&mut self, mut series: Series<'a>, drop: &[&str], op: Op) {
        series.sample = None;
        series
            .pairs
            .retain(|(k, _)| !drop.iter().any(|d| d.as_bytes() == *k));
        let mut key = series.pairs.clone();
        key.sort_unstable();
        match self.index.get(&(series.tail, key.clone())) {
            Some(&i) => {
                let into = &mut self.out[i];
                into.value = merged(into.value, series.value, op);
            }
            None => {
                self.index.insert((series.tail, key), self.out.len());
                self.out.push(series);
            }
        }
    }
}

fn merged<'a>(a: Value<'a>, b: Value<'a>, op: Op) -> Value<'a> {
    let acc = match op {
        Op::Sum | Op::Avg => a.acc + b.acc,
        // NaN loses to a number: a process that never set its gauge does not hide the others.
        Op::Max => a.acc.max(b.acc),
        Op::Min => a.acc.min(b.acc),
        Op::Pass => a.acc,
    };
    Value {
        raw: None,
        acc,
        n: a.n + b.n,
    }
}
