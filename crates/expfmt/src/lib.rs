//! The exposition format, pure and I/O-free: bytes in, bytes out. Nothing here does I/O or
//! speaks HTTP; the crate's dependency list (bytes, memchr, thiserror) keeps it so.
//!
//! - [`parse()`] lexes one upstream body (text 0.0.4 or OpenMetrics 1.0) without copying it, keeps
//!   only the families whose names start with the upstream's `keep` prefixes, and groups samples
//!   by family. The result, an [`Exposition`], owns the body and refers into it by offsets, so it
//!   can be cached and shared between concurrent scrapes. A large body is parsed by two threads
//!   at once, with the result of a parse in one pass ([`Split`]).
//! - [`merge()`] combines several expositions: one HELP/TYPE per family, TYPE conflicts and
//!   duplicate series dropped and counted.
//! - [`merge_write`] and [`parse_merge_write`] are the whole pipeline in one call: what the
//!   server, the views, the benchmarks and the load driver do with pages.
//! - [`Selection`] is what a reader's `?name=` selects, for merging and for asking an engine.
//! - [`write_text`] and [`write_openmetrics`] render a merge into a [`Sink`]: one pre-sized
//!   buffer, or [`Pieces`], runs of the upstream bodies wherever the output repeats them.
//! - [`Exposition::retain`], [`Exposition::label_pairs`] and the text line writers serve
//!   programs that rewrite samples: the result goes back through [`parse()`].
//!
//! Families are modelled the way text 0.0.4 names them (a counter `x` is the family `x_total`,
//! its `x_created` is a gauge family of its own, as `prometheus_client` renders them), because
//! that is what Prometheus stores and what most scrapers ask for. OpenMetrics input is mapped
//! into that model when parsed, and OpenMetrics output maps back.

#![forbid(unsafe_code)]
#![deny(missing_docs)]

mod hash;
mod lex;
mod merge;
mod openmetrics;
mod out;
mod parse;
mod pipeline;
mod rewrite;
mod select;
mod text;
mod values;

pub use hash::PairHasher;
pub use lex::{LineError, SampleLex, is_label_name, is_metric_name, valid_float};
pub use merge::{AddedLabel, Merge, MergeOptions, MergeStats, merge};
pub use openmetrics::{OPENMETRICS_EOF, OpenMetricsStats, write_openmetrics};
pub use out::{Pieces, Sink};
pub use parse::{
    Limit, Malformed, ParseError, ParseLimits, ParseOptions, Rule, Split, parse, parse_after,
    parse_with,
};
pub use pipeline::{Output, Rewritten, Target, Written, merge_write, parse_merge_write};
pub use rewrite::{escape_label_value, unescape_label_value};
pub use select::Selection;
pub use text::write_text;
pub use values::write_value;

use bytes::Bytes;

use lex::{LexKey, LexOptions};

/// Content type of text format 0.0.4 as sysport serves it.
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Content type of OpenMetrics 1.0 as sysport serves it.
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// No upstream family may use this prefix: it belongs to sysport's own metrics.
pub const RESERVED_PREFIX: &[u8] = b"dynamo_sysport_";
/// The most labels a caller may add to every series ([`ParseOptions::added_labels`]): the
/// lexer notes which of them a line already carries in one byte ([`SampleLex::present`]).
pub const MAX_ADDED_LABELS: usize = 8;

/// An exposition format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Prometheus text format 0.0.4.
    Text,
    /// OpenMetrics 1.0 text.
    OpenMetrics,
}

impl Format {
    /// The format of an upstream body, read from the body itself: OpenMetrics when it ends in
    /// `# EOF`, which every OpenMetrics document must, else text 0.0.4. The Content-Type is no
    /// guide: some engines serve OpenMetrics under either header, and a text page labelled
    /// OpenMetrics would lose every counter read as OpenMetrics.
    pub fn detect(body: &[u8]) -> Format {
        if ends_with_eof(body) {
            Format::OpenMetrics
        } else {
            Format::Text
        }
    }

