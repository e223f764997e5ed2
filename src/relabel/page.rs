//! One upstream page through its rules: the families no rule touches stay as they were parsed
//! (their samples still written as runs of the upstream body), samples the rules only drop are
//! left out, and the families with a changed sample are written anew, as a text body of their
//! own that is parsed like any page.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;

use super::RuleSet;
use super::analysis::{FamilyLabels, NameView, Verdict, verdict};
use super::apply::{Memo, Step};
use super::labels::{Labels, SampleLabels};
use super::rule::is_label_name;
use super::seen;
use crate::expfmt::{
    self, Exposition, Family, Format, Kind, PairHasher, ParseError, ParseLimits, ParseOptions,
    RESERVED_PREFIX, Sample,
};

/// One upstream's page as parsed and as served.
#[derive(Debug)]
pub struct Page {
    /// The page as parsed: the next fetch of the same URL parses after it.
    pub parsed: Arc<Exposition>,
    /// What is served, in this order: `parsed` itself when no rule changes it, else the parsed
    /// page without what the rules dropped or changed, then the changed families, if any.
    pub served: Vec<Arc<Exposition>>,
    /// Samples the rules dropped, or left without a valid name or label names.
    pub relabel_dropped: u64,
}

impl Page {
    /// A page served as it was parsed.
    pub fn unchanged(parsed: Arc<Exposition>) -> Page {
        Page {
            served: vec![parsed.clone()],
            parsed,
            relabel_dropped: 0,
        }
    }
}

/// `parsed` through `rules`. `limits` and `hasher` are the page's own (the hasher must be the
/// one its merge uses).
///
/// # Errors
/// The rewritten families are over a limit (`limits`).
pub fn relabel(
    parsed: Arc<Exposition>,
    rules: &RuleSet,
    limits: ParseLimits,
    hasher: PairHasher,
) -> Result<Page, ParseError> {
    let exp = &*parsed;
    let mut run = Run {
        exp,
        rules,
        keep_family: vec![true; exp.families().len()],
        drop: Vec::new(),
        dropped: 0,
        made: Made::default(),
        index: None,
        buf: String::new(),
        memos: rules.rules.iter().map(|_| Memo::default()).collect(),
    };
    for (fi, family) in exp.families().iter().enumerate() {
        run.family(fi, family);
    }
    if run.keep_family.iter().all(|&k| k) && run.drop.is_empty() && run.made.families.is_empty() {
        return Ok(Page::unchanged(parsed));
    }
    let mut served = vec![Arc::new(exp.retain(|fi| run.keep_family[fi], &run.drop))];
    if !run.made.families.is_empty() {
        let body = run.made.body(exp);
        let keep = [String::new()];
        let opts = ParseOptions {
            keep: &keep,
            limits,
            added_labels: &[],
            hasher,
            allow_reserved: false,
        };
        let made = expfmt::parse(Bytes::from(body), Format::Text, &opts)?;
        served.push(Arc::new(made.with_added_labels_written()));
    }
    Ok(Page {
        served,
        relabel_dropped: run.dropped,
        parsed,
    })
}

/// What became of one sample of a family evaluated sample by sample.
#[derive(Debug, Clone, Copy)]
enum Outcome {
    Unchanged,
    Dropped,
    /// Changed: its line is `lines[start..end]` of the family's evaluation, for `target`.
    Changed {
        target: u32,
        start: u32,
        end: u32,
    },
}

/// Where a written sample goes: a family of the page (by index), or a new untyped family.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Target {
    Page(u32),
    New(Vec<u8>),
}

/// The families written anew, in order of first use.
#[derive(Debug, Default)]
struct Made {
    families: Vec<(Target, Vec<u8>)>,
    by_target: HashMap<Target, usize>,
}

impl Made {
    /// The index of the family `target` in the body, made on first use.
    fn index(&mut self, target: Target) -> usize {
        if let Some(&i) = self.by_target.get(&target) {
            return i;
        }
        self.families.push((target.clone(), Vec::new()));
        self.by_target.insert(target, self.families.len() - 1);
        self.families.len() - 1
    }

