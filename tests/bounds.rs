//! Bounded whatever the engine sends: the real binary's resident memory with the vitals of a
//! 1,000-rank engine against the same without them, and with a label that changes at every
//! check; `/live` and the other probes while four clients read the status page without pause;
//! a canary answered with an endless, a huge or a trickling body; a client that takes its
//! answer slowly kept past the write timeout, one that takes nothing cut at it.

mod common;

use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use bytes::Bytes;
use common::probe;
use common::sidecar::Sidecar;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// Held by each test for its whole run: each measures memory or time, so none runs beside
/// another's load.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A stand-in engine whose page is made again every second by `page` (given the seconds since
/// it started), with `/health` 200 and the routes of `extra`.
struct Engine {
    addr: std::net::SocketAddr,
    stop: Arc<AtomicBool>,
}

impl Engine {
    async fn start(page: impl Fn(u64) -> String + Send + Sync + 'static, extra: Router) -> Engine {
        let current = Arc::new(RwLock::new(Bytes::from(page(0))));
        let stop = Arc::new(AtomicBool::new(false));
        let (made, done) = (current.clone(), stop.clone());
        tokio::task::spawn_blocking(move || {
            let started = Instant::now();
            // Bounded: the test stops it, and it stops by itself after ten minutes.
            while !done.load(Ordering::Relaxed) && started.elapsed() < Duration::from_secs(600) {
                std::thread::sleep(Duration::from_secs(1));
                let next = Bytes::from(page(started.elapsed().as_secs()));
                *made.write().expect("page lock") = next;
            }
        });
        let serving = current.clone();
        let app = extra
            .route(
                "/metrics",
                get(move || {
                    let page = serving.read().expect("page lock").clone();
                    async move { ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], page) }
                }),
            )
            .route("/health", get(|| async { StatusCode::OK }));
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Engine { addr, stop }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// A vLLM page of `ranks` data-parallel ranks `t` seconds in: every vitals family, three
/// histograms of 20 buckets; `extra` is one more label on every series.
fn ranks_page(ranks: usize, t: u64, extra: &str) -> String {
    use std::fmt::Write;
    let t = t as f64;
    let mut p = String::with_capacity(ranks * 6000);
    let gauge = |p: &mut String, name: &str, value: &dyn Fn(usize) -> f64| {
        let _ = writeln!(p, "# TYPE {name} gauge");
        for r in 0..ranks {
            let _ = writeln!(
                p,
                "{name}{{engine=\"{r}\",model_name=\"m\"{extra}}} {}",
                value(r)
            );
        }
    };
    gauge(&mut p, "vllm:num_requests_running", &|r| (r % 7) as f64);
    gauge(&mut p, "vllm:num_requests_waiting", &|r| (r % 3) as f64);
    gauge(&mut p, "vllm:kv_cache_usage_perc", &|r| {
        (r % 10) as f64 / 10.0
    });
    for (name, per_s) in [
        ("vllm:request_success", 1.0),
        ("vllm:prompt_tokens", 100.0),
        ("vllm:generation_tokens", 50.0),
        ("vllm:num_preemptions", 0.1),
        ("vllm:prefix_cache_queries", 80.0),
        ("vllm:prefix_cache_hits", 20.0),
    ] {
        let _ = writeln!(p, "# TYPE {name} counter");
        for r in 0..ranks {
            let _ = writeln!(
                p,
                "{name}_total{{engine=\"{r}\",model_name=\"m\"{extra}}} {}",
                1000.0 + per_s * t
            );
        }
    }
    for name in [
        "vllm:time_to_first_token_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:e2e_request_latency_seconds",
    ] {
        let _ = writeln!(p, "# TYPE {name} histogram");
        for r in 0..ranks {
            let count = 1000.0 + t;
            for k in 1..20 {
                let le = 0.01 * f64::from(k) * f64::from(k);
                let c = (count * f64::from(k) / 20.0).floor();
                let _ = writeln!(
                    p,
                    "{name}_bucket{{engine=\"{r}\",le=\"{le}\",model_name=\"m\"{extra}}} {c}"
                );
            }
            let _ = writeln!(
                p,
                "{name}_bucket{{engine=\"{r}\",le=\"+Inf\",model_name=\"m\"{extra}}} {count}"
            );
        }
    }
    p
}

