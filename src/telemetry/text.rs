//! sysport's own families as text 0.0.4, written straight into the answer's buffer.
//!
//! The bytes are the `prometheus` crate's `TextEncoder`'s for every finite value (the tests hold
//! the two side by side), without its two allocations a sample (the value and each bucket bound
//! formatted into a `String` of their own), with whole numbers written without the float
//! formatter and bucket bounds kept as written: with the crate's encoder, these families took a
//! seventh of the CPU of a scrape of a one-engine page (bench/RESULTS.md, sections 30 and 31).
//! Where the crate's output is not valid text (an infinite value written `inf`, a family without
//! metrics failing the whole page) this writes `+Inf`, `-Inf` and `NaN` and leaves the empty
//! family out.

use std::cell::RefCell;
use std::io::Write;

use prometheus::proto::{LabelPair, Metric, MetricFamily, MetricType};

/// Appends `families` to `out` as text 0.0.4.
pub(super) fn encode(families: &[MetricFamily], out: &mut Vec<u8>) {
    for mf in families {
        let name = mf.name();
        let kind = mf.get_field_type();
        // The crate panics on an untyped family (and nothing here makes one): left out, like
        // a family without metrics, which fails the crate's whole page.
        if name.is_empty() || mf.get_metric().is_empty() || kind == MetricType::UNTYPED {
            continue;
        }
        let help = mf.help();
        if !help.is_empty() {
            out.extend_from_slice(b"# HELP ");
            out.extend_from_slice(name.as_bytes());
            out.push(b' ');
            escape(help, false, out);
            out.push(b'\n');
        }
        out.extend_from_slice(b"# TYPE ");
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(match kind {
            MetricType::COUNTER => b" counter\n",
            MetricType::GAUGE => b" gauge\n",
            MetricType::HISTOGRAM => b" histogram\n",
            MetricType::SUMMARY => b" summary\n",
            MetricType::UNTYPED => b" untyped\n",
        });
        for m in mf.get_metric() {
            metric(name, kind, m, out);
        }
    }
}

/// The sample lines of one metric of a family of `kind`.
fn metric(name: &str, kind: MetricType, m: &Metric, out: &mut Vec<u8>) {
    let line = |suffix: &str, extra: Option<(&str, f64)>, value: f64, out: &mut Vec<u8>| {
        sample(name, suffix, m.get_label(), extra, value, out)
    };
    match kind {
        MetricType::COUNTER => line("", None, m.get_counter().get_value(), out),
        MetricType::GAUGE => line("", None, m.get_gauge().get_value(), out),
        MetricType::UNTYPED => {}
        MetricType::HISTOGRAM => {
            let h = m.get_histogram();
            let mut inf_seen = false;
            for b in h.get_bucket() {
                let bound = b.upper_bound();
                inf_seen |= bound == f64::INFINITY;
                line(
                    "_bucket",
                    Some(("le", bound)),
                    b.cumulative_count() as f64,
                    out,
                );
            }
            let count = h.get_sample_count() as f64;
            if !inf_seen {
                line("_bucket", Some(("le", f64::INFINITY)), count, out);
            }
            line("_sum", None, h.get_sample_sum(), out);
            line("_count", None, count, out);
        }
        MetricType::SUMMARY => {
            let s = m.get_summary();
            for q in s.get_quantile() {
                line("", Some(("quantile", q.quantile())), q.value(), out);
            }
            line("_sum", None, s.sample_sum(), out);
            line("_count", None, s.sample_count() as f64, out);
        }
    }
}

/// One sample line: `name` `suffix`, the labels and `extra` after them, the value.
fn sample(
    name: &str,
    suffix: &str,
    labels: &[LabelPair],
    extra: Option<(&str, f64)>,
    value: f64,
    out: &mut Vec<u8>,
) {
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(suffix.as_bytes());
    if !labels.is_empty() || extra.is_some() {
        let mut sep = b'{';
        for l in labels {
            out.push(sep);
            out.extend_from_slice(l.name().as_bytes());
            out.extend_from_slice(b"=\"");
            escape(l.value(), true, out);
            out.push(b'"');
            sep = b',';
        }
        if let Some((label, bound)) = extra {
            out.push(sep);
            out.extend_from_slice(label.as_bytes());
            out.extend_from_slice(b"=\"");
            fixed(bound, out);
            out.push(b'"');
        }
        out.push(b'}');
    }
    out.push(b' ');
    number(value, out);
    out.push(b'\n');
}

/// `v` as Rust's `Display` writes it (shortest round-trip digits, never an exponent), which is
/// what the text format reads back exactly; whole numbers without the float formatter.
fn number(v: f64, out: &mut Vec<u8>) {
    // Below 2^53 every whole number is exact, and `Display` writes it without a fraction.
    const EXACT: f64 = 9_007_199_254_740_992.0;
    if v.is_nan() {
        out.extend_from_slice(b"NaN");
    } else if v.is_infinite() {
        out.extend_from_slice(if v > 0.0 { b"+Inf" } else { b"-Inf" });
    } else if v.fract() == 0.0 && v.abs() < EXACT && !(v == 0.0 && v.is_sign_negative()) {
        let mut n = v as i64;
        if n < 0 {
            out.push(b'-');
            n = -n;
        }
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        out.extend_from_slice(&digits[at..]);
    } else {
        write!(out, "{v}").expect("writing to a Vec cannot fail");
    }
}

