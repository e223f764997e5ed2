//! Engine vitals end to end: a stand-in vLLM on loopback whose counters and histograms grow at
//! known constant rates, read by sysport's health checks; every figure `/status` reports is
//! checked against the known value, and a counter reset inside the window is handled as
//! Prometheus' `rate()` handles it.
//!
//! The stand-in's clock is driven by its readers: every fetch of its page moves it one check
//! interval on, so the readings sysport stamps with the checks' due times (exactly one
//! interval apart) show exactly one interval's growth each, however late a loaded machine
//! answers.

mod common;

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use common::*;
use serde_json::Value;
use sysport::model::Url;
use tokio::net::TcpListener;

/// Bucket bounds of the latency histograms, and the share of observations in each bucket
/// (the `+Inf` bucket holds none beyond the last bound).
const BOUNDS: [f64; 5] = [0.05, 0.1, 0.2, 0.5, 1.0];
const SHARES: [f64; 5] = [0.2, 0.3, 0.3, 0.15, 0.05];

/// Quantiles of that shape, by Prometheus' linear interpolation within a bucket: p50 is the
/// top of (0.05, 0.1], p90 is 2/3 into (0.2, 0.5], p99 is 4/5 into (0.5, 1].
const P50: f64 = 0.1;
const P90: f64 = 0.4;
const P99: f64 = 0.9;

/// Rates per second of each engine (data-parallel rank 0 and 1).
struct Rates {
    requests: [f64; 2],
    prompt: [f64; 2],
    generation: [f64; 2],
    preemptions: [f64; 2],
    hits: f64,
    queries: f64,
}

const RATES: Rates = Rates {
    requests: [2.0, 1.0],
    prompt: [300.0, 100.0],
    generation: [40.0, 20.0],
    preemptions: [0.5, 0.0],
    hits: 30.0,
    queries: 100.0,
};

/// sysport's health check interval, and the stand-in's step.
const STEP: Duration = Duration::from_millis(500);

/// The stand-in's clock: fetches served, and the fetch at which rank 0's request counter last
/// restarted (the engine restarted just after the one before).
struct Clock {
    steps: AtomicU64,
    reset: Mutex<Option<u64>>,
}

fn page(clock: &Clock) -> String {
    let step = clock.steps.fetch_add(1, Ordering::SeqCst) + 1;
    let t = step as f64 * STEP.as_secs_f64();
    let since_reset = clock
        .reset
        .lock()
        .expect("lock")
        .map(|r| (step - r) as f64 * STEP.as_secs_f64());
    let mut p = String::new();
    let gauge = |p: &mut String, name: &str, values: [f64; 2]| {
        let _ = writeln!(p, "# TYPE {name} gauge");
        for (e, v) in values.iter().enumerate() {
            let _ = writeln!(p, "{name}{{engine=\"{e}\",model_name=\"m\"}} {v}");
        }
    };
    gauge(&mut p, "vllm:num_requests_running", [3.0, 1.0]);
    gauge(&mut p, "vllm:num_requests_waiting", [2.0, 0.0]);
    gauge(&mut p, "vllm:kv_cache_usage_perc", [0.5, 0.25]);
    let counter = |p: &mut String, name: &str, per_s: [f64; 2]| {
        let _ = writeln!(p, "# TYPE {name} counter");
        for (e, r) in per_s.iter().enumerate() {
            // Counters start above zero, as on an engine that served before sysport started.
            let v = match (e, name, since_reset) {
                (0, "vllm:request_success_total", Some(s)) => r * s,
                _ => 10.0 + r * t,
            };
            let _ = writeln!(p, "{name}{{engine=\"{e}\",model_name=\"m\"}} {v}");
        }
    };
    counter(&mut p, "vllm:request_success_total", RATES.requests);
    counter(&mut p, "vllm:prompt_tokens_total", RATES.prompt);
    counter(&mut p, "vllm:generation_tokens_total", RATES.generation);
    counter(&mut p, "vllm:num_preemptions_total", RATES.preemptions);
    counter(&mut p, "vllm:prefix_cache_hits_total", [RATES.hits, 0.0]);
    counter(
        &mut p,
        "vllm:prefix_cache_queries_total",
        [RATES.queries, 0.0],
    );
    for (name, scale) in [
        ("vllm:time_to_first_token_seconds", 1.0),
        ("vllm:inter_token_latency_seconds", 0.1),
        ("vllm:e2e_request_latency_seconds", 10.0),
    ] {
        let _ = writeln!(p, "# TYPE {name} histogram");
        for (e, per_s) in RATES.requests.iter().enumerate() {
            let count = per_s * t;
            let mut cumulative = 0.0;
            for (bound, share) in BOUNDS.iter().zip(SHARES) {
                cumulative += share * count;
                let le = bound * scale;
                let _ = writeln!(
                    p,
                    "{name}_bucket{{engine=\"{e}\",le=\"{le}\",model_name=\"m\"}} {cumulative}"
                );
            }
            let _ = writeln!(
                p,
                "{name}_bucket{{engine=\"{e}\",le=\"+Inf\",model_name=\"m\"}} {count}\n\
                 {name}_count{{engine=\"{e}\",model_name=\"m\"}} {count}\n\
                 {name}_sum{{engine=\"{e}\",model_name=\"m\"}} {}",
                count * 0.2 * scale
            );
        }
    }
    p
}

