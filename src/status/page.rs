//! The status page: one HTML document with its style inline and no script, no font and no
//! image from elsewhere (a port-forwarded pod has no network to fetch them from), refreshing
//! itself. Every text that comes from the configuration or an upstream is escaped: an error
//! can quote a redirect's `Location` or a Content-Type, which an upstream chooses.

use std::fmt::Write;
use std::time::{Duration, SystemTime};

use super::chart;
use super::facts::{Facts, HealthFacts, Timestamp, UpstreamFacts};
use super::history::WINDOW_SECONDS;
use super::words::{Esc, seconds};
use crate::health::Badge as State;
use crate::model::routes;

/// How often the page reloads itself, in seconds.
pub(crate) const REFRESH_SECONDS: u32 = 5;

const STYLE: &str = include_str!("page.css");

/// The whole page.
pub(super) fn render(f: &Facts) -> String {
    let now = SystemTime::now();
    let mut out = String::with_capacity(16 << 10);
    let up = f.upstreams.iter().filter(|u| u.state == State::Up).count();
    let (badge, word) = if f.ready {
        ("ok", "ready")
    } else {
        ("bad", "not ready")
    };
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta http-equiv=\"refresh\" content=\"{REFRESH_SECONDS}\">\
         <title>sysport: {word}, {up} of {} up</title><style>{STYLE}</style></head><body>\n\
         <header><h1>sysport <small>{}</small></h1>\
         <span class=\"badge {badge}\" id=\"readiness\">{word}</span>\
         <dl class=\"facts\"><div><dt>uptime</dt><dd>{}</dd></div>\
         <div><dt>listening on</dt><dd>{}</dd></div>\
         <div><dt>upstreams</dt><dd>{up} of {} up</dd></div></dl>\n<nav>",
        f.upstreams.len(),
        Esc(f.version),
        uptime(f.uptime_seconds),
        Esc(&f.listen),
        f.upstreams.len(),
    );
    let p = &f.paths;
    let links = [p.metrics]
        .into_iter()
        .chain(p.views.iter().map(String::as_str))
        .chain([
            p.health.as_str(),
            p.live.as_str(),
            p.status,
            routes::INCIDENTS,
        ]);
    for path in links {
        let _ = write!(out, "<a href=\"{0}\">{0}</a>", Esc(path));
    }
    out.push_str("</nav></header>\n");
    if let Some(o) = &f.otlp {
        let when = |t: Option<super::facts::Timestamp>| {
            t.map_or_else(|| "never".to_owned(), |t| super::facts::rfc3339(t.0))
        };
        let _ = writeln!(
            out,
            "<p class=\"otlp\" id=\"otlp\">OTLP push to {} ({}): last success {}{}</p>",
            Esc(&o.endpoint),
            Esc(&o.protocol),
            Esc(&when(o.last_success_at)),
            match &o.last_error {
                Some(e) => format!("; last error {}: {}", Esc(&when(o.last_error_at)), Esc(e)),
                None => String::new(),
            },
        );
    }
    match &f.not_ready_reason {
        Some(reason) => {
            let _ = writeln!(
                out,
                "<p class=\"reason bad\" id=\"why\">Not ready: {}</p>",
                Esc(reason)
            );
        }
        None => out.push_str(
            "<p class=\"reason ok\" id=\"why\">Ready: every required upstream passes its \
             check.</p>\n",
        ),
    }
    out.push_str("<main>\n");
    for u in &f.upstreams {
        card(u, now, &mut out);
    }
    out.push_str("</main>\n");
    incidents(&f.incidents, &mut out);
    out.push_str("<details><summary>Effective configuration");
    if let Some(file) = &f.config_file {
        let _ = write!(out, " (from {})", Esc(file));
    }
    let _ = write!(
        out,
        "</summary><pre>{}</pre></details>\n<footer>Read from sysport's own state: opening \
         this page fetches nothing from the upstreams. Refreshes every {REFRESH_SECONDS} s. \
         The same facts as JSON: <a href=\"{1}\">{1}</a>.</footer>\n</body></html>\n",
        Esc(&f.config),
        Esc(p.status),
    );
    out
}

/// The latest incidents, each linked to its JSON and its bundle.
fn incidents(list: &[serde_json::Value], out: &mut String) {
    if list.is_empty() {
        return;
    }
    out.push_str("<section id=\"incidents\"><h2>Latest incidents</h2><ul>\n");
    for i in list {
        let id = i["id"].as_str().unwrap_or_default();
        let opened = i["opened_unix_seconds"].as_f64().unwrap_or_default();
        let opened = SystemTime::UNIX_EPOCH + Duration::from_secs_f64(opened);
        let state = match i["duration_seconds"].as_f64() {
            Some(d) => format!("closed after {d:.0} s"),
            None => "open".to_owned(),
        };
        let _ = writeln!(
            out,
            "<li><a href=\"{path}/{id}\">{upstream}: {kind}</a> at {at}, {state} \
             (<a href=\"{path}/{id}.tar.gz\">bundle</a>): {reason}</li>",
            path = routes::INCIDENTS,
            id = Esc(id),
            upstream = Esc(i["upstream"].as_str().unwrap_or_default()),
            kind = Esc(i["kind"].as_str().unwrap_or_default()),
            at = super::facts::rfc3339(opened),
            reason = Esc(i["reason"].as_str().unwrap_or_default()),
        );
    }
    out.push_str("</ul></section>\n");
}

