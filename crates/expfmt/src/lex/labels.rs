//! Label lexing: `{name="value",...}` of a sample line, and reading back a block the lexer
//! accepted. A line's pairs are compared with the previous line's first ([`super::LabelScratch`]):
//! most lines of a family repeat most of their pairs byte for byte.

use super::{LABEL_CONT, LABEL_START, LexOptions, LineError, SampleLex, skip_blanks};
use crate::hash::pair_from_raw;

/// A label pair as lexed: where it is on its line, its hashes, and whether it is in the
/// canonical shape (`name="value"`, no blanks).
#[derive(Debug, Clone, Copy)]
pub(super) struct Pair {
    start: u32,
    /// Just after the closing quote.
    end: u32,
    name_end: u32,
    name_hash: u64,
    hash: u64,
    /// The bit of [`SampleLex::present`] this pair's name sets, if any.
    present: u8,
    clean: bool,
}

/// The previous line's label pairs, as [`lex_labels`] reuses them.
#[derive(Clone, Copy)]
pub(super) struct Prev<'a> {
    pub(super) line: &'a [u8],
    pub(super) pairs: &'a [Pair],
}

/// Lexes `name="value",...}` starting just after `{`; returns the index of the closing `}`.
pub(super) fn lex_labels(
    line: &[u8],
    start: usize,
    opts: &LexOptions<'_>,
    pairs: &mut Vec<Pair>,
    prev: Option<Prev<'_>>,
    out: &mut SampleLex,
) -> Result<usize, LineError> {
    pairs.clear();
    let mut i = start;
    let mut hash = 0u64;
    let mut trailing_comma = false;
    // While every name so far equals the previous line's at the same position, the names are
    // known valid and distinct.
    let mut same_as_prev = true;
    loop {
        let j = skip_blanks(line, i);
        if j != i {
            out.canonical = false;
        }
        i = j;
        match line.get(i) {
            None => return Err(LineError::BadLabelSyntax),
            Some(b'}') => {
                if trailing_comma {
                    out.canonical = false;
                }
                out.labels = (start as u32, i as u32);
                out.labels_hash = hash;
                return Ok(i);
            }
            Some(_) => {}
        }
        let ns = i;
        let theirs = same_as_prev
            .then(|| prev.and_then(|p| p.pairs.get(pairs.len()).map(|q| (p, *q))))
            .flatten();
        let pair = match theirs {
            // The same bytes as the previous line's pair here, up to its closing quote: the
            // same name and value, lexed the same way.
            Some((p, q)) if line[ns..].starts_with(&p.line[q.start as usize..q.end as usize]) => {
                let shift = |x: u32| x - q.start + ns as u32;
                Pair {
                    start: ns as u32,
                    end: shift(q.end),
                    name_end: shift(q.name_end),
                    ..q
                }
            }
            _ => lex_pair(line, ns, opts, pairs, theirs, &mut same_as_prev)?,
        };
        if !pair.clean {
            out.canonical = false;
        }
        pairs.push(pair);
        out.present |= pair.present;
        hash = hash.wrapping_add(pair.hash);
        i = pair.end as usize;
        let j = skip_blanks(line, i);
        if j != i {
            out.canonical = false;
        }
        i = j;
        match line.get(i) {
            Some(b',') => {
                i += 1;
                trailing_comma = true;
            }
            Some(b'}') => trailing_comma = false,
            _ => return Err(LineError::BadLabelSyntax),
        }
    }
}