    /// The body: each family's HELP and TYPE (a new family is untyped), then its lines.
    fn body(&self, exp: &Exposition) -> Vec<u8> {
        let len = self.families.iter().map(|(_, l)| l.len() + 256).sum();
        let mut body = Vec::with_capacity(len);
        for (target, lines) in &self.families {
            match target {
                Target::Page(fi) => exp.write_text_header(&exp.families()[*fi as usize], &mut body),
                Target::New(name) => {
                    body.extend_from_slice(b"# TYPE ");
                    body.extend_from_slice(name);
                    body.extend_from_slice(b" untyped\n");
                }
            }
            body.extend_from_slice(lines);
        }
        body
    }
}

/// One page going through the rules.
struct Run<'e> {
    exp: &'e Exposition,
    rules: &'e RuleSet,
    keep_family: Vec<bool>,
    /// Samples dropped from families that are otherwise served as parsed, ascending.
    drop: Vec<u32>,
    dropped: u64,
    made: Made,
    /// The page's families by text name, made on the first renamed sample.
    index: Option<HashMap<Vec<u8>, u32>>,
    buf: String,
    /// What each rule worked out so far on this page.
    memos: Vec<Memo>,
}

impl<'e> Run<'e> {
    fn family(&mut self, fi: usize, family: &'e Family) {
        let exp = self.exp;
        let rules: &'e RuleSet = self.rules;
        let key = seen::key(exp, family);
        let labels = FamilyLabels::new(exp, family, &rules.seen, &key);
        let samples = exp.samples(family);
        let names = if samples.is_empty() {
            possible_names(exp, family)
        } else {
            sample_names(exp, family)
        };
        let verdicts: Vec<Verdict> = names
            .iter()
            .map(|name| {
                let mut view = NameView {
                    name,
                    family: &labels,
                    added: &rules.added,
                };
                verdict(&rules.rules, &mut self.memos, &mut view, &mut self.buf)
            })
            .collect();
        if verdicts.iter().all(|v| *v == Verdict::Keep) {
            return;
        }
        if verdicts.iter().all(|v| *v == Verdict::Drop) {
            self.keep_family[fi] = false;
            self.dropped += samples.len() as u64;
            return;
        }
        let first = family.samples.0;
        // Which of `names` each sample has.
        let mut which: Vec<u32> = Vec::with_capacity(samples.len());
        for (i, s) in samples.iter().enumerate() {
            let w = match which.last() {
                Some(&w) if i > 0 && s.repeats_name() => w,
                _ => {
                    let name = sample_name(exp, family, s);
                    names.iter().position(|n| *n == name).unwrap_or(0) as u32
                }
            };
            which.push(w);
        }
        let evaluates = verdicts.iter().any(|v| matches!(v, Verdict::Evaluate(_)));
        let sequence = evaluates.then(|| seen::sequence(samples, &which, &names));
        if let Some(dropped) = sequence.and_then(|seq| rules.seen.filtered(&key, seq)) {
            self.drop.extend(dropped.iter().map(|&d| first + d));
            self.dropped += dropped.len() as u64;
            return;
        }
        // What became of each sample.
        let mut outcomes: Vec<Outcome> = Vec::with_capacity(samples.len());
        let mut lines = Vec::new();
        let mut labels = SampleLabels::default();
        for (s, &w) in samples.iter().zip(&which) {
            let name = &names[w as usize];
            let outcome = match verdicts[w as usize] {
                Verdict::Keep => Outcome::Unchanged,
                Verdict::Drop => Outcome::Dropped,
                Verdict::Evaluate(from) => {
                    read(exp, s, name, &rules.added, &mut labels);
                    self.evaluate(fi, s, name, from, &mut labels, &mut lines)
                }
            };
            outcomes.push(outcome);
        }
        let dropped: Vec<u32> = (0..outcomes.len() as u32)
            .filter(|&i| matches!(outcomes[i as usize], Outcome::Dropped))
            .collect();
        self.dropped += dropped.len() as u64;
        if !outcomes
            .iter()
            .any(|o| matches!(o, Outcome::Changed { .. }))
        {
            self.drop.extend(dropped.iter().map(|&d| first + d));
            if let Some(seq) = sequence {
                rules.seen.remember_filtered(&key, seq, dropped);
            }
            return;
        }
        // A changed sample: the whole family is written anew, so that a histogram's series is
        // never served half from one body and half from the other.
        self.keep_family[fi] = false;
        for ((s, &w), &outcome) in samples.iter().zip(&which).zip(&outcomes) {
            match outcome {
                Outcome::Dropped => {}
                Outcome::Changed { target, start, end } => self.made.families[target as usize]
                    .1
                    .extend_from_slice(&lines[start as usize..end as usize]),
                Outcome::Unchanged => {
                    read(exp, s, &names[w as usize], &rules.added, &mut labels);
                    let own = self.made.index(Target::Page(fi as u32));
                    let out = &mut self.made.families[own].1;
                    let at = out.len();
                    if write_line(exp, s, &labels, out).is_none() {
                        // The page's own samples always make a series; kept safe regardless.
                        out.truncate(at);
                        self.dropped += 1;
                    }
                }
            }
        }
    }