/// One upstream's card.
fn card(u: &UpstreamFacts, now: SystemTime, out: &mut String) {
    let (class, word) = match u.state {
        State::Up => ("ok", "up"),
        State::Stalled => ("bad", "stalled"),
        State::CanaryFailed => ("bad", "canary failed"),
        State::Sleeping => ("idle", "sleeping"),
        State::Down => ("bad", "down"),
        State::Unknown => ("idle", "not scraped yet"),
    };
    let since = u
        .state_since
        .filter(|_| u.state != State::Unknown)
        .map(|t| {
            let secs = now.duration_since(t.0).unwrap_or(Duration::ZERO);
            format!(
                " <span class=\"since\">for {}</span>",
                uptime(secs.as_secs_f64())
            )
        })
        .unwrap_or_default();
    let _ = write!(
        out,
        "<section class=\"card {class}\" id=\"upstream-{0}\"><h2>{0} \
         <span class=\"badge {class}\">{word}</span>{since}</h2><p class=\"url\">{1}</p>",
        Esc(&u.name),
        Esc(&u.url),
    );
    // Why the engine is not OK, as its verdict words it (down is the scrape's error, below).
    if let (State::Stalled | State::CanaryFailed, Some(reason)) = (u.state, &u.health.reason) {
        let _ = write!(out, "<p class=\"error\">{}</p>", Esc(reason));
    }
    if let Some(canary) = &u.health.canary {
        canary_line(canary, &u.health, out);
    }
    if let Some(error) = &u.last_error {
        let when = u
            .last_error_at
            .map(|t| format!(" <span class=\"when\">· {}</span>", time(t, now)))
            .unwrap_or_default();
        let _ = match u.state {
            State::Down => write!(out, "<p class=\"error\">{}{when}</p>", Esc(error)),
            _ => write!(
                out,
                "<p class=\"error past\">last error: {}{when}</p>",
                Esc(error)
            ),
        };
    }
    out.push_str("<dl class=\"props\">");
    let _ = write!(
        out,
        "<dt>{}</dt><dd>{}</dd><dt>required</dt><dd>{}</dd>",
        if u.engine_families {
            "engine"
        } else {
            "families"
        },
        // An upstream that keeps none of its engine preset's own families (LMCache's, kept
        // under the default vLLM preset) is not that engine: say what it keeps instead.
        Esc(&if u.engine_families {
            u.engine.to_owned()
        } else {
            u.keep.join(", ")
        }),
        if u.required {
            "yes, readiness needs it"
        } else {
            "no"
        },
    );
    let h = &u.health;
    let _ = write!(
        out,
        "<dt>readiness</dt><dd>{} <span class=\"muted\">(checked by {}{})</span></dd>",
        if h.ready { "ready" } else { "not ready" },
        if h.check == "health_url" {
            "its health URL"
        } else {
            "scraping it"
        },
        match h.last_check_at {
            Some(t) => format!(", {}", time(t, now)),
            None => ", not yet".to_owned(),
        },
    );
    out.push_str("<dt>last scrape</dt><dd>");
    match &u.last_scrape {
        Some(s) => {
            let _ = write!(
                out,
                "{}, took {}, <span class=\"result\">{}</span>{}",
                time(s.at, now),
                seconds(s.duration_seconds),
                Esc(s.result),
                if s.read == "selective" {
                    " <span class=\"muted\">(selected families)</span>"
                } else {
                    ""
                },
            );
        }
        None => out.push_str("none yet"),
    }
    let _ = write!(
        out,
        "</dd><dt>data age</dt><dd>{}</dd><dt>response</dt><dd>{}</dd></dl>",
        u.data_age_seconds
            .map_or_else(|| "no data yet".to_owned(), seconds),
        u.response_bytes
            .map_or_else(|| "none yet".to_owned(), bytes),
    );
    // The vitals are the engine's: not shown for an upstream that keeps none of its families.
    if let Some(v) = u.vitals.as_ref().filter(|_| u.engine_families) {
        super::vitals::write(&u.name, v, out);
    }
    out.push_str("<ul class=\"series\">");
    for &(outcome, n) in &u.series.0 {
        let warn = n > 0 && matches!(outcome, "malformed" | "duplicate" | "conflict");
        let _ = write!(
            out,
            "<li{}><b>{}</b>{}</li>",
            if warn { " class=\"warn\"" } else { "" },
            count(n),
            // `relabel_dropped` reads as two words and stays on one line.
            Esc(&outcome.replace('_', "\u{a0}")),
        );
    }
    out.push_str("</ul><figure>");
    let scale = chart::svg(&u.history, out);
    out.push_str("<figcaption>");
    let minutes = WINDOW_SECONDS / 60;
    if scale.max_duration.is_none() && scale.failed_seconds == 0 {
        let _ = write!(
            out,
            "no full-page scrape in the last {minutes} min: nothing has read /metrics, and \
             health checks read selected families only"
        );
    } else {
        let _ = write!(out, "last {minutes} min:");
        if let Some(max) = scale.max_duration {
            let _ = write!(
                out,
                " <span class=\"key took\">scrape time, up to {}</span>",
                seconds(max)
            );
        }
        if let Some((lo, hi)) = scale.kept {
            let range = if lo == hi {
                count(hi)
            } else {
                format!("{}–{}", count(lo), count(hi))
            };
            let _ = write!(out, " <span class=\"key kept\">series kept, {range}</span>");
        }
        if scale.failed_seconds > 0 {
            let _ = write!(
                out,
                " <span class=\"key fail\">failed in {} s</span>",
                scale.failed_seconds
            );
        }
    }
    out.push_str("</figcaption></figure></section>\n");
}