    /// The format a Content-Type names, if it names one.
    pub fn declared(content_type: &str) -> Option<Format> {
        let media = content_type.split(';').next().unwrap_or("").trim();
        if media.eq_ignore_ascii_case("application/openmetrics-text") {
            Some(Format::OpenMetrics)
        } else if media.eq_ignore_ascii_case("text/plain") {
            Some(Format::Text)
        } else {
            None
        }
    }
}

fn ends_with_eof(body: &[u8]) -> bool {
    let mut end = body.len();
    while end > 0 && matches!(body[end - 1], b'\n' | b'\r' | b' ' | b'\t') {
        end -= 1;
    }
    let body = &body[..end];
    body.ends_with(b"# EOF") && (body.len() == 5 || body[body.len() - 6] == b'\n')
}

/// A metric type. Text 0.0.4 has the first five; OpenMetrics adds the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `counter`.
    Counter,
    /// `gauge`.
    Gauge,
    /// `histogram`.
    Histogram,
    /// `summary`.
    Summary,
    /// `untyped` in text 0.0.4, `unknown` in OpenMetrics.
    Untyped,
    /// OpenMetrics `info`.
    Info,
    /// OpenMetrics `stateset`.
    StateSet,
    /// OpenMetrics `gaugehistogram`.
    GaugeHistogram,
}

impl Kind {
    /// Reads a `# TYPE` value; both formats' spellings are accepted (`unknown` = `untyped`).
    pub fn parse(s: &[u8]) -> Option<Kind> {
        Some(match s {
            b"counter" => Kind::Counter,
            b"gauge" => Kind::Gauge,
            b"histogram" => Kind::Histogram,
            b"summary" => Kind::Summary,
            b"untyped" | b"unknown" => Kind::Untyped,
            b"info" => Kind::Info,
            b"stateset" => Kind::StateSet,
            b"gaugehistogram" => Kind::GaugeHistogram,
            _ => return None,
        })
    }

    /// The `# TYPE` word in text 0.0.4.
    pub fn text_name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge | Kind::Info | Kind::StateSet => "gauge",
            Kind::Histogram | Kind::GaugeHistogram => "histogram",
            Kind::Summary => "summary",
            Kind::Untyped => "untyped",
        }
    }

    /// The `# TYPE` word in OpenMetrics.
    pub fn openmetrics_name(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
            Kind::Untyped => "unknown",
            Kind::Info => "info",
            Kind::StateSet => "stateset",
            Kind::GaugeHistogram => "gaugehistogram",
        }
    }
}

/// A sample-name suffix relative to a family's declared name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Suffix {
    /// No suffix: the sample is named as its family.
    None,
    /// `_total`.
    Total,
    /// `_created`.
    Created,
    /// `_bucket`.
    Bucket,
    /// `_count`.
    Count,
    /// `_sum`.
    Sum,
    /// `_gcount`.
    GCount,
    /// `_gsum`.
    GSum,
    /// `_info`.
    Info,
}

impl Suffix {
    /// The suffix text.
    pub fn as_bytes(self) -> &'static [u8] {
        match self {
            Suffix::None => b"",
            Suffix::Total => b"_total",
            Suffix::Created => b"_created",
            Suffix::Bucket => b"_bucket",
            Suffix::Count => b"_count",
            Suffix::Sum => b"_sum",
            Suffix::GCount => b"_gcount",
            Suffix::GSum => b"_gsum",
            Suffix::Info => b"_info",
        }
    }

    /// Every suffix, in declaration order (`Suffix as usize` indexes it).
    const BY_INDEX: [Suffix; 9] = [
        Suffix::None,
        Suffix::Total,
        Suffix::Created,
        Suffix::Bucket,
        Suffix::Count,
        Suffix::Sum,
        Suffix::GCount,
        Suffix::GSum,
        Suffix::Info,
    ];

    /// Every suffix but `None`.
    const ALL: [Suffix; 8] = {
        let [_, rest @ ..] = Suffix::BY_INDEX;
        rest
    };

    /// The text 0.0.4 families an OpenMetrics family `x` is written as are `x` followed by one
    /// of these: a counter `x_total` and `x_created`; a histogram or summary `x` and
    /// `x_created`; a gauge histogram `x`, `x_gcount` and `x_gsum`; an info `x_info`.
    pub const FAMILY_PARTS: [Suffix; 6] = [
        Suffix::None,
        Suffix::Total,
        Suffix::Created,
        Suffix::GCount,
        Suffix::GSum,
        Suffix::Info,
    ];

    /// The sample names of a text 0.0.4 family `x` are `x` followed by one of these (a
    /// histogram's or summary's; any other family's are `x` alone).
    pub const SAMPLE_PARTS: [Suffix; 4] =
        [Suffix::None, Suffix::Bucket, Suffix::Count, Suffix::Sum];

    /// Reads a suffix exactly.
    pub fn parse(s: &[u8]) -> Option<Suffix> {
        if s.is_empty() {
            return Some(Suffix::None);
        }
        Suffix::ALL.into_iter().find(|x| x.as_bytes() == s)
    }
}

