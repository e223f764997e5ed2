//! Several upstreams' expositions → one list of families (contract rules 1 and 4).
//!
//! Families are matched by their text 0.0.4 name. The first upstream (in configuration order)
//! to bring a family decides its TYPE and HELP; a later one with another TYPE is dropped and
//! counted as a conflict. A series that already appeared (same name, same label set, added
//! labels included) is dropped and counted as a duplicate.

use std::collections::HashMap;
use std::collections::hash_map::Entry;

use super::hash::{PairHasher, PassThrough, pair_hash};
use super::lex::label_pairs;
use super::model::{Exposition, Family, Kind, Sample, Span};
use super::select::Selection;

/// A label sysport adds to every engine series that lacks it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddedLabel {
    name: Vec<u8>,
    /// The value escaped for the exposition formats (`\\`, `\"`, `\n`).
    escaped: Vec<u8>,
}

impl AddedLabel {
    /// A label from its name and plain value.
    pub fn new(name: &str, value: &str) -> AddedLabel {
        let mut escaped = Vec::with_capacity(value.len());
        crate::rewrite::escape_label_value(value.as_bytes(), &mut escaped);
        AddedLabel {
            name: name.as_bytes().to_vec(),
            escaped,
        }
    }

    /// The label name.
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// The escaped value.
    pub fn escaped_value(&self) -> &[u8] {
        &self.escaped
    }
}

/// What to merge and how.
#[derive(Debug, Clone, Copy)]
pub struct MergeOptions<'a> {
    /// Labels added to samples that lack them (the same names passed to the parser, same order).
    pub added: &'a [AddedLabel],
    /// Only the families this selects, when given.
    pub names: Option<&'a Selection>,
    /// The key of the series hashes (the one the sources were parsed with).
    pub hasher: PairHasher,
}

/// Per-upstream counts from one merge.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MergeStats {
    /// Samples written.
    pub kept: u64,
    /// Samples dropped because their family's TYPE differs from an earlier upstream's.
    pub conflict: u64,
    /// Samples dropped because the same series was already written.
    pub duplicate: u64,
}

/// One output family.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OutFamily {
    /// The text 0.0.4 family name, as a range of `Merge::names`.
    pub name: (u32, u32),
    /// Where the family's name and metadata come from: the first upstream that brought it.
    pub first: u32,
    pub last: u32,
    /// The part whose HELP is used, if any has one.
    pub help_from: u32,
}

/// One upstream's contribution to an output family. Parts form a list through `next`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Part {
    pub source: u32,
    pub family: u32,
    /// The output family this part belongs to.
    pub out: u32,
    pub next: u32,
}

pub(crate) const END: u32 = u32::MAX;

/// The merged view of several expositions, ready to be written in either format.
#[derive(Debug)]
pub struct Merge<'a> {
    sources: &'a [&'a Exposition],
    pub(crate) families: Vec<OutFamily>,
    parts: Vec<Part>,
    /// Samples to skip, as `(part, sample index within the family)`, in writing order.
    skip: Vec<(u32, u32)>,
    added: &'a [AddedLabel],
    hasher: PairHasher,
    /// Every family name, concatenated.
    names: Vec<u8>,
    stats: Vec<MergeStats>,
}

impl<'a> Merge<'a> {
    /// Counts per source, in the order the sources were given.
    pub fn stats(&self) -> &[MergeStats] {
        &self.stats
    }

    /// The text 0.0.4 name of an output family.
    pub(crate) fn name(&self, fam: &OutFamily) -> &[u8] {
        &self.names[fam.name.0 as usize..fam.name.1 as usize]
    }

