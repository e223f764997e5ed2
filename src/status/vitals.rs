//! An upstream's vitals on the status page: one row of figures, and five-minute sparklines of
//! requests running and waiting, KV cache usage, generation tokens/s and TTFT p99. Numbers
//! only; each figure carries its `/status` key (`data-key`) so a reader can match the two.

use std::fmt::Write;

use crate::vitals::{HISTORY, Report, Spark};

/// How a number is put in words.
type Show<'a> = &'a dyn Fn(f64) -> String;

/// Height of a sparkline, in SVG units (the width is one unit per second).
const HEIGHT: f64 = 24.0;

/// Writes the vitals block of upstream `name`.
pub(super) fn write(name: &str, v: &Report, out: &mut String) {
    let t = &v.total;
    let window = super::words::seconds_words(v.window_seconds);
    let _ = write!(
        out,
        "<div class=\"vitals\" id=\"vitals-{}\" data-readings-total=\"{}\">\
         <p class=\"vhead\">engine, last {window}</p><dl class=\"vrow\">",
        super::words::escape(name),
        v.readings_total
    );
    let pct = |x: f64| format!("{:.1} %", x * 100.0);
    let rate = |x: f64| {
        if x >= 100.0 {
            format!("{x:.0}/s")
        } else {
            format!("{x:.2}/s")
        }
    };
    let n = |x: f64| format!("{x:.0}");
    let items: [(&str, &str, Option<f64>, Show<'_>); 8] = [
        ("running", "running", t.running, &n),
        ("waiting", "waiting", t.waiting, &n),
        ("kv_cache_usage", "KV cache", t.kv_cache_usage, &pct),
        (
            "requests_per_second",
            "requests",
            t.requests_per_second,
            &rate,
        ),
        (
            "prompt_tokens_per_second",
            "prompt tok",
            t.prompt_tokens_per_second,
            &rate,
        ),
        (
            "generation_tokens_per_second",
            "gen tok",
            t.generation_tokens_per_second,
            &rate,
        ),
        (
            "preemptions_per_second",
            "preempted",
            t.preemptions_per_second,
            &rate,
        ),
        (
            "prefix_cache_hit_rate",
            "prefix hits",
            t.prefix_cache_hit_rate,
            &pct,
        ),
    ];
    let why = |key: &str| t.not_available.get(key).map(String::as_str);
    for (key, label, value, show) in items {
        figure(key, label, value.map(show), value, why(key), out);
    }
    // sysport's own canaries, left out of the requests and generated tokens above.
    let canaries = v.canaries.requests_per_second;
    figure(
        "canaries.requests_per_second",
        "canaries",
        canaries.map(&rate),
        canaries,
        None,
        out,
    );
    for (key, label, q) in [
        (
            "time_to_first_token_seconds",
            "TTFT",
            t.time_to_first_token_seconds,
        ),
        (
            "inter_token_latency_seconds",
            "ITL",
            t.inter_token_latency_seconds,
        ),
        (
            "e2e_request_latency_seconds",
            "E2E",
            t.e2e_request_latency_seconds,
        ),
    ] {
        for (p, value) in [("p50", q.p50), ("p99", q.p99)] {
            let key = format!("{key}.{p}");
            figure(
                &key,
                &format!("{label} {p}"),
                value.map(super::words::seconds),
                value,
                why(&key),
                out,
            );
        }
    }
    out.push_str("</dl>");
    if !t.not_available.is_empty() {
        out.push_str("<ul class=\"vna muted\">");
        for (key, why) in &t.not_available {
            let _ = write!(
                out,
                "<li data-key=\"{key}\">{key} not available: {}</li>",
                super::words::escape(why)
            );
        }
        out.push_str("</ul>");
    }
    out.push_str("<div class=\"sparks\">");
    let h = &v.history;
    for (key, label, points, show) in [
        ("running", "running", &h.running, &n as Show<'_>),
        ("waiting", "waiting", &h.waiting, &n),
        ("kv_cache_usage", "KV cache", &h.kv_cache_usage, &pct),
        (
            "generation_tokens_per_second",
            "gen tok/s",
            &h.generation_tokens_per_second,
            &rate,
        ),
        (
            "ttft_p99_seconds",
            "TTFT p99",
            &h.ttft_p99_seconds,
            &super::words::seconds,
        ),
    ] {
        spark(key, label, points, show, out);
    }
    out.push_str("</div>");
    if !v.ranks.is_empty() || v.pids.len() > 1 {
        out.push_str("<p class=\"vparts muted\">");
        let label = v.rank_label.unwrap_or("rank");
        for part in &v.ranks {
            let f = &part.figures;
            // A dash for too little data, "n/a" for numbers that cannot be figures.
            let shown = |key: &str, value: Option<f64>, show: Show<'_>| match value {
                Some(v) => show(v),
                None if f.not_available.contains_key(key) => "n/a".to_owned(),
                None => "–".to_owned(),
            };
            let _ = write!(
                out,
                "<span>{label} {}: {} running, {} waiting, KV {}</span> ",
                super::words::escape(&part.id),
                shown("running", f.running, &n),
                shown("waiting", f.waiting, &n),
                shown("kv_cache_usage", f.kv_cache_usage, &pct),
            );
        }
        if v.pids.len() > 1 {
            let _ = write!(out, "<span>{} processes (pid)</span>", v.pids.len());
        }
        out.push_str("</p>");
    }
    let left = &v.left_out;
    if left.ranks + left.pids + left.buckets > 0 {
        let mut what = Vec::new();
        if left.ranks > 0 {
            what.push(format!("{} more ranks", left.ranks));
        }
        if left.pids > 0 {
            what.push(format!("{} more processes", left.pids));
        }
        if left.buckets > 0 {
            what.push(format!("{} bucket bounds", left.buckets));
        }
        let _ = write!(
            out,
            "<p class=\"vleft muted\" data-key=\"left_out\">not shown apart: {} \
             (counted in the totals; sysport keeps at most {} ranks, {} processes and {} \
             buckets per histogram)</p>",
            what.join(", "),
            crate::vitals::MAX_RANKS,
            crate::vitals::MAX_PIDS,
            crate::vitals::MAX_BUCKETS,
        );
    }
    out.push_str("</div>");
}

/// One figure: its words; "n/a" with the reason when the engine's numbers cannot be one; a
/// dash when there is too little data.
fn figure(
    key: &str,
    label: &str,
    text: Option<String>,
    value: Option<f64>,
    not_available: Option<&str>,
    out: &mut String,
) {
    let (text, title) = match (text, not_available) {
        (Some(text), _) => (text, String::new()),
        (None, Some(why)) => (
            "n/a".to_owned(),
            format!(" title=\"{}\"", super::words::escape(why)),
        ),
        (None, None) => ("–".to_owned(), String::new()),
    };
    let _ = write!(
        out,
        "<div data-key=\"{key}\" data-value=\"{}\"{title}><dt>{label}</dt><dd>{text}</dd></div>",
        value.map_or("null".to_owned(), |v| v.to_string()),
    );
}

/// One sparkline over the last five minutes, with its latest value.
fn spark(key: &str, label: &str, points: &Spark, show: Show<'_>, out: &mut String) {
    let width = HISTORY.as_secs_f64();
    let max = points.iter().filter_map(|p| p.1).fold(0.0_f64, f64::max);
    let _ = write!(
        out,
        "<figure class=\"spark\" data-key=\"{key}\"><svg viewBox=\"0 0 {width} {HEIGHT}\" \
         preserveAspectRatio=\"none\" role=\"img\" aria-label=\"{label}, last 5 minutes\">\
         <path d=\""
    );
    let mut pen_down = false;
    for &(t, value) in points {
        match value {
            Some(v) if v.is_finite() => {
                let x = width + t;
                let y = if max > 0.0 {
                    HEIGHT - 1.0 - (HEIGHT - 2.0) * v / max
                } else {
                    HEIGHT - 1.0
                };
                let _ = write!(out, "{}{x:.1} {y:.1}", if pen_down { "L" } else { "M" });
                pen_down = true;
            }
            _ => pen_down = false,
        }
    }
    let last = points.iter().rev().find_map(|p| p.1);
    let _ = write!(
        out,
        "\"/></svg><figcaption>{label} <b>{}</b>{}</figcaption></figure>",
        last.map_or("–".to_owned(), show),
        if max > 0.0 {
            format!("<br><span class=\"muted\">max {}</span>", show(max))
        } else {
            String::new()
        },
    );
}
