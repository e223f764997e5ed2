//! The real server on a loopback port with real loopback upstreams: `/metrics`, `/health` and
//! `/live` through every state change.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::*;

const VLLM: &str = "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
# TYPE vllm:num_requests_running gauge\n\
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3.0\n\
# HELP python_gc_objects_collected_total Objects collected during gc\n\
# TYPE python_gc_objects_collected_total counter\n\
python_gc_objects_collected_total{generation=\"0\"} 10.0\n\
# HELP lmcache:num_hit_tokens_total Hit tokens.\n\
# TYPE lmcache:num_hit_tokens_total counter\n\
lmcache:num_hit_tokens_total{worker_id=\"0\"} 7.0\n";

const OTHER: &str = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{engine=\"1\",model_name=\"m\"} 5.0\n";

#[tokio::test]
async fn metrics_filters_merges_and_adds_own_metrics() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let b = Upstream::start(Reply::text(OTHER)).await;
    let mut cfg = config(vec![
        upstream_config("vllm", &a.metrics_url(), &["vllm:"]),
        upstream_config("second", &b.metrics_url(), &["vllm:"]),
    ]);
    cfg.labels = vec![("worker_id".into(), "pod-\"a\"".into())];
    let sp = Running::start(cfg).await;
    let r = client()
        .get(sp.url("/metrics"))
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let body = r.text().await.expect("body");
    assert_eq!(
        metric(&body, "vllm:num_requests_running")
            .label("engine", "0")
            .value(),
        3.0
    );
    assert_eq!(
        metric(&body, "vllm:num_requests_running")
            .label("engine", "1")
            .value(),
        5.0
    );
    assert_eq!(
        body.matches("# TYPE vllm:num_requests_running gauge")
            .count(),
        1
    );
    assert!(
        body.contains(
            r#"vllm:num_requests_running{engine="0",model_name="m",worker_id="pod-\"a\""} 3.0"#
        ),
        "{body}"
    );
    assert!(!body.contains("python_gc"), "unkept families are dropped");
    assert!(!body.contains("lmcache:"), "prefixes not given are dropped");
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_up")
            .label("upstream", "vllm")
            .value(),
        1.0
    );
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_up")
            .label("upstream", "second")
            .value(),
        1.0
    );
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_series")
            .label("upstream", "vllm")
            .label("outcome", "dropped")
            .value(),
        2.0
    );
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_series")
            .label("upstream", "vllm")
            .label("outcome", "kept")
            .value(),
        1.0
    );
    assert_eq!(metric(&body, "dynamo_sysport_build_info").count(), 1);
    assert!(
        !body
            .lines()
            .any(|l| l.starts_with("dynamo_sysport_") && l.contains("worker_id")),
        "configured labels go on engine series only"
    );
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_shared_url_is_fetched_once_and_split_by_prefix() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let mut cfg = config(vec![
        upstream_config("vllm", &a.metrics_url(), &["vllm:"]),
        upstream_config("lmcache", &a.metrics_url(), &["lmcache:"]),
    ]);
    cfg.health.interval = Duration::from_secs(3600);
    let sp = Running::start(cfg).await;
    // Let the first health round (which scrapes, as there is no health_url) finish.
    eventually(Duration::from_secs(5), "first health check", || async {
        a.requests() >= 1
    })
    .await;
    let before = a.requests();
    let (code, body) = sp.get("/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(
        a.requests(),
        before + 1,
        "one fetch for two upstreams on one URL"
    );
    assert_eq!(metric(&body, "vllm:num_requests_running").value(), 3.0);
    assert_eq!(metric(&body, "lmcache:num_hit_tokens_total").value(), 7.0);
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_series")
            .label("upstream", "lmcache")
            .label("outcome", "kept")
            .value(),
        1.0
    );
}

#[tokio::test]
async fn concurrent_scrapes_share_one_fetch() {
    let a = Upstream::start(Reply {
        delay: Duration::from_millis(1000),
        ..Reply::text(VLLM)
    })
    .await;
    let mut cfg = config(vec![upstream_config("vllm", &a.metrics_url(), &["vllm:"])]);
    cfg.health.interval = Duration::from_secs(3600);
    cfg.upstreams[0].health_url = Some(a.health_url().parse().expect("url"));
    // The vitals' read at the first check would be an upstream fetch of its own.
    cfg.vitals.window = Duration::ZERO;
    let sp = Running::start(cfg).await;
    let c = client();
    let scrapes = (0..16).map(|_| {
        let c = c.clone();
        let url = sp.url("/metrics");
        async move {
            c.get(url)
                .send()
                .await
                .expect("answers")
                .text()
                .await
                .expect("body")
        }
    });
    let bodies = futures_util::future::join_all(scrapes).await;
    for body in &bodies {
        assert_eq!(metric(body, "vllm:num_requests_running").value(), 3.0);
    }
    assert_eq!(a.requests(), 1, "16 concurrent scrapes, one upstream fetch");
}