    /// The merged expositions, in the order given.
    pub(crate) fn sources(&self) -> &'a [&'a Exposition] {
        self.sources
    }

    /// How many families will be written.
    pub fn family_count(&self) -> usize {
        self.families.len()
    }

    pub(crate) fn part_family(&self, p: u32) -> (&'a Exposition, &'a Family) {
        let part = self.parts[p as usize];
        let src = self.sources[part.source as usize];
        (src, &src.families()[part.family as usize])
    }

    /// The parts of an output family, in upstream order.
    pub(crate) fn parts(&self, fam: &OutFamily) -> impl Iterator<Item = u32> + '_ {
        let parts = &self.parts;
        std::iter::successors((fam.first != END).then_some(fam.first), move |&p| {
            let next = parts[p as usize].next;
            (next != END).then_some(next)
        })
    }

    /// The samples of part `p` to leave out (sorted by sample index).
    fn skips_for(&self, p: u32) -> &[(u32, u32)] {
        // Parts are numbered in the order they were visited, so `skip` is sorted by part.
        let start = self.skip.partition_point(|&(sp, _)| sp < p);
        let end = self.skip.partition_point(|&(sp, _)| sp <= p);
        &self.skip[start..end]
    }

    /// The samples of part `p` that are written: all but the duplicates.
    pub(crate) fn written(&self, p: u32) -> impl Iterator<Item = &'a Sample> + '_ {
        let (src, fam) = self.part_family(p);
        let mut skip = self
            .skips_for(p)
            .iter()
            .map(|&(_, i)| i as usize)
            .peekable();
        src.samples(fam)
            .iter()
            .enumerate()
            .filter_map(move |(idx, s)| skip.next_if_eq(&idx).is_none().then_some(s))
    }

    /// A family gets a TYPE line when any upstream declared one for it.
    pub(crate) fn families_typed(&self, fam: &OutFamily) -> bool {
        self.parts(fam).any(|p| self.part_family(p).1.typed)
    }

    /// Bit mask of the added labels sample `s` lacks.
    #[inline]
    pub(crate) fn missing_added(&self, s: &Sample) -> u16 {
        let n = self.added.len();
        let all: u16 = if n >= 8 { 0xff } else { (1u16 << n) - 1 };
        all & !(s.present() as u16)
    }

    /// `{labels,added}` of sample `s` of `src` in canonical form, `missing` being
    /// [`Merge::missing_added`]; nothing when there are no labels at all.
    pub(crate) fn write_labels(
        &self,
        src: &Exposition,
        s: &Sample,
        missing: u16,
        out: &mut Vec<u8>,
    ) {
        let block = src.sample_part(s, src.lex(s).labels);
        if block.is_empty() && missing == 0 {
            return;
        }
        out.push(b'{');
        let mut any = false;
        if s.canonical() {
            out.extend_from_slice(block);
            any = !block.is_empty();
        } else {
            for (name, value) in label_pairs(block) {
                if any {
                    out.push(b',');
                }
                any = true;
                out.extend_from_slice(name);
                out.extend_from_slice(b"=\"");
                out.extend_from_slice(value);
                out.push(b'"');
            }
        }
        for (bit, label) in self.added.iter().enumerate().take(8) {
            if missing & (1 << bit) != 0 {
                if any {
                    out.push(b',');
                }
                any = true;
                out.extend_from_slice(label.name());
                out.extend_from_slice(b"=\"");
                out.extend_from_slice(label.escaped_value());
                out.push(b'"');
            }
        }
        out.push(b'}');
    }

    /// Bytes the written output will roughly need.
    pub fn size_hint(&self) -> usize {
        let added: usize = self
            .added
            .iter()
            .map(|l| l.name.len() + l.escaped.len() + 4)
            .sum();
        // Header lines exactly enough that writing never has to grow the buffer: HELP, TYPE
        // and UNIT each repeat the name with a short keyword, HELP and UNIT add their text.
        let headers = |s: &Exposition| -> usize {
            s.families()
                .iter()
                .map(|f| {
                    let (base, suffix) = s.family_name(f);
                    let text = |t: Option<Span>| t.map_or(0, |t| (t.end - t.start) as usize);
                    3 * (base.len() + suffix.len() + 24) + text(f.help) + text(f.unit)
                })
                .sum()
        };
        self.sources
            .iter()
            .map(|s| s.kept_bytes() + s.all_samples().len() * added + headers(s))
            .sum()
    }
}

/// Merges expositions given in upstream order.
pub fn merge<'a>(sources: &'a [&'a Exposition], opts: &MergeOptions<'a>) -> Merge<'a> {
    let total: usize = sources.iter().map(|s| s.all_samples().len()).sum();
    let tables = if total > PER_FAMILY_ABOVE {
        Tables::PerFamily
    } else {
        Tables::One
    };
    merge_with(sources, opts, tables)
}

/// Below this many samples one table for the whole merge stays in cache anyway.
const PER_FAMILY_ABOVE: usize = 4096;

/// How a merge finds duplicate series ([`dedup`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Tables {
    /// One table for every sample of the merge.
    One,
    /// One table per output family, or [`Tables::One`] when two families share a sample name.
    PerFamily,
}

