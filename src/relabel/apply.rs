//! What a rule does to a label set, as Prometheus' `relabel` does it, remembering what it
//! worked out: the samples of a page share most of their source values (the same models and
//! ranks, the same bucket bounds series after series), and a page has few label names.

use std::collections::HashMap;

use super::labels::Labels;
use super::rule::{Action, Rule, is_label_name};

/// What a rule made of a label set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// The series stays (changed or not).
    Keep,
    /// The series is dropped.
    Drop,
    /// Not known (a label's value or the outcome of a change is not known).
    Unknown,
}

/// What one rule worked out, for the next label set it meets.
#[derive(Debug, Default)]
pub(crate) struct Memo {
    /// Joined source values, and what came of them.
    values: HashMap<String, Worked>,
    /// Per label name, for `labelmap`, `labeldrop` and `labelkeep`: whether the regex matches
    /// it, and the name `labelmap` maps it to.
    names: HashMap<String, Option<String>>,
}

/// What a rule worked out from one joined value.
#[derive(Debug)]
enum Worked {
    /// The regex matched, or did not (`keep`, `drop`; `replace` that sets nothing).
    Matched(bool),
    /// `replace`: the target label and its new value.
    Replace(String, String),
    /// `hashmod`, `lowercase`, `uppercase`: the target label's new value.
    Value(String),
}

/// Label names a memo remembers at most: a page has a few dozen.
const MEMO_NAMES: usize = 1024;
/// Joined values a memo remembers at most (a histogram's bucket bounds times its sample names,
/// a few models and ranks); when full, it starts again.
const MEMO_VALUES: usize = 4096;

impl Rule {
    /// Applies the rule to `labels`, with `buf` as scratch space and `memo` what this rule
    /// worked out before (from other labels sets of the same page).
    pub(crate) fn apply(&self, labels: &mut dyn Labels, buf: &mut String, memo: &mut Memo) -> Step {
        match self.action {
            Action::Keep | Action::Drop => match self.matches(labels, buf, memo) {
                None => Step::Unknown,
                Some(matched) if matched == (self.action == Action::Drop) => Step::Drop,
                Some(_) => Step::Keep,
            },
            Action::Replace => match self.matches(labels, buf, memo) {
                None => Step::Unknown,
                Some(false) => Step::Keep,
                Some(true) => match self.work(buf, memo) {
                    Worked::Replace(target, value) => step(labels.set(target, value)),
                    _ => Step::Keep,
                },
            },
            Action::KeepEqual | Action::DropEqual => {
                if !self.join(labels, false, buf) {
                    return Step::Unknown;
                }
                let Some(target) = labels.get(&self.target_label) else {
                    return Step::Unknown;
                };
                if (target == buf.as_str()) == (self.action == Action::KeepEqual) {
                    Step::Keep
                } else {
                    Step::Drop
                }
            }
            Action::HashMod | Action::Lowercase | Action::Uppercase => {
                if !self.join(labels, false, buf) {
                    return Step::Unknown;
                }
                match self.work(buf, memo) {
                    Worked::Value(value) => step(labels.set(&self.target_label, value)),
                    _ => Step::Keep,
                }
            }
            Action::LabelMap => self.label_map(labels, memo),
            Action::LabelDrop | Action::LabelKeep => {
                let keep_matching = self.action == Action::LabelKeep;
                step(labels.retain(&mut |name| {
                    self.map_name(name, &mut memo.names).is_some() == keep_matching
                }))
            }
        }
    }

    /// Whether the joined source values match the regex; `None` when that is not known. When
    /// they are known, `buf` holds them.
    fn matches(&self, labels: &dyn Labels, buf: &mut String, memo: &mut Memo) -> Option<bool> {
        // What is known without a costly look-up may already rule any match out.
        if !self.join(labels, true, buf) {
            if !self.regex.may_match_with_prefix(buf) {
                return Some(false);
            }
            if !self.join(labels, false, buf) {
                return (!self.regex.may_match_with_prefix(buf)).then_some(false);
            }
        }
        Some(!matches!(self.work(buf, memo), Worked::Matched(false)))
    }

