//! Parse → merge → write, spelled once: what every reader of upstream pages does with them.
//!
//! [`merge_write`] merges parsed pages and writes the merge in the format asked for, into an
//! output made for it (a buffer of [`Merge::size_hint`] bytes, or [`Pieces`] over the pages'
//! bodies). [`parse_merge_write`] does the same for one body, parsed first. Both do exactly the
//! work of the steps written out by hand: one merge, one output sized once, no copy.

use bytes::Bytes;

use super::merge::{AddedLabel, Merge, MergeOptions, MergeStats, merge};
use super::openmetrics::{OPENMETRICS_EOF, OpenMetricsStats, write_openmetrics};
use super::out::{Pieces, Sink};
use super::parse::{ParseError, ParseOptions, parse};
use super::select::Selection;
use super::text::write_text;
use crate::format::Format;
use crate::model::Exposition;

/// The format a merge is written in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Output {
    /// Text 0.0.4.
    Text,
    /// OpenMetrics 1.0. With `eof` the document ends here ([`OPENMETRICS_EOF`]); without, the
    /// caller writes more families after it and ends the document itself.
    OpenMetrics {
        /// Whether `# EOF` follows the merge.
        eof: bool,
    },
}

impl Output {
    /// OpenMetrics (with or without its `# EOF`) when `openmetrics`, else text 0.0.4.
    pub fn new(openmetrics: bool, eof: bool) -> Output {
        if openmetrics {
            Output::OpenMetrics { eof }
        } else {
            Output::Text
        }
    }

    /// The bytes written after the merge.
    fn trailer(self) -> &'static [u8] {
        match self {
            Output::OpenMetrics { eof: true } => OPENMETRICS_EOF,
            _ => b"",
        }
    }
}

/// An output a merge is written into, made fresh for each merge.
pub trait Target: Sink + Sized {
    /// An empty output for `merge`, with room for `extra` bytes after it.
    fn for_merge(merge: &Merge<'_>, extra: usize) -> Self;
}

impl Target for Vec<u8> {
    /// One buffer that writing never has to grow.
    fn for_merge(merge: &Merge<'_>, extra: usize) -> Self {
        Vec::with_capacity(merge.size_hint() + extra)
    }
}

impl Target for Pieces {
    /// Runs of the merged pages' bodies wherever the output repeats them (text 0.0.4 from
    /// canonical text pages); OpenMetrics output is all made bytes.
    fn for_merge(merge: &Merge<'_>, _extra: usize) -> Self {
        Pieces::new(merge.sources().iter().map(|e| e.body().clone()).collect())
    }
}

/// A merge and what was written of it.
#[derive(Debug)]
pub struct Written<'a, T> {
    /// The merge: its per-source counts ([`Merge::stats`]) and family count.
    pub merge: Merge<'a>,
    /// The bytes.
    pub out: T,
    /// What OpenMetrics output left out (nothing for text).
    pub openmetrics: OpenMetricsStats,
}

/// Merges parsed pages, given in upstream order, and writes the merge as `to` says.
pub fn merge_write<'a, T: Target>(
    sources: &'a [&'a Exposition],
    opts: &MergeOptions<'a>,
    to: Output,
) -> Written<'a, T> {
    let merge = merge(sources, opts);
    let trailer = to.trailer();
    let mut out = T::for_merge(&merge, trailer.len());
    let openmetrics = match to {
        Output::Text => {
            write_text(&merge, &mut out);
            OpenMetricsStats::default()
        }
        Output::OpenMetrics { .. } => write_openmetrics(&merge, out.made()),
    };
    if !trailer.is_empty() {
        out.put(trailer);
    }
    Written {
        merge,
        out,
        openmetrics,
    }
}

/// One page parsed, merged and written.
#[derive(Debug)]
pub struct Rewritten<T> {
    /// The page as parsed.
    pub page: Exposition,
    /// The bytes.
    pub out: T,
    /// What the merge kept and dropped of it.
    pub merge: MergeStats,
    /// Families written.
    pub families: usize,
    /// What OpenMetrics output left out (nothing for text).
    pub openmetrics: OpenMetricsStats,
}

/// Parses one body as `opts` says, merges it (with the labels `added`, whose names must be
/// `opts.added_labels`, and only the families `names` selects when given) and writes it as
/// `to` says. The series hashes use `opts.hasher`.
pub fn parse_merge_write<T: Target>(
    body: Bytes,
    from: Format,
    opts: &ParseOptions<'_>,
    added: &[AddedLabel],
    names: Option<&Selection>,
    to: Output,
) -> Result<Rewritten<T>, ParseError> {
    debug_assert!(
        opts.added_labels
            .iter()
            .copied()
            .eq(added.iter().map(AddedLabel::name)),
        "the parser is told the names of the labels the merge adds"
    );
    let page = parse(body, from, opts)?;
    let sources = [&page];
    let mopts = MergeOptions {
        added,
        names,
        hasher: opts.hasher,
    };
    let Written {
        merge,
        out,
        openmetrics,
    } = merge_write::<T>(&sources, &mopts, to);
    let stats = merge.stats().first().copied().unwrap_or_default();
    let families = merge.family_count();
    drop(merge);
    Ok(Rewritten {
        page,
        out,
        merge: stats,
        families,
        openmetrics,
    })
}