#[tokio::test]
async fn name_query_returns_only_those_families() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let sp = start_single(&a.metrics_url(), &["vllm:", "lmcache:"]).await;
    let (code, body) = sp
        .get("/metrics?name=lmcache:num_hit_tokens_total&name=dynamo_sysport_upstream_up")
        .await;
    assert_eq!(code, 200);
    assert_eq!(metric(&body, "lmcache:num_hit_tokens_total").value(), 7.0);
    assert_eq!(metric(&body, "dynamo_sysport_upstream_up").value(), 1.0);
    assert!(!body.contains("vllm:num_requests_running"));
    assert!(!body.contains("dynamo_sysport_build_info"));
}

#[tokio::test]
async fn a_dead_upstream_fails_readiness_but_never_metrics_or_liveness() {
    let mut vllm = Upstream::start(Reply::text(VLLM)).await;
    let other = Upstream::start(Reply::text(OTHER)).await;
    let mut cfg = config(vec![
        upstream_config("vllm", &vllm.metrics_url(), &["vllm:"]),
        upstream_config("second", &other.metrics_url(), &["vllm:"]),
    ]);
    cfg.upstreams[0].health_url = Some(vllm.health_url().parse().expect("url"));
    cfg.upstreams[1].required = false;
    let sp = Running::start(cfg).await;
    let health = |sp: &Running| {
        let url = sp.url("/health");
        async move {
            let r = client().get(url).send().await.expect("answers");
            let code = r.status().as_u16();
            assert_eq!(r.headers()["content-type"], "application/json");
            (
                code,
                serde_json::from_str::<serde_json::Value>(&r.text().await.expect("body"))
                    .expect("json"),
            )
        }
    };
    eventually(Duration::from_secs(5), "ready", || async {
        health(&sp).await.0 == 200
    })
    .await;
    let (_, body) = health(&sp).await;
    assert_eq!(body["status"], "ready");
    assert_eq!(body["endpoints"]["vllm"], "ready");
    assert!(body["uptime"].as_f64().expect("uptime") > 0.0);

    vllm.stop().await;
    let went_down = Instant::now();
    eventually(
        Duration::from_secs(5),
        "notready after the upstream died",
        || async { health(&sp).await.0 == 503 },
    )
    .await;
    // Within one interval (200 ms) plus the check itself.
    assert!(
        went_down.elapsed() < Duration::from_secs(2),
        "took {:?}",
        went_down.elapsed()
    );
    let (_, body) = health(&sp).await;
    assert_eq!(body["status"], "notready");
    assert_eq!(body["endpoints"]["vllm"], "notready");
    assert!(
        body["upstreams"]["vllm"]["last_error"]
            .as_str()
            .expect("an error")
            .contains("health check failed")
    );
    assert_eq!(sp.get("/live").await.0, 200);
    let (code, metrics) = sp.get("/metrics").await;
    assert_eq!(code, 200);
    assert_eq!(
        metric(&metrics, "dynamo_sysport_upstream_up")
            .label("upstream", "vllm")
            .value(),
        0.0
    );
    assert_eq!(
        metric(&metrics, "dynamo_sysport_upstream_up")
            .label("upstream", "second")
            .value(),
        1.0
    );
    assert_eq!(
        metric(&metrics, "vllm:num_requests_running")
            .label("engine", "1")
            .value(),
        5.0
    );
    assert!(
        metric(&metrics, "dynamo_sysport_upstream_scrapes_total")
            .label("upstream", "vllm")
            .label("result", "connect_error")
            .value()
            >= 1.0
    );
    assert_eq!(metric(&metrics, "dynamo_sysport_health_ready").value(), 0.0);

    vllm.restart().await;
    eventually(Duration::from_secs(5), "ready again", || async {
        health(&sp).await.0 == 200
    })
    .await;
    let (_, metrics) = sp.get("/metrics").await;
    assert_eq!(
        metric(&metrics, "dynamo_sysport_upstream_up")
            .label("upstream", "vllm")
            .value(),
        1.0
    );
    assert_eq!(
        metric(&metrics, "vllm:num_requests_running")
            .label("engine", "0")
            .value(),
        3.0
    );
}

#[tokio::test]
async fn readiness_without_health_url_follows_scrapes_and_unhealthy_status_codes() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let sp = start_single(&a.metrics_url(), &["vllm:"]).await;
    eventually(Duration::from_secs(5), "ready", || async {
        sp.get("/health").await.0 == 200
    })
    .await;
    a.set(Reply {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        ..Reply::text("boom")
    });
    eventually(Duration::from_secs(5), "notready on HTTP 500", || async {
        sp.get("/health").await.0 == 503
    })
    .await;
    let (code, metrics) = sp.get("/metrics").await;
    assert_eq!(code, 200);
    assert!(
        metric(&metrics, "dynamo_sysport_upstream_scrapes_total")
            .label("upstream", "vllm")
            .label("result", "http_status")
            .value()
            >= 1.0
    );
}