/// The stand-in engine on loopback: `/metrics` computed at each request, `/health` 200.
async fn stand_in() -> (String, Arc<Clock>) {
    let listener = TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let addr = listener.local_addr().expect("addr");
    let clock = Arc::new(Clock {
        steps: AtomicU64::new(0),
        reset: Mutex::new(None),
    });
    let c = clock.clone();
    let app = Router::new()
        .route(
            "/metrics",
            axum::routing::get(move || {
                let body = page(&c);
                async move { body }
            }),
        )
        .route("/health", axum::routing::get(|| async { "ok" }));
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), clock)
}

/// sysport checking the stand-in every [`STEP`], vitals over 4 s.
async fn sysport_on(base: &str) -> Running {
    let mut u = upstream_config("vllm", &format!("{base}/metrics"), &["vllm:"]);
    u.health_url = Some(Url::parse(&format!("{base}/health")).expect("url"));
    let mut cfg = config(vec![u]);
    cfg.health.interval = STEP;
    cfg.vitals.window = Duration::from_secs(4);
    Running::start(cfg).await
}

async fn vitals(sp: &Running) -> Value {
    let (_, body) = sp.get("/status").await;
    let status: Value = serde_json::from_str(&body).expect("JSON");
    status["upstreams"][0]["vitals"].clone()
}

/// Waits for a full window of readings past the first check (which also fetches the full
/// page once, to compare the engine's `name[]` selection with it: two steps).
async fn full_window(sp: &Running, clock: &Clock) {
    eventually(
        Duration::from_secs(30),
        "a full window of readings",
        || async {
            clock.steps.load(Ordering::SeqCst) >= 12
                && vitals(sp).await["readings"].as_u64() >= Some(8)
        },
    )
    .await;
}

/// Within 2 %: exact unless a check took longer than its interval on a loaded machine (the
/// next is then due later, and that spacing holds one step's growth).
fn near(v: &Value, want: f64, what: &str) {
    let got = v.as_f64().unwrap_or_else(|| panic!("{what}: {v}"));
    assert!(
        (got - want).abs() <= 0.02 * want.abs().max(1e-9),
        "{what}: {got}, want {want}"
    );
}

