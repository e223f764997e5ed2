//! What a scrape leaves behind: sysport's own metrics for the upstream, the status page's
//! record, and a log line when the upstream changes state or its page's first malformed line
//! changes. [`record`] is the one place that does it.

use std::time::{Duration, Instant};

use super::{Inner, UpstreamResult};
use crate::expfmt::Malformed;
use crate::status::history::{Outcome, Recorded};
use crate::telemetry::SERIES_OUTCOMES;

/// Per upstream state, for logging changes once and for the status page.
#[derive(Debug, Default)]
pub(super) struct UpstreamState {
    pub(super) up: Option<bool>,
    pub(super) last_error: Option<String>,
    pub(super) last_success: Option<Instant>,
    pub(super) recorded: Recorded,
    /// The first malformed line of the last full page, logged when it changes.
    first_malformed: Option<Malformed>,
}

/// What a result being recorded came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A fetch of the full page.
    Full,
    /// A fetch of selected families (`name[]`): a request to the engine, but its duration,
    /// size and series are not the full page's.
    Selective,
    /// A request whose deadline came before the shared fetch ended: for that scrape the
    /// upstream timed out. The fetch itself is recorded when it ends.
    Deadline,
}

/// Records one result of upstream `u`: `dynamo_sysport_upstream_scrapes_total`, `_up`, and for a
/// full page its duration, size and series counts; the status page's record of engine requests;
/// and a log line when the upstream goes up or down. `took`: how long the fetch (or the wait)
/// took; `body_len`: the decoded body's size, when one arrived.
pub(super) fn record(
    inner: &Inner,
    u: usize,
    result: &UpstreamResult,
    took: Duration,
    kind: Kind,
    body_len: Option<usize>,
) {
    let t = &inner.telemetry;
    let name = inner.upstreams[u].name.as_str();
    let up = result.is_ok();
    let reason = result.as_ref().map_or_else(|e| e.reason(), |_| "success");
    // Until a full `/metrics` read merges the page (and takes out conflicts and duplicates),
    // the parse's count less what the rules dropped is the best one the status page can show.
    let kept = result.as_ref().ok().map(|page| {
        page.parsed
            .stats()
            .kept
            .saturating_sub(page.relabel_dropped)
    });
    t.scrapes.with_label_values(&[name, reason]).inc();
    t.upstream_up.with_label_values(&[name]).set(up as i64);
    if kind == Kind::Full {
        t.scrape_duration
            .with_label_values(&[name])
            .observe(took.as_secs_f64());
        if let Some(len) = body_len {
            t.response_bytes.with_label_values(&[name]).set(len as i64);
        }
        match result {
            Ok(page) => {
                let s = page.parsed.stats();
                t.set_series(name, "kept", kept.unwrap_or_default());
                t.set_series(name, "dropped", s.dropped);
                t.set_series(name, "malformed", s.malformed);
                t.set_series(name, "relabel_dropped", page.relabel_dropped);
            }
            Err(_) => {
                for outcome in SERIES_OUTCOMES {
                    t.set_series(name, outcome, 0);
                }
            }
        }
    }
    let mut state = inner.states[u].lock().expect("upstream state lock");
    let error = result.as_ref().err().map(|e| e.to_string());
    if state.up != Some(up) {
        let url = &inner.upstreams[u].url;
        match &error {
            None => tracing::info!(upstream = name, url = %url, "upstream is up"),
            Some(err) => {
                tracing::warn!(upstream = name, url = %url, error = %err, "upstream is down")
            }
        }
    }
    state.up = Some(up);
    if up {
        state.last_success = Some(Instant::now());
    } else {
        state.last_error = error;
    }
    if let (Kind::Full, Ok(page)) = (kind, result) {
        let stats = page.parsed.stats();
        note_malformed(&mut state, name, stats.first_malformed, stats.malformed);
    }
    if kind != Kind::Deadline {
        state.recorded.record(Outcome {
            result: reason,
            took,
            selective: kind == Kind::Selective,
            kept,
            body_bytes: body_len.map(|n| n as u64),
        });
    }
}

/// Logs the first malformed line of a full page when it is not the last page's, so that an
/// operator can find it (line number and the rule it broke) without a log line per scrape.
fn note_malformed(
    state: &mut UpstreamState,
    upstream: &str,
    first: Option<Malformed>,
    malformed: u64,
) {
    if state.first_malformed == first {
        return;
    }
    match first {
        Some(m) => tracing::warn!(
            upstream,
            line = m.line,
            rule = %m.rule,
            malformed,
            "malformed lines dropped from the upstream's page; the first is line {}: {}",
            m.line,
            m.rule
        ),
        None => tracing::info!(
            upstream,
            "the upstream's page has no malformed lines any more"
        ),
    }
    state.first_malformed = first;
}