/// Lexes one `name="value"` pair at `ns`. `theirs` is the previous line's pair at the same
/// position while every name before it was the same: a name equal to its name is known valid
/// and distinct from the others.
fn lex_pair(
    line: &[u8],
    ns: usize,
    opts: &LexOptions<'_>,
    seen: &[Pair],
    theirs: Option<(Prev<'_>, Pair)>,
    same_as_prev: &mut bool,
) -> Result<Pair, LineError> {
    let mut clean = true;
    let mut i;
    let repeated = theirs
        .map(|(p, q)| (q.name_hash, &p.line[q.start as usize..q.name_end as usize]))
        .filter(|(_, pname)| {
            line[ns..].starts_with(pname) && line.get(ns + pname.len()) == Some(&b'=')
        });
    let name_hash = match repeated {
        Some((h, pname)) => {
            i = ns + pname.len();
            h
        }
        None => {
            *same_as_prev = false;
            if !LABEL_START[line[ns] as usize] {
                return Err(LineError::BadLabelName);
            }
            i = ns + 1;
            while i < line.len() && LABEL_CONT[line[i] as usize] {
                i += 1;
            }
            let name = &line[ns..i];
            if name.starts_with(b"__") {
                return Err(LineError::BadLabelName);
            }
            let h = opts.hasher.raw(name);
            // Hashes first: a repeated name is rare, a byte comparison per pair is not.
            if seen
                .iter()
                .any(|q| q.name_hash == h && line[q.start as usize..q.name_end as usize] == *name)
            {
                return Err(LineError::BadLabelName);
            }
            h
        }
    };
    if seen.len() >= opts.max_labels {
        return Err(LineError::TooManyLabels);
    }
    let name_end = i;
    let name = &line[ns..name_end];
    let mut present = 0u8;
    for (bit, added) in opts.added.iter().enumerate().take(super::MAX_ADDED_LABELS) {
        if *added == name {
            present |= 1 << bit;
        }
    }
    let vs = if line.get(i) == Some(&b'=') && line.get(i + 1) == Some(&b'"') {
        i + 2
    } else {
        let j = skip_blanks(line, i);
        if line.get(j) != Some(&b'=') {
            return Err(LineError::BadLabelSyntax);
        }
        let k = skip_blanks(line, j + 1);
        if line.get(k) != Some(&b'"') {
            return Err(LineError::BadLabelSyntax);
        }
        clean = false;
        k + 1
    };
    let ve = scan_quoted(line, vs)?;
    if ve - vs > opts.max_label_value_bytes {
        return Err(LineError::LabelValueTooLong);
    }
    // Names and values outside quotes are ASCII by their grammar: only label values (and
    // HELP text) can hold other bytes, and they must be UTF-8.
    let value = &line[vs..ve];
    if !value.is_ascii() && std::str::from_utf8(value).is_err() {
        return Err(LineError::NotUtf8);
    }
    Ok(Pair {
        start: ns as u32,
        end: (ve + 1) as u32,
        name_end: name_end as u32,
        name_hash,
        hash: pair_from_raw(name_hash, opts.hasher.raw(value)),
        present,
        clean,
    })
}

/// Finds the closing quote of a label value starting at `start`; validates escapes.
#[inline]
fn scan_quoted(line: &[u8], start: usize) -> Result<usize, LineError> {
    let mut i = start;
    loop {
        match find_quote_or_backslash(&line[i..]) {
            None => return Err(LineError::BadLabelSyntax),
            Some(off) => {
                let at = i + off;
                if line[at] == b'"' {
                    return Ok(at);
                }
                match line.get(at + 1) {
                    Some(b'\\' | b'"' | b'n') => i = at + 2,
                    _ => return Err(LineError::BadEscape),
                }
            }
        }
    }
}

/// The first `"` or `\\` in `s`. Label values are mostly a few bytes to a few dozen: eight bytes
/// at a time in a register for the first 64, where a vector search would spend its time
/// setting up, then `memchr2`.
#[inline]
fn find_quote_or_backslash(s: &[u8]) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero_byte = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    let mut i = 0;
    while i + 8 <= s.len() && i < 64 {
        let w = u64::from_le_bytes(s[i..i + 8].try_into().expect("8 bytes"));
        let hits = zero_byte(w ^ (ONES * b'"' as u64)) | zero_byte(w ^ (ONES * b'\\' as u64));
        if hits != 0 {
            // The lowest flagged byte is exact: borrows only run towards higher bytes.
            return Some(i + (hits.trailing_zeros() / 8) as usize);
        }
        i += 8;
    }
    if i < 64 {
        return s[i..]
            .iter()
            .position(|&b| b == b'"' || b == b'\\')
            .map(|p| i + p);
    }
    memchr::memchr2(b'"', b'\\', &s[i..]).map(|p| i + p)
}

/// The `(name, raw escaped value)` pairs of a label block that [`super::lex_sample`] accepted.
pub(crate) fn label_pairs(block: &[u8]) -> LabelPairs<'_> {
    LabelPairs { block, i: 0 }
}

/// Iterator returned by [`label_pairs`].
#[derive(Debug, Clone)]
pub(crate) struct LabelPairs<'a> {
    block: &'a [u8],
    i: usize,
}

impl<'a> Iterator for LabelPairs<'a> {
    type Item = (&'a [u8], &'a [u8]);

    fn next(&mut self) -> Option<Self::Item> {
        let b = self.block;
        let mut i = skip_blanks(b, self.i);
        if i >= b.len() {
            return None;
        }
        let ns = i;
        while i < b.len() && LABEL_CONT[b[i] as usize] {
            i += 1;
        }
        let name = &b[ns..i];
        i = skip_blanks(b, i) + 1; // `=`
        i = skip_blanks(b, i) + 1; // `"`
        let ve = scan_quoted(b, i).ok()?;
        let value = &b[i..ve];
        i = skip_blanks(b, ve + 1);
        if b.get(i) == Some(&b',') {
            i += 1;
        }
        self.i = i;
        Some((name, value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_search_matches_a_naive_scan() {
        let alphabet = [
            b'a',
            b'"',
            b'\\',
            0x80,
            0xff,
            b'\n',
            0x22 ^ 0x01,
            0x5c ^ 0x80,
        ];
        let mut state = 12345u64;
        for len in 0..200 {
            for _ in 0..20 {
                let v: Vec<u8> = (0..len)
                    .map(|_| {
                        state = state
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let r = (state >> 33) as usize;
                        if r % 16 == 0 {
                            alphabet[(r / 16) % alphabet.len()]
                        } else {
                            b'x'
                        }
                    })
                    .collect();
                let naive = v.iter().position(|&b| b == b'"' || b == b'\\');
                assert_eq!(find_quote_or_backslash(&v), naive, "{v:?}");
            }
        }
    }
}
