//! OpenMetrics 1.0 output (contract rule 3).
//!
//! The merged families are text 0.0.4 families, so this regroups them the way OpenMetrics needs:
//! a counter `x_total` with its `x_created` gauge becomes one counter family `x`, a histogram
//! `h` takes `h_created` (and a gauge histogram its `_gcount`/`_gsum`), and every MetricPoint's
//! samples are written together (`x_total{a}` then `x_created{a}`; a histogram's buckets,
//! `_count`, `_sum` and `_created` per label set), which multiprocess-mode input does not do.
//! A family that OpenMetrics cannot express (a NaN or negative counter, a histogram without a
//! `+Inf` bucket, two families that would take the same name) is left out and counted.

use std::collections::{HashMap, HashSet};

use super::format::Format;
use super::hash::PassThrough;
use super::lex::{label_pairs, valid_float};
use super::merge::{END, Merge, OutFamily, group_key};
use super::model::{Exposition, Family, Kind, Role, Sample, Suffix};

/// What OpenMetrics output had to leave out.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct OpenMetricsStats {
    /// Families left out because OpenMetrics cannot express them.
    pub dropped_families: u64,
    /// Their samples.
    pub dropped_samples: u64,
}

/// One sample to write, with where it comes from.
#[derive(Clone, Copy)]
struct Item<'a> {
    src: &'a Exposition,
    fam: &'a Family,
    s: &'a Sample,
    /// Group (MetricPoint) key: the label set without `le` / `quantile`.
    group: u64,
    /// Extra suffix to append to the written name (`_total` for counters named without it).
    add_total: bool,
}

/// Writes a merge's families as OpenMetrics 1.0. The caller ends the document with
/// [`OPENMETRICS_EOF`] once every merge it serves is written.
pub fn write_openmetrics(m: &Merge<'_>, out: &mut Vec<u8>) -> OpenMetricsStats {
    let mut stats = OpenMetricsStats::default();
    let index: HashMap<&[u8], usize> = m
        .families
        .iter()
        .enumerate()
        .map(|(i, f)| (m.name(f), i))
        .collect();
    // Companion gauges folded into the family they belong to.
    let mut owner: Vec<usize> = vec![usize::MAX; m.families.len()];
    for (i, f) in m.families.iter().enumerate() {
        let (_, first) = m.part_family(f.first);
        if first.kind != Kind::Gauge {
            continue;
        }
        let name = m.name(f);
        if let Some(base) = name.strip_suffix(Suffix::Created.as_bytes()) {
            let total = [base, Suffix::Total.as_bytes()].concat();
            let found = index
                .get(total.as_slice())
                .filter(|&&o| kind_of(m, o) == Kind::Counter)
                .or_else(|| {
                    index
                        .get(base)
                        .filter(|&&o| matches!(kind_of(m, o), Kind::Histogram | Kind::Summary))
                });
            if let Some(&o) = found {
                owner[i] = o;
            }
        } else if let Some(base) = name
            .strip_suffix(Suffix::GCount.as_bytes())
            .or_else(|| name.strip_suffix(Suffix::GSum.as_bytes()))
            && matches!(first.role, Role::GCount | Role::GSum)
            && let Some(&o) = index.get(base)
        {
            owner[i] = o;
        }
    }
    let mut companions: Vec<Vec<usize>> = vec![Vec::new(); m.families.len()];
    for (i, &o) in owner.iter().enumerate() {
        if o != usize::MAX {
            companions[o].push(i);
        }
    }
    let mut used_names: HashSet<Vec<u8>> = HashSet::with_capacity(m.families.len());
    let mut items: Vec<Item<'_>> = Vec::new();
    let mut extra: Vec<Item<'_>> = Vec::new();
    for (i, f) in m.families.iter().enumerate() {
        if owner[i] != usize::MAX {
            continue;
        }
        let (src, first) = m.part_family(f.first);
        let text_name = m.name(f);
        let (mut om_kind, mut om_name, add_total) = om_shape(first, text_name);
        items.clear();
        extra.clear();
        collect(m, f, om_kind, add_total, &mut items);
        for &c in &companions[i] {
            collect(m, &m.families[c], om_kind, false, &mut extra);
        }
        let total = (items.len() + extra.len()) as u64;
        if matches!(om_kind, Kind::Info | Kind::StateSet)
            && !representable(om_kind, om_name, &items, &extra)
        {
            // An info or stateset that breaks its type's rules (an escaped state label, a
            // value other than 1) is still a valid gauge, as text 0.0.4 has it.
            (om_kind, om_name) = (Kind::Gauge, text_name);
        }
        if !used_names.insert(om_name.to_vec()) || !representable(om_kind, om_name, &items, &extra)
        {
            stats.dropped_families += 1;
            stats.dropped_samples += total;
            continue;
        }
        out.extend_from_slice(b"# TYPE ");
        out.extend_from_slice(om_name);
        out.push(b' ');
        out.extend_from_slice(om_kind.openmetrics_name().as_bytes());
        out.push(b'\n');
        if f.help_from != END {
            let (hsrc, hfam) = m.part_family(f.help_from);
            out.extend_from_slice(b"# HELP ");
            out.extend_from_slice(om_name);
            out.push(b' ');
            let help = hfam
                .help
                .expect("help_from points at a family with HELP")
                .of(hsrc.body());
            write_help_as_openmetrics(help, hsrc.format(), out);
            out.push(b'\n');
        }
        if let Some(unit) = first.unit.map(|u| u.of(src.body()))
            && om_name.len() > unit.len() + 1
            && om_name.ends_with(unit)
            && om_name[om_name.len() - unit.len() - 1] == b'_'
        {
            out.extend_from_slice(b"# UNIT ");
            out.extend_from_slice(om_name);
            out.push(b' ');
            out.extend_from_slice(unit);
            out.push(b'\n');
        }
        write_grouped(m, om_kind, &items, &extra, out);
    }
    stats
}

