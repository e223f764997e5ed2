//! What a family is, named and typed as text 0.0.4 has it: its type ([`Kind`]), the suffixes
//! of its name and its samples' names ([`Suffix`]), what it is in OpenMetrics terms ([`Role`]),
//! and the spans of the body it is read from ([`Span`]).

use std::sync::atomic::{AtomicBool, Ordering};

/// No upstream family may use this prefix: it belongs to sysport's own metrics.
pub const RESERVED_PREFIX: &[u8] = b"dynamo_sysport_";

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
    pub(super) const BY_INDEX: [Suffix; 9] = [
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
    pub(crate) const ALL: [Suffix; 8] = {
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
    /// Known: no two of its samples are the same series (a cache for the merge's duplicate
    /// check, not part of what the family is).
    pub no_duplicates: NoDuplicates,
}

/// Whether a family is known to hold no two samples of the same series. The merge that checks
/// a family for duplicates and finds none sets it ([`crate::merge()`]); the next parse of the
/// same upstream carries it to a family whose series are the prior's, byte for byte and in
/// the same order ([`crate::parse_after`]), and the merge then counts that family's samples
/// without its duplicate table. Unknown until one of the two sets it; a clone knows nothing
/// (a family made from another, relabelled or cut, may hold other series). Families compare
/// equal whatever it holds.
#[derive(Debug, Default)]
pub struct NoDuplicates(AtomicBool);

impl NoDuplicates {
    /// Known to hold none.
    pub fn known(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    pub(crate) fn set(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    pub(crate) fn new(known: bool) -> NoDuplicates {
        NoDuplicates(AtomicBool::new(known))
    }
}

impl Clone for NoDuplicates {
    fn clone(&self) -> NoDuplicates {
        NoDuplicates::default()
    }
}

impl PartialEq for NoDuplicates {
    fn eq(&self, _: &NoDuplicates) -> bool {
        true
    }
}

impl Eq for NoDuplicates {}