#[tokio::test]
async fn starting_status_holds_until_the_first_check() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    a.set_health(StatusCode::SERVICE_UNAVAILABLE);
    let mut cfg = config(vec![upstream_config("vllm", &a.metrics_url(), &["vllm:"])]);
    cfg.upstreams[0].health_url = Some(a.health_url().parse().expect("url"));
    cfg.health.interval = Duration::from_secs(3600);
    cfg.health.starting_status = sysport::config::StartingStatus::Ready;
    // The first check runs at once and fails; readiness must not stay at the starting value.
    let sp = Running::start(cfg).await;
    eventually(
        Duration::from_secs(5),
        "first check turns it notready",
        || async { sp.get("/health").await.0 == 503 },
    )
    .await;
    assert_eq!(sp.get("/live").await.0, 200);
}

#[tokio::test]
async fn unknown_paths_are_404_and_other_methods_405() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let sp = start_single(&a.metrics_url(), &["vllm:"]).await;
    assert_eq!(sp.get("/nope").await.0, 404);
    let r = client()
        .post(sp.url("/metrics"))
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status(), 405);
    assert_eq!(r.headers()["allow"], "GET, HEAD");
    assert_eq!(
        client()
            .delete(sp.url("/live"))
            .send()
            .await
            .expect("answers")
            .status(),
        405
    );
    let r = client()
        .head(sp.url("/live"))
        .send()
        .await
        .expect("answers");
    assert_eq!(r.status(), 200);
    let (_, metrics) = sp.get("/metrics").await;
    assert!(
        metric(&metrics, "dynamo_sysport_http_requests_total")
            .label("path", "other")
            .label("code", "404")
            .value()
            >= 1.0
    );
    // A refused POST is no read of the page.
    let posts = metric(&metrics, "dynamo_sysport_http_requests_total")
        .label("path", "/metrics")
        .label("code", "405");
    assert_eq!(posts.count(), 1, "{metrics}");
    assert!(metrics.contains(
        "dynamo_sysport_http_requests_total{code=\"405\",path=\"/metrics\",read=\"\"} 1\n"
    ));
    assert!(
        !metrics.contains("dynamo_sysport_metrics_request_duration_seconds_count{read=\"\"}"),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_query_without_parameters_is_the_full_page() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let sp = start_single(&a.metrics_url(), &["vllm:"]).await;
    for path in ["/metrics?", "/metrics?&", "/metrics?&&"] {
        let (code, body) = sp.get(path).await;
        assert_eq!(code, 200, "{path}");
        assert_eq!(
            metric(&body, "vllm:num_requests_running").value(),
            3.0,
            "{path}: {body}"
        );
        assert!(body.contains("dynamo_sysport_upstream_up{"), "{path}");
    }
    let (_, page) = sp.get("/metrics").await;
    let reads = |read: &str| {
        metric(&page, "dynamo_sysport_http_requests_total")
            .label("path", "/metrics")
            .label("read", read)
            .count()
    };
    assert_eq!(reads("selective"), 0, "{page}");
    assert_eq!(
        metric(&page, "dynamo_sysport_http_requests_total")
            .label("path", "/metrics")
            .label("read", "full")
            .value(),
        3.0
    );
}

/// The status line of the answer to a raw request.
async fn raw_status(addr: &str, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connects");
    stream
        .write_all(request.as_bytes())
        .await
        .expect("request sent");
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = tokio::time::timeout(Duration::from_secs(10), stream.read(&mut buf))
            .await
            .expect("answers in time")
            .expect("reads");
        assert!(n > 0, "closed without an answer to {request:?}");
        answer.extend_from_slice(&buf[..n]);
    }
    let answer = String::from_utf8_lossy(&answer).into_owned();
    answer.lines().next().unwrap_or_default().to_string()
}

#[tokio::test]
async fn http_1_1_needs_exactly_one_valid_host() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let sp = start_single(&a.metrics_url(), &["vllm:"]).await;
    let addr = sp.base.trim_start_matches("http://").to_string();
    for (request, status) in [
        (
            "GET /live HTTP/1.1\r\nHost: sysport\r\n\r\n",
            "HTTP/1.1 200 OK",
        ),
        (
            "GET /live HTTP/1.1\r\nHost: 127.0.0.1:8081\r\n\r\n",
            "HTTP/1.1 200 OK",
        ),
        (
            "GET /live HTTP/1.1\r\nHost: [::1]:8081\r\n\r\n",
            "HTTP/1.1 200 OK",
        ),
        ("GET /live HTTP/1.0\r\n\r\n", "HTTP/1.0 200 OK"),
        ("GET /live HTTP/1.1\r\n\r\n", "HTTP/1.1 400 Bad Request"),
        (
            "GET /metrics HTTP/1.1\r\nConnection: close\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
        ),
        (
            "GET /live HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
        ),
        (
            "GET /live HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n",
            "HTTP/1.0 400 Bad Request",
        ),
        (
            "GET /live HTTP/1.1\r\nHost: user@h\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
        ),
        (
            "GET /live HTTP/1.1\r\nHost: a b\r\n\r\n",
            "HTTP/1.1 400 Bad Request",
        ),
    ] {
        assert_eq!(raw_status(&addr, request).await, status, "{request:?}");
    }
    let (_, page) = sp.get("/metrics").await;
    assert_eq!(
        metric(&page, "dynamo_sysport_http_requests_total")
            .label("path", "/metrics")
            .label("code", "400")
            .value(),
        1.0,
        "{page}"
    );
}

