//! One upstream page through its rules: the families no rule touches stay as they were parsed
//! (their samples still written as runs of the upstream body), samples the rules only drop are
//! left out, and the families with a changed sample are written anew, as a text body of their
//! own that is parsed like any page. What the rules made of each family is kept for the next
//! page (`seen`).

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;

use super::apply::{Memo, Step};
use super::labels::{Labels, SampleLabels};
use super::made::{Families, Made, Rewritten, Target};
use super::seen::{self, Outcome};
use super::set::RuleSet;
use super::verdict::{Verdict, Verdicts};
use crate::expfmt::{
    self, Exposition, Family, Format, PairHasher, ParseError, ParseLimits, ParseOptions, Sample,
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
        families: None,
        buf: String::new(),
        memos: rules.rules.iter().map(|_| Memo::default()).collect(),
    };
    for (fi, family) in exp.families().iter().enumerate() {
        run.family(fi, family);
    }
    if run.keep_family.iter().all(|&k| k) && run.drop.is_empty() && run.made.is_empty() {
        return Ok(Page::unchanged(parsed));
    }
    let mut served = vec![Arc::new(exp.retain(|fi| run.keep_family[fi], &run.drop))];
    if !run.made.is_empty() {
        let body = run.made.body(exp);
        let keep = [String::new()];
        let opts = ParseOptions {
            keep: &keep,
            limits,
            added_labels: &[],
            hasher,
            allow_reserved: false,
        };
        // The last such body as the prior: the series of rewritten families repeat from one
        // page to the next as the engine's do. (Its samples were marked as carrying the added
        // labels; every sample of this parse is marked the same way below.)
        let prior = rules.seen.made();
        let made = expfmt::parse_after(Bytes::from(body), Format::Text, &opts, prior.as_ref())?;
        let made = Arc::new(made.with_added_labels_written());
        rules.seen.remember_made(&made);
        served.push(made);
    }
    Ok(Page {
        served,
        relabel_dropped: run.dropped,
        parsed,
    })
}

/// What became of one sample of a family evaluated sample by sample.
#[derive(Debug, Clone, Copy)]
enum Fate {
    Unchanged,
    Dropped,
    /// Changed: to `target` (of the family's [`Rewritten`]), with the series at `series`.
    Changed {
        target: u32,
        series: (u32, u32),
    },
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
    families: Option<Families>,
    buf: String,
    /// What each rule worked out so far on this page.
    memos: Vec<Memo>,
}

impl<'e> Run<'e> {
    fn family(&mut self, fi: usize, family: &'e Family) {
        let exp = self.exp;
        let rules: &'e RuleSet = self.rules;
        let key = seen::key(exp, family);
        let samples = exp.samples(family);
        let known = match rules.seen.verdicts(&key, samples) {
            Some(known) => known,
            None => {
                let known = Arc::new(Verdicts::of(
                    exp,
                    family,
                    &key,
                    rules,
                    &mut self.memos,
                    &mut self.buf,
                ));
                rules.seen.remember_verdicts(&key, known.clone());
                known
            }
        };
        if known.verdicts.iter().all(|v| *v == Verdict::Keep) {
            return;
        }
        if known.verdicts.iter().all(|v| *v == Verdict::Drop) {
            self.keep_family[fi] = false;
            self.dropped += samples.len() as u64;
            return;
        }
        // Which of the names each sample has: by type a sample has one of them, but should one
        // not, it goes through every rule (`OTHER`).
        let mut names: Vec<Cow<'_, str>> = known
            .names
            .iter()
            .map(|n| Cow::Borrowed(n.as_str()))
            .collect();
        let mut verdicts = known.verdicts.clone();
        let mut which: Vec<u32> = Vec::with_capacity(samples.len());
        for (i, s) in samples.iter().enumerate() {
            let w = match which.last() {
                Some(&w) if i > 0 && s.repeats_name() => w,
                _ => {
                    let (a, b) = exp.sample_name(family, s);
                    match names.iter().position(|n| is_name(n, a, b)) {
                        Some(w) => w as u32,
                        None => {
                            names.push(sample_name(exp, family, s));
                            verdicts.push(Verdict::Evaluate(0));
                            names.len() as u32 - 1
                        }
                    }
                }
            };
            which.push(w);
        }
        let evaluates = verdicts.iter().any(|v| matches!(v, Verdict::Evaluate(_)));
        let sequence = evaluates.then(|| seen::sequence(samples, &which, &names));
        match sequence.and_then(|seq| rules.seen.outcome(&key, seq)) {
            Some(Outcome::Filtered(dropped)) => return self.filtered(family, &dropped),
            Some(Outcome::Rewritten(family)) => return self.rewritten(fi, samples, &family),
            None => {}
        }
        let mut rewritten = Rewritten::default();
        let mut labels = SampleLabels::default();
        let fates: Vec<Fate> = samples
            .iter()
            .zip(&which)
            .map(|(s, &w)| match verdicts[w as usize] {
                Verdict::Keep => Fate::Unchanged,
                Verdict::Drop => Fate::Dropped,
                Verdict::Evaluate(from) => {
                    read(exp, s, &names[w as usize], &rules.added, &mut labels);
                    self.evaluate(fi, &names[w as usize], from, &mut labels, &mut rewritten)
                }
            })
            .collect();
        if !fates.iter().any(|f| matches!(f, Fate::Changed { .. })) {
            let dropped: Vec<u32> = (0..fates.len() as u32)
                .filter(|&i| matches!(fates[i as usize], Fate::Dropped))
                .collect();
            self.filtered(family, &dropped);
            if let Some(seq) = sequence {
                rules
                    .seen
                    .remember_outcome(&key, seq, Outcome::Filtered(Arc::new(dropped)));
            }
            return;
        }
        // A changed sample: the whole family is written anew, so that a histogram's series is
        // never served half from one body and half from the other.
        for ((s, &w), fate) in samples.iter().zip(&which).zip(fates) {
            let sample = match fate {
                Fate::Dropped => None,
                Fate::Changed { target, series } => Some((target, series)),
                Fate::Unchanged => {
                    read(exp, s, &names[w as usize], &rules.added, &mut labels);
                    let own = rewritten.target(Target::Page(fi as u32));
                    // The page's own samples always make a series; a sample that would not is
                    // dropped rather than served wrong.
                    rewritten.write_series(&labels).map(|series| (own, series))
                }
            };
            rewritten.push(sample);
        }
        let rewritten = Arc::new(rewritten);
        self.rewritten(fi, samples, &rewritten);
        if let Some(seq) = sequence {
            rules
                .seen
                .remember_outcome(&key, seq, Outcome::Rewritten(rewritten));
        }
    }

