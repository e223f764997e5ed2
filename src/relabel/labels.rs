//! What a rule reads and writes: [`Labels`], and [`SampleLabels`], one sample's label set with
//! the meaning of Prometheus' `labels.Builder` (a label set to the empty string is removed).

use std::borrow::Cow;

/// A label set as rules see it: one sample's, or what is known of the samples of one name in a
/// family (the analysis that spares untouched families any work, `analysis.rs`), where some
/// values are not known.
pub(crate) trait Labels {
    /// The value of `name`, `""` when the label is absent; `None` when it is not known.
    fn get(&self, name: &str) -> Option<&str>;

    /// [`Labels::get`] without any costly look-up: `None` when not known yet.
    fn peek(&self, name: &str) -> Option<&str> {
        self.get(name)
    }

    /// Sets `name` to `value`, or removes it when `value` is empty. `false` when the outcome
    /// cannot be known.
    fn set(&mut self, name: &str, value: &str) -> bool;

    /// Calls `f` with every label in name order (`__name__` included), the value `None` when it
    /// is not known. `false` when the label names themselves are not known.
    fn for_each_sorted(&self, f: &mut dyn FnMut(&str, Option<&str>)) -> bool;

    /// Removes the labels whose name `keep` refuses. `false` when the outcome cannot be known.
    fn retain(&mut self, keep: &mut dyn FnMut(&str) -> bool) -> bool;
}

/// One sample's labels, `__name__` first, then its labels in their order, then the labels
/// added since (a rule's new labels, and sysport's configured labels it lacked).
#[derive(Debug, Default)]
pub(crate) struct SampleLabels<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// The labels as read, before any rule.
    read: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// Whether a rule wrote anything since [`SampleLabels::clear`].
    changed: bool,
}

impl<'a> SampleLabels<'a> {
    /// Empties the set for the next sample (keeping its memory).
    pub(crate) fn clear(&mut self) {
        self.pairs.clear();
        self.read.clear();
        self.changed = false;
    }

    /// Adds a label of the sample as read (before any rule runs), unless it has one of that
    /// name. Empty values are left out: Prometheus removes them before its rules run.
    pub(crate) fn push(&mut self, name: Cow<'a, str>, value: Cow<'a, str>) {
        if self.position(&name).is_none() {
            self.push_new(name, value);
        }
    }

    /// [`SampleLabels::push`] of a name known not to be in the set yet (a line's own labels,
    /// whose names the lexer checked are distinct).
    pub(crate) fn push_new(&mut self, name: Cow<'a, str>, value: Cow<'a, str>) {
        if !value.is_empty() {
            self.read.push((name.clone(), value.clone()));
            self.pairs.push((name, value));
        }
    }

    /// Whether the rules left a label set other than the one read. A temporary label set and
    /// removed again, or a value set to what it was, is no change.
    pub(crate) fn changed(&self) -> bool {
        self.changed
            && (self.pairs.len() != self.read.len()
                || self.read.iter().any(|pair| !self.pairs.contains(pair)))
    }

    /// The labels in their order, `__name__` among them.
    pub(crate) fn pairs(&self) -> &[(Cow<'a, str>, Cow<'a, str>)] {
        &self.pairs
    }

    fn position(&self, name: &str) -> Option<usize> {
        self.pairs.iter().position(|(n, _)| n == name)
    }
}

impl Labels for SampleLabels<'_> {
    fn get(&self, name: &str) -> Option<&str> {
        Some(self.position(name).map_or("", |i| &self.pairs[i].1))
    }

    fn set(&mut self, name: &str, value: &str) -> bool {
        match (self.position(name), value.is_empty()) {
            (Some(i), true) => {
                self.pairs.remove(i);
                self.changed = true;
            }
            (Some(i), false) => {
                if self.pairs[i].1 != value {
                    self.pairs[i].1 = Cow::Owned(value.to_owned());
                    self.changed = true;
                }
            }
            (None, true) => {}
            (None, false) => {
                self.pairs
                    .push((Cow::Owned(name.to_owned()), Cow::Owned(value.to_owned())));
                self.changed = true;
            }
        }
        true
    }

    fn for_each_sorted(&self, f: &mut dyn FnMut(&str, Option<&str>)) -> bool {
        let mut order: Vec<usize> = (0..self.pairs.len()).collect();
        order.sort_unstable_by(|&a, &b| self.pairs[a].0.cmp(&self.pairs[b].0));
        for i in order {
            f(&self.pairs[i].0, Some(&self.pairs[i].1));
        }
        true
    }

    fn retain(&mut self, keep: &mut dyn FnMut(&str) -> bool) -> bool {
        let before = self.pairs.len();
        self.pairs.retain(|(n, _)| keep(n));
        self.changed |= self.pairs.len() != before;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set_of(pairs: &[(&'static str, &'static str)]) -> SampleLabels<'static> {
        let mut l = SampleLabels::default();
        for &(n, v) in pairs {
            l.push(Cow::Borrowed(n), Cow::Borrowed(v));
        }
        l
    }

    #[test]
    fn an_empty_value_removes_the_label_and_new_labels_come_last() {
        let mut l = set_of(&[("__name__", "x"), ("b", "1"), ("a", "2")]);
        assert!(!l.changed());
        l.set("b", "1");
        assert!(!l.changed(), "the same value is no change");
        l.set("tmp", "x");
        l.set("b", "");
        l.set("b", "1");
        l.set("tmp", "");
        assert!(!l.changed(), "labels set and removed again are no change");
        l.set("c", "3");
        l.set("b", "");
        l.set("zz", "");
        assert!(l.changed());
        let names: Vec<&str> = l.pairs().iter().map(|(n, _)| n.as_ref()).collect();
        assert_eq!(names, ["__name__", "a", "c"]);
        assert_eq!(l.get("b"), Some(""));
    }

    #[test]
    fn labels_read_with_an_empty_value_are_absent() {
        let l = set_of(&[("__name__", "x"), ("a", "")]);
        assert_eq!(l.pairs().len(), 1);
        let mut seen = Vec::new();
        l.for_each_sorted(&mut |n, _| seen.push(n.to_owned()));
        assert_eq!(seen, ["__name__"]);
    }
}
