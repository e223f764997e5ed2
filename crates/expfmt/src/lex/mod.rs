//! Line-level lexing of the Prometheus text format 0.0.4 and OpenMetrics 1.0.
//!
//! Everything here works on one line (without its `\n`, and without a trailing `\r`) and returns
//! offsets relative to that line. Nothing allocates. The grammar accepted is the intersection of
//! what Prometheus' own parser and Python `prometheus_client`'s parsers accept, so anything that
//! passes can be written out again and read by both.

mod labels;
mod value;

use crate::format::Format;
use crate::hash::PairHasher;

pub(crate) use self::labels::label_pairs;
use self::labels::{Pair, Prev, lex_labels};
use self::value::lex_value;
pub use self::value::valid_float;

/// The most labels a caller may add to every series ([`crate::ParseOptions::added_labels`]): the
/// lexer notes which of them a line already carries in one byte ([`SampleLex::present`]).
pub const MAX_ADDED_LABELS: usize = 8;

/// Why a line was rejected. Cheap to construct: malformed lines are counted, and only the
/// first of a body is kept ([`crate::ParseStats::first_malformed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LineError {
    /// The metric name is missing or has a character outside `[a-zA-Z0-9_:]`.
    #[error("metric name missing or invalid")]
    BadName,
    /// A label name is empty, invalid, reserved (`__` prefix) or repeated.
    #[error("label name empty, invalid, reserved (__) or repeated")]
    BadLabelName,
    /// `=`, `"`, `,` or `}` is missing where the grammar needs it.
    #[error("label syntax: `=`, `\"`, `,` or `}}` missing")]
    BadLabelSyntax,
    /// A label value or HELP text has an escape other than `\\`, `\"` (label values and
    /// OpenMetrics HELP only) or `\n`.
    #[error("escape other than \\\\, \\\" or \\n")]
    BadEscape,
    /// The value is not a float both Prometheus and Python can read.
    #[error("value is not a number")]
    BadValue,
    /// The timestamp is not an integer (text) or a float (OpenMetrics).
    #[error("timestamp is not a number of the format's kind")]
    BadTimestamp,
    /// Something follows the sample that the format does not allow.
    #[error("text after the sample that the format does not allow")]
    TrailingGarbage,
    /// The line is not valid UTF-8.
    #[error("not valid UTF-8")]
    NotUtf8,
    /// A `# TYPE` line names an unknown type.
    #[error("TYPE line with an unknown type")]
    BadType,
    /// A label value is longer than the configured limit.
    #[error("label value longer than the max_label_value_bytes limit")]
    LabelValueTooLong,
    /// More labels than the configured limit.
    #[error("more labels than the max_labels limit")]
    TooManyLabels,
}

/// Byte classes for metric names: `[a-zA-Z_:][a-zA-Z0-9_:]*`.
const fn name_table(colon: bool, digits: bool) -> [bool; 256] {
    let mut t = [false; 256];
    let mut b = 0;
    while b < 256 {
        let c = b as u8;
        t[b] = c.is_ascii_alphabetic()
            || c == b'_'
            || (colon && c == b':')
            || (digits && c.is_ascii_digit());
        b += 1;
    }
    t
}
static METRIC_START: [bool; 256] = name_table(true, false);
static METRIC_CONT: [bool; 256] = name_table(true, true);
static LABEL_START: [bool; 256] = name_table(false, false);
static LABEL_CONT: [bool; 256] = name_table(false, true);

#[inline]
fn is_blank(b: u8) -> bool {
    b == b' ' || b == b'\t'
}

#[inline]
fn skip_blanks(line: &[u8], mut i: usize) -> usize {
    while i < line.len() && is_blank(line[i]) {
        i += 1;
    }
    i
}

/// Whether `b` may continue a metric name.
#[inline]
pub(crate) fn is_metric_char(b: u8) -> bool {
    METRIC_CONT[b as usize]
}

/// Length of the metric name at the start of `s` (0 when there is none).
#[inline]
pub(crate) fn metric_name_len(s: &[u8]) -> usize {
    match s.first() {
        Some(&b) if METRIC_START[b as usize] => {}
        _ => return 0,
    }
    let mut i = 1;
    while i < s.len() && METRIC_CONT[s[i] as usize] {
        i += 1;
    }
    i
}

/// Whether `s` is a whole valid metric name.
pub fn is_metric_name(s: &[u8]) -> bool {
    !s.is_empty() && metric_name_len(s) == s.len()
}