#[tokio::test]
async fn gzip_is_served_when_asked() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let sp = start_single(&a.metrics_url(), &["vllm:"]).await;
    let text = gzipped_metrics(&sp).await;
    assert_eq!(metric(&text, "vllm:num_requests_running").value(), 3.0);
}

/// A client that neither asks for gzip nor decodes it by itself.
fn raw_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .no_gzip()
        .build()
        .expect("client")
}

/// `/metrics` asked for with gzip: checks that it came compressed, and decodes it.
async fn gzipped_metrics(sp: &Running) -> String {
    let r = raw_client()
        .get(sp.url("/metrics"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("answers");
    assert_eq!(r.headers()["content-encoding"], "gzip");
    let bytes = r.bytes().await.expect("body");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text)
        .expect("valid gzip");
    text
}

fn gzip(text: &str) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut e, text.as_bytes()).expect("in memory");
    e.finish().expect("in memory")
}

/// A `/metrics` that answers with the gzip stream in the returned cell, as
/// `Content-Encoding: gzip`.
async fn gzip_upstream() -> (String, Arc<Mutex<Vec<u8>>>) {
    let current = Arc::new(Mutex::new(Vec::new()));
    let served = current.clone();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let body = served.lock().expect("lock").clone();
            async move {
                (
                    [
                        ("content-type", "text/plain; version=0.0.4; charset=utf-8"),
                        ("content-encoding", "gzip"),
                    ],
                    body,
                )
            }
        }),
    );
    (serve_metrics(app).await, current)
}

/// Serves `app` on a loopback port for the rest of the test; returns its `/metrics` URL.
async fn serve_metrics(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let url = format!("http://{}/metrics", listener.local_addr().expect("addr"));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    url
}

#[tokio::test]
async fn gzip_upstream_bodies_that_grow_and_shrink_are_read_whole() {
    // The decoded length of a compressed body is only known once read; the buffer for the
    // next one is sized from it. Each body here is larger or smaller than the one before.
    let page = |n: usize| -> String {
        let mut s = String::from("# TYPE vllm:x gauge\n");
        for i in 0..n {
            s.push_str(&format!(
                "vllm:x{{i=\"{i}\",model_name=\"some-model\"}} {i}\n"
            ));
        }
        s
    };
    let (url, body) = gzip_upstream().await;
    let sp = start_single(&url, &["vllm:"]).await;
    for n in [2_000, 2_000, 30_000, 31_000, 10, 5_000] {
        *body.lock().expect("lock") = gzip(&page(n));
        let text = get_text(&sp.url("/metrics")).await;
        assert_eq!(metric(&text, "vllm:x").count(), n, "{n} series");
        let last = (n - 1).to_string();
        assert_eq!(
            metric(&text, "vllm:x").label("i", &last).value(),
            (n - 1) as f64
        );
    }
}

/// A `/metrics` that compresses its page when the request accepts gzip, as prometheus_client's
/// `make_asgi_app` does (`exposition.py`, `_bake_output`: `gzip.compress` when `gzip_accepted`),
/// which SGLang serves its metrics with (`add_prometheus_middleware`); each request's
/// `Accept-Encoding` is kept.
async fn compressing_upstream(page: &'static str) -> (String, Arc<Mutex<Vec<String>>>) {
    use axum::response::IntoResponse as _;
    let asked = Arc::new(Mutex::new(Vec::new()));
    let seen = asked.clone();
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move |headers: axum::http::HeaderMap| {
            let accept = headers
                .get("accept-encoding")
                .map(|v| v.to_str().unwrap_or("?").to_owned())
                .unwrap_or_default();
            let gzip_accepted = accept.split(',').any(|c| c.trim() == "gzip");
            seen.lock().expect("lock").push(accept);
            async move {
                let ct = ("content-type", "text/plain; version=0.0.4; charset=utf-8");
                match gzip_accepted {
                    true => ([ct, ("content-encoding", "gzip")], gzip(page)).into_response(),
                    false => ([ct], page).into_response(),
                }
            }
        }),
    );
    (serve_metrics(app).await, asked)
}

#[tokio::test]
async fn an_engine_on_loopback_is_not_asked_to_compress_unless_configured() {
    let (url, asked) = compressing_upstream(VLLM).await;
    // On loopback by default: the page as it is, which the engine then does not compress.
    let sp = start_single(&url, &["vllm:"]).await;
    let text = get_text(&sp.url("/metrics")).await;
    assert_eq!(
        metric(&text, "vllm:num_requests_running")
            .label("engine", "0")
            .value(),
        3.0
    );
    let first: Vec<String> = asked.lock().expect("lock").drain(..).collect();
    assert!(!first.is_empty());
    assert!(first.iter().all(|a| a == "identity"), "{first:?}");
    sp.shutdown().await.expect("stops");
    // Told to: gzip is asked for, the engine compresses, and the page reads the same.
    let mut u = upstream_config("vllm", &url, &["vllm:"]);
    u.enable_compression = true;
    let sp = Running::start(config(vec![u])).await;
    let again = get_text(&sp.url("/metrics")).await;
    assert_eq!(
        metric(&again, "vllm:num_requests_running")
            .label("engine", "0")
            .value(),
        3.0
    );
    assert_eq!(engine_part(&again), engine_part(&text));
    let second: Vec<String> = asked.lock().expect("lock").clone();
    assert!(!second.is_empty());
    assert!(second.iter().all(|a| a == "gzip"), "{second:?}");
}

