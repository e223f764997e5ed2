//! What a scrape leaves behind: a [`ScrapeRecord`] told to every [`Recorder`] the scraper was
//! given (sysport's own metrics, the status page's history), the upstream's state here (up or
//! down, its last error and success), and a log line when the upstream changes state or its
//! page's first malformed line changes. [`record`] is the one place that does it.

use std::time::{Duration, Instant};

use super::{Inner, UpstreamResult};
use crate::expfmt::Malformed;
use crate::model::{PageSeries, Read, Recorder, ScrapeRecord};

/// Per upstream state, for logging changes once and for [`super::Scraper::status`].
#[derive(Debug, Default)]
pub(super) struct UpstreamState {
    pub(super) up: Option<bool>,
    pub(super) last_error: Option<String>,
    pub(super) last_success: Option<Instant>,
    /// The first malformed line of the last full page, logged when it changes.
    first_malformed: Option<Malformed>,
}

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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;
    use crate::config::{Config, UpstreamConfig};
    use crate::scrape::{Scraper, http_client};

    /// A recorder that keeps what it is told.
    #[derive(Default)]
    struct Kept(Mutex<Vec<String>>);

    impl Recorder for Kept {
        fn scraped(&self, r: &ScrapeRecord<'_>) {
            self.0.lock().expect("lock").push(format!(
                "{} {} {:?} {} bytes={:?} series={:?}",
                r.upstream,
                r.name,
                r.read,
                r.result,
                r.body_bytes,
                r.series
                    .map(|s| (s.kept, s.dropped, s.malformed, s.relabel_dropped))
            ));
        }

        fn mislabelled(&self, upstream: usize, name: &str) {
            self.0
                .lock()
                .expect("lock")
                .push(format!("{upstream} {name} mislabelled"));
        }
    }

    const PAGE: &str = "# TYPE vllm:a gauge\nvllm:a 1\nvllm:a{x=\"1\"} 2\nvllm:b{oops 4\nother 3\n";

    /// A loopback upstream that answers `PAGE` labelled as OpenMetrics.
    async fn upstream() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("address");
        let app = axum::Router::new().route(
            "/metrics",
            axum::routing::get(|| async {
                (
                    [(
                        axum::http::header::CONTENT_TYPE,
                        "application/openmetrics-text; version=1.0.0",
                    )],
                    PAGE,
                )
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
        format!("http://{addr}/metrics")
    }

    #[tokio::test]
    async fn every_result_reaches_every_recorder() {
        let url = upstream().await;
        let config = Config {
            upstreams: vec![
                UpstreamConfig {
                    keep: vec!["vllm:".to_owned()],
                    ..UpstreamConfig::new("engine", url.parse().expect("url"))
                },
                UpstreamConfig::new("gone", "http://127.0.0.1:1/metrics".parse().expect("url")),
            ],
            ..Config::default()
        };
        let (a, b) = (Arc::new(Kept::default()), Arc::new(Kept::default()));
        let scraper = Scraper::new(&config, http_client(), vec![a.clone(), b.clone()]);
        let scraped = scraper.scrape(&[0, 1], None, None).await;
        assert!(scraped[0].result.is_ok() && scraped[1].result.is_err());
        let bytes = PAGE.len();
        let mut told = a.0.lock().expect("lock").clone();
        told.sort();
        assert_eq!(
            told,
            [
                format!("0 engine Full success bytes=Some({bytes}) series=Some((2, 1, 1, 0))"),
                "0 engine mislabelled".to_owned(),
                "1 gone Full connect_error bytes=None series=None".to_owned(),
            ]
        );
        assert_eq!(*b.0.lock().expect("lock"), *a.0.lock().expect("lock"));
        // What the scraper keeps for itself.
        let (up, down) = (scraper.status(0), scraper.status(1));
        assert_eq!((up.up, up.last_success.is_some()), (Some(true), true));
        assert_eq!(down.up, Some(false));
        assert!(down.last_error.is_some_and(|e| !e.is_empty()));
    }
}