/// A range of bytes in an upstream body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Span {
    /// The first byte.
    pub start: u32,
    /// Just after the last byte.
    pub end: u32,
}

impl Span {
    pub(crate) fn new(start: usize, end: usize) -> Span {
        Span {
            start: start as u32,
            end: end as u32,
        }
    }

    /// The bytes this span covers in `body`.
    #[inline]
    pub fn of(self, body: &[u8]) -> &[u8] {
        &body[self.start as usize..self.end as usize]
    }

    /// Whether the span covers nothing.
    pub fn is_empty(self) -> bool {
        self.start == self.end
    }
}

/// What a family's samples mean in OpenMetrics terms, so OpenMetrics output can regroup the text
/// 0.0.4 families an OpenMetrics family was split into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The family itself.
    Primary,
    /// The `_created` gauge of a counter, histogram or summary (`base` names that family).
    Created,
    /// The `_gcount` gauge of a gauge histogram.
    GCount,
    /// The `_gsum` gauge of a gauge histogram.
    GSum,
}

/// One family, named and typed as text 0.0.4 has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// The declared name in the body; the text family name is `base` + `suffix`.
    pub base: Span,
    /// See `base`.
    pub suffix: Suffix,
    /// Type as text 0.0.4 declares it; [`Kind::Untyped`] when there was no TYPE line.
    pub kind: Kind,
    /// Whether the upstream declared a type (a `# TYPE` line) for it.
    pub typed: bool,
    /// The type the upstream declared, in its own format's terms.
    pub declared: Kind,
    /// What this family is in OpenMetrics terms.
    pub role: Role,
    /// HELP text as escaped in the upstream's format.
    pub help: Option<Span>,
    /// OpenMetrics UNIT, if any.
    pub unit: Option<Span>,
    /// This family's samples: `samples[range]` of the exposition.
    pub samples: (u32, u32),
}

/// One sample line that was kept, in 32 bytes: a 16 MiB body holds some 130,000 of them.
///
/// The offsets of the line's parts are kept relative to the line as `u16`. A line with a
/// timestamp or an exemplar, or one too long for `u16` offsets, keeps its whole [`SampleLex`] in
/// a side table of the exposition instead (rare: the engines sysport fronts write neither), so
/// [`Exposition::lex`] is the way to read any of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// Start of the line in the body.
    line_start: u32,
    family: u32,
    labels_hash: u64,
    /// `name_start`, `name_end`, labels start and end, value start and end, line length; for a
    /// line in the side table the first two hold its index there (low half first).
    offsets: [u16; 7],
    /// [`SampleLex::present`].
    present: u8,
    /// `CANONICAL`, `SIDE`, the rename suffix (0 = none, else its index + 1) in bits 2 to 5,
    /// `SAME_NAME`.
    flags: u8,
}

const CANONICAL: u8 = 1;
const SIDE: u8 = 2;
const RENAME_SHIFT: u32 = 2;
const RENAME_MASK: u8 = 0xf;
/// The sample's name is the one of the sample before it in the exposition.
const SAME_NAME: u8 = 0x80;

