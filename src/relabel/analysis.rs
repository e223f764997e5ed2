//! What a rule set does to the samples of one name in a family, decided before any of them is
//! read, so that the families no rule can touch cost nothing per sample.
//!
//! The rules run on a [`NameView`]: what is known of every sample of that name at once. Its
//! `__name__` is known; a label that no sample of the family carries is known to be absent (or
//! to hold sysport's configured value); the value of any other label is not known. A rule is
//! decided when what it reads is known (or when no value it could read can match, checked on
//! the known start of the joined source values); the first undecided rule, or the first that
//! changes the labels, leaves the samples of that name to be evaluated one by one from there.
//!
//! A family's verdicts hold as long as its label names do: they are kept for the next page
//! (`seen`), and worked out again only when the label sets they depended on changed.

use std::cell::OnceCell;
use std::sync::Arc;

use super::apply::{Memo, Step};
use super::labels::Labels;
use super::rule::Rule;
use super::seen::{self, Seen};
use super::set::RuleSet;
use super::verdict::{Verdict, Verdicts};
use crate::expfmt::{Exposition, Family, Kind};

impl Verdicts {
    /// Works out what `rules` do to the samples of `family` (`key` its [`seen::key`]).
    pub(crate) fn of(
        exp: &Exposition,
        family: &Family,
        key: &[u8],
        rules: &RuleSet,
        memos: &mut [Memo],
        buf: &mut String,
    ) -> Verdicts {
        let labels = FamilyLabels {
            exp,
            family,
            seen: &rules.seen,
            key,
            names: OnceCell::new(),
        };
        let names = possible_names(exp, family);
        let verdicts = names
            .iter()
            .map(|name| {
                let mut view = NameView {
                    name,
                    family: &labels,
                    added: &rules.added,
                };
                verdict(&rules.rules, memos, &mut view, buf)
            })
            .collect();
        Verdicts {
            names,
            verdicts,
            label_sum: labels.names.get().map(|(sum, _)| *sum),
        }
    }
}

/// The sample names a family can have, by its type.
fn possible_names(exp: &Exposition, family: &Family) -> Vec<String> {
    let (base, suffix) = exp.family_name(family);
    let name = String::from_utf8_lossy(&[base, suffix].concat()).into_owned();
    let suffixes: &[&str] = match family.kind {
        Kind::Histogram | Kind::GaugeHistogram => &["_bucket", "_sum", "_count"],
        Kind::Summary => &["", "_sum", "_count"],
        _ => &[""],
    };
    suffixes.iter().map(|s| format!("{name}{s}")).collect()
}

/// The label names the samples of one family carry, read on first need (or taken from the
/// last page: [`Seen`]), with the sum of its label-set hashes.
struct FamilyLabels<'e> {
    exp: &'e Exposition,
    family: &'e Family,
    seen: &'e Seen,
    key: &'e [u8],
    names: OnceCell<(u64, Arc<Vec<String>>)>,
}

impl FamilyLabels<'_> {
    fn names(&self) -> &[String] {
        &self
            .names
            .get_or_init(|| {
                let sum = seen::label_sum(self.exp.samples(self.family));
                let names = self
                    .seen
                    .names(self.key, sum, || read_names(self.exp, self.family));
                (sum, names)
            })
            .1
    }

    fn carries(&self, name: &str) -> bool {
        self.names().iter().any(|n| n == name)
    }
}

/// Every label name some sample of `family` carries.
fn read_names(exp: &Exposition, family: &Family) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    // Consecutive samples mostly carry the same names in the same order: a name where the
    // sample before had it is known already.
    let mut last: Vec<&[u8]> = Vec::new();
    for s in exp.samples(family) {
        for (i, (name, _)) in exp.label_pairs(s).enumerate() {
            if last.get(i) == Some(&name) {
                continue;
            }
            if !names.iter().any(|n| n.as_bytes() == name) {
                names.push(String::from_utf8_lossy(name).into_owned());
            }
            last.truncate(i);
            last.push(name);
        }
    }
    names
}

/// The samples of one name in a family, as the rules see them together.
struct NameView<'a> {
    name: &'a str,
    family: &'a FamilyLabels<'a>,
    /// sysport's configured labels, which a sample lacking them gets.
    added: &'a [(String, String)],
}

impl NameView<'_> {
    /// Every label some of these samples have: name and value, `None` when not known.
    fn entries(&self) -> Vec<(&str, Option<&str>)> {
        let mut all: Vec<(&str, Option<&str>)> = vec![("__name__", Some(self.name))];
        all.extend(self.family.names().iter().map(|n| (n.as_str(), None)));
        for (name, value) in self.added {
            if !value.is_empty() && !self.family.carries(name) {
                all.push((name, Some(value)));
            }
        }
        all.sort_unstable_by(|a, b| a.0.cmp(b.0));
        all
    }
}

impl Labels for NameView<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        if name == "__name__" {
            return Some(self.name);
        }
        if self.family.carries(name) {
            return None;
        }
        Some(
            self.added
                .iter()
                .find(|(n, _)| n == name)
                .map_or("", |(_, v)| v.as_str()),
        )
    }

    fn peek(&self, name: &str) -> Option<&str> {
        if name == "__name__" || self.family.names.get().is_some() {
            self.get(name)
        } else {
            None
        }
    }

    fn set(&mut self, name: &str, value: &str) -> bool {
        // Anything but setting what is already there changes (some of) the samples.
        self.get(name) == Some(value)
    }

    fn for_each_sorted(&self, f: &mut dyn FnMut(&str, Option<&str>)) -> bool {
        for (name, value) in self.entries() {
            f(name, value);
        }
        true
    }

    fn retain(&mut self, keep: &mut dyn FnMut(&str) -> bool) -> bool {
        self.entries().iter().all(|(name, _)| keep(name))
    }
}

/// What `rules` do to every sample that `view` stands for (`memos` are the rules' own).
fn verdict(
    rules: &[Rule],
    memos: &mut [Memo],
    view: &mut NameView<'_>,
    buf: &mut String,
) -> Verdict {
    for (i, (rule, memo)) in rules.iter().zip(memos).enumerate() {
        match rule.apply(view, buf, memo) {
            Step::Keep => {}
            Step::Drop => return Verdict::Drop,
            Step::Unknown => return Verdict::Evaluate(i),
        }
    }
    Verdict::Keep
}
