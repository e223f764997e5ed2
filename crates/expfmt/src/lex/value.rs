//! Value lexing: what follows a sample's name and labels (the value, a timestamp, an
//! OpenMetrics exemplar), and the number grammars both Prometheus and Python accept.

use super::labels::lex_labels;
use super::{LabelScratch, LexOptions, LineError, SampleLex, skip_blanks, token};
use crate::format::Format;

/// The rest of a sample line from `i`, just after its name or labels: the value, then a
/// timestamp or exemplar if any.
pub(super) fn lex_value(
    line: &[u8],
    mut i: usize,
    opts: &LexOptions<'_>,
    scratch: &mut LabelScratch<'_>,
    mut out: SampleLex,
) -> Result<SampleLex, LineError> {
    // Most lines end in one space and the value: a valid float holds no blank, so when the rest
    // of the line after that space is one, it is the value and nothing follows.
    if line.get(i) == Some(&b' ') && valid_float(&line[i + 1..]) {
        out.value = (i as u32 + 1, line.len() as u32);
        return Ok(out);
    }
    // Value: one or more blanks, then a token.
    let j = skip_blanks(line, i);
    if j == i {
        return Err(if i == line.len() {
            LineError::BadValue
        } else {
            LineError::BadName
        });
    }
    if j - i != 1 || line[i] != b' ' {
        out.canonical = false;
    }
    let (vs, ve) = token(line, j);
    if !valid_float(&line[vs..ve]) {
        return Err(LineError::BadValue);
    }
    out.value = (vs as u32, ve as u32);
    i = ve;
    let j = skip_blanks(line, i);
    if j == line.len() {
        if j != i {
            out.canonical = false;
        }
        return Ok(out);
    }
    if j - i != 1 || line[i] != b' ' {
        out.canonical = false;
    }
    if line[j] != b'#' {
        let (ts, te) = token(line, j);
        let ok = match opts.format {
            Format::Text => valid_int(&line[ts..te]),
            Format::OpenMetrics => valid_float(&line[ts..te]) && !is_special_float(&line[ts..te]),
        };
        if !ok {
            return Err(LineError::BadTimestamp);
        }
        out.timestamp = (ts as u32, te as u32);
        i = te;
        let j = skip_blanks(line, i);
        if j == line.len() {
            if j != i {
                out.canonical = false;
            }
            return Ok(out);
        }
        if opts.format == Format::Text || line[j] != b'#' {
            return Err(LineError::TrailingGarbage);
        }
        return lex_exemplar(line, j, opts, scratch, out);
    }
    if opts.format == Format::Text {
        return Err(LineError::TrailingGarbage);
    }
    lex_exemplar(line, j, opts, scratch, out)
}

/// ` # {labels} value [timestamp]` after an OpenMetrics sample. Kept as one span.
fn lex_exemplar(
    line: &[u8],
    hash: usize,
    opts: &LexOptions<'_>,
    scratch: &mut LabelScratch<'_>,
    mut out: SampleLex,
) -> Result<SampleLex, LineError> {
    let i = skip_blanks(line, hash + 1);
    if i == hash + 1 || i >= line.len() || line[i] != b'{' {
        return Err(LineError::TrailingGarbage);
    }
    let ex_opts = LexOptions {
        added: &[],
        ..*opts
    };
    let mut lexed = SampleLex::default();
    let pairs = &mut scratch.exemplar_pairs;
    let close = lex_labels(line, i + 1, &ex_opts, pairs, None, &mut lexed)?;
    let j = skip_blanks(line, close + 1);
    let (vs, ve) = token(line, j);
    if j == close + 1 || !valid_float(&line[vs..ve]) {
        return Err(LineError::TrailingGarbage);
    }
    let mut end = ve;
    let k = skip_blanks(line, ve);
    if k < line.len() {
        let (ts, te) = token(line, k);
        if k == ve || !valid_float(&line[ts..te]) || skip_blanks(line, te) != line.len() {
            return Err(LineError::TrailingGarbage);
        }
        end = te;
    }
    out.exemplar = (hash as u32, end as u32);
    out.canonical = false;
    Ok(out)
}

/// A float both Go's `strconv.ParseFloat` and Python's `float()` read the same way: decimal
/// notation, or `NaN` / `Inf` / `Infinity` in any case with an optional sign on infinities.
/// Hex floats (Python rejects them) and `_` digit separators (Go rejects them) are refused.
pub fn valid_float(s: &[u8]) -> bool {
    if s.is_empty() {
        return false;
    }
    if s.eq_ignore_ascii_case(b"nan") {
        return true;
    }
    let unsigned = match s[0] {
        b'+' | b'-' => &s[1..],
        _ => s,
    };
    if unsigned.eq_ignore_ascii_case(b"inf") || unsigned.eq_ignore_ascii_case(b"infinity") {
        return true;
    }
    let mut i = 0;
    let int_digits = count_digits(&unsigned[i..]);
    i += int_digits;
    let mut frac_digits = 0;
    if unsigned.get(i) == Some(&b'.') {
        i += 1;
        frac_digits = count_digits(&unsigned[i..]);
        i += frac_digits;
    }
    if int_digits + frac_digits == 0 {
        return false;
    }
    if matches!(unsigned.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(unsigned.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_digits = count_digits(&unsigned[i..]);
        if exp_digits == 0 {
            return false;
        }
        i += exp_digits;
    }
    i == unsigned.len()
}

/// `NaN` or an infinity, in any spelling `valid_float` accepts.
fn is_special_float(s: &[u8]) -> bool {
    s.last().is_some_and(|b| b.is_ascii_alphabetic())
}

fn count_digits(s: &[u8]) -> usize {
    s.iter().take_while(|b| b.is_ascii_digit()).count()
}

/// An int64 millisecond timestamp as text 0.0.4 has it.
fn valid_int(s: &[u8]) -> bool {
    let digits = match s.first() {
        Some(b'-' | b'+') => &s[1..],
        _ => s,
    };
    !digits.is_empty() && digits.len() <= 19 && digits.iter().all(u8::is_ascii_digit)
}