#[cfg(test)]
mod contract_tests;
#[cfg(test)]
mod proptests;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::PairHasher;
    use crate::parse::ParseLimits;

    const PAGE: &str = "# HELP vllm:a A\n# TYPE vllm:a gauge\nvllm:a{x=\"1\"} 1\nvllm:a{x=\"1\"} 2\n\
                        # TYPE vllm:h histogram\nvllm:h_bucket{le=\"1\"} 1\nvllm:h_count 1\nother 3\n";

    fn opts<'a>(keep: &'a [String], added: &'a [&'a [u8]]) -> ParseOptions<'a> {
        ParseOptions {
            keep,
            limits: ParseLimits::DERIVED,
            added_labels: added,
            hasher: PairHasher::new(5),
            allow_reserved: false,
        }
    }

    /// What the steps written out by hand give.
    fn by_hand(
        page: &Exposition,
        added: &[AddedLabel],
        openmetrics: bool,
    ) -> (Vec<u8>, usize, OpenMetricsStats) {
        let sources = [page];
        let m = merge(
            &sources,
            &MergeOptions {
                added,
                names: None,
                hasher: PairHasher::new(5),
            },
        );
        let mut out = Vec::new();
        let mut stats = OpenMetricsStats::default();
        if openmetrics {
            stats = write_openmetrics(&m, &mut out);
            out.extend_from_slice(OPENMETRICS_EOF);
        } else {
            write_text(&m, &mut out);
        }
        (out, m.family_count(), stats)
    }

    #[test]
    fn one_page_comes_out_as_the_steps_by_hand_write_it() {
        let keep = ["vllm:".to_owned()];
        let added = [AddedLabel::new("worker", "w\"1")];
        let names = [added[0].name()];
        let o = opts(&keep, &names);
        for openmetrics in [false, true] {
            let to = Output::new(openmetrics, true);
            let w = parse_merge_write::<Vec<u8>>(PAGE.into(), Format::Text, &o, &added, None, to)
                .expect("a small page");
            let (out, families, om) = by_hand(&w.page, &added, openmetrics);
            assert_eq!(
                String::from_utf8_lossy(&w.out),
                String::from_utf8_lossy(&out)
            );
            assert_eq!(w.families, families);
            assert!(w.out.ends_with(OPENMETRICS_EOF) == openmetrics);
            // A histogram without a `+Inf` bucket cannot be written as OpenMetrics.
            assert_eq!(w.openmetrics.dropped_families, u64::from(openmetrics));
            assert_eq!((w.merge.kept, w.merge.duplicate), (3, 1));
            assert_eq!(w.openmetrics, om);
            assert!(String::from_utf8_lossy(&w.out).contains("worker=\"w\\\"1\""));
        }
    }

    #[test]
    fn pieces_and_one_buffer_hold_the_same_bytes() {
        let keep = ["vllm:".to_owned()];
        let o = opts(&keep, &[]);
        let a = parse(PAGE.into(), Format::Text, &o).expect("a small page");
        let b = parse("vllm:b 1\n".into(), Format::Text, &o).expect("a small page");
        let sources = [&a, &b];
        let mopts = MergeOptions {
            added: &[],
            names: None,
            hasher: PairHasher::new(5),
        };
        for to in [
            Output::Text,
            Output::OpenMetrics { eof: false },
            Output::OpenMetrics { eof: true },
        ] {
            let one = merge_write::<Vec<u8>>(&sources, &mopts, to);
            let pieces = merge_write::<Pieces>(&sources, &mopts, to);
            assert_eq!(pieces.out.finish().concat(), one.out);
            assert_eq!(one.merge.stats().len(), 2);
            assert_eq!(
                one.out.ends_with(OPENMETRICS_EOF),
                to.trailer() == OPENMETRICS_EOF
            );
        }
    }

    #[test]
    fn a_page_over_the_limits_is_an_error() {
        let keep = ["vllm:".to_owned()];
        let mut o = opts(&keep, &[]);
        o.limits.max_series = 1;
        let err =
            parse_merge_write::<Vec<u8>>(PAGE.into(), Format::Text, &o, &[], None, Output::Text)
                .expect_err("two series, one allowed");
        assert!(matches!(err, ParseError::TooLarge { .. }), "{err}");
    }
}