/// The line that ends every OpenMetrics document.
pub const OPENMETRICS_EOF: &[u8] = b"# EOF\n";

fn kind_of(m: &Merge<'_>, i: usize) -> Kind {
    m.part_family(m.families[i].first).1.kind
}

/// The OpenMetrics type and family name of a text family, and whether its samples need `_total`.
fn om_shape<'n>(first: &Family, text_name: &'n [u8]) -> (Kind, &'n [u8], bool) {
    match first.kind {
        Kind::Counter => match text_name.strip_suffix(Suffix::Total.as_bytes()) {
            Some(base) => (Kind::Counter, base, false),
            None => (Kind::Counter, text_name, true),
        },
        Kind::Gauge => match first.declared {
            Kind::Info => (
                Kind::Info,
                text_name
                    .strip_suffix(Suffix::Info.as_bytes())
                    .unwrap_or(text_name),
                false,
            ),
            Kind::StateSet => (Kind::StateSet, text_name, false),
            _ => (Kind::Gauge, text_name, false),
        },
        Kind::Histogram if first.declared == Kind::GaugeHistogram => {
            (Kind::GaugeHistogram, text_name, false)
        }
        k => (k, text_name, false),
    }
}

/// Appends an output family's samples (minus duplicates) with their group keys.
fn collect<'a>(
    m: &'a Merge<'a>,
    f: &OutFamily,
    kind: Kind,
    add_total: bool,
    into: &mut Vec<Item<'a>>,
) {
    for p in m.parts(f) {
        let (src, fam) = m.part_family(p);
        for s in m.written(p) {
            let group = group_key(m, src, kind, s);
            into.push(Item {
                src,
                fam,
                s,
                group,
                add_total,
            });
        }
    }
}

fn value_of(it: &Item<'_>) -> f64 {
    let v = it.src.sample_part(it.s, it.src.lex(it.s).value);
    parse_f64(v).unwrap_or(f64::NAN)
}

fn parse_f64(v: &[u8]) -> Option<f64> {
    std::str::from_utf8(v).ok()?.parse().ok()
}

fn suffix_of<'a>(it: &Item<'a>, base: &[u8]) -> &'a [u8] {
    // The written name is `a` + `b`: a recovered name is `base` + suffix `b`, any other is
    // all in `a`, which starts with `base`.
    let (a, b) = it.src.sample_name(it.fam, it.s);
    if b.is_empty() {
        a.get(base.len()..).unwrap_or(b"")
    } else {
        b
    }
}

fn label_value<'a>(it: &Item<'a>, name: &[u8]) -> Option<&'a [u8]> {
    label_pairs(it.src.sample_part(it.s, it.src.lex(it.s).labels))
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
}