impl Sample {
    /// A sample for the line at `line_start..line_end`. Returns `None` when its lexing has to go
    /// to the side table; then [`Sample::new_side`] makes it.
    pub(crate) fn new(
        line_start: usize,
        line_end: usize,
        lex: &SampleLex,
        rename: Option<Suffix>,
        family: u32,
    ) -> Option<Sample> {
        let len = line_end - line_start;
        // One test for all three: a length over 16 bits, a timestamp, an exemplar.
        let extra = (len >> 16) as u32
            | (lex.timestamp.1 - lex.timestamp.0)
            | (lex.exemplar.1 - lex.exemplar.0);
        if extra != 0 {
            return None;
        }
        // Every offset is within the line, so each fits once the length does.
        let offsets = [
            lex.name_start as u16,
            lex.name_end as u16,
            lex.labels.0 as u16,
            lex.labels.1 as u16,
            lex.value.0 as u16,
            lex.value.1 as u16,
            len as u16,
        ];
        Some(Sample {
            line_start: line_start as u32,
            family,
            labels_hash: lex.labels_hash,
            offsets,
            present: lex.present,
            flags: Sample::flags(lex, rename, 0),
        })
    }

    /// A sample whose lexing is entry `index` of the side table.
    pub(crate) fn new_side(
        line_start: usize,
        lex: &SampleLex,
        rename: Option<Suffix>,
        family: u32,
        index: u32,
    ) -> Sample {
        let mut s = Sample {
            line_start: line_start as u32,
            family,
            labels_hash: lex.labels_hash,
            offsets: [0; 7],
            present: lex.present,
            flags: Sample::flags(lex, rename, SIDE),
        };
        s.set_side_index(index);
        s
    }

    /// Where a side-table sample's index is kept: its first two offsets.
    fn set_side_index(&mut self, index: u32) {
        self.offsets[0] = index as u16;
        self.offsets[1] = (index >> 16) as u16;
    }

    fn flags(lex: &SampleLex, rename: Option<Suffix>, side: u8) -> u8 {
        let rename = rename.map_or(0, |r| r as u8 + 1);
        (if lex.canonical { CANONICAL } else { 0 }) | side | (rename << RENAME_SHIFT)
    }

    /// Start of the line in the body.
    #[inline]
    pub fn line_start(&self) -> u32 {
        self.line_start
    }

    /// Order-independent hash of the label pairs ([`SampleLex::labels_hash`]).
    #[inline]
    pub fn labels_hash(&self) -> u64 {
        self.labels_hash
    }

    /// Bit `i` set when the line carries the `i`-th added label ([`SampleLex::present`]).
    #[inline]
    pub fn present(&self) -> u8 {
        self.present
    }

    /// Whether the line can be copied as it stands ([`SampleLex::canonical`]).
    #[inline]
    pub fn canonical(&self) -> bool {
        self.flags & CANONICAL != 0
    }

    /// When not `None`, the name as written is an escaped form (`vllm_x_total` for `vllm:x`,
    /// prometheus/client_python#1177) and the real name is the family's `base` + this suffix.
    #[inline]
    pub fn rename(&self) -> Option<Suffix> {
        match (self.flags >> RENAME_SHIFT) & RENAME_MASK {
            0 => None,
            r => Some(Suffix::BY_INDEX[r as usize - 1]),
        }
    }

    #[inline]
    fn side_index(&self) -> Option<usize> {
        (self.flags & SIDE != 0)
            .then(|| self.offsets[0] as usize | (self.offsets[1] as usize) << 16)
    }

    /// The length of the line, given the side table of its exposition.
    #[inline]
    pub(crate) fn line_len(&self, side: &[SideLex]) -> usize {
        match self.side_index() {
            None => self.offsets[6] as usize,
            Some(i) => (side[i].line_end - self.line_start) as usize,
        }
    }

    /// Where the line's labels end (its `}`, relative to the line) when a later line that
    /// repeats the line up to there may take its name and labels as lexed: the line was
    /// canonical, had labels, and its lexing is held here (no timestamp or exemplar, under
    /// 64 KiB).
    #[inline]
    pub(crate) fn reusable_labels_end(&self) -> Option<usize> {
        let close = self.offsets[3] as usize;
        (self.flags & (CANONICAL | SIDE) == CANONICAL && close != 0).then_some(close)
    }

