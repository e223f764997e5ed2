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

mod format;
mod hash;
mod lex;
mod merge;
mod model;
mod openmetrics;
mod out;
mod parse;
mod pipeline;
mod rewrite;
mod select;
mod text;
mod values;

pub use format::{Format, OPENMETRICS_CONTENT_TYPE, TEXT_CONTENT_TYPE};
pub use hash::PairHasher;
pub use lex::{LineError, MAX_ADDED_LABELS, SampleLex, is_label_name, is_metric_name, valid_float};
pub use merge::{AddedLabel, Merge, MergeOptions, MergeStats, merge};
pub use model::{
    Exposition, Family, Kind, Malformed, NoDuplicates, ParseStats, RESERVED_PREFIX, Role, Rule,
    Sample, Span, Suffix,
};
pub use openmetrics::{OPENMETRICS_EOF, OpenMetricsStats, write_openmetrics};
pub use out::{Pieces, Sink};
pub use parse::{
    Limit, ParseError, ParseLimits, ParseOptions, Split, parse, parse_after, parse_with,
};
pub use pipeline::{Output, Rewritten, Target, Written, merge_write, parse_merge_write};
pub use rewrite::{escape_label_value, unescape_label_value};
pub use select::Selection;
pub use text::write_text;
pub use values::write_value;

#[cfg(test)]
mod testing;