/// Whether OpenMetrics can carry the family as it is (the checks OpenMetrics parsers make).
fn representable(kind: Kind, name: &[u8], items: &[Item<'_>], extra: &[Item<'_>]) -> bool {
    let counter_like = |it: &Item<'_>| {
        let v = value_of(it);
        !v.is_nan() && v >= 0.0
    };
    match kind {
        Kind::Counter => items.iter().all(counter_like),
        Kind::Info => items.iter().all(|it| value_of(it) == 1.0),
        Kind::StateSet => items
            .iter()
            .all(|it| matches!(value_of(it), 0.0 | 1.0) && label_value(it, name).is_some()),
        Kind::Summary => items.iter().all(|it| match suffix_of(it, name) {
            b"" => label_value(it, b"quantile")
                .and_then(parse_f64)
                .is_some_and(|q| {
                    (0.0..=1.0).contains(&q) && (value_of(it) >= 0.0 || value_of(it).is_nan())
                }),
            b"_count" => counter_like(it) && value_of(it).fract() == 0.0,
            b"_sum" => !value_of(it).is_nan(),
            _ => true,
        }),
        Kind::Histogram | Kind::GaugeHistogram => {
            histogram_ok(name, items) && extra.iter().all(|it| !value_of(it).is_nan())
        }
        _ => true,
    }
}