    /// Whether the sample's name (as [`Exposition::sample_name`] gives it) is the one of the
    /// sample before it in [`Exposition::all_samples`]; `false` when not known.
    #[inline]
    pub(crate) fn same_name_as_previous(&self) -> bool {
        self.flags & SAME_NAME != 0
    }

    pub(crate) fn set_same_name_as_previous(&mut self, same: bool) {
        self.flags = self.flags & !SAME_NAME | if same { SAME_NAME } else { 0 };
    }

    pub(crate) fn family(&self) -> u32 {
        self.family
    }

    pub(crate) fn set_family(&mut self, family: u32) {
        self.family = family;
    }

    /// The sample with `family` added to its family index and `side` to its side-table index
    /// (for appending one exposition part's samples to another's).
    #[inline]
    pub(crate) fn shifted(mut self, family: u32, side: u32) -> Sample {
        self.family += family;
        if let Some(i) = self.side_index() {
            self.set_side_index(i as u32 + side);
        }
        self
    }
}

/// A line's whole lexing, for the samples that [`Sample`] cannot hold in its own 32 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SideLex {
    pub line_end: u32,
    pub lex: SampleLex,
}

/// Counts from parsing one upstream body.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseStats {
    /// Sample lines kept.
    pub kept: u64,
    /// Sample lines of families the upstream's prefixes do not keep.
    pub dropped: u64,
    /// Lines rejected as malformed (samples and HELP/TYPE/UNIT lines of kept families, and
    /// lines that cannot be read at all).
    pub malformed: u64,
    /// Sample names recovered from an escaped form (prometheus/client_python#1177).
    pub renamed: u64,
    /// The first line counted in `malformed`, so that it can be found and fixed.
    pub first_malformed: Option<Malformed>,
}

/// One upstream body, lexed, filtered and grouped by family.
#[derive(Debug, Clone)]
pub struct Exposition {
    body: Bytes,
    format: Format,
    families: Vec<Family>,
    samples: Vec<Sample>,
    /// The lexing of samples that do not fit [`Sample`].
    side: Vec<SideLex>,
    stats: ParseStats,
    /// Bytes of the kept sample lines with their newlines, known once parsed.
    kept_bytes: usize,
    /// The options its lines were lexed with: a later parse takes a line's lexing from here
    /// only under the same ones.
    lexed_with: LexKey,
    /// Its families by name and role, made when a later parse first reads it as its prior.
    by_name: FamilyIndex,
}

/// Two expositions are equal when they hold the same parse of the same body. The family index
/// is left out: it is made from the families, on first use.
impl PartialEq for Exposition {
    fn eq(&self, other: &Self) -> bool {
        // Every field is named, so a new one does not compile until it is compared or left out.
        let Exposition {
            body,
            format,
            families,
            samples,
            side,
            stats,
            kept_bytes,
            lexed_with,
            by_name: _,
        } = self;
        *body == other.body
            && *format == other.format
            && *families == other.families
            && *samples == other.samples
            && *side == other.side
            && *stats == other.stats
            && *kept_bytes == other.kept_bytes
            && *lexed_with == other.lexed_with
    }
}

impl Eq for Exposition {}

/// An index of an exposition's families by [`family_key`], made on first use.
#[derive(Debug, Default, Clone)]
struct FamilyIndex(std::sync::OnceLock<std::collections::HashMap<u64, u32, hash::PassThrough>>);

/// The key of a family of declared name `base` in role `role`.
fn family_key(hasher: PairHasher, base: &[u8], role: Role) -> u64 {
    hasher.bytes(base).wrapping_add(role as u64)
}

impl Exposition {
    /// An exposition with nothing in it.
    pub fn empty() -> Exposition {
        Exposition {
            body: Bytes::new(),
            format: Format::Text,
            families: Vec::new(),
            samples: Vec::new(),
            side: Vec::new(),
            stats: ParseStats::default(),
            kept_bytes: 0,
            lexed_with: LexKey::of(&LexOptions {
                format: Format::Text,
                max_labels: 0,
                max_label_value_bytes: 0,
                added: &[],
                hasher: PairHasher::new(0),
            }),
            by_name: FamilyIndex::default(),
        }
    }