/// sysport's configuration for one engine, checks every second.
fn config(port: u16, engine: &Engine, vitals: &str) -> String {
    format!(
        "listen: {{host: 127.0.0.1, port: {port}}}\n\
         shutdown: {{drain_delay: 0s}}\n\
         health: {{interval: 1s}}\n\
         vitals: {{window: {vitals}}}\n\
         upstreams:\n  - name: vllm\n    url: {}\n    health_url: {}\n    timeout: 5s\n    \
         canary_after: 0s\n",
        engine.url("/metrics"),
        engine.url("/health"),
    )
}

/// Resident memory of `pid` now, in MiB.
fn rss_mib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("status");
    let kib: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("a VmRSS line");
    kib / 1024.0
}

async fn status(sp: &Sidecar) -> serde_json::Value {
    serde_json::from_slice(&sp.get("/status", &[]).await.body).expect("JSON")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn vitals_of_a_thousand_ranks_cost_a_few_mib_and_never_delay_a_probe() {
    let _alone = ALONE.lock().await;
    let engine = Engine::start(|t| ranks_page(1000, t, ""), Router::new()).await;
    let churn = Engine::start(
        |t| ranks_page(100, t, &format!(",request_id=\"{t}\"")),
        Router::new(),
    )
    .await;
    let on = Sidecar::launch("bounds-on")
        .config(|port| config(port, &engine, "1m"))
        .start()
        .await;
    let off = Sidecar::launch("bounds-off")
        .config(|port| config(port, &engine, "0s"))
        .start()
        .await;
    let churning = Sidecar::launch("bounds-churn")
        .config(|port| config(port, &churn, "1m"))
        .start()
        .await;
    // Two minutes of checks every second; the churning page's RSS is taken after the first.
    let started = Instant::now();
    let mut churn_after_a_minute = None;
    while started.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_secs(5)).await;
        if churn_after_a_minute.is_none() && started.elapsed() >= Duration::from_secs(60) {
            churn_after_a_minute = Some(rss_mib(churning.pid()));
        }
    }
    let (rss_on, rss_off) = (rss_mib(on.pid()), rss_mib(off.pid()));
    let churn_late = rss_mib(churning.pid());
    let churn_early = churn_after_a_minute.expect("taken");
    println!(
        "after 2 min of 1 s checks of 1,000 ranks: RSS {rss_on:.1} MiB with the vitals, \
         {rss_off:.1} MiB without; a label changing at every check: {churn_early:.1} MiB at \
         1 min, {churn_late:.1} MiB at 2 min"
    );
    let s = status(&on).await;
    let vitals = &s["upstreams"][0]["vitals"];
    assert!(
        vitals["readings_total"].as_u64().expect("readings") >= 30,
        "{vitals}"
    );
    assert_eq!(vitals["ranks"].as_array().expect("ranks").len(), 32);
    assert_eq!(vitals["left_out"]["ranks"], 968);
    assert!(vitals["running"].as_f64().expect("running") > 0.0);
    assert!(
        rss_on - rss_off <= 24.0,
        "the vitals cost {:.1} MiB",
        rss_on - rss_off
    );
    let churned = &status(&churning).await["upstreams"][0]["vitals"];
    assert!(
        churned["readings_total"].as_u64().expect("readings") >= 30,
        "{churned}"
    );
    // Before, each reading held every series it read: a churning label grew RSS by about
    // 3 MiB a second, 180 MiB in this minute. Now the second minute adds allocator slack only:
    // up to 6.7 MiB seen here on a loaded machine, while the same page served alone for 8
    // minutes stays flat from the first (release build 44 → 40 MiB, debug 64 → 59 MiB,
    // bench/RESULTS.md section 33).
    assert!(
        churn_late - churn_early <= 12.0,
        "RSS grew {:.1} MiB in the second minute of a churning label",
        churn_late - churn_early
    );
    drop(off);
    drop(churning);
    drop(churn);

    // Four clients read the status page and /status without pause; the probes answer within
    // 100 ms all the while.
    let reading = Arc::new(AtomicBool::new(true));
    let reads = Arc::new(AtomicU64::new(0));
    let mut clients = Vec::new();
    for k in 0..4 {
        let url = on.url(if k % 2 == 0 { "/status" } else { "/" });
        let (reading, reads) = (reading.clone(), reads.clone());
        clients.push(tokio::spawn(async move {
            let client = common::client();
            while reading.load(Ordering::Relaxed) {
                if let Ok(r) = client.get(&url).send().await {
                    let _ = r.bytes().await;
                    reads.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let mut worst = Duration::ZERO;
    let mut probes = 0;
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(20) {
        for path in ["/live", "/health", "/live/engine"] {
            let (code, took) = probe(on.port, path).await;
            assert!(code == 200 || code == 503, "{path}: {code}");
            worst = worst.max(took);
            probes += 1;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    reading.store(false, Ordering::Relaxed);
    for c in clients {
        let _ = c.await;
    }
    let reads = reads.load(Ordering::Relaxed);
    println!("{probes} probes, the slowest {worst:?}, while {reads} status pages were read");
    assert!(reads >= 20, "the clients read {reads} pages");
    assert!(worst < Duration::from_millis(100), "a probe took {worst:?}");
    drop(engine);
}

/// A vLLM stand-in, idle, whose completions answer with `answer`.
async fn canary_engine(answer: fn() -> Response) -> Engine {
    let page = |_| {
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0\n\
         # TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 0\n\
         # TYPE vllm:iteration_tokens_total histogram\n\
         vllm:iteration_tokens_total_bucket{le=\"+Inf\"} 5\nvllm:iteration_tokens_total_count 5\n"
            .to_owned()
    };
    let routes = Router::new()
        .route(
            "/v1/models",
            get(|| async { r#"{"data":[{"id":"m"}]}"#.to_owned() }),
        )
        .route("/v1/completions", post(move || async move { answer() }));
    Engine::start(page, routes).await
}

/// An answer that never ends: 64 KiB chunks as fast as they are taken.
fn endless() -> Response {
    let chunk = Bytes::from(vec![b' '; 64 << 10]);
    let stream = futures_util::stream::repeat_with(move || Ok::<_, Infallible>(chunk.clone()));
    Body::from_stream(stream).into_response()
}

/// An answer that says it holds 4 GiB, and sends them.
fn four_gib() -> Response {
    let mut r = endless();
    r.headers_mut().insert(
        header::CONTENT_LENGTH,
        (4u64 << 30).to_string().parse().expect("value"),
    );
    r
}

/// An answer of one byte a second.
fn trickle() -> Response {
    let stream = futures_util::stream::unfold((), |()| async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        Some((Ok::<_, Infallible>(Bytes::from_static(b" ")), ()))
    });
    Body::from_stream(stream).into_response()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_reads_a_bounded_answer_within_its_timeout() {
    let _alone = ALONE.lock().await;
    for (answer, what, result) in [
        (
            endless as fn() -> Response,
            "an endless answer",
            "too_large",
        ),
        (four_gib, "a 4 GiB answer", "too_large"),
        (trickle, "a trickling answer", "timeout"),
    ] {
        let engine = canary_engine(answer).await;
        let sp = Sidecar::launch("bounds-canary")
            .config(|port| {
                format!(
                    "listen: {{host: 127.0.0.1, port: {port}}}\n\
                     shutdown: {{drain_delay: 0s}}\n\
                     health: {{interval: 200ms}}\n\
                     upstreams:\n  - name: vllm\n    url: {}\n    health_url: {}\n    \
                     canary_after: 1s\n    canary: {{timeout: 3s, live_failures: 0}}\n",
                    engine.url("/metrics"),
                    engine.url("/health"),
                )
            })
            .start()
            .await;
        let before = rss_mib(sp.pid());
        let started = Instant::now();
        let mut worst = Duration::ZERO;
        let last = loop {
            let (code, took) = probe(sp.port, "/live").await;
            assert_eq!(code, 200);
            worst = worst.max(took);
            let s = status(&sp).await;
            let last = s["upstreams"][0]["health"]["canary"]["last"].clone();
            if !last.is_null() {
                break last;
            }
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "{what}: no canary ended"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let grew = rss_mib(sp.pid()) - before;
        println!("{what}: {last}; RSS +{grew:.1} MiB; slowest /live {worst:?}");
        assert_eq!(last["result"], result, "{what}: {last}");
        let took = last["duration_seconds"].as_f64().expect("duration");
        assert!(
            took <= 3.5,
            "{what}: the canary took {took} s, its timeout is 3 s"
        );
        assert!(grew < 64.0, "{what}: RSS grew {grew:.1} MiB");
        assert!(
            worst < Duration::from_millis(100),
            "{what}: /live took {worst:?}"
        );
        if result == "too_large" {
            let error = last["error"].as_str().expect("why");
            assert!(error.contains("8 MiB"), "{error}");
            let (code, _) = probe(sp.port, "/health").await;
            assert_eq!(code, 503, "a failed canary: not ready");
        }
    }
}

/// A 15 MB page that is new at every second: each answer made of it is a copy of its own.
fn big_page(t: u64) -> String {
    use std::fmt::Write;
    static BASE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let base = BASE.get_or_init(|| {
        let mut p = String::with_capacity(15 << 20);
        let _ = writeln!(p, "# TYPE vllm:prompt_tokens counter");
        let mut i = 0u64;
        while p.len() < 15 << 20 {
            let _ = writeln!(
                p,
                "vllm:prompt_tokens_total{{engine=\"{i}\",model_name=\"m\"}} {i}"
            );
            i += 1;
        }
        p
    });
    let mut p = String::with_capacity(base.len() + 128);
    p.push_str(base);
    let _ = writeln!(p, "# TYPE vllm:generation_tokens counter");
    let _ = writeln!(p, "vllm:generation_tokens_total{{model_name=\"m\"}} {t}");
    p
}

/// A sidecar named `name` in front of `engine` alone, with `listen` added to its listen settings;
/// checks every 5 s, no canaries and no stall watch (the engine is a page server).
async fn behind(engine: &Engine, name: &str, listen: &str) -> Sidecar {
    Sidecar::launch(name)
        .config(|port| {
            format!(
                "listen: {{host: 127.0.0.1, port: {port}, {listen}}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 health: {{interval: 5s}}\n\
                 upstreams:\n  - name: vllm\n    url: {}\n    health_url: {}\n    \
                 timeout: 5s\n    canary_after: 0s\n    stall_after: 0s\n",
                engine.url("/metrics"),
                engine.url("/health"),
            )
        })
        .start()
        .await
}

/// A client that asks for the page and then reads `per_tick` bytes every 100 ms (0: never),
/// until `stop`. Returns the answer's status code when it got that far.
async fn holder(port: u16, per_tick: usize, stop: Arc<AtomicBool>) -> u16 {
    let Ok(mut tcp) = TcpStream::connect(("127.0.0.1", port)).await else {
        return 0;
    };
    let request = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
    if tcp.write_all(request.as_bytes()).await.is_err() {
        return 0;
    }
    let mut head = [0u8; 12];
    if tcp.read_exact(&mut head).await.is_err() {
        return 0;
    }
    let code = String::from_utf8_lossy(&head[9..12]).parse().unwrap_or(0);
    let mut buf = vec![0u8; per_tick.max(1)];
    while !stop.load(Ordering::Relaxed) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if per_tick > 0 && matches!(tcp.read(&mut buf).await, Ok(0) | Err(_)) {
            break;
        }
    }
    code
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_and_non_reading_clients_hold_no_more_than_the_answer_budget() {
    let _alone = ALONE.lock().await;
    let engine = Engine::start(big_page, Router::new()).await;
    let sp = behind(&engine, "bounds-holders", "max_answer_bytes_held: 48MiB").await;
    // The baseline: the page read a few times, at intervals, by a client that takes it (the
    // blocks bodies are read into are kept for the next fetches: two spares and the page).
    for _ in 0..6 {
        assert_eq!(sp.get("/metrics", &[]).await.status, 200);
        tokio::time::sleep(Duration::from_millis(700)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let baseline = rss_mib(sp.pid());

    // 200 clients that never read and 200 that read 1 KiB every 100 ms, 20 arriving a second.
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    let peak = Arc::new(AtomicU64::new(0));
    let watching = {
        let (stop, peak, pid) = (stop.clone(), peak.clone(), sp.pid());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                peak.fetch_max(rss_mib(pid) as u64, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    for i in 0..400 {
        let per_tick = if i % 2 == 0 { 0 } else { 1024 };
        clients.push(tokio::spawn(holder(sp.port, per_tick, stop.clone())));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The probes are never refused, whatever the clients hold.
    let (code, took) = probe(sp.port, "/live").await;
    assert_eq!(code, 200);
    assert!(took < Duration::from_secs(1), "/live took {took:?}");
    stop.store(true, Ordering::Relaxed);
    let mut codes = std::collections::BTreeMap::new();
    for c in clients {
        *codes.entry(c.await.expect("client")).or_insert(0) += 1;
    }
    let _ = watching.await;
    let peak = peak.load(Ordering::Relaxed) as f64;
    // The budget is 48 MiB; the page being fetched and parsed, and the answer just made before
    // the total went over, come on top.
    assert!(
        peak < baseline + 48.0 + 80.0,
        "RSS peaked at {peak:.0} MiB from a baseline of {baseline:.0} MiB (answers: {codes:?})"
    );
    assert!(
        codes.get(&503).copied().unwrap_or(0) > 0,
        "over the budget new answers are refused: {codes:?}"
    );
    // Once they have left, memory goes back to within about one budget of where it was (the
    // body blocks kept for the next fetches and the allocator's cache; before the budget and
    // mimalloc, 1.2 GiB stayed).
    tokio::time::sleep(Duration::from_secs(10)).await;
    let after = rss_mib(sp.pid());
    eprintln!(
        "RSS baseline {baseline:.1} MiB, peak {peak:.1} MiB, 10 s after {after:.1} MiB; \
         answers by status {codes:?}"
    );
    let own = String::from_utf8(
        sp.get(
            "/metrics?name=dynamo_sysport_answer_bytes_held&name=dynamo_sysport_http_connections",
            &[],
        )
        .await
        .body,
    )
    .expect("text");
    assert!(
        after < baseline + 64.0,
        "RSS {after:.0} MiB 10 s after the clients left, baseline {baseline:.0} MiB:\n{own}"
    );
    let page = String::from_utf8(
        sp.get("/metrics?name=dynamo_sysport_answers_refused_total", &[])
            .await
            .body,
    )
    .expect("text");
    assert!(common::metric(&page, "dynamo_sysport_answers_refused_total").value() > 0.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_of_as_many_upstreams_as_allowed_answers_within_a_second_beside_metrics() {
    let _alone = ALONE.lock().await;
    // Measured before: /status walked every upstream's series once per upstream (500: 0.54 s,
    // 1,000: 3.2 s, 2,000: 19 s in a release build), and /metrics waited meanwhile.
    const N: usize = 2_000;
    let page =
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 0\n";
    let app =
        Router::new()
            .route(
                "/{n}/metrics",
                get(move || async move {
                    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], page)
                }),
            )
            .route("/{n}/health", get(|| async { StatusCode::OK }));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let sp = Sidecar::launch("bounds-upstreams")
        .config(|port| {
            let mut y = format!(
                "listen: {{host: 127.0.0.1, port: {port}}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 health: {{interval: 10s}}\n\
                 vitals: {{window: 0s}}\n\
                 upstreams:\n"
            );
            for i in 0..N {
                y.push_str(&format!(
                    "  - name: u{i}\n    url: http://{addr}/{i}/metrics\n    \
                     health_url: http://{addr}/{i}/health\n    keep: [\"vllm:\"]\n    \
                     timeout: 10s\n    stall_after: 0s\n    canary_after: 0s\n    min_interval: 1h\n"
                ));
            }
            y
        })
        .start()
        .await;
    common::eventually(
        Duration::from_secs(60),
        "every upstream checked",
        || async { sp.get("/health", &[]).await.status == 200 },
    )
    .await;
    // One fetch of every page, kept for the /metrics after it (min_interval): what is timed
    // below is sysport's own work.
    let warm = Instant::now();
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let first = client
        .get(sp.url("/metrics"))
        .send()
        .await
        .expect("/metrics");
    assert_eq!(first.status(), 200);
    let first = first.bytes().await.expect("body");
    eprintln!(
        "first /metrics: {:?}, {} bytes",
        warm.elapsed(),
        first.len()
    );
    // /metrics alone, then while a client reads /status without pause.
    let alone: Vec<Duration> = {
        let mut took = Vec::new();
        for _ in 0..3 {
            let answer = sp.get("/metrics", &[]).await;
            assert_eq!(answer.status, 200);
            took.push(answer.elapsed);
        }
        took
    };
    let reading = Arc::new(AtomicBool::new(true));
    let mut readers = Vec::new();
    for _ in 0..1 {
        let (url, go) = (sp.url("/status"), reading.clone());
        readers.push(tokio::spawn(async move {
            let client = common::client();
            let mut took = Vec::new();
            // Bounded: the test stops it after a few seconds.
            while go.load(Ordering::Relaxed) && took.len() < 1_000 {
                let started = Instant::now();
                let body = client
                    .get(&url)
                    .send()
                    .await
                    .expect("answers")
                    .bytes()
                    .await
                    .expect("body");
                took.push((started.elapsed(), body.len()));
            }
            took
        }));
    }
    let mut beside = Vec::new();
    for _ in 0..3 {
        let answer = sp.get("/metrics", &[]).await;
        assert_eq!(answer.status, 200);
        beside.push(answer.elapsed);
    }
    reading.store(false, Ordering::Relaxed);
    let mut status = Vec::new();
    for r in readers {
        status.extend(r.await.expect("reader"));
    }
    let slowest = status.iter().map(|(t, _)| *t).max().expect("a /status");
    let json = serde_json::from_slice::<serde_json::Value>(&sp.get("/status", &[]).await.body)
        .expect("JSON");
    assert_eq!(json["upstreams"].as_array().map(Vec::len), Some(N));
    sp.stop().await;
    eprintln!("/status: {status:?}; /metrics alone {alone:?}, beside {beside:?}");
    // Generous for a debug build on a shared machine: before, the same took minutes.
    assert!(
        slowest < Duration::from_secs(2),
        "/status of {N} upstreams took {slowest:?} ({} answers)",
        status.len()
    );
    let (alone, beside) = (
        alone.iter().max().expect("timed"),
        beside.iter().max().expect("timed"),
    );
    assert!(
        *beside < *alone * 3 + Duration::from_secs(1),
        "/metrics took {beside:?} beside /status readers, {alone:?} alone"
    );
}

/// A 4 MiB page of `n`-numbered counters, new each second (`t` in its last line).
fn four_mib_page(t: u64) -> String {
    let mut p = big_page(t);
    let cut = p[..4 << 20].rfind('\n').expect("lines") + 1;
    p.replace_range(..cut, "");
    p.insert_str(0, "# TYPE vllm:prompt_tokens counter\n");
    p
}

/// Asks for `/metrics` with `Connection: close` on a socket with a 4 KiB receive buffer, then
/// reads `per_tick` bytes every 100 ms (0: nothing) until sysport closes the connection,
/// `done()` says so or `within` passes. Returns the bytes received.
async fn reader<F, Done>(port: u16, per_tick: usize, within: Duration, done: F) -> Vec<u8>
where
    F: Fn() -> Done,
    Done: std::future::Future<Output = bool>,
{
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket.set_recv_buffer_size(4096).expect("SO_RCVBUF");
    let mut tcp = socket
        .connect(([127, 0, 0, 1], port).into())
        .await
        .expect("connect");
    let request = "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    tcp.write_all(request.as_bytes()).await.expect("request");
    let mut got = Vec::new();
    let mut buf = vec![0u8; per_tick.max(1)];
    let started = Instant::now();
    while started.elapsed() < within {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if done().await {
            break;
        }
        if per_tick == 0 {
            continue;
        }
        let mut tick = 0;
        while tick < per_tick {
            match tcp.read(&mut buf[..per_tick - tick]).await {
                Ok(0) | Err(_) => return got,
                Ok(n) => {
                    got.extend_from_slice(&buf[..n]);
                    tick += n;
                }
            }
        }
    }
    // What a non-reader would get now, if its connection is still open.
    let rest = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut got)).await;
    assert!(
        rest.is_ok(),
        "reading the rest of the answer took over 10 s"
    );
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_reader_keeps_its_connection_past_the_write_timeout_and_a_non_reader_does_not() {
    let _alone = ALONE.lock().await;
    let engine = Engine::start(four_mib_page, Router::new()).await;
    let sp = behind(&engine, "bounds-slow-reader", "write_timeout: 2s").await;
    let closed = || async {
        let page = sp
            .get(
                "/metrics?name=dynamo_sysport_http_connections_closed_total",
                &[],
            )
            .await
            .body;
        let page = String::from_utf8(page).expect("text");
        common::metric(&page, "dynamo_sysport_http_connections_closed_total")
            .label("reason", "write_timeout")
            .value()
    };
    // One that reads nothing: cut at the write timeout, as before. It waits for the cut to be
    // counted (at most 60 s) rather than a fixed time: on a loaded machine a debug build takes
    // seconds to make the 4 MiB page's answer, and the timeout runs from its first stalled
    // write. Never cut, it reads the whole answer after 60 s.
    let cut = || async { closed().await >= 1.0 };
    let got = reader(sp.port, 0, Duration::from_secs(60), cut).await;
    assert!(got.len() < 4 << 20, "a non-reader got {} bytes", got.len());
    assert_eq!(
        closed().await,
        1.0,
        "the non-reader cut at the write timeout"
    );
    // One that takes 60 KiB a second: the kernel holds what it has not taken, so sysport's
    // writes wait for seconds at a time, but its send queue goes down all along.
    let started = Instant::now();
    let never = || async { false };
    let got = reader(sp.port, 6 << 10, Duration::from_secs(120), never).await;
    let text = String::from_utf8_lossy(&got);
    let own = sp
        .get(
            "/metrics?name=dynamo_sysport_http_connections_closed_total",
            &[],
        )
        .await
        .body;
    assert!(
        text.contains("vllm:generation_tokens_total") && got.len() > 4 << 20,
        "the slow reader got {} bytes in {:?}:\n{}",
        got.len(),
        started.elapsed(),
        String::from_utf8_lossy(&own)
    );
    assert!(
        started.elapsed() > Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(closed().await, 1.0, "the slow reader was not cut");
}
