//! Each upstream checked on its own schedule, through the real binary: a hanging neighbour
//! delays no other upstream's checks, nor how soon `/health` tells of its failure.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use common::sidecar::Sidecar;
use common::{Reply, Upstream, eventually};
use tokio::net::TcpListener;

const PAGE: &str = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n";

/// A loopback port that accepts connections and never answers, holding each until the test
/// ends; returns how many it took.
async fn hanging() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let taken = Arc::new(AtomicUsize::new(0));
    let count = taken.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        // Bounded: 20 upstreams, one connection each at a time, for the few seconds of the test.
        while let Ok((tcp, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            held.push(tcp);
            if held.len() > 1_000 {
                held.remove(0);
            }
        }
    });
    (format!("http://{addr}"), taken)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_hanging_upstreams_delay_neither_a_healthy_ones_checks_nor_its_failure() {
    // Measured before: one check loop joined every upstream's check, so a healthy upstream was
    // checked only when the hanging ones timed out (every 10 s), and its failure reached
    // /health up to 10 s late.
    let healthy = Upstream::start(Reply::text(PAGE)).await;
    let (hang, taken) = hanging().await;
    let metrics = healthy.metrics_url();
    let sp = Sidecar::launch("checks-own-schedule")
        .config(|port| {
            let mut y = format!(
                "listen: {{host: 127.0.0.1, port: {port}}}\n\
                 health: {{interval: 1s}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 upstreams:\n  - name: healthy\n    url: {metrics}\n    keep: [\"vllm:\"]\n    \
                 timeout: 2s\n"
            );
            for i in 0..20 {
                y.push_str(&format!(
                    "  - name: hanging{i}\n    url: {hang}/{i}/metrics\n    keep: [\"vllm:\"]\n    \
                     timeout: 10s\n    required: false\n"
                ));
            }
            y
        })
        .start()
        .await;
    eventually(Duration::from_secs(5), "ready", || async {
        sp.get("/health", &[]).await.status == 200
    })
    .await;
    eventually(Duration::from_secs(5), "the hanging ones asked", || async {
        taken.load(Ordering::SeqCst) >= 20
    })
    .await;
    // Checked every second while the others hang (their checks take 10 s each).
    let before = healthy.requests();
    let window = Duration::from_secs(6);
    tokio::time::sleep(window).await;
    let checks = healthy.requests() - before;
    assert!(
        (5..=8).contains(&checks),
        "{checks} checks of the healthy upstream in {window:?}"
    );
    // Its failure is on /health within one interval and its own timeout.
    let mut failing = Reply::text("engine error");
    failing.status = StatusCode::INTERNAL_SERVER_ERROR;
    healthy.set(failing);
    let failed = Instant::now();
    let within = Duration::from_secs(1) + Duration::from_secs(2);
    eventually(within + Duration::from_secs(1), "/health 503", || async {
        sp.get("/health", &[]).await.status == 503
    })
    .await;
    let took = failed.elapsed();
    // And its recovery.
    healthy.set(Reply::text(PAGE));
    eventually(
        within + Duration::from_secs(1),
        "/health 200 again",
        || async { sp.get("/health", &[]).await.status == 200 },
    )
    .await;
    let log = sp.stop().await;
    assert!(took <= within + Duration::from_secs(1), "{took:?}\n{log}");
}

/// An engine on loopback speaking HTTP/1.1 with keep-alive as uvicorn (vLLM, SGLang) and
/// cpp-httplib (llama-server) do, whose idle connections time out after 5 s: a request that
/// arrives on a connection idle for nearly that long meets the close (here: idle 4.5 s or
/// more, closed without an answer, as when the server's timer fires while the request is on
/// its way). Answers `/metrics` with `PAGE` and anything else with `ok`. Returns its URL and
/// how many requests met a close.
async fn closing_idle_after_5s() -> (String, Arc<AtomicUsize>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let closed = Arc::new(AtomicUsize::new(0));
    let count = closed.clone();
    tokio::spawn(async move {
        // Bounded: a handful of connections, one request every few seconds, for ~20 s.
        while let Ok((mut tcp, _)) = listener.accept().await {
            let count = count.clone();
            tokio::spawn(async move {
                let mut idle_since = Instant::now();
                let mut head = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = tcp.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    if head.is_empty() && idle_since.elapsed() >= Duration::from_millis(4500) {
                        count.fetch_add(1, Ordering::SeqCst);
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                    let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
                        continue;
                    };
                    let body = if head.starts_with(b"GET /metrics") {
                        PAGE
                    } else {
                        "ok"
                    };
                    head.drain(..end + 4);
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\n\
                         content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    if tcp.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                    idle_since = Instant::now();
                }
            });
        }
    });
    (format!("http://{addr}"), closed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_check_every_5s_never_meets_an_engines_5s_keep_alive_closing() {
    // Before, idle connections were kept 60 s: with checks every 5 s (the default) each check
    // went out on the connection the last one left, idle just under 5 s, and met the engine's
    // keep-alive close often enough to flip /health to 503 for a whole interval
    // ("connection reset or closed mid-response").
    let (engine, closed) = closing_idle_after_5s().await;
    let sp = Sidecar::launch("checks-keep-alive")
        .config(|port| {
            format!(
                "listen: {{host: 127.0.0.1, port: {port}}}\n\
                 health: {{interval: 5s}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 upstreams:\n  - name: vllm\n    url: {engine}/metrics\n    \
                 health_url: {engine}/health\n    keep: [\"vllm:\"]\n    timeout: 2s\n    \
                 canary_after: 0s\n"
            )
        })
        .start()
        .await;
    eventually(Duration::from_secs(5), "ready", || async {
        sp.get("/health", &[]).await.status == 200
    })
    .await;
    // Four checks after the first, /health read every 100 ms.
    let until = Instant::now() + Duration::from_secs(21);
    let mut not_ready = Vec::new();
    while Instant::now() < until {
        let r = sp.get("/health", &[]).await;
        if r.status != 200 {
            not_ready.push(String::from_utf8_lossy(&r.body).into_owned());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = sp.stop().await;
    assert_eq!(
        closed.load(Ordering::SeqCst),
        0,
        "requests sent on connections the engine was closing\n{log}"
    );
    assert!(
        not_ready.is_empty(),
        "/health: {:?}\n{log}",
        &not_ready[..not_ready.len().min(3)]
    );
}
