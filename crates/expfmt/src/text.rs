//! Text format 0.0.4 output (contract rules 1, 2 and 3).
//!
//! A kept sample from a text upstream is copied byte for byte when its line is already in the
//! canonical shape and needs no added label: one `memcpy` per line. Anything else is written
//! token by token from the lexed offsets, so values, timestamps and label order never change.

use crate::format::Format;
use crate::merge::{END, Merge};
use crate::model::{Exposition, Family, Sample};
use crate::out::Sink;

/// Writes a merge as text format 0.0.4, appending to `out`.
pub fn write_text<S: Sink>(m: &Merge<'_>, out: &mut S) {
    for fam in &m.families {
        let (src, first) = m.part_family(fam.first);
        let (base, suffix) = src.family_name(first);
        if fam.help_from != END {
            let (hsrc, hfam) = m.part_family(fam.help_from);
            let help = hfam
                .help
                .expect("help_from points at a family with HELP")
                .of(hsrc.body());
            if hsrc.format() == Format::Text {
                out.put_parts(&[b"# HELP ", base, suffix, b" ", help, b"\n"]);
            } else {
                let line = out.made();
                line.extend_from_slice(b"# HELP ");
                line.extend_from_slice(base);
                line.extend_from_slice(suffix);
                line.push(b' ');
                write_help_as_text(help, hsrc.format(), line);
                line.push(b'\n');
            }
        }
        if m.families_typed(fam) {
            let kind = first.kind.text_name().as_bytes();
            out.put_parts(&[b"# TYPE ", base, suffix, b" ", kind, b"\n"]);
        }
        for p in m.parts(fam) {
            let (src, family) = m.part_family(p);
            for s in m.written(p) {
                write_sample(src, family, s, m, out);
            }
        }
    }
}

/// OpenMetrics escapes `"` in HELP; text 0.0.4 does not and would reject `\"`.
pub(super) fn write_help_as_text(help: &[u8], from: Format, out: &mut Vec<u8>) {
    if from == Format::Text || memchr::memmem::find(help, b"\\\"").is_none() {
        out.extend_from_slice(help);
        return;
    }
    let mut i = 0;
    while i < help.len() {
        if help[i] == b'\\' && i + 1 < help.len() {
            if help[i + 1] != b'"' {
                out.push(b'\\');
            }
            out.push(help[i + 1]);
            i += 2;
        } else {
            out.push(help[i]);
            i += 1;
        }
    }
}

fn write_sample<S: Sink>(src: &Exposition, fam: &Family, s: &Sample, m: &Merge<'_>, out: &mut S) {
    let missing = m.missing_added(s);
    if missing == 0
        && let Some(line) = src.plain_line(s)
    {
        out.put_line(line);
        return;
    }
    let lex = src.lex(s);
    let plain = src.format() == Format::Text
        || (lex.timestamp.0 == lex.timestamp.1 && lex.exemplar.0 == lex.exemplar.1);
    if s.canonical() && s.rename().is_none() && missing == 0 && plain {
        out.put_line(src.line(s));
        return;
    }
    let line = out.made();
    let (a, b) = src.sample_name(fam, s);
    line.extend_from_slice(a);
    line.extend_from_slice(b);
    m.write_labels(src, s, missing, line);
    line.push(b' ');
    line.extend_from_slice(src.sample_part(s, lex.value));
    if lex.timestamp.0 != lex.timestamp.1 {
        let ts = src.sample_part(s, lex.timestamp);
        line.push(b' ');
        match src.format() {
            Format::Text => line.extend_from_slice(ts),
            Format::OpenMetrics => write_seconds_as_millis(ts, line),
        }
    }
    line.push(b'\n');
}

/// prometheus_client renders an OpenMetrics timestamp `t` (seconds) in text 0.0.4 as
/// `int(float(t) * 1000)`; so does this.
pub(super) fn write_seconds_as_millis(ts: &[u8], out: &mut Vec<u8>) {
    use std::io::Write as _;
    let secs: f64 = std::str::from_utf8(ts)
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(0.0);
    let _ = write!(out, "{}", (secs * 1000.0) as i64);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openmetrics_help_loses_only_the_quote_escape() {
        let mut out = Vec::new();
        write_help_as_text(br#"say \"hi\" \\ and \n"#, Format::OpenMetrics, &mut out);
        assert_eq!(out, br#"say "hi" \\ and \n"#);
    }

    #[test]
    fn timestamps_convert_like_prometheus_client() {
        let mut out = Vec::new();
        write_seconds_as_millis(b"1700000000.123", &mut out);
        assert_eq!(out, b"1700000000123");
    }
}
