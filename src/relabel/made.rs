//! The families the rules changed, written anew as a text body: where each rewritten sample
//! goes ([`Target`]), its series (`name{labels}`) written once and kept for the next page
//! ([`Rewritten`]), and the body of them all ([`Made`]).

use std::collections::HashMap;

use super::labels::{Labels, SampleLabels};
use super::rule::is_label_name;
use crate::expfmt::{self, Exposition, Family, Kind, RESERVED_PREFIX, Sample};

/// Where a written sample goes: a family of the page (by index), or a new untyped family.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Target {
    Page(u32),
    New(Vec<u8>),
}

/// The families written anew, in order of first use.
#[derive(Debug, Default)]
pub(crate) struct Made {
    families: Vec<(Target, Vec<u8>)>,
    by_target: HashMap<Target, usize>,
}

impl Made {
    pub(crate) fn is_empty(&self) -> bool {
        self.families.is_empty()
    }

    /// The index of the family `target` in the body, made on first use.
    fn index(&mut self, target: &Target) -> usize {
        if let Some(&i) = self.by_target.get(target) {
            return i;
        }
        self.families.push((target.clone(), Vec::new()));
        self.by_target
            .insert(target.clone(), self.families.len() - 1);
        self.families.len() - 1
    }

    /// The body: each family's HELP and TYPE, then its lines. A family without a type (a new
    /// one among them) is declared `untyped`, so that its samples cannot be read as another
    /// family's, whatever comes before them in this body.
    pub(crate) fn body(&self, exp: &Exposition) -> Vec<u8> {
        let len = self.families.iter().map(|(_, l)| l.len() + 256).sum();
        let mut body = Vec::with_capacity(len);
        for (target, lines) in &self.families {
            let untyped = match target {
                Target::Page(fi) => {
                    let family = &exp.families()[*fi as usize];
                    exp.write_text_header(family, &mut body);
                    let (base, suffix) = exp.family_name(family);
                    (!family.typed).then(|| [base, suffix].concat())
                }
                Target::New(name) => Some(name.clone()),
            };
            if let Some(name) = untyped {
                body.extend_from_slice(b"# TYPE ");
                body.extend_from_slice(&name);
                body.extend_from_slice(b" untyped\n");
            }
            body.extend_from_slice(lines);
        }
        body
    }
}

/// One family of the page as the rules rewrote it: for each of its samples, dropped or where
/// it goes with which series. The same label sets on the next page make the same family; only
/// the values are new.
#[derive(Debug, Default)]
pub(crate) struct Rewritten {
    targets: Vec<Target>,
    /// Per sample of the family: `None` when dropped, else its target (in `targets`) and its
    /// series, `series[start..end]`.
    samples: Vec<Option<(u32, u32, u32)>>,
    series: Vec<u8>,
    dropped: u64,
}

impl Rewritten {
    /// The index of `target` among the family's targets.
    pub(crate) fn target(&mut self, target: Target) -> u32 {
        match self.targets.iter().position(|t| *t == target) {
            Some(i) => i as u32,
            None => {
                self.targets.push(target);
                self.targets.len() as u32 - 1
            }
        }
    }

    /// Writes the series of `labels` to the family's series: the name and the labels to serve
    /// (those named `__...` left out), and returns where it is. `None`, and nothing written,
    /// when the labels cannot make a series: no or an invalid `__name__`, a name under
    /// sysport's own prefix, an invalid label name.
    pub(crate) fn write_series(&mut self, labels: &SampleLabels<'_>) -> Option<(u32, u32)> {
        let start = self.series.len();
        let ok = write_series(labels, &mut self.series);
        if !ok {
            self.series.truncate(start);
            return None;
        }
        Some((start as u32, self.series.len() as u32))
    }

    /// Notes the next sample of the family: dropped (`None`), or its target and series.
    pub(crate) fn push(&mut self, sample: Option<(u32, (u32, u32))>) {
        match sample {
            None => {
                self.dropped += 1;
                self.samples.push(None);
            }
            Some((target, (start, end))) => self.samples.push(Some((target, start, end))),
        }
    }

    /// Samples the rules dropped from the family.
    pub(crate) fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Memory it holds, roughly.
    pub(crate) fn bytes(&self) -> usize {
        self.series.len() + 12 * self.samples.len()
    }

    /// Writes the family's samples to `made`: each kept one's series with its value from
    /// `samples` (the family's samples on the page, in order).
    pub(crate) fn write(&self, exp: &Exposition, samples: &[Sample], made: &mut Made) {
        let mut current: Option<(u32, usize)> = None;
        for (s, kept) in samples.iter().zip(&self.samples) {
            let Some((target, start, end)) = *kept else {
                continue;
            };
            let at = match current {
                Some((t, at)) if t == target => at,
                _ => {
                    let at = made.index(&self.targets[target as usize]);
                    current = Some((target, at));
                    at
                }
            };
            let out = &mut made.families[at].1;
            out.extend_from_slice(&self.series[start as usize..end as usize]);
            exp.write_text_value(s, out);
            out.push(b'\n');
        }
    }
}

/// Appends `name{labels}` for `labels`; `false` when they cannot make a series (see
/// [`Rewritten::write_series`]).
fn write_series(labels: &SampleLabels<'_>, out: &mut Vec<u8>) -> bool {
    let name = labels.get("__name__").unwrap_or_default();
    if !expfmt::is_metric_name(name.as_bytes()) || name.as_bytes().starts_with(RESERVED_PREFIX) {
        return false;
    }
    out.extend_from_slice(name.as_bytes());
    let mut any = false;
    for (n, v) in labels.pairs() {
        if n.starts_with("__") {
            continue;
        }
        if !is_label_name(n) {
            return false;
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
    true
}

/// The page's families by text name, to find where a renamed sample belongs.
pub(crate) struct Families(HashMap<Vec<u8>, u32>);

impl Families {
    pub(crate) fn of(exp: &Exposition) -> Families {
        Families(
            exp.families()
                .iter()
                .enumerate()
                .map(|(i, f)| {
                    let (base, suffix) = exp.family_name(f);
                    ([base, suffix].concat(), i as u32)
                })
                .collect(),
        )
    }

    /// The family a sample renamed to `name` belongs to: the page's family of that sample name
    /// when its shape fits (a bucket needs `le`, a quantile `quantile`), else a new untyped
    /// family.
    pub(crate) fn target(
        &self,
        families: &[Family],
        name: &[u8],
        labels: &SampleLabels<'_>,
    ) -> Target {
        let kind = |fi: u32| families[fi as usize].kind;
        let has = |label: &str| labels.get(label).is_some_and(|v| !v.is_empty());
        if let Some(&fi) = self.0.get(name) {
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
                && let Some(&fi) = self.0.get(base)
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