#[tokio::test]
async fn every_figure_matches_the_known_rates_and_quantiles() {
    let (base, clock) = stand_in().await;
    let sp = sysport_on(&base).await;
    full_window(&sp, &clock).await;
    let v = vitals(&sp).await;
    assert_eq!(v["window_seconds"], 4.0);
    assert_eq!(v["running"], 4.0);
    assert_eq!(v["waiting"], 2.0);
    assert_eq!(v["kv_cache_usage"], 0.375);
    let sum = |r: [f64; 2]| r[0] + r[1];
    near(&v["requests_per_second"], sum(RATES.requests), "requests/s");
    near(
        &v["prompt_tokens_per_second"],
        sum(RATES.prompt),
        "prompt tokens/s",
    );
    near(
        &v["generation_tokens_per_second"],
        sum(RATES.generation),
        "generation tokens/s",
    );
    near(
        &v["preemptions_per_second"],
        sum(RATES.preemptions),
        "preemptions/s",
    );
    near(
        &v["prefix_cache_hit_rate"],
        RATES.hits / RATES.queries,
        "prefix hit rate",
    );
    for (key, scale) in [
        ("time_to_first_token_seconds", 1.0),
        ("inter_token_latency_seconds", 0.1),
        ("e2e_request_latency_seconds", 10.0),
    ] {
        near(&v[key]["p50"], P50 * scale, &format!("{key} p50"));
        near(&v[key]["p90"], P90 * scale, &format!("{key} p90"));
        near(&v[key]["p99"], P99 * scale, &format!("{key} p99"));
    }
    // Per rank: counts and rates of that rank, quantiles from its own buckets.
    assert_eq!(v["rank_label"], "engine");
    let ranks = v["ranks"].as_array().expect("ranks");
    assert_eq!(ranks.len(), 2);
    for (r, rank) in ranks.iter().enumerate() {
        assert_eq!(rank["id"], r.to_string());
        near(
            &rank["requests_per_second"],
            RATES.requests[r],
            "rank requests/s",
        );
        near(
            &rank["generation_tokens_per_second"],
            RATES.generation[r],
            "rank tokens/s",
        );
        near(
            &rank["time_to_first_token_seconds"]["p90"],
            P90,
            "rank TTFT p90",
        );
    }
    assert_eq!(ranks[1]["running"], 1.0);
    assert_eq!(ranks[1]["kv_cache_usage"], 0.25);
    assert_eq!(
        ranks[1]["prefix_cache_hit_rate"],
        Value::Null,
        "no queries: null, not 0"
    );
    // The sparklines end with the figures.
    let last = |k: &str| v["history"][k].as_array().and_then(|a| a.last().cloned());
    assert_eq!(last("running").expect("a point")[1], 4.0);
    near(
        &last("generation_tokens_per_second").expect("a point")[1],
        sum(RATES.generation),
        "sparkline tokens/s",
    );
}

#[tokio::test]
async fn a_counter_reset_in_the_window_is_handled_as_prometheus_does() {
    let (base, clock) = stand_in().await;
    let sp = sysport_on(&base).await;
    full_window(&sp, &clock).await;
    // Rank 0's request counter restarts from zero (the engine restarted); half a window later
    // the reset is inside the window.
    let at = clock.steps.load(Ordering::SeqCst);
    *clock.reset.lock().expect("lock") = Some(at);
    eventually(
        Duration::from_secs(20),
        "the reset in mid-window",
        || async { clock.steps.load(Ordering::SeqCst) >= at + 4 },
    )
    .await;
    let v = vitals(&sp).await;
    // rate() adds back the value before the drop: one step after the restart the counter
    // shows one step's growth, so the increase over the window is what it would have been
    // without the restart. Without that rule the drop (from ~50 to 1) makes it negative.
    near(
        &v["ranks"][0]["requests_per_second"],
        RATES.requests[0],
        "requests/s across a reset",
    );
    near(
        &v["requests_per_second"],
        RATES.requests[0] + RATES.requests[1],
        "total requests/s across a reset",
    );
}

#[tokio::test]
async fn an_upstream_that_keeps_none_of_its_engines_families_is_not_read_for_them() {
    // LMCache's own endpoint under the default vLLM preset, keeping `lmcache:` only, next to
    // the vLLM engine: only the engine is asked for the vitals' families.
    let lmcache = Upstream::start(Reply::text(
        "# TYPE lmcache:num_hit_tokens counter\nlmcache:num_hit_tokens_total 5\n",
    ))
    .await;
    let engine = Upstream::start(Reply::text(
        "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 3\n",
    ))
    .await;
    let mut upstreams = Vec::new();
    for (name, up, keep) in [
        ("lmcache", &lmcache, "lmcache:"),
        ("vllm", &engine, "vllm:"),
    ] {
        let mut u = upstream_config(name, &up.metrics_url(), &[keep]);
        u.health_url = Some(Url::parse(&up.health_url()).expect("url"));
        upstreams.push(u);
    }
    let mut cfg = config(upstreams);
    cfg.health.interval = Duration::from_millis(200);
    let sp = Running::start(cfg).await;
    eventually(Duration::from_secs(10), "the engine's vitals", || async {
        let (_, body) = sp.get("/status").await;
        let status: Value = serde_json::from_str(&body).expect("JSON");
        status["upstreams"][1]["vitals"]["readings"].as_u64() >= Some(3)
    })
    .await;
    let (_, body) = sp.get("/status").await;
    let status: Value = serde_json::from_str(&body).expect("JSON");
    assert_eq!(status["upstreams"][1]["vitals"]["running"], 3.0);
    assert_eq!(status["upstreams"][0]["vitals"], Value::Null, "{body}");
    // Its health URL answered every check, and nobody asked it for a page.
    assert_eq!(lmcache.queries(), Vec::<String>::new());
    assert!(!engine.queries().is_empty());
    sp.shutdown().await.expect("clean shutdown");
}
