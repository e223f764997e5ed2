//! Reading a kept sample as a reader of the text format sees it (label pairs, a number, its
//! timestamp in milliseconds) and writing computed numbers back, for code that derives new
//! series from parsed ones.

use std::io::Write as _;

use crate::format::Format;
use crate::lex::label_pairs;
use crate::model::{Exposition, Family, Sample};
use crate::parse::ParseLimits;
use crate::text::{write_help_as_text, write_seconds_as_millis};

impl ParseLimits {
    /// For text sysport wrote itself (its own metrics, views of pages already parsed within
    /// the configured limits): no limit of its own.
    pub const DERIVED: ParseLimits = ParseLimits {
        max_line_bytes: usize::MAX,
        max_series: usize::MAX,
        max_families: usize::MAX,
        max_labels: usize::MAX,
        max_label_value_bytes: usize::MAX,
    };
}

impl Exposition {
    /// The sample's label pairs in the order written, each value still escaped (`\\`, `\"`,
    /// `\n`, the same in both formats): two escaped values are equal exactly when the values are.
    pub fn label_pairs<'a>(
        &'a self,
        sample: &Sample,
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        label_pairs(self.sample_part(sample, self.lex(sample).labels))
    }

    /// The value as written.
    pub fn value_text(&self, sample: &Sample) -> &[u8] {
        self.sample_part(sample, self.lex(sample).value)
    }

    /// The value as a number (`NaN`, `+Inf` and every other spelling the lexer accepts).
    pub fn value(&self, sample: &Sample) -> f64 {
        parse_float(self.value_text(sample))
    }

    /// Appends the family's HELP text escaped for text 0.0.4; false when it has none.
    pub fn help_as_text(&self, family: &Family, out: &mut Vec<u8>) -> bool {
        match family.help {
            Some(help) => {
                write_help_as_text(help.of(&self.body), self.format, out);
                true
            }
            None => false,
        }
    }

    /// Appends ` TIMESTAMP` in text 0.0.4 terms (milliseconds) when the sample has one.
    pub fn timestamp_as_text(&self, sample: &Sample, out: &mut Vec<u8>) {
        let lex = self.lex(sample);
        if lex.timestamp.0 == lex.timestamp.1 {
            return;
        }
        let ts = self.sample_part(sample, lex.timestamp);
        out.push(b' ');
        match self.format {
            Format::Text => out.extend_from_slice(ts),
            Format::OpenMetrics => write_seconds_as_millis(ts, out),
        }
    }
}

/// A value the lexer accepted, as a number: Rust reads every spelling Go and Python read alike
/// (decimal, exponent, `NaN`, `Inf`, `Infinity`, any case, signed).
fn parse_float(text: &[u8]) -> f64 {
    std::str::from_utf8(text)
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Appends `value` so that Go's `strconv.ParseFloat` (Prometheus' parsers) and Python's
/// `float()` read back exactly the same number: `NaN`, `+Inf`, `-Inf`, integers without a
/// fraction, every other number in its shortest round-trip form (an exponent outside
/// 1e-5..1e16, where plain digits would run long).
pub fn write_value(value: f64, out: &mut Vec<u8>) {
    if value.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if value.is_infinite() {
        out.extend_from_slice(if value > 0.0 { b"+Inf" } else { b"-Inf" });
    } else {
        let magnitude = value.abs();
        if magnitude == 0.0 || (1e-5..1e16).contains(&magnitude) {
            let _ = write!(out, "{value}");
        } else {
            let _ = write!(out, "{value:e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written(v: f64) -> String {
        let mut out = Vec::new();
        write_value(v, &mut out);
        String::from_utf8(out).expect("ascii")
    }

    #[test]
    fn every_spelling_the_lexer_accepts_reads_as_its_number() {
        for (text, want) in [
            ("1", 1.0),
            ("-0.5", -0.5),
            ("1e+06", 1e6),
            (".5", 0.5),
            ("5.", 5.0),
            ("1.7550000000227594e+09", 1.7550000000227594e9),
            ("+Inf", f64::INFINITY),
            ("-inf", f64::NEG_INFINITY),
            ("Infinity", f64::INFINITY),
            ("+infinity", f64::INFINITY),
        ] {
            assert!(crate::lex::valid_float(text.as_bytes()), "{text}");
            assert_eq!(parse_float(text.as_bytes()), want, "{text}");
        }
        assert!(parse_float(b"NaN").is_nan());
        assert!(parse_float(b"nan").is_nan());
    }

    #[test]
    fn computed_values_are_written_in_the_shortest_form_that_reads_back_exactly() {
        assert_eq!(written(f64::NAN), "NaN");
        assert_eq!(written(f64::INFINITY), "+Inf");
        assert_eq!(written(f64::NEG_INFINITY), "-Inf");
        assert_eq!(written(3.0), "3");
        assert_eq!(written(0.0), "0");
        assert_eq!(written(0.1 + 0.2), "0.30000000000000004");
        assert_eq!(written(1.7550000000231285e9), "1755000000.0231285");
        assert_eq!(written(1e-7), "1e-7");
        assert_eq!(written(2.5e300), "2.5e300");
        assert_eq!(written(1e16), "1e16");
        assert_eq!(written(9007199254740993.0), "9007199254740992");
        for v in [
            0.1,
            1.0 / 3.0,
            1e-5,
            123456.789e-12,
            f64::MAX,
            f64::MIN_POSITIVE,
            5e-324,
            -0.0,
        ] {
            let text = written(v);
            assert!(crate::lex::valid_float(text.as_bytes()), "{text}");
            assert_eq!(
                parse_float(text.as_bytes()).to_bits(),
                v.to_bits(),
                "{text}"
            );
        }
    }
}