    /// Runs the rules from `from` on over a sample's `labels` (as [`read`] left them); a
    /// changed sample's line goes to `lines`.
    fn evaluate(
        &mut self,
        fi: usize,
        s: &Sample,
        name: &str,
        from: usize,
        labels: &mut SampleLabels<'_>,
        lines: &mut Vec<u8>,
    ) -> Outcome {
        let rules = &self.rules.rules[from..];
        for (rule, memo) in rules.iter().zip(&mut self.memos[from..]) {
            match rule.apply(labels, &mut self.buf, memo) {
                // A sample's labels are all known: a rule never leaves them unknown.
                Step::Keep | Step::Unknown => {}
                Step::Drop => return Outcome::Dropped,
            }
        }
        if !labels.changed() {
            return Outcome::Unchanged;
        }
        let start = lines.len();
        let Some(final_name) = write_line(self.exp, s, labels, lines) else {
            lines.truncate(start);
            return Outcome::Dropped;
        };
        let target = if final_name == name {
            Target::Page(fi as u32)
        } else {
            self.target(final_name.as_bytes(), labels)
        };
        Outcome::Changed {
            target: self.made.index(target) as u32,
            start: start as u32,
            end: lines.len() as u32,
        }
    }

    /// The family a sample renamed to `name` belongs to: the page's family of that sample
    /// name when its shape fits (a bucket needs `le`), else a new untyped family.
    fn target(&mut self, name: &[u8], labels: &SampleLabels<'_>) -> Target {
        let exp = self.exp;
        let index = self.index.get_or_insert_with(|| {
            exp.families()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let (base, suffix) = exp.family_name(f);
                    ([base, suffix].concat(), i as u32)
                })
                .collect()
        });
        let kind = |fi: u32| exp.families()[fi as usize].kind;
        let has = |label: &str| labels.get(label).is_some_and(|v| !v.is_empty());
        if let Some(&fi) = index.get(name) {
            match kind(fi) {
                Kind::Histogram | Kind::GaugeHistogram => {}
                Kind::Summary if !has("quantile") => {}
                _ => return Target::Page(fi),
            }
        }
        for (suffix, bucket) in [
            (&b"_bucket"[..], true),
            (b"_sum", false),
            (b"_count", false),
        ] {
            if let Some(base) = name.strip_suffix(suffix)
                && let Some(&fi) = index.get(base)
            {
                let fits = match kind(fi) {
                    Kind::Histogram | Kind::GaugeHistogram => !bucket || has("le"),
                    Kind::Summary => !bucket,
                    _ => false,
                };
                if fits {
                    return Target::Page(fi);
                }
            }
        }
        Target::New(name.to_vec())
    }
}

