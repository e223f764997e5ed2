//! Text exposition 0.0.4 written the way Python `prometheus_client` 0.2x writes it, so the demo
//! upstreams look to the sidecar like a real engine: labels sorted by name, values formatted by
//! `floatToGoString`, counters as `x_total` plus a separate `x_created` gauge family with the same
//! HELP, histograms as buckets, `_count`, `_sum`, then their own `_created` gauge family.

use std::fmt::{self, Write as _};

/// Labels of one child, sorted by name as `prometheus_client` prints them.
pub(super) type Labels<'l> = &'l [(&'l str, &'l str)];

/// Offset between the `_created` timestamps of successive children: Python creates them one
/// after the other, so no two are equal.
const CREATED_STEP_SECONDS: f64 = 0.000_123;

/// A histogram child: per-bucket (non-cumulative) counts, the last one for `+Inf`.
#[derive(Debug, Clone)]
pub(super) struct Hist {
    bounds: &'static [f64],
    counts: Vec<u64>,
    sum: f64,
}

impl Hist {
    pub(super) fn new(bounds: &'static [f64]) -> Self {
        Hist {
            bounds,
            counts: vec![0; bounds.len() + 1],
            sum: 0.0,
        }
    }

    pub(super) fn observe(&mut self, value: f64) {
        self.observe_n(value, 1);
    }

    /// Records `n` observations of the same value.
    pub(super) fn observe_n(&mut self, value: f64, n: u64) {
        if n == 0 {
            return;
        }
        let i = self.bounds.partition_point(|&b| b < value);
        self.counts[i] += n;
        self.sum += value * n as f64;
    }

    pub(super) fn count(&self) -> u64 {
        self.counts.iter().sum()
    }
}

/// Writes families into one buffer. `_created` values are derived from the start time and the
/// child's position, which is stable from scrape to scrape because every child exists from the
/// start.
pub(super) struct Writer<'a> {
    out: &'a mut String,
    created_base: f64,
    created_seq: u32,
}

impl<'a> Writer<'a> {
    pub(super) fn new(out: &'a mut String, created_base: f64) -> Self {
        Writer {
            out,
            created_base,
            created_seq: 0,
        }
    }