/// Every MetricPoint has increasing buckets ending in `+Inf`, integer counts, and `_count`
/// equal to the `+Inf` bucket.
fn histogram_ok(name: &[u8], items: &[Item<'_>]) -> bool {
    struct G {
        last_le: f64,
        last_count: f64,
        inf: Option<f64>,
        count: Option<f64>,
    }
    let mut groups: HashMap<u64, G, PassThrough> = HashMap::with_hasher(PassThrough);
    for it in items {
        let g = groups.entry(it.group).or_insert(G {
            last_le: f64::NEG_INFINITY,
            last_count: 0.0,
            inf: None,
            count: None,
        });
        let v = value_of(it);
        match suffix_of(it, name) {
            b"_bucket" => {
                let Some(le_text) = label_value(it, b"le") else {
                    return false;
                };
                let Some(le) = parse_f64(le_text) else {
                    return false;
                };
                if le.is_nan() || (le.is_infinite() && le_text != b"+Inf" && le_text != b"-Inf") {
                    return false;
                }
                if le <= g.last_le || v.is_nan() || v < g.last_count || v.fract() != 0.0 {
                    return false;
                }
                g.last_le = le;
                g.last_count = v;
                if le == f64::INFINITY {
                    g.inf = Some(v);
                }
            }
            b"_count" | b"_gcount" => {
                if v.is_nan() || v < 0.0 || v.fract() != 0.0 {
                    return false;
                }
                g.count = Some(v);
            }
            b"_sum" | b"_gsum" => {
                if v.is_nan() {
                    return false;
                }
            }
            _ => return false,
        }
    }
    groups
        .values()
        .all(|g| g.inf.is_some() && g.count.is_none_or(|c| Some(c) == g.inf))
}

/// Writes samples MetricPoint by MetricPoint: groups in order of first appearance, each
/// group's own samples in input order, then its companions.
fn write_grouped(
    m: &Merge<'_>,
    kind: Kind,
    items: &[Item<'_>],
    extra: &[Item<'_>],
    out: &mut Vec<u8>,
) {
    let needs_grouping =
        !extra.is_empty() || matches!(kind, Kind::Histogram | Kind::GaugeHistogram | Kind::Summary);
    if !needs_grouping {
        for it in items {
            write_sample(m, kind, it, out);
        }
        return;
    }
    let mut order: HashMap<u64, usize, PassThrough> =
        HashMap::with_capacity_and_hasher(items.len(), PassThrough);
    let mut keyed: Vec<(usize, usize, bool)> = Vec::with_capacity(items.len() + extra.len());
    for (i, it) in items.iter().enumerate() {
        let next = order.len();
        let g = *order.entry(it.group).or_insert(next);
        keyed.push((g, i, false));
    }
    for (i, it) in extra.iter().enumerate() {
        let next = order.len();
        let g = *order.entry(it.group).or_insert(next);
        keyed.push((g, i, true));
    }
    // Stable: within a group, own samples keep their order, companions follow.
    keyed.sort_by_key(|&(g, i, companion)| (g, companion, i));
    for (_, i, companion) in keyed {
        let it = if companion { &extra[i] } else { &items[i] };
        write_sample(m, kind, it, out);
    }
}

fn write_sample(m: &Merge<'_>, kind: Kind, it: &Item<'_>, out: &mut Vec<u8>) {
    let (src, s) = (it.src, it.s);
    let missing = m.missing_added(s);
    let (a, b) = src.sample_name(it.fam, s);
    out.extend_from_slice(a);
    out.extend_from_slice(b);
    if it.add_total {
        out.extend_from_slice(b"_total");
    }
    m.write_labels(src, s, missing, out);
    out.push(b' ');
    let lex = src.lex(s);
    write_value(src.sample_part(s, lex.value), out);
    if lex.timestamp.0 != lex.timestamp.1 {
        out.push(b' ');
        let ts = src.sample_part(s, lex.timestamp);
        match src.format() {
            Format::OpenMetrics => out.extend_from_slice(ts),
            Format::Text => write_millis_as_seconds(ts, out),
        }
    }
    if lex.exemplar.0 != lex.exemplar.1 {
        let name_end = [a, b].concat();
        let allowed = match kind {
            Kind::Counter => name_end.ends_with(b"_total"),
            Kind::Histogram | Kind::GaugeHistogram => name_end.ends_with(b"_bucket"),
            _ => false,
        };
        if allowed {
            out.push(b' ');
            out.extend_from_slice(src.sample_part(s, lex.exemplar));
        }
    }
    out.push(b'\n');
}

/// OpenMetrics spells the special values exactly `NaN`, `+Inf`, `-Inf`.
fn write_value(v: &[u8], out: &mut Vec<u8>) {
    debug_assert!(valid_float(v));
    if v.last().is_some_and(|b| b.is_ascii_alphabetic()) {
        let canonical: &[u8] = if v.eq_ignore_ascii_case(b"nan") {
            b"NaN"
        } else if v[0] == b'-' {
            b"-Inf"
        } else {
            b"+Inf"
        };
        out.extend_from_slice(canonical);
    } else {
        out.extend_from_slice(v);
    }
}

/// Text 0.0.4 timestamps are integer milliseconds; OpenMetrics wants seconds.
fn write_millis_as_seconds(ms: &[u8], out: &mut Vec<u8>) {
    let (neg, digits) = match ms.first() {
        Some(b'-') => (true, &ms[1..]),
        Some(b'+') => (false, &ms[1..]),
        _ => (false, ms),
    };
    if neg {
        out.push(b'-');
    }
    if digits.len() > 3 {
        out.extend_from_slice(&digits[..digits.len() - 3]);
    } else {
        out.push(b'0');
    }
    out.push(b'.');
    for _ in digits.len()..3 {
        out.push(b'0');
    }
    out.extend_from_slice(&digits[digits.len().saturating_sub(3)..]);
}

/// OpenMetrics HELP escapes `"` too.
fn write_help_as_openmetrics(help: &[u8], from: Format, out: &mut Vec<u8>) {
    if from == Format::OpenMetrics || memchr::memchr(b'"', help).is_none() {
        out.extend_from_slice(help);
        return;
    }
    for &b in help {
        if b == b'"' {
            out.extend_from_slice(b"\\\"");
        } else {
            out.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn millisecond_timestamps_become_exact_seconds() {
        for (ms, s) in [
            ("1700000000123", "1700000000.123"),
            ("5", "0.005"),
            ("-1500", "-1.500"),
            ("0", "0.000"),
        ] {
            let mut out = Vec::new();
            write_millis_as_seconds(ms.as_bytes(), &mut out);
            assert_eq!(String::from_utf8(out).expect("utf-8"), s);
        }
    }

    #[test]
    fn special_values_are_canonical() {
        for (v, want) in [
            ("nan", "NaN"),
            ("Inf", "+Inf"),
            ("-inf", "-Inf"),
            ("+Infinity", "+Inf"),
            ("1.5", "1.5"),
        ] {
            let mut out = Vec::new();
            write_value(v.as_bytes(), &mut out);
            assert_eq!(String::from_utf8(out).expect("utf-8"), want);
        }
    }

    #[test]
    fn help_quotes_are_escaped_for_openmetrics() {
        let mut out = Vec::new();
        write_help_as_openmetrics(br#"a "b" \\ c"#, Format::Text, &mut out);
        assert_eq!(out, br#"a \"b\" \\ c"#);
    }
}