/// Reads a sample's labels as the rules see them: `__name__`, its own labels (values
/// unescaped), then sysport's configured labels it lacks.
fn read<'n>(
    exp: &'n Exposition,
    s: &Sample,
    name: &'n str,
    added: &'n [(String, String)],
    labels: &mut SampleLabels<'n>,
) {
    labels.clear();
    labels.push_new(Cow::Borrowed("__name__"), Cow::Borrowed(name));
    // The lexer checked that names are ASCII and values UTF-8: the lossy paths never run.
    let text = |b: &'n [u8]| {
        std::str::from_utf8(b).map_or_else(|_| String::from_utf8_lossy(b), Cow::Borrowed)
    };
    for (n, v) in exp.label_pairs(s) {
        let v = match expfmt::unescape_label_value(v) {
            Cow::Borrowed(v) => text(v),
            Cow::Owned(v) => Cow::Owned(String::from_utf8_lossy(&v).into_owned()),
        };
        labels.push_new(text(n), v);
    }
    for (n, v) in added {
        labels.push(Cow::Borrowed(n), Cow::Borrowed(v));
    }
}

/// Appends the sample's text line with `labels`; returns its name, or `None` (and a partial
/// line) when the labels cannot make a series: no or an invalid `__name__`, a name under
/// sysport's own prefix, an invalid label name. Labels named `__...` are left out.
fn write_line(
    exp: &Exposition,
    s: &Sample,
    labels: &SampleLabels<'_>,
    out: &mut Vec<u8>,
) -> Option<String> {
    let name = labels.get("__name__").unwrap_or_default();
    if !expfmt::is_metric_name(name.as_bytes()) || name.as_bytes().starts_with(RESERVED_PREFIX) {
        return None;
    }
    out.extend_from_slice(name.as_bytes());
    let mut any = false;
    for (n, v) in labels.pairs() {
        if n.starts_with("__") {
            continue;
        }
        if !is_label_name(n) {
            return None;
        }
        out.push(if any { b',' } else { b'{' });
        any = true;
        out.extend_from_slice(n.as_bytes());
        out.extend_from_slice(b"=\"");
        expfmt::escape_label_value(v.as_bytes(), out);
        out.push(b'"');
    }
    if any {
        out.push(b'}');
    }
    exp.write_text_value(s, out);
    out.push(b'\n');
    Some(name.to_owned())
}

/// A sample's name as one string.
fn sample_name<'e>(exp: &'e Exposition, family: &Family, s: &Sample) -> Cow<'e, str> {
    match exp.sample_name(family, s) {
        (name, b"") => String::from_utf8_lossy(name),
        (base, suffix) => {
            Cow::Owned(String::from_utf8_lossy(&[base, suffix].concat()).into_owned())
        }
    }
}

/// The distinct sample names of a family, in order of first appearance.
fn sample_names<'e>(exp: &'e Exposition, family: &Family) -> Vec<Cow<'e, str>> {
    let mut names: Vec<Cow<'e, str>> = Vec::new();
    for (i, s) in exp.samples(family).iter().enumerate() {
        if i > 0 && s.repeats_name() {
            continue;
        }
        let name = sample_name(exp, family, s);
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The sample names a family without samples could have: whether the rules would drop them
/// all decides whether its HELP and TYPE stay.
fn possible_names<'e>(exp: &'e Exposition, family: &Family) -> Vec<Cow<'e, str>> {
    let (base, suffix) = exp.family_name(family);
    let name = String::from_utf8_lossy(&[base, suffix].concat()).into_owned();
    let suffixes: &[&str] = match family.kind {
        Kind::Histogram | Kind::GaugeHistogram => &["_bucket", "_sum", "_count"],
        Kind::Summary => &["", "_sum", "_count"],
        _ => &[""],
    };
    suffixes
        .iter()
        .map(|s| Cow::Owned(format!("{name}{s}")))
        .collect()
}
