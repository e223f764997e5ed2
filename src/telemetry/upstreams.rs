//! The upstreams' own families, read from their records when a page is made: whether the last
//! read succeeded, the size of the last page, what became of its series, the age of the newest
//! data. Each is defined here and nowhere else, and only the scraper's records feed them.

use std::time::Instant;

use prometheus::proto::{Metric, MetricFamily};

use super::collect::{family, gauge};

use crate::model::UpstreamRecord;

/// The families, each with its metrics sorted as a registry sorts them; empty ones left out.
pub(super) fn families(records: &[(&str, UpstreamRecord)], now: Instant) -> Vec<MetricFamily> {
    let one = |pick: &dyn Fn(&UpstreamRecord) -> Option<f64>| -> Vec<Metric> {
        records
            .iter()
            .filter_map(|(name, r)| Some(gauge(&[("upstream", name)], pick(r)?)))
            .collect()
    };
    let up = one(&|r| Some(f64::from(u8::from(r.up() == Some(true)))));
    let bytes = one(&|r| r.response_bytes.map(|b| b as f64));
    let age = one(&|r| {
        r.last_success
            .map(|at| now.saturating_duration_since(at).as_secs_f64())
    });
    let series = records
        .iter()
        .flat_map(|(name, r)| {
            r.series
                .by_outcome()
                .map(|(outcome, n)| gauge(&[("outcome", outcome), ("upstream", name)], n as f64))
        })
        .collect();
    [
        family(
            "dynamo_sysport_upstream_last_fetch_age_seconds",
            "Age of the newest successful fetch of the upstream when this page was made: \
             how stale its families here are (grows while the upstream is down).",
            age,
        ),
        family(
            "dynamo_sysport_upstream_response_bytes",
            "Decoded size of the upstream's last successful response.",
            bytes,
        ),
        family(
            "dynamo_sysport_upstream_series",
            "Series of the upstream in the last scrape, by what became of them.",
            series,
        ),
        family(
            "dynamo_sysport_upstream_up",
            "1 if the last scrape of the upstream succeeded, else 0.",
            up,
        ),
    ]
    .into_iter()
    .flatten()
    .collect()
}