    /// The samples of the family of declared name `base` in role `role`, as a range of
    /// [`Exposition::all_samples`].
    pub(crate) fn find_family(&self, base: &[u8], role: Role) -> Option<(u32, u32)> {
        let hasher = self.lexed_with.hasher;
        let index = self.by_name.0.get_or_init(|| {
            let mut index = std::collections::HashMap::with_capacity_and_hasher(
                self.families.len(),
                hash::PassThrough,
            );
            for (i, f) in self.families.iter().enumerate() {
                index
                    .entry(family_key(hasher, f.base.of(&self.body), f.role))
                    .or_insert(i as u32);
            }
            index
        });
        let f = &self.families[*index.get(&family_key(hasher, base, role))? as usize];
        (f.base.of(&self.body) == base && f.role == role).then_some(f.samples)
    }

    /// The body the offsets refer to.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The format the body was parsed as.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Kept families in order of first appearance.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// All kept samples, grouped by family in family order.
    pub fn all_samples(&self) -> &[Sample] {
        &self.samples
    }

    /// The samples of one family.
    pub fn samples(&self, family: &Family) -> &[Sample] {
        &self.samples[family.samples.0 as usize..family.samples.1 as usize]
    }

    /// Parse counts.
    pub fn stats(&self) -> ParseStats {
        self.stats
    }

    /// The family's text 0.0.4 name as two parts, declared name and suffix.
    pub fn family_name(&self, family: &Family) -> (&[u8], &'static [u8]) {
        (family.base.of(&self.body), family.suffix.as_bytes())
    }

    /// The sample's name as written out: its name in the body, or the recovered one.
    pub fn sample_name(&self, family: &Family, sample: &Sample) -> (&[u8], &'static [u8]) {
        match sample.rename() {
            Some(suffix) => (family.base.of(&self.body), suffix.as_bytes()),
            None => {
                let lex = self.lex(sample);
                (
                    self.sample_part(sample, (lex.name_start, lex.name_end)),
                    b"",
                )
            }
        }
    }

    /// The offsets of a sample's parts within its line.
    #[inline]
    pub fn lex(&self, sample: &Sample) -> SampleLex {
        match sample.side_index() {
            None => {
                let o = sample.offsets;
                SampleLex {
                    name_start: o[0] as u32,
                    name_end: o[1] as u32,
                    labels: (o[2] as u32, o[3] as u32),
                    value: (o[4] as u32, o[5] as u32),
                    timestamp: (0, 0),
                    exemplar: (0, 0),
                    labels_hash: sample.labels_hash,
                    present: sample.present,
                    canonical: sample.canonical(),
                }
            }
            Some(i) => self.side[i].lex,
        }
    }

    /// A part of a sample line given line-relative offsets.
    #[inline]
    pub fn sample_part(&self, sample: &Sample, r: (u32, u32)) -> &[u8] {
        let s = sample.line_start as usize;
        &self.body[s + r.0 as usize..s + r.1 as usize]
    }

    /// The whole sample line.
    #[inline]
    pub fn line(&self, sample: &Sample) -> &[u8] {
        let start = sample.line_start as usize;
        &self.body[start..start + self.line_len(sample)]
    }

    /// The line when it can be written out as it stands: canonical, under its own name, and
    /// without timestamp or exemplar (the common case, checked without decoding the offsets).
    #[inline]
    pub fn plain_line(&self, sample: &Sample) -> Option<&[u8]> {
        (sample.flags & !SAME_NAME == CANONICAL).then(|| {
            let start = sample.line_start as usize;
            &self.body[start..start + sample.offsets[6] as usize]
        })
    }

    /// The length of the sample's line.
    #[inline]
    pub fn line_len(&self, sample: &Sample) -> usize {
        sample.line_len(&self.side)
    }

    /// Total bytes of kept sample lines, for sizing output buffers.
    pub fn kept_bytes(&self) -> usize {
        self.kept_bytes
    }
}
#[cfg(test)]
mod prior_tests;
#[cfg(test)]
mod proptests;
#[cfg(test)]
mod split_tests;
#[cfg(test)]
mod tests;