    /// The family served as parsed but for `dropped` (indices in the family).
    fn filtered(&mut self, family: &Family, dropped: &[u32]) {
        let first = family.samples.0;
        self.drop.extend(dropped.iter().map(|&d| first + d));
        self.dropped += dropped.len() as u64;
    }

    /// The family `fi` served as `rewritten` says, with the values of `samples`.
    fn rewritten(&mut self, fi: usize, samples: &[Sample], rewritten: &Rewritten) {
        self.keep_family[fi] = false;
        self.dropped += rewritten.dropped();
        rewritten.write(self.exp, samples, &mut self.made);
    }

    /// Runs the rules from `from` on over a sample's `labels` (as [`read`] left them); a
    /// changed sample's series goes to `rewritten`.
    fn evaluate(
        &mut self,
        fi: usize,
        name: &str,
        from: usize,
        labels: &mut SampleLabels<'_>,
        rewritten: &mut Rewritten,
    ) -> Fate {
        let rules = &self.rules.rules[from..];
        for (rule, memo) in rules.iter().zip(&mut self.memos[from..]) {
            match rule.apply(labels, &mut self.buf, memo) {
                // A sample's labels are all known: a rule never leaves them unknown.
                Step::Keep | Step::Unknown => {}
                Step::Drop => return Fate::Dropped,
            }
        }
        if !labels.changed() {
            return Fate::Unchanged;
        }
        let Some(series) = rewritten.write_series(labels) else {
            return Fate::Dropped;
        };
        let final_name = labels.get("__name__").unwrap_or_default();
        let target = if final_name == name {
            Target::Page(fi as u32)
        } else {
            let exp = self.exp;
            self.families
                .get_or_insert_with(|| Families::of(exp))
                .target(exp.families(), final_name.as_bytes(), labels)
        };
        Fate::Changed {
            target: rewritten.target(target),
            series,
        }
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

/// A sample's name as one string.
fn sample_name<'e>(exp: &'e Exposition, family: &Family, s: &Sample) -> Cow<'e, str> {
    match exp.sample_name(family, s) {
        (name, b"") => String::from_utf8_lossy(name),
        (base, suffix) => {
            Cow::Owned(String::from_utf8_lossy(&[base, suffix].concat()).into_owned())
        }
    }
}

/// Whether `name` is the name written as `a` then `b`.
fn is_name(name: &str, a: &[u8], b: &[u8]) -> bool {
    let n = name.as_bytes();
    n.len() == a.len() + b.len() && n.starts_with(a) && n.ends_with(b)
}