#[tokio::test]
async fn prometheus_scrape_timeout_bounds_a_stalled_upstream() {
    let slow = Upstream::start(Reply {
        delay: Duration::from_secs(30),
        ..Reply::text(VLLM)
    })
    .await;
    let fine = Upstream::start(Reply::text(OTHER)).await;
    let mut cfg = config(vec![
        upstream_config("slow", &slow.metrics_url(), &["vllm:"]),
        upstream_config("fine", &fine.metrics_url(), &["vllm:"]),
    ]);
    cfg.upstreams[0].timeout = Duration::from_secs(20);
    cfg.health.interval = Duration::from_secs(3600);
    let sp = Running::start(cfg).await;
    let started = Instant::now();
    let r = client()
        .get(sp.url("/metrics"))
        .header("X-Prometheus-Scrape-Timeout-Seconds", "1")
        .send()
        .await
        .expect("answers");
    let took = started.elapsed();
    assert_eq!(r.status(), 200);
    // The budget for a 1 s timeout (0.9 s) is unit-tested in `server::budget`; here sysport
    // waits that long for the slow upstream and no longer than a loaded machine needs beyond
    // it, far from the upstream's own 20 s timeout.
    assert!(
        (Duration::from_millis(900)..Duration::from_secs(5)).contains(&took),
        "answered in {took:?}: Prometheus' 1 s timeout was not applied"
    );
    let body = r.text().await.expect("body");
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_up")
            .label("upstream", "slow")
            .value(),
        0.0
    );
    assert_eq!(
        metric(&body, "vllm:num_requests_running")
            .label("engine", "1")
            .value(),
        5.0
    );
    assert!(
        metric(&body, "dynamo_sysport_upstream_scrapes_total")
            .label("upstream", "slow")
            .label("result", "timeout")
            .value()
            >= 1.0
    );
}

#[tokio::test]
async fn a_reader_that_joins_a_fetch_keeps_its_own_deadline_not_the_starters() {
    // Prometheus' scrape of sysport (0.5 s: a 0.45 s budget) starts the fetch of an engine that
    // answers in 1.2 s; a reader without a deadline (a health check, a scraper with a longer
    // timeout) joins it. The first gives up at its deadline; the fetch goes on to the
    // upstream's own 5 s timeout, so the second gets the page, from the same single request.
    let slow = Upstream::start(Reply::text(VLLM)).await;
    let mut cfg = config(vec![upstream_config(
        "slow",
        &slow.metrics_url(),
        &["vllm:"],
    )]);
    cfg.upstreams[0].timeout = Duration::from_secs(5);
    cfg.health.interval = Duration::from_secs(3600);
    let sp = Running::start(cfg).await;
    eventually(Duration::from_secs(5), "ready", || async {
        sp.get("/health").await.0 == 200
    })
    .await;
    slow.set(Reply {
        delay: Duration::from_millis(1200),
        ..Reply::text(VLLM)
    });
    let asked = slow.queries().len();
    let bounded = tokio::spawn(
        client()
            .get(sp.url("/metrics"))
            .header("X-Prometheus-Scrape-Timeout-Seconds", "0.5")
            .send(),
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let patient = client()
        .get(sp.url("/metrics"))
        .send()
        .await
        .expect("answers");
    let patient = patient.text().await.expect("body");
    let bounded = bounded.await.expect("task").expect("answers");
    let bounded = bounded.text().await.expect("body");
    let up = |body: &str| {
        metric(body, "dynamo_sysport_upstream_up")
            .label("upstream", "slow")
            .value()
    };
    assert_eq!(
        up(&bounded),
        0.0,
        "the 0.5 s scrape gave up at its deadline"
    );
    assert_eq!(
        up(&patient),
        1.0,
        "the joined fetch was cut at the starter's deadline"
    );
    assert_eq!(
        metric(&patient, "vllm:num_requests_running")
            .label("engine", "0")
            .value(),
        3.0
    );
    assert_eq!(slow.queries().len(), asked + 1, "one request to the engine");
}

#[tokio::test]
async fn shutdown_finishes_in_flight_scrapes_and_fails_health_first() {
    // The in-flight scrape outlasts the drain delay, which leaves seconds for the checks made
    // during it.
    let a = Upstream::start(Reply {
        delay: Duration::from_secs(3),
        ..Reply::text(VLLM)
    })
    .await;
    let mut cfg = config(vec![upstream_config("vllm", &a.metrics_url(), &["vllm:"])]);
    cfg.upstreams[0].health_url = Some(a.health_url().parse().expect("url"));
    cfg.upstreams[0].timeout = Duration::from_secs(10);
    cfg.shutdown.drain_delay = Duration::from_secs(2);
    let sp = Running::start(cfg).await;
    eventually(Duration::from_secs(5), "ready", || async {
        sp.get("/health").await.0 == 200
    })
    .await;
    let inflight = tokio::spawn(client().get(sp.url("/metrics")).send());
    tokio::time::sleep(Duration::from_millis(100)).await;
    sp.handle.shutdown();
    tokio::time::sleep(Duration::from_millis(50)).await;
    // During the drain delay the listener still answers, with /health already 503.
    assert_eq!(sp.get("/health").await.0, 503);
    assert_eq!(sp.get("/live").await.0, 503);
    let base = sp.base.clone();
    sp.shutdown().await.expect("clean shutdown");
    let r = inflight
        .await
        .expect("task")
        .expect("in-flight scrape completed");
    assert_eq!(r.status(), 200);
    assert!(
        r.text()
            .await
            .expect("body")
            .contains("vllm:num_requests_running")
    );
    assert!(
        client().get(format!("{base}/live")).send().await.is_err(),
        "listener closed after shutdown"
    );
}

#[tokio::test]
async fn reload_replaces_upstreams_atomically() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let b = Upstream::start(Reply::text(OTHER)).await;
    let sp = Running::start(config(vec![upstream_config(
        "first",
        &a.metrics_url(),
        &["vllm:"],
    )]))
    .await;
    let (_, body) = sp.get("/metrics").await;
    assert_eq!(metric(&body, "vllm:num_requests_running").value(), 3.0);
    sp.handle.reload(config(vec![upstream_config(
        "second",
        &b.metrics_url(),
        &["vllm:"],
    )]));
    let (_, body) = sp.get("/metrics").await;
    assert_eq!(metric(&body, "vllm:num_requests_running").value(), 5.0);
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_up")
            .label("upstream", "first")
            .count(),
        0
    );
    assert_eq!(
        metric(&body, "dynamo_sysport_config_reloads_total")
            .label("result", "success")
            .value(),
        1.0
    );
}

