//! What a scrape leaves behind: a [`ScrapeRecord`] told to every [`Recorder`] the scraper was
//! given (sysport's own metrics, the status page's history), the upstream's state here (up or
//! down, its last error and success), and a log line when the upstream changes state or its
//! page's first malformed line changes. [`record`] is the one place that does it.

use std::time::{Duration, Instant};

use super::shared::{Inner, UpstreamResult, UpstreamState};
use crate::expfmt::Malformed;
use crate::model::{PageSeries, Read, Recorder, ScrapeRecord, ShownUrl};

/// Records one result of upstream `u` with every recorder, and in the upstream's state here
/// (with a log line when the upstream goes up or down). `took`: how long the fetch (or the
/// wait) took; `body_len`: the decoded body's size, when one arrived.
pub(super) fn record(
    inner: &Inner,
    u: usize,
    result: &UpstreamResult,
    took: Duration,
    read: Read,
    body_len: Option<usize>,
) {
    let name = inner.upstreams[u].name.as_str();
    let up = result.is_ok();
    let record = ScrapeRecord {
        upstream: u,
        name,
        read,
        result: result.as_ref().map_or_else(|e| e.reason(), |_| "success"),
        took,
        body_bytes: body_len.map(|n| n as u64),
        series: result.as_ref().ok().map(|page| {
            let s = page.parsed.stats();
            PageSeries {
                kept: s.kept.saturating_sub(page.relabel_dropped),
                dropped: s.dropped,
                malformed: s.malformed,
                relabel_dropped: page.relabel_dropped,
            }
        }),
    };
    for r in &inner.recorders {
        r.scraped(&record);
    }
    let mut state = inner.states[u].lock().expect("upstream state lock");
    let error = result.as_ref().err().map(|e| e.to_string());
    if state.up != Some(up) {
        let url = ShownUrl(&inner.upstreams[u].url);
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
    if let (Read::Full, Ok(page)) = (read, result) {
        let stats = page.parsed.stats();
        note_malformed(&mut state, name, stats.first_malformed, stats.malformed);
    }
}

/// Tells every recorder that upstream `u` sent a `Content-Type` naming the other format.
pub(super) fn mislabelled(recorders: &[std::sync::Arc<dyn Recorder>], u: usize, name: &str) {
    for r in recorders {
        r.mislabelled(u, name);
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