/// Whether `s` is a whole valid label name that a scrape may carry (`__` names are reserved).
pub fn is_label_name(s: &[u8]) -> bool {
    match s.first() {
        Some(&b) if LABEL_START[b as usize] => {}
        _ => return false,
    }
    !s.starts_with(b"__") && s[1..].iter().all(|&b| LABEL_CONT[b as usize])
}

/// A lexed sample line. Offsets are relative to the line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleLex {
    /// Start of the metric name.
    pub name_start: u32,
    /// End of the metric name.
    pub name_end: u32,
    /// The bytes between `{` and `}` (empty when there are no labels).
    pub labels: (u32, u32),
    /// The value as written.
    pub value: (u32, u32),
    /// Empty when there is no timestamp.
    pub timestamp: (u32, u32),
    /// OpenMetrics exemplar after ` # `, empty when none.
    pub exemplar: (u32, u32),
    /// Order-independent hash of the label pairs.
    pub labels_hash: u64,
    /// Bit `i` set when the line already carries the `i`-th label of `LexOptions::added`.
    pub present: u8,
    /// Exactly `name{labels} value[ timestamp]` with single spaces and no trailing comma, so the
    /// line can be copied as it stands.
    pub canonical: bool,
}

/// Per-upstream settings the lexer needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LexOptions<'a> {
    pub format: Format,
    pub max_labels: usize,
    pub max_label_value_bytes: usize,
    /// Names of labels sysport adds (at most 8 are tracked in `SampleLex::present`).
    pub added: &'a [&'a [u8]],
    pub hasher: PairHasher,
}

/// What, besides a line's bytes, decides how the line lexes: two parses with equal keys lex
/// equal lines alike, so a later parse may take a line's lexing from an earlier one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LexKey {
    format: Format,
    pub hasher: PairHasher,
    max_labels: usize,
    max_label_value_bytes: usize,
    /// Hash of the added label names, in order.
    added: u64,
}

impl LexKey {
    /// The key of lexing with `opts`.
    pub(crate) fn of(opts: &LexOptions<'_>) -> LexKey {
        // Every option is named: one added to `LexOptions` does not compile here until it is
        // part of the key.
        let LexOptions {
            format,
            max_labels,
            max_label_value_bytes,
            added,
            hasher,
        } = *opts;
        let added = added.iter().fold(added.len() as u64, |h, a| {
            h.rotate_left(17) ^ hasher.bytes(a)
        });
        LexKey {
            format,
            hasher,
            max_labels,
            max_label_value_bytes,
            added,
        }
    }
}

/// Working memory for label lexing, reused for every line of a body. It remembers the label
/// pairs of the previous line: the next line of the same family repeats its label names in
/// order, and most of its pairs byte for byte (`engine` and `model_name`, around a different
/// `le`). A repeated pair is taken as it was lexed, one byte comparison instead of the value
/// scan, the UTF-8 check and two hashes; a repeated name skips the name scan, its hash and the
/// repeated-name check.
#[derive(Debug, Default)]
pub(crate) struct LabelScratch<'b> {
    pairs: Vec<Pair>,
    prev_pairs: Vec<Pair>,
    prev_line: &'b [u8],
    exemplar_pairs: Vec<Pair>,
}

/// Lexes a full sample line. `name_start..name_end` must already be known to hold a valid name.
pub(crate) fn lex_sample<'b>(
    line: &'b [u8],
    name_start: usize,
    name_end: usize,
    opts: &LexOptions<'_>,
    scratch: &mut LabelScratch<'b>,
) -> Result<SampleLex, LineError> {
    let lexed = lex_sample_inner(line, name_start, name_end, opts, scratch)?;
    if lexed.labels.0 != lexed.labels.1 {
        std::mem::swap(&mut scratch.pairs, &mut scratch.prev_pairs);
        scratch.prev_line = line;
    }
    Ok(lexed)
}

fn lex_sample_inner<'b>(
    line: &'b [u8],
    name_start: usize,
    name_end: usize,
    opts: &LexOptions<'_>,
    scratch: &mut LabelScratch<'b>,
) -> Result<SampleLex, LineError> {
    let mut out = SampleLex {
        name_start: name_start as u32,
        name_end: name_end as u32,
        canonical: name_start == 0,
        ..SampleLex::default()
    };
    let mut i = name_end;
    if i < line.len() && is_blank(line[i]) {
        let j = skip_blanks(line, i);
        if j < line.len() && line[j] == b'{' {
            out.canonical = false;
            i = j;
        }
    }
    if i < line.len() && line[i] == b'{' {
        let prev = Prev {
            line: scratch.prev_line,
            pairs: &scratch.prev_pairs,
        };
        let close = lex_labels(line, i + 1, opts, &mut scratch.pairs, Some(prev), &mut out)?;
        i = close + 1;
    }
    lex_value(line, i, opts, scratch, out)
}