    /// What the rule makes of the joined source values `joined`, remembered in `memo`.
    fn work<'m>(&self, joined: &str, memo: &'m mut Memo) -> &'m Worked {
        if !memo.values.contains_key(joined) {
            if memo.values.len() >= MEMO_VALUES {
                memo.values.clear();
            }
            memo.values.insert(joined.to_owned(), self.worked(joined));
        }
        &memo.values[joined]
    }

    fn worked(&self, joined: &str) -> Worked {
        match self.action {
            Action::Replace => match self.regex.captures(joined) {
                None => Worked::Matched(false),
                Some(caps) => {
                    let mut target = String::new();
                    self.regex.expand(&caps, &self.target_label, &mut target);
                    if is_label_name(&target) {
                        let mut value = String::new();
                        self.regex.expand(&caps, &self.replacement, &mut value);
                        Worked::Replace(target, value)
                    } else {
                        // A target that is not a label name: nothing is set.
                        Worked::Matched(false)
                    }
                }
            },
            Action::HashMod => {
                // The low 64 bits of the MD5 digest, big-endian, as Prometheus takes.
                let digest = md5::compute(joined.as_bytes()).0;
                let low = u64::from_be_bytes(digest[8..].try_into().expect("8 bytes"));
                Worked::Value((low % self.modulus).to_string())
            }
            Action::Lowercase => Worked::Value(go_lowercase(joined)),
            Action::Uppercase => Worked::Value(go_uppercase(joined)),
            _ => Worked::Matched(self.regex.is_match(joined)),
        }
    }

    fn label_map(&self, labels: &mut dyn Labels, memo: &mut Memo) -> Step {
        // Every label is mapped from the set as it was before the rule, in name order: a later
        // name mapped to the same new name wins, as in Prometheus.
        let mut mapped: Vec<(String, String)> = Vec::new();
        let mut unknown = false;
        let known = labels.for_each_sorted(&mut |name, value| {
            if let Some(new_name) = self.map_name(name, &mut memo.names) {
                match value {
                    Some(value) => mapped.push((new_name, value.to_owned())),
                    None if new_name != name => unknown = true,
                    None => {}
                }
            }
        });
        if !known || unknown {
            return Step::Unknown;
        }
        for (name, value) in mapped {
            if !labels.set(&name, &value) {
                return Step::Unknown;
            }
        }
        Step::Keep
    }

    /// The name a label name maps to when the regex matches it (`replacement` expanded), or
    /// `None`.
    fn map_name(&self, name: &str, names: &mut HashMap<String, Option<String>>) -> Option<String> {
        if let Some(known) = names.get(name) {
            return known.clone();
        }
        let mapped = self.regex.captures(name).map(|caps| {
            let mut out = String::new();
            if self.action == Action::LabelMap {
                self.regex.expand(&caps, &self.replacement, &mut out);
            }
            out
        });
        if names.len() < MEMO_NAMES {
            names.insert(name.to_owned(), mapped.clone());
        }
        mapped
    }

    /// Joins the source values into `buf`; `false` when one is not known, `buf` then holding
    /// what comes before it. `cheap` reads with [`Labels::peek`].
    fn join(&self, labels: &dyn Labels, cheap: bool, buf: &mut String) -> bool {
        buf.clear();
        for (i, name) in self.source_labels.iter().enumerate() {
            if i > 0 {
                buf.push_str(&self.separator);
            }
            let value = if cheap {
                labels.peek(name)
            } else {
                labels.get(name)
            };
            match value {
                Some(value) => buf.push_str(value),
                None => return false,
            }
        }
        true
    }
}

fn step(known: bool) -> Step {
    if known { Step::Keep } else { Step::Unknown }
}

/// Go's `strings.ToLower`: each character's simple lower-case mapping (`İ` becomes `i`; no
/// final-sigma rule).
fn go_lowercase(s: &str) -> String {
    s.chars()
        .map(|c| c.to_lowercase().next().unwrap_or(c))
        .collect()
}

/// Go's `strings.ToUpper`: each character's simple upper-case mapping. A character whose
/// upper case is several characters (`ß`) has no simple mapping and stays as it is.
fn go_uppercase(s: &str) -> String {
    s.chars()
        .map(|c| {
            let mut upper = c.to_uppercase();
            match (upper.next(), upper.next()) {
                (Some(u), None) => u,
                _ => c,
            }
        })
        .collect()
}
