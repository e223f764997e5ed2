//! What a scrape leaves behind: a [`ScrapeRecord`] told to every [`Recorder`] the scraper was
//! given (sysport's own counters, the status page's history), the upstream's one
//! [`UpstreamRecord`](crate::model::UpstreamRecord) (its last read of each kind, error, success,
//! page size and series), and a log line when the upstream goes up or down or its page's first
//! malformed line changes. This file is the one place that writes the record: [`record`] at
//! each result, [`merged`] with what the merge of a full `/metrics` page made of the series.

use std::time::{Duration, Instant};

use super::shared::{Entry, Inner, UpstreamResult};
use crate::expfmt::Malformed;
use crate::model::{LastRead, PageSeries, Read, Recorder, ScrapeRecord, ShownUrl};

/// Records one result of upstream `u` with every recorder, and in the upstream's record
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
    let mut entry = inner.records[u].lock().expect("upstream record lock");
    let error = result.as_ref().err().map(|e| e.to_string());
    if entry.record.up() != Some(up) {
        let url = ShownUrl(&inner.upstreams[u].url);
        match &error {
            None => tracing::info!(upstream = name, url = %url, "upstream is up"),
            Some(err) => {
                tracing::warn!(upstream = name, url = %url, error = %err, "upstream is down")
            }
        }
    }
    let now = Instant::now();
    *entry.record.slot(read) = Some(LastRead {
        at: now,
        result: record.result,
        took,
    });
    if up {
        entry.record.last_success = Some(now);
    } else {
        entry.record.last_error = error;
    }
    if read != Read::Full {
        return;
    }
    if let Some(len) = record.body_bytes {
        entry.record.response_bytes = Some(len);
    }
    let series = &mut entry.record.series;
    match record.series {
        Some(s) => {
            series.kept = s.kept;
            series.dropped = s.dropped;
            series.malformed = s.malformed;
            series.relabel_dropped = s.relabel_dropped;
        }
        None => *series = Default::default(),
    }
    if let Ok(page) = result {
        let stats = page.parsed.stats();
        note_malformed(&mut entry, name, stats.first_malformed, stats.malformed);
    }
}

/// Records what the merge of a full `/metrics` page made of upstream `u`'s series: the series
/// kept, in conflict and duplicated, and those added under renamed families' other names
/// (`aliased`, when the page has any).
pub(super) fn merged(
    inner: &Inner,
    u: usize,
    merge: Option<(u64, u64, u64)>,
    aliased: Option<u64>,
) {
    let mut entry = inner.records[u].lock().expect("upstream record lock");
    let series = &mut entry.record.series;
    if let Some((kept, conflict, duplicate)) = merge {
        series.kept = kept;
        series.conflict = conflict;
        series.duplicate = duplicate;
    }
    if let Some(aliased) = aliased {
        series.aliased = aliased;
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
fn note_malformed(state: &mut Entry, upstream: &str, first: Option<Malformed>, malformed: u64) {
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