/// Lexes a sample line whose name and labels, up to and including the `}` at `close`, are
/// byte for byte those of a line lexed before as `known`, which was canonical: only the value
/// and what follows it are read. The result is the one [`lex_sample`] gives.
pub(crate) fn lex_sample_known_labels(
    line: &[u8],
    close: usize,
    known: &SampleLex,
    opts: &LexOptions<'_>,
    scratch: &mut LabelScratch<'_>,
) -> Result<SampleLex, LineError> {
    let out = SampleLex {
        name_start: known.name_start,
        name_end: known.name_end,
        labels: known.labels,
        labels_hash: known.labels_hash,
        present: known.present,
        canonical: true,
        ..SampleLex::default()
    };
    lex_value(line, close + 1, opts, scratch, out)
}

/// The token starting at `i`, up to the next blank or the end of the line.
#[inline]
fn token(line: &[u8], i: usize) -> (usize, usize) {
    let mut e = i;
    while e < line.len() && !is_blank(line[e]) {
        e += 1;
    }
    (i, e)
}

/// Whether HELP text has only the escapes its format allows.
pub(crate) fn valid_help(text: &[u8], format: Format) -> bool {
    if std::str::from_utf8(text).is_err() {
        return false;
    }
    let mut i = 0;
    while let Some(off) = memchr::memchr(b'\\', &text[i..]) {
        let at = i + off;
        match (text.get(at + 1), format) {
            (Some(b'\\' | b'n'), _) | (Some(b'"'), Format::OpenMetrics) => i = at + 2,
            _ => return false,
        }
    }
    true
}

/// A parsed `#` line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Comment {
    /// `# HELP name text`: name and text ranges.
    Help { name: (u32, u32), text: (u32, u32) },
    /// `# TYPE name type`.
    Type { name: (u32, u32), kind: (u32, u32) },
    /// `# UNIT name unit` (OpenMetrics).
    Unit { name: (u32, u32), unit: (u32, u32) },
    /// `# EOF` (OpenMetrics).
    Eof,
    /// Any other comment: ignored, never passed on.
    Other,
}

/// Lexes a line whose first non-blank byte is `#` at `hash`.
pub(crate) fn lex_comment(line: &[u8], hash: usize) -> Result<Comment, LineError> {
    let i = skip_blanks(line, hash + 1);
    let (ks, ke) = token(line, i);
    let keyword = &line[ks..ke];
    let which = match keyword {
        b"HELP" => 0,
        b"TYPE" => 1,
        b"UNIT" => 2,
        b"EOF" if skip_blanks(line, ke) == line.len() => return Ok(Comment::Eof),
        _ => return Ok(Comment::Other),
    };
    if ke == i || ke == line.len() || !is_blank(line[ke]) {
        // `# HELP` with nothing after it: a comment as far as the text format goes.
        return Ok(Comment::Other);
    }
    let ns = skip_blanks(line, ke);
    let nlen = metric_name_len(&line[ns..]);
    let ne = ns + nlen;
    if nlen == 0 || (ne < line.len() && !is_blank(line[ne])) {
        return Err(LineError::BadName);
    }
    let name = (ns as u32, ne as u32);
    // HELP text starts after exactly one blank; the rest, trailing blanks included, is the text.
    let rest_start = if ne < line.len() { ne + 1 } else { ne };
    match which {
        0 => Ok(Comment::Help {
            name,
            text: (rest_start as u32, line.len() as u32),
        }),
        1 => {
            let ts = skip_blanks(line, ne);
            let (ts, te) = token(line, ts);
            if ts == te || skip_blanks(line, te) != line.len() {
                return Err(LineError::BadType);
            }
            Ok(Comment::Type {
                name,
                kind: (ts as u32, te as u32),
            })
        }
        _ => {
            let us = skip_blanks(line, ne);
            let (us, ue) = token(line, us);
            if skip_blanks(line, ue) != line.len() {
                return Err(LineError::TrailingGarbage);
            }
            Ok(Comment::Unit {
                name,
                unit: (us as u32, ue as u32),
            })
        }
    }
}

#[cfg(test)]
mod tests;