/// [`merge`], finding duplicates with `tables`.
pub(crate) fn merge_with<'a>(
    sources: &'a [&'a Exposition],
    opts: &MergeOptions<'a>,
    tables: Tables,
) -> Merge<'a> {
    let family_total: usize = sources.iter().map(|s| s.families().len()).sum();
    let mut m = Merge {
        sources,
        families: Vec::with_capacity(family_total),
        parts: Vec::with_capacity(family_total),
        skip: Vec::new(),
        added: opts.added,
        hasher: opts.hasher,
        names: Vec::new(),
        stats: vec![MergeStats::default(); sources.len()],
    };
    // Family names, built once into one buffer.
    let mut arena = Vec::with_capacity(family_total * 32);
    let mut ranges = Vec::with_capacity(family_total);
    for src in sources {
        for fam in src.families() {
            let (base, suffix) = src.family_name(fam);
            let start = arena.len();
            arena.extend_from_slice(base);
            arena.extend_from_slice(suffix);
            ranges.push((start, arena.len()));
        }
    }
    let mut by_name: HashMap<&[u8], u32> = HashMap::with_capacity(family_total);
    let added_hashes: Vec<u64> = opts
        .added
        .iter()
        .map(|l| pair_hash(opts.hasher, &l.name, &l.escaped))
        .collect();
    let mut r = 0;
    for (si, src) in sources.iter().enumerate() {
        for (fi, fam) in src.families().iter().enumerate() {
            let (start, end) = ranges[r];
            r += 1;
            let name = &arena[start..end];
            if opts.names.is_some_and(|names| !names.selects(name)) {
                continue;
            }
            let part = m.parts.len() as u32;
            let out = match by_name.entry(name) {
                Entry::Vacant(v) => {
                    v.insert(m.families.len() as u32);
                    m.families.push(OutFamily {
                        name: (start as u32, end as u32),
                        first: part,
                        last: part,
                        help_from: END,
                    });
                    m.families.len() - 1
                }
                Entry::Occupied(o) => {
                    let out = *o.get() as usize;
                    let (_, first) = m.part_family(m.families[out].first);
                    if first.kind != fam.kind {
                        m.stats[si].conflict += src.samples(fam).len() as u64;
                        continue;
                    }
                    let last = m.families[out].last;
                    m.parts[last as usize].next = part;
                    m.families[out].last = part;
                    out
                }
            };
            m.parts.push(Part {
                source: si as u32,
                family: fi as u32,
                out: out as u32,
                next: END,
            });
            if m.families[out].help_from == END && fam.help.is_some() {
                m.families[out].help_from = part;
            }
        }
    }
    drop(by_name);
    m.names = arena;
    dedup(&mut m, &added_hashes, tables);
    m
}

/// Drops series already written (rule 4). A histogram or summary is one series per label set
/// without `le` / `quantile`: when two upstreams bring the same one, the first upstream's
/// buckets are kept whole and the other's dropped whole, never mixed.
///
/// A series is a sample name and a label set, and a sample name normally belongs to one output
/// family: then one table per family, cleared between families, finds every duplicate, and
/// stays the size of the largest family instead of the whole scrape (4.5 MB at 16 MB). When two
/// output families do share a sample name (a histogram `x` from one upstream, a gauge `x_count`
/// from another), the merge is deduplicated again with one table for everything.
fn dedup(m: &mut Merge<'_>, added_hashes: &[u64], tables: Tables) {
    let stats = std::mem::take(&mut m.stats);
    let per_family = match tables {
        Tables::PerFamily => dedup_per_family(m, added_hashes, stats),
        Tables::One => Err(stats),
    };
    let d = per_family.unwrap_or_else(|stats| {
        let total = m.sources.iter().map(|s| s.all_samples().len()).sum();
        dedup_one_table(m, total, added_hashes, stats)
    });
    m.skip = d.skip;
    m.stats = d.stats;
}

/// [`dedup`] with one table for every sample of the merge.
fn dedup_one_table(
    m: &Merge<'_>,
    total: usize,
    added_hashes: &[u64],
    stats: Vec<MergeStats>,
) -> Dedup {
    let mut d = Dedup::new(m, total, false, stats);
    for p in 0..m.parts.len() as u32 {
        d.part(m, p, added_hashes);
    }
    d
}

