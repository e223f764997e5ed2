//! `scrape::record`: every result reaches every recorder the scraper was given.

use std::sync::{Arc, Mutex};

use super::{Scraper, http_client};
use crate::config::{Config, UpstreamConfig};
use crate::model::{Recorder, ScrapeRecord};

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
    let (up, down) = (scraper.record(0), scraper.record(1));
    assert_eq!((up.up(), up.last_success.is_some()), (Some(true), true));
    assert_eq!(up.response_bytes, Some(bytes as u64));
    assert_eq!(
        (up.series.kept, up.series.dropped, up.series.malformed),
        (2, 1, 1)
    );
    assert_eq!(down.up(), Some(false));
    assert_eq!(down.full.map(|r| r.result), Some("connect_error"));
    assert_eq!((down.response_bytes, down.series.kept), (None, 0));
    assert!(down.last_error.is_some_and(|e| !e.is_empty()));
}