/// A bucket bound or a quantile as [`number`] writes it, kept from one page to the next: they are
/// fixed when a histogram or summary is made, and a fractional one (`0.005`) cost the float
/// formatter at every scrape (38 of the 142 numbers of sysport's own families beside one engine).
fn fixed(v: f64, out: &mut Vec<u8>) {
    /// More distinct values than sysport's own histograms have; past it, they are written anew.
    const KEPT: usize = 64;
    thread_local! {
        static WRITTEN: RefCell<Vec<(u64, Box<[u8]>)>> = const { RefCell::new(Vec::new()) };
    }
    if v.fract() == 0.0 || !v.is_finite() {
        return number(v, out);
    }
    let bits = v.to_bits();
    WRITTEN.with_borrow_mut(|written| {
        if let Some((_, text)) = written.iter().find(|(b, _)| *b == bits) {
            out.extend_from_slice(text);
            return;
        }
        let at = out.len();
        number(v, out);
        if written.len() < KEPT {
            written.push((bits, out[at..].into()));
        }
    });
}

/// `s` with `\` and newline escaped, and `"` too when `quote` (a label value; HELP keeps it).
fn escape(s: &str, quote: bool, out: &mut Vec<u8>) {
    let bytes = s.as_bytes();
    let mut from = 0;
    loop {
        let rest = &bytes[from..];
        let found = match quote {
            true => memchr::memchr3(b'\\', b'\n', b'"', rest),
            false => memchr::memchr2(b'\\', b'\n', rest),
        };
        let Some(off) = found else {
            break;
        };
        let i = from + off;
        out.extend_from_slice(&bytes[from..i]);
        out.extend_from_slice(match bytes[i] {
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            _ => b"\\\"",
        });
        from = i + 1;
    }
    out.extend_from_slice(&bytes[from..]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus::{
        Encoder, Gauge, HistogramOpts, HistogramVec, IntCounterVec, Opts, Registry, TextEncoder,
    };

    fn both(families: &[MetricFamily]) -> (String, String) {
        let mut ours = Vec::new();
        encode(families, &mut ours);
        let mut theirs = Vec::new();
        TextEncoder::new()
            .encode(families, &mut theirs)
            .expect("the crate encodes finite values");
        (
            String::from_utf8(ours).expect("utf-8"),
            String::from_utf8(theirs).expect("utf-8"),
        )
    }

    #[test]
    fn the_bytes_are_the_crates_for_every_finite_value() {
        let r = Registry::new();
        let c = IntCounterVec::new(
            Opts::new("c_total", "A \\ help\nwith \"quotes\""),
            &["path", "code"],
        )
        .expect("counter");
        r.register(Box::new(c.clone())).expect("register");
        c.with_label_values(&["/metrics", "200"]).inc_by(12_345_678);
        c.with_label_values(&["a \"b\"\\c\nd", "503"]).inc();
        c.with_label_values(&["", "0"]).inc_by(0);
        let h = HistogramVec::new(
            HistogramOpts::new("h_seconds", "Durations.")
                .buckets(vec![1e-9, 0.0005, 0.001, 0.25, 1.0, 2.5, 1e21]),
            &["read"],
        )
        .expect("histogram");
        r.register(Box::new(h.clone())).expect("register");
        for v in [0.0001, 0.3, 7.0, 0.1 + 0.2, 1e-12] {
            h.with_label_values(&["full"]).observe(v);
        }
        let g = Gauge::new("g", "A gauge.").expect("gauge");
        r.register(Box::new(g.clone())).expect("register");
        for v in [
            0.0,
            -0.0,
            -3.0,
            1.5,
            0.1 + 0.2,
            1e15,
            9_007_199_254_740_991.0,
            9_007_199_254_740_993.0,
            -1e300,
            5e-324,
            123_456.789,
        ] {
            g.set(v);
            let (ours, theirs) = both(&r.gather());
            assert_eq!(ours, theirs, "gauge at {v:e}");
        }
        let page = both(&r.gather()).0;
        assert!(page.contains(r#"path="a \"b\"\\c\nd""#), "{page}");
    }

    #[test]
    fn what_the_crate_writes_wrongly_is_written_as_text_reads_it() {
        let r = Registry::new();
        let g = Gauge::new("g", "G.").expect("gauge");
        r.register(Box::new(g.clone())).expect("register");
        let mut out = Vec::new();
        for (v, text) in [
            (f64::INFINITY, "g +Inf\n"),
            (f64::NEG_INFINITY, "g -Inf\n"),
            (f64::NAN, "g NaN\n"),
        ] {
            g.set(v);
            out.clear();
            encode(&r.gather(), &mut out);
            let page = String::from_utf8(out.clone()).expect("utf-8");
            assert!(page.ends_with(text), "{page}");
        }
        // A family without metrics is left out; the others are still written.
        let mut empty = MetricFamily::default();
        empty.set_name("empty".into());
        empty.set_field_type(MetricType::GAUGE);
        let mut families = vec![empty];
        families.extend(r.gather());
        out.clear();
        encode(&families, &mut out);
        let page = String::from_utf8(out).expect("utf-8");
        assert!(!page.contains("empty"), "{page}");
        assert!(page.contains("# TYPE g gauge\ng NaN\n"), "{page}");
    }

    #[test]
    fn a_bound_written_again_is_the_one_written_first_even_past_the_kept_ones() {
        let bounds: Vec<f64> = (1..200).map(|i| i as f64 * 0.0125).collect();
        for round in 0..3 {
            for &b in &bounds {
                let (mut kept, mut fresh) = (Vec::new(), Vec::new());
                fixed(b, &mut kept);
                number(b, &mut fresh);
                assert_eq!(kept, fresh, "{b} in round {round}");
                assert_eq!(String::from_utf8(kept).expect("utf-8"), b.to_string());
            }
        }
    }
}