    /// A gauge family.
    pub(super) fn gauge(
        &mut self,
        name: &str,
        help: &str,
        children: impl Fn(&mut dyn FnMut(Labels<'_>, f64)),
    ) {
        self.header(name, "", help, "gauge");
        children(&mut |labels, value| self.sample(name, "", labels, None, value));
    }

    /// A counter declared without `_total`: the `name_total` counter family, then `name_created`.
    pub(super) fn counter(
        &mut self,
        name: &str,
        help: &str,
        children: impl Fn(&mut dyn FnMut(Labels<'_>, f64)),
    ) {
        self.header(name, "_total", help, "counter");
        children(&mut |labels, value| self.sample(name, "_total", labels, None, value));
        self.created(name, help, |emit| children(&mut |labels, _| emit(labels)));
    }

    /// A counter from a custom collector (Python's gc and process collectors): `name` already
    /// ends in `_total` and there is no `_created` family.
    pub(super) fn collector_counter(
        &mut self,
        name: &str,
        help: &str,
        children: impl Fn(&mut dyn FnMut(Labels<'_>, f64)),
    ) {
        self.header(name, "", help, "counter");
        children(&mut |labels, value| self.sample(name, "", labels, None, value));
    }

    /// A histogram family, then its `name_created` gauge family.
    pub(super) fn histogram(
        &mut self,
        name: &str,
        help: &str,
        children: impl Fn(&mut dyn FnMut(Labels<'_>, &Hist)),
    ) {
        self.header(name, "", help, "histogram");
        children(&mut |labels, hist| {
            let mut cumulative = 0;
            for (bound, count) in hist.bounds.iter().zip(&hist.counts) {
                cumulative += count;
                self.sample(name, "_bucket", labels, Some(*bound), cumulative as f64);
            }
            let total = hist.count();
            self.sample(name, "_bucket", labels, Some(f64::INFINITY), total as f64);
            self.sample(name, "_count", labels, None, total as f64);
            self.sample(name, "_sum", labels, None, hist.sum);
        });
        self.created(name, help, |emit| children(&mut |labels, _| emit(labels)));
    }

    /// A summary without quantiles (what prometheus-fastapi-instrumentator registers): `_count`
    /// and `_sum` per child, then `name_created`. Children give `(count, sum)`.
    pub(super) fn summary(
        &mut self,
        name: &str,
        help: &str,
        children: impl Fn(&mut dyn FnMut(Labels<'_>, (f64, f64))),
    ) {
        self.header(name, "", help, "summary");
        children(&mut |labels, (count, sum)| {
            self.sample(name, "_count", labels, None, count);
            self.sample(name, "_sum", labels, None, sum);
        });
        self.created(name, help, |emit| children(&mut |labels, _| emit(labels)));
    }

    fn created(&mut self, name: &str, help: &str, children: impl Fn(&mut dyn FnMut(Labels<'_>))) {
        self.header(name, "_created", help, "gauge");
        children(&mut |labels| {
            let value = self.created_base + f64::from(self.created_seq) * CREATED_STEP_SECONDS;
            self.created_seq += 1;
            self.sample(name, "_created", labels, None, value);
        });
    }

    fn header(&mut self, name: &str, suffix: &str, help: &str, kind: &str) {
        let out = &mut *self.out;
        out.push_str("# HELP ");
        out.push_str(name);
        out.push_str(suffix);
        out.push(' ');
        for c in help.chars() {
            match c {
                '\\' => out.push_str("\\\\"),
                '\n' => out.push_str("\\n"),
                c => out.push(c),
            }
        }
        out.push_str("\n# TYPE ");
        out.push_str(name);
        out.push_str(suffix);
        out.push(' ');
        out.push_str(kind);
        out.push('\n');
    }

    /// One sample line; `le` is merged into the sorted labels where it belongs.
    fn sample(
        &mut self,
        name: &str,
        suffix: &str,
        labels: Labels<'_>,
        le: Option<f64>,
        value: f64,
    ) {
        debug_assert!(
            labels.windows(2).all(|w| w[0].0 < w[1].0),
            "labels must be sorted: {labels:?}"
        );
        let out = &mut *self.out;
        out.push_str(name);
        out.push_str(suffix);
        if !labels.is_empty() || le.is_some() {
            out.push('{');
            let mut le = le;
            let mut first = true;
            for &(key, val) in labels {
                if let Some(bound) = le.filter(|_| key > "le") {
                    push_label_start(out, &mut first, "le");
                    push_go_float(out, bound);
                    out.push('"');
                    le = None;
                }
                push_label_start(out, &mut first, key);
                push_escaped(out, val);
                out.push('"');
            }
            if let Some(bound) = le {
                push_label_start(out, &mut first, "le");
                push_go_float(out, bound);
                out.push('"');
            }
            out.push('}');
        }
        out.push(' ');
        push_go_float(out, value);
        out.push('\n');
    }
}

fn push_label_start(out: &mut String, first: &mut bool, key: &str) {
    if !*first {
        out.push(',');
    }
    *first = false;
    out.push_str(key);
    out.push_str("=\"");
}

fn push_escaped(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// Fixed-size text buffer on the stack, so formatting a float never allocates.
struct StackStr {
    buf: [u8; 48],
    len: usize,
}

impl StackStr {
    fn new() -> Self {
        StackStr {
            buf: [0; 48],
            len: 0,
        }
    }

    fn as_str(&self) -> &str {
        // Only ASCII is ever written (digits, '.', 'e', '+', '-').
        std::str::from_utf8(&self.buf[..self.len]).unwrap_or("NaN")
    }

    fn push(&mut self, b: u8) {
        self.buf[self.len] = b;
        self.len += 1;
    }
}

impl fmt::Write for StackStr {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len + s.len();
        if end > self.buf.len() {
            return Err(fmt::Error);
        }
        self.buf[self.len..end].copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// Python's `repr(float)` for a finite value: the shortest round-trip digits, positional with a
/// trailing `.0` when the decimal exponent is in [-4, 16), otherwise `d.ddde±XX`.
fn py_repr(value: f64) -> StackStr {
    let mut sci = StackStr::new();
    // `{:e}` gives the shortest round-trip digits, e.g. `1.755000000000123e9`, `1e-5`, `0e0`.
    write!(sci, "{:e}", value.abs()).expect("a float's shortest form fits in 48 bytes");
    let text = sci.as_str();
    let (mantissa, exp) = text.split_once('e').unwrap_or((text, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let mut digits = [0u8; 20];
    let mut n = 0;
    for b in mantissa.bytes().filter(u8::is_ascii_digit) {
        digits[n] = b;
        n += 1;
    }
    let digits = &digits[..n];

    let mut out = StackStr::new();
    if value.is_sign_negative() {
        out.push(b'-');
    }
    if (-4..16).contains(&exp) {
        let point = exp + 1; // digits before the decimal point
        if point <= 0 {
            out.push(b'0');
            out.push(b'.');
            for _ in 0..-point {
                out.push(b'0');
            }
            digits.iter().for_each(|&d| out.push(d));
        } else {
            let point = point as usize;
            for i in 0..point.max(digits.len()) {
                if i == point {
                    out.push(b'.');
                }
                out.push(digits.get(i).copied().unwrap_or(b'0'));
            }
            if point >= digits.len() {
                out.push(b'.');
                out.push(b'0');
            }
        }
    } else {
        out.push(digits[0]);
        if digits.len() > 1 {
            out.push(b'.');
            digits[1..].iter().for_each(|&d| out.push(d));
        }
        write!(
            out,
            "e{}{:02}",
            if exp < 0 { '-' } else { '+' },
            exp.unsigned_abs()
        )
        .expect("exponent fits");
    }
    out
}

/// `prometheus_client.utils.floatToGoString`: Python's repr, except `+Inf`/`-Inf`/`NaN` and
/// positive values with seven or more integer digits, which switch to an exponent like Go does
/// (`1e+06`, `1.755000000000123e+09`).
pub(super) fn push_go_float(out: &mut String, value: f64) {
    if value.is_nan() {
        out.push_str("NaN");
        return;
    }
    if value.is_infinite() {
        out.push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
        return;
    }
    let repr = py_repr(value);
    let s = repr.as_str();
    match s.find('.') {
        Some(dot) if value > 0.0 && dot > 6 => {
            let start = out.len();
            out.push_str(&s[..1]);
            out.push('.');
            out.push_str(&s[1..dot]);
            out.push_str(&s[dot + 1..]);
            let kept = out[start..].trim_end_matches(['0', '.']).len();
            out.truncate(start + kept);
            write!(out, "e+{:02}", dot - 1).expect("writing to a String cannot fail");
        }
        _ => out.push_str(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(value: f64) -> String {
        let mut s = String::new();
        push_go_float(&mut s, value);
        s
    }

    #[test]
    fn floats_match_prometheus_client() {
        // Expected strings printed by prometheus_client 0.26 `floatToGoString`.
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (-0.0, "-0.0"),
            (1.0, "1.0"),
            (0.001, "0.001"),
            (0.075, "0.075"),
            (0.07500000000000001, "0.07500000000000001"),
            (1e-05, "1e-05"),
            (0.00016, "0.00016"),
            (0.0001, "0.0001"),
            (0.00001 * 524_288.0, "5.24288"),
            (1e6, "1e+06"),
            (1.5e6, "1.5e+06"),
            (1_755_000_000.000123, "1.755000000000123e+09"),
            (2.0401094656e10, "2.0401094656e+10"),
            (1e16, "1e+16"),
            (1.234e17, "1.234e+17"),
            (123_456.0, "123456.0"),
            (1_234_567.0, "1.234567e+06"),
            (0.1 + 0.2, "0.30000000000000004"),
            (-3.5, "-3.5"),
            (-2.5e6, "-2500000.0"),
            (1e-300, "1e-300"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "5e-324"),
            (9_999_999_999_999_998.0, "9.999999999999998e+15"),
            (33.950129208411795, "33.950129208411795"),
            (1_048_576.0, "1.048576e+06"),
            (12_345_678_901_234.5, "1.23456789012345e+13"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for &(value, want) in cases {
            assert_eq!(go(value), want, "value {value:e}");
        }
    }

    #[test]
    fn le_is_merged_into_sorted_labels() {
        let mut out = String::new();
        let mut w = Writer::new(&mut out, 1.0);
        let mut h = Hist::new(&[0.5, 1.0]);
        h.observe(0.7);
        h.observe(2.0);
        w.histogram("x", "H", |emit| {
            emit(&[("engine", "0"), ("model_name", "m")], &h)
        });
        let want = "# HELP x H\n# TYPE x histogram\n\
            x_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"} 0.0\n\
            x_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 1.0\n\
            x_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 2.0\n\
            x_count{engine=\"0\",model_name=\"m\"} 2.0\n\
            x_sum{engine=\"0\",model_name=\"m\"} 2.7\n\
            # HELP x_created H\n# TYPE x_created gauge\n\
            x_created{engine=\"0\",model_name=\"m\"} 1.0\n";
        assert_eq!(out, want);
    }

    #[test]
    fn counter_gets_total_and_created_families() {
        let mut out = String::new();
        let mut w = Writer::new(&mut out, 1_700_000_000.0);
        w.counter("vllm:x", "Back\\slash", |emit| emit(&[("a", "q\"\n")], 3.0));
        let want = "# HELP vllm:x_total Back\\\\slash\n# TYPE vllm:x_total counter\n\
            vllm:x_total{a=\"q\\\"\\n\"} 3.0\n\
            # HELP vllm:x_created Back\\\\slash\n# TYPE vllm:x_created gauge\n\
            vllm:x_created{a=\"q\\\"\\n\"} 1.7e+09\n";
        assert_eq!(out, want);
    }
}