/// [`dedup`] with one table per output family; `stats` given back when two output families
/// share a sample name.
fn dedup_per_family(
    m: &Merge<'_>,
    added_hashes: &[u64],
    stats: Vec<MergeStats>,
) -> Result<Dedup, Vec<MergeStats>> {
    let largest = m
        .families
        .iter()
        .map(|fam| {
            m.parts(fam)
                .map(|p| {
                    let (src, f) = m.part_family(p);
                    src.samples(f).len()
                })
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0);
    let mut d = Dedup::new(m, largest, true, stats);
    for fam in &m.families {
        d.seen.clear();
        for p in m.parts(fam) {
            if !d.part(m, p, added_hashes) {
                return Err(d.into_stats());
            }
        }
    }
    // Written part by part: skips are looked up in part order.
    d.skip.sort_unstable();
    Ok(d)
}

/// Duplicate tables.
struct Dedup {
    /// Series hash → the first sample with it, as `(part, index)`.
    seen: HashMap<u64, (u32, u32), PassThrough>,
    /// Histogram and summary series (without `le` / `quantile`) of families several upstreams
    /// bring.
    groups: HashMap<u64, (u32, u32), PassThrough>,
    /// When `seen` is per family: sample name hash → the output family that has it.
    owners: Option<HashMap<u64, u32, PassThrough>>,
    /// What [`Merge::skip`] becomes.
    skip: Vec<(u32, u32)>,
    /// What [`Merge::stats`] becomes: the merge's conflicts, and the kept and duplicate
    /// samples counted here.
    stats: Vec<MergeStats>,
}

impl Dedup {
    /// Tables for `m`, `seen` with room for `capacity` series, one per output family when
    /// `per_family`; `stats` holds the merge's conflicts, and nothing counted here yet.
    fn new(m: &Merge<'_>, capacity: usize, per_family: bool, stats: Vec<MergeStats>) -> Dedup {
        Dedup {
            seen: HashMap::with_capacity_and_hasher(capacity, PassThrough),
            groups: HashMap::with_hasher(PassThrough),
            // Histograms and summaries have three sample names a family.
            owners: per_family
                .then(|| HashMap::with_capacity_and_hasher(3 * m.families.len(), PassThrough)),
            skip: Vec::new(),
            stats,
        }
    }

    /// The counts it was given, without what it counted.
    fn into_stats(self) -> Vec<MergeStats> {
        let mut stats = self.stats;
        for s in &mut stats {
            s.kept = 0;
            s.duplicate = 0;
        }
        stats
    }

    /// Dedups the samples of part `p`; `false` when a per-family table cannot be used because
    /// another output family has a sample of the same name.
    fn part(&mut self, m: &Merge<'_>, p: u32, added_hashes: &[u64]) -> bool {
        let part = m.parts[p as usize];
        let (src, fam) = m.part_family(p);
        let out = &m.families[part.out as usize];
        let alone = out.first == out.last;
        let grouped = !alone && matches!(fam.kind, Kind::Histogram | Kind::Summary);
        let si = part.source as usize;
        // With a table per output family, a family that is the only part of its own has a
        // duplicate only among its own samples: none when that is known already (its series
        // are the last merge's, `NoDuplicates`), and known from here on when none is found.
        let own_table = self.owners.is_some() && alone;
        let known = own_table && fam.no_duplicates.known();
        let skipped = self.skip.len();
        // Consecutive samples mostly share their name: hash it once per run of them.
        let mut name_hash = 0;
        for (idx, s) in src.samples(fam).iter().enumerate() {
            if idx == 0 || !s.same_name_as_previous() {
                name_hash = hash_name(m.hasher, src.sample_name(fam, s));
                if let Some(owners) = &mut self.owners {
                    match owners.entry(name_hash) {
                        Entry::Vacant(v) => {
                            v.insert(part.out);
                        }
                        Entry::Occupied(o) if *o.get() != part.out => return false,
                        Entry::Occupied(_) => {}
                    }
                }
            }
            if known {
                self.stats[si].kept += 1;
                continue;
            }
            if grouped {
                let key = group_key(m, src, fam.kind, s)
                    ^ (part.out as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                match self.groups.entry(key) {
                    Entry::Vacant(v) => {
                        v.insert((p, idx as u32));
                    }
                    Entry::Occupied(o) => {
                        let (op, oidx) = *o.get();
                        let (osrc, ofam) = m.part_family(op);
                        let other = &osrc.samples(ofam)[oidx as usize];
                        if op != p
                            && m.parts[op as usize].out == part.out
                            && same_labels(
                                (osrc, ofam, other),
                                (src, fam, s),
                                m.added,
                                group_label(fam.kind),
                            )
                        {
                            self.skip.push((p, idx as u32));
                            self.stats[si].duplicate += 1;
                            continue;
                        }
                    }
                }
            }
            let h = series_hash(name_hash, s, added_hashes);
            match self.seen.entry(h) {
                Entry::Vacant(v) => {
                    v.insert((p, idx as u32));
                    self.stats[si].kept += 1;
                }
                Entry::Occupied(o) => {
                    let (op, oidx) = *o.get();
                    let (osrc, ofam) = m.part_family(op);
                    let other = &osrc.samples(ofam)[oidx as usize];
                    if same_series((osrc, ofam, other), (src, fam, s), m.added) {
                        self.skip.push((p, idx as u32));
                        self.stats[si].duplicate += 1;
                    } else {
                        // A 64-bit collision between different series: keep both.
                        self.stats[si].kept += 1;
                    }
                }
            }
        }
        if own_table && !known && self.skip.len() == skipped {
            fam.no_duplicates.set();
        }
        true
    }
}

/// The label that tells a histogram's or summary's samples apart within one series.
fn group_label(kind: Kind) -> Option<&'static [u8]> {
    match kind {
        Kind::Histogram | Kind::GaugeHistogram => Some(b"le"),
        Kind::Summary => Some(b"quantile"),
        _ => None,
    }
}

/// The series (MetricPoint) a sample belongs to: its label set, added labels included, without
/// the label that [`group_label`] names for its kind.
pub(crate) fn group_key(m: &Merge<'_>, src: &Exposition, kind: Kind, s: &Sample) -> u64 {
    let mut key = s.labels_hash();
    let missing = m.missing_added(s);
    for (bit, l) in m.added.iter().enumerate().take(8) {
        if missing & (1 << bit) != 0 {
            key = key.wrapping_add(pair_hash(m.hasher, l.name(), l.escaped_value()));
        }
    }
    if let Some(drop) = group_label(kind) {
        for (name, value) in label_pairs(src.sample_part(s, src.lex(s).labels)) {
            if name == drop {
                key = key.wrapping_sub(pair_hash(m.hasher, name, value));
            }
        }
    }
    key
}

/// The hash of a sample name given as two parts.
fn hash_name(h: PairHasher, (a, b): (&[u8], &[u8])) -> u64 {
    if b.is_empty() {
        h.bytes(a)
    } else if a.len() + b.len() <= 256 {
        let mut buf = [0u8; 256];
        buf[..a.len()].copy_from_slice(a);
        buf[a.len()..a.len() + b.len()].copy_from_slice(b);
        h.bytes(&buf[..a.len() + b.len()])
    } else {
        h.bytes(&[a, b].concat())
    }
}

fn series_hash(name_hash: u64, s: &Sample, added: &[u64]) -> u64 {
    let mut sum = name_hash.wrapping_add(s.labels_hash());
    for (bit, ah) in added.iter().enumerate() {
        if bit >= 8 || s.present() & (1 << bit) == 0 {
            sum = sum.wrapping_add(*ah);
        }
    }
    sum
}

type SampleRef<'a> = (&'a Exposition, &'a Family, &'a Sample);

/// Exact comparison behind a hash match: same name and the same set of labels as written.
fn same_series(a: SampleRef<'_>, b: SampleRef<'_>, added: &[AddedLabel]) -> bool {
    let name = |(src, fam, s): SampleRef<'_>| {
        let (x, y) = src.sample_name(fam, s);
        [x, y].concat()
    };
    name(a) == name(b) && same_labels(a, b, added, None)
}

/// Whether two samples carry the same label set (added labels included), ignoring `except`.
fn same_labels(
    a: SampleRef<'_>,
    b: SampleRef<'_>,
    added: &[AddedLabel],
    except: Option<&[u8]>,
) -> bool {
    let labels = |(src, _, s): SampleRef<'_>| {
        let mut v: Vec<(Vec<u8>, Vec<u8>)> = label_pairs(src.sample_part(s, src.lex(s).labels))
            .filter(|(n, _)| Some(*n) != except)
            .map(|(n, v)| (n.to_vec(), v.to_vec()))
            .collect();
        for (bit, l) in added.iter().enumerate() {
            if bit >= 8 || s.present() & (1 << bit) == 0 {
                v.push((l.name.clone(), l.escaped.clone()));
            }
        }
        v.sort();
        v
    };
    labels(a) == labels(b)
}