/// `<time>` saying how long ago, with the exact time as its title.
fn time(t: Timestamp, now: SystemTime) -> String {
    let exact = super::facts::rfc3339(t.0);
    let ago = now.duration_since(t.0).unwrap_or(Duration::ZERO).as_secs();
    let words = match ago {
        0 => "just now".to_owned(),
        1..=119 => format!("{ago} s ago"),
        120..=7199 => format!("{} min ago", ago / 60),
        _ => format!("{} h ago", ago / 3600),
    };
    format!("<time datetime=\"{exact}\" title=\"{exact}\">{words}</time>")
}

/// A long span of time: `45 s`, `12 min 5 s`, `3 h 20 min`, `4 d 2 h`.
fn uptime(s: f64) -> String {
    let s = s as u64;
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        3600..=86_399 => format!("{} h {} min", s / 3600, s / 60 % 60),
        _ => format!("{} d {} h", s / 86_400, s / 3600 % 24),
    }
}

/// A size: `512 B`, `740.2 KiB`, `15.9 MiB`.
fn bytes(n: u64) -> String {
    match n {
        0..1024 => format!("{n} B"),
        1024..1_048_576 => format!("{:.1} KiB", n as f64 / 1024.0),
        _ => format!("{:.1} MiB", n as f64 / 1_048_576.0),
    }
}

/// A count with thousands separated: `1 234 567`.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3 * 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push('\u{202f}');
        }
        out.push(c);
    }
    out
}

/// The canary facts of one upstream: why and until when they pause, the last result, when,
/// how long, and the next one.
fn canary_line(c: &serde_json::Value, h: &HealthFacts, out: &mut String) {
    if let Some(why) = &h.canary_stopped {
        let until = h
            .canary_paused_until
            .map(|t| super::facts::rfc3339(t.0))
            .unwrap_or_default();
        let _ = write!(
            out,
            "<p class=\"warn\">canaries paused until <time datetime=\"{until}\">{until}</time> \
             (back-off {}): {}</p>",
            Esc(&seconds(c["pause_seconds"].as_f64().unwrap_or_default())),
            Esc(why)
        );
    }
    let last = match &c["last"] {
        serde_json::Value::Null => "none yet".to_owned(),
        last => format!(
            "{} in {:.3} s",
            last["result"].as_str().unwrap_or_default(),
            last["duration_seconds"].as_f64().unwrap_or_default()
        ),
    };
    let next = match (c["next_in_seconds"].as_f64(), c["none_because"].as_str()) {
        (Some(secs), _) => format!("next in {secs:.0} s if idle"),
        (None, Some(why)) => format!("none: {why}"),
        (None, None) => String::new(),
    };
    let _ = write!(
        out,
        "<p class=\"canary\">canary every {} s of idleness · last: {} · {}</p>",
        c["canary_after_seconds"].as_f64().unwrap_or_default(),
        Esc(&last),
        Esc(&next),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_leaves_no_markup() {
        let hostile = r#"<script>alert("x")</script> & 'y' <img src=x onerror=1>"#;
        let escaped = Esc(hostile).to_string();
        assert_eq!(
            escaped,
            "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &#39;y&#39; &lt;img \
             src=x onerror=1&gt;"
        );
        assert_eq!(Esc("plain µs text").to_string(), "plain µs text");
    }

    #[test]
    fn quantities_read_as_people_write_them() {
        assert_eq!(seconds(0.000_85), "850 µs");
        assert_eq!(seconds(0.003_21), "3.21 ms");
        assert_eq!(seconds(0.0124), "12.4 ms");
        assert_eq!(seconds(1.25), "1.25 s");
        assert_eq!(seconds(200.0), "3 min 20 s");
        assert_eq!(uptime(45.9), "45 s");
        assert_eq!(uptime(12.0 * 3600.0 + 61.0), "12 h 1 min");
        assert_eq!(uptime(3.0 * 86_400.0 + 7200.0), "3 d 2 h");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(758_000), "740.2 KiB");
        assert_eq!(bytes(16 << 20), "16.0 MiB");
        assert_eq!(count(7), "7");
        assert_eq!(count(1234), "1\u{202f}234");
        assert_eq!(count(1_234_567), "1\u{202f}234\u{202f}567");
    }
}