#[tokio::test]
async fn a_reload_during_a_fetch_leaves_no_series_of_the_removed_upstream() {
    let fast = Upstream::start(Reply::text(VLLM)).await;
    let mut slow_reply = Reply::text(OTHER);
    slow_reply.delay = Duration::from_secs(1);
    let slow = Upstream::start(slow_reply).await;
    let mut both = config(vec![
        upstream_config("fast", &fast.metrics_url(), &["vllm:"]),
        upstream_config("slowb", &slow.metrics_url(), &["vllm:"]),
    ]);
    both.upstreams[1].timeout = Duration::from_secs(5);
    let sp = Running::start(both).await;
    // A scrape that fetches slowb for a second, and a reload without slowb while it runs.
    let url = sp.url("/metrics");
    let during = tokio::spawn(async move { client().get(url).send().await?.text().await });
    eventually(Duration::from_secs(5), "slowb's fetch is under way", || {
        let n = slow.requests();
        async move { n >= 1 }
    })
    .await;
    sp.handle.reload(config(vec![upstream_config(
        "fast",
        &fast.metrics_url(),
        &["vllm:"],
    )]));
    // The fetch that began before the reload ends after it, and so does the scrape.
    let _ = during.await.expect("the scrape task");
    let (_, body) = sp.get("/metrics").await;
    let own: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("dynamo_sysport_") && l.contains("upstream=\"slowb\""))
        .collect();
    assert!(own.is_empty(), "series of a removed upstream: {own:?}");
    assert_eq!(
        metric(&body, "dynamo_sysport_upstream_up")
            .label("upstream", "fast")
            .value(),
        1.0
    );
    let (_, health) = sp.get("/health").await;
    assert!(!health.contains("slowb"), "{health}");
}

