//! What parsing one body counted ([`ParseStats`]), and the first line it dropped as malformed
//! ([`Malformed`]) with the rule that line broke ([`Rule`]).

use crate::lex::LineError;

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

/// A line dropped as malformed: where it is in the body, and which rule it broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {rule}")]
pub struct Malformed {
    /// The line number, from 1.
    pub line: usize,
    /// The rule it broke.
    pub rule: Rule,
}

/// The rule a malformed line broke.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Rule {
    /// The line does not lex as a sample or a HELP, TYPE or UNIT line.
    #[error("{0}")]
    Line(LineError),
    /// A sample whose name its declared family's TYPE does not allow (an OpenMetrics counter
    /// `x`, then a sample `x`).
    #[error("sample name not allowed by its family's TYPE")]
    NameNotOfType,
    /// A second HELP line for the same family.
    #[error("second HELP line for the family")]
    RepeatedHelp,
    /// HELP text that is not UTF-8 or has an escape its format does not allow.
    #[error("HELP text not UTF-8 or with an escape its format does not allow")]
    BadHelp,
    /// A TYPE line that names no known type.
    #[error("TYPE line with an unknown type")]
    UnknownType,
    /// A second TYPE line for the same family.
    #[error("second TYPE line for the family")]
    RepeatedType,
    /// A TYPE line after the family's first sample.
    #[error("TYPE line after the family's samples")]
    TypeAfterSamples,
    /// A UNIT line in text 0.0.4, or a second one for the same family.
    #[error("UNIT line in text format, or a second one for the family")]
    Unit,
    /// A sample after an OpenMetrics `# EOF`.
    #[error("sample after # EOF")]
    AfterEof,
    /// A second `# EOF`.
    #[error("second # EOF")]
    RepeatedEof,
}