#[tokio::test]
async fn openmetrics_is_served_when_preferred() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let sp = start_single(&a.metrics_url(), &["vllm:", "lmcache:"]).await;
    let prometheus_accept = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
    let r = client()
        .get(sp.url("/metrics"))
        .header("accept", prometheus_accept)
        .send()
        .await
        .expect("answers");
    assert_eq!(
        r.headers()["content-type"],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let body = r.text().await.expect("body");
    assert!(body.ends_with("\n# EOF\n"));
    assert_eq!(body.matches("# EOF").count(), 1);
    assert!(
        body.contains("# TYPE lmcache:num_hit_tokens counter\n"),
        "{body}"
    );
    assert_eq!(metric(&body, "lmcache:num_hit_tokens_total").value(), 7.0);
    assert_eq!(metric(&body, "dynamo_sysport_upstream_up").value(), 1.0);
    let r = client()
        .get(sp.url("/metrics"))
        .header("accept", "text/plain;version=0.0.4")
        .send()
        .await
        .expect("answers");
    assert_eq!(
        r.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
}

#[tokio::test]
async fn prometheus_3_accept_headers_get_the_version_and_escaping_they_asked_for() {
    let a = Upstream::start(Reply::text(VLLM)).await;
    let sp = start_single(&a.metrics_url(), &["vllm:", "lmcache:"]).await;
    // Prometheus 3.16's Accept headers (scrape/scrape.go acceptHeader): its default
    // scrape_protocols, each protocol alone, and `metric_name_escaping_scheme: underscores`.
    let om = "application/openmetrics-text; version=1.0.0; charset=utf-8";
    let text = "text/plain; version=1.0.0; charset=utf-8";
    let cases = [
        (
            "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.7,application/openmetrics-text;version=0.0.1;q=0.6,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.3",
            format!("{om}; escaping=allow-utf-8"),
        ),
        (
            "application/openmetrics-text;version=0.0.1;q=0.7,*/*;q=0.6",
            "application/openmetrics-text; version=0.0.1; charset=utf-8".to_string(),
        ),
        (
            "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.7,*/*;q=0.6",
            format!("{text}; escaping=allow-utf-8"),
        ),
        (
            "text/plain;version=1.0.0;escaping=underscores;q=0.7,*/*;q=0.6",
            format!("{text}; escaping=underscores"),
        ),
        (
            "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.7,application/openmetrics-text;version=0.0.1;q=0.6,text/plain;version=1.0.0;escaping=underscores;q=0.5,text/plain;version=0.0.4;q=0.4,*/*;q=0.3",
            format!("{om}; escaping=underscores"),
        ),
        (
            "text/plain;version=0.0.4;q=0.7,*/*;q=0.6",
            "text/plain; version=0.0.4; charset=utf-8".to_string(),
        ),
    ];
    for (accept, want) in cases {
        let r = client()
            .get(sp.url("/metrics"))
            .header("accept", accept)
            .send()
            .await
            .expect("answers");
        assert_eq!(r.headers()["content-type"], want.as_str(), "{accept}");
        let body = r.text().await.expect("body");
        // The body is the format the header names: OpenMetrics ends in `# EOF` and writes the
        // counter's family without `_total`; the text formats do neither.
        let openmetrics = want.starts_with("application/openmetrics-text");
        assert_eq!(body.ends_with("\n# EOF\n"), openmetrics, "{accept}");
        let counter_type = if openmetrics {
            "# TYPE lmcache:num_hit_tokens counter\n"
        } else {
            "# TYPE lmcache:num_hit_tokens_total counter\n"
        };
        assert!(body.contains(counter_type), "{accept}: {body}");
        assert_eq!(metric(&body, "lmcache:num_hit_tokens_total").value(), 7.0);
    }
}

/// A page of `families` gauge families of 40 series each under `prefix`, with an unkept family
/// every tenth, one CRLF line, one line in a non-canonical shape and no newline at the end.
fn big_page(prefix: &str, engine: &str, families: usize) -> String {
    let mut page = String::new();
    for f in 0..families {
        if f % 10 == 3 {
            page.push_str("# HELP python_gc_x Dropped.\n# TYPE python_gc_x counter\n");
            page.push_str(&format!("python_gc_x{{generation=\"{f}\"}} 1.0\n"));
        }
        page.push_str(&format!(
            "# HELP {prefix}f{f} Family {f}.\n# TYPE {prefix}f{f} gauge\n"
        ));
        for s in 0..40 {
            let end = if f == 7 && s == 3 { "\r\n" } else { "\n" };
            page.push_str(&format!(
                "{prefix}f{f}{{engine=\"{engine}\",model_name=\"meta-llama/Llama-3.1-8B\",n=\"{s}\"}} {s}.5{end}"
            ));
        }
    }
    page.push_str(&format!(
        "{prefix}f2 {{ n = \"x\" , engine=\"{engine}\" }} 1"
    ));
    page
}

/// The engines' part of a `/metrics` page: all before sysport's own metrics.
fn engine_part(body: &str) -> &str {
    let own = body
        .find("# HELP dynamo_sysport_")
        .expect("own metrics follow");
    &body[..own]
}

/// What sysport's exposition pipeline writes for these bodies, into one plain buffer.
fn reference_text(bodies: &[&str], keep: &[&str]) -> String {
    use sysport::expfmt;
    let keep: Vec<String> = keep.iter().map(|k| k.to_string()).collect();
    let limits = sysport::config::Limits::default().parse_limits();
    let hasher = expfmt::PairHasher::new(1);
    let parsed: Vec<expfmt::Exposition> = bodies
        .iter()
        .map(|b| {
            let opts = expfmt::ParseOptions {
                keep: &keep,
                limits,
                added_labels: &[],
                hasher,
                allow_reserved: false,
            };
            expfmt::parse(b.to_string().into(), expfmt::Format::Text, &opts).expect("parses")
        })
        .collect();
    let sources: Vec<&expfmt::Exposition> = parsed.iter().collect();
    let m = expfmt::merge(
        &sources,
        &expfmt::MergeOptions {
            added: &[],
            names: None,
            hasher,
        },
    );
    let mut out = Vec::new();
    expfmt::write_text(&m, &mut out);
    String::from_utf8(out).expect("utf-8")
}

#[tokio::test]
async fn large_pages_are_served_whole_with_a_content_length() {
    let (page_a, page_b) = (big_page("vllm:", "0", 120), big_page("vllm:", "1", 60));
    assert!(page_a.len() > 300_000);
    let a = Upstream::start(Reply::text(page_a.clone())).await;
    let b = Upstream::start(Reply::text(page_b.clone())).await;
    let sp = Running::start(config(vec![
        upstream_config("a", &a.metrics_url(), &["vllm:"]),
        upstream_config("b", &b.metrics_url(), &["vllm:"]),
    ]))
    .await;
    let want = reference_text(&[&page_a, &page_b], &["vllm:"]);
    let raw = raw_client();
    for _ in 0..3 {
        let r = raw.get(sp.url("/metrics")).send().await.expect("answers");
        assert_eq!(r.status(), 200);
        assert!(r.headers().get("transfer-encoding").is_none());
        let declared: usize = r.headers()["content-length"]
            .to_str()
            .expect("ascii")
            .parse()
            .expect("a length");
        let body = r.text().await.expect("body");
        assert_eq!(declared, body.len());
        let got = engine_part(&body);
        assert!(got.len() > 400_000, "{}", got.len());
        assert!(
            got == want,
            "the engine part differs from the pipeline's own output"
        );
        assert!(got.contains(
            "vllm:f7{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B\",n=\"3\"} 3.5\n"
        ));
        assert!(got.contains("vllm:f2{n=\"x\",engine=\"0\"} 1\n"));
        assert!(!got.contains("python_gc_x"));
    }
    assert!(engine_part(&gzipped_metrics(&sp).await) == want);
}

#[tokio::test]
async fn pages_that_change_between_scrapes_are_served_as_they_are_now() {
    // Each scrape parses after the one before it, taking the lexing of the lines whose series
    // are unchanged from there; whatever changed, the page served is the engine's page now.
    let first = big_page("vllm:", "0", 30);
    let revalued = first.replace(".5", ".25");
    let fewer: String = revalued
        .lines()
        .filter(|l| !l.contains("n=\"7\"") && !l.contains("n=\"8\""))
        .map(|l| format!("{l}\n"))
        .collect();
    let relabelled = fewer.replacen("engine=\"0\"", "engine=\"1\"", 200);
    let more = format!(
        "# TYPE vllm:new gauge\nvllm:new{{engine=\"0\"}} 1\n{}{}",
        relabelled.replace("vllm:f4{", "vllm:f4{extra=\"e\","),
        first.lines().take(60).collect::<Vec<_>>().join("\n")
    );
    let retyped = more.replace("# TYPE vllm:f5 gauge", "# TYPE vllm:f5 counter");
    let up = Upstream::start(Reply::text(first.clone())).await;
    let sp = start_single(&up.metrics_url(), &["vllm:"]).await;
    for (what, page) in [
        ("first", &first),
        ("same", &first),
        ("values", &revalued),
        ("series gone", &fewer),
        ("labels", &relabelled),
        ("series and a family new", &more),
        ("type", &retyped),
        ("first again", &first),
    ] {
        up.set(Reply::text(page.clone()));
        let body = get_text(&sp.url("/metrics")).await;
        assert!(
            engine_part(&body) == reference_text(&[page], &["vllm:"]),
            "{what}: the engine part is not the page's"
        );
    }
}

#[test]
fn the_test_matcher_compares_label_names_and_values_exactly() {
    let page = "\
# TYPE vllm:x gauge
vllm:x{xengine=\"0\"} 1
vllm:x{engine=\"00\"} 2
vllm:x{engine=\"0\\\",\",model=\"a\"} 3
vllm:x{path=\"C:\\\\dir\\\"quoted\\\"\\nend\",engine=\"1\"} 4
vllm:x_total{engine=\"0\"} 5
";
    // Neither a longer label name nor a longer value is the one asked for.
    assert_eq!(metric(page, "vllm:x").label("engine", "0").count(), 0);
    // A value holding `",` is one value, not the end of the label and a new one.
    assert_eq!(metric(page, "vllm:x").label("engine", "0\",").value(), 3.0);
    assert_eq!(metric(page, "vllm:x").label("model", "a").value(), 3.0);
    // Escapes are read: `\\`, `\"` and `\n`.
    assert_eq!(
        metric(page, "vllm:x")
            .label("path", "C:\\dir\"quoted\"\nend")
            .value(),
        4.0
    );
    assert_eq!(metric(page, "vllm:x").label("path", "C:\\dir").count(), 0);
    assert_eq!(metric(page, "vllm:x").label("xengine", "0").value(), 1.0);
    assert_eq!(metric(page, "vllm:x").count(), 4);
    assert_eq!(
        metric(page, "vllm:x_total").label("engine", "0").value(),
        5.0
    );
    // OpenMetrics' quoted names and a timestamp after the value.
    let quoted = "{\"vllm.x\",engine=\"0\"} 6 1700000000\n";
    assert_eq!(metric(quoted, "vllm.x").label("engine", "0").value(), 6.0);
}
