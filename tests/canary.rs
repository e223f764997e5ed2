//! Canary requests end to end: sysport on a loopback port in front of a stand-in engine whose
//! `/health` stays 200 while its generation answers, hangs, fails with 500 or answers without
//! `choices`; judged through `/health`, `/live/engine`, `/live`, `/status` and the metrics.

mod common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use common::{Running, config, eventually, metric, upstream_config};
use sysport::config::{CanaryConfig, Config, Overrides, StallConfig};
use sysport::model::engine::CanaryAnswer;
use sysport::model::{Engine, Url};
use tokio::net::TcpListener;

const INTERVAL: Duration = Duration::from_millis(100);
const CANARY_AFTER: Duration = Duration::from_secs(1);
const TIMEOUT: Duration = Duration::from_millis(500);
/// What a check, a canary and a poll may take beyond their schedule on a loaded 2-core machine.
const MARGIN: Duration = Duration::from_secs(3);

/// How the stand-in's generation behaves.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Mode {
    Answer,
    Hang,
    Fail500,
    NoChoices,
    /// 401, as vLLM answers `/v1/*` without its `--api-key`.
    Unauthorized,
}

/// A stand-in engine: vLLM's page with a busy gauge, a step counter and the sleep gauge, `/health`
/// always 200, and the generation endpoints of every engine.
struct Fake {
    mode: Mutex<Mode>,
    running: AtomicU32,
    steps: AtomicU64,
    awake: AtomicU32,
    model: Mutex<String>,
    /// Generation requests (completions, `/health_generate`, Triton generate), in order.
    generations: Mutex<Vec<(String, String)>>,
    /// The canary's model lookups: `/v1/models` with the canary's `Authorization`.
    /// sysport's `/metadata` reads the same route at start, without it.
    models_asked: AtomicUsize,
    authorization: Mutex<Option<String>>,
    /// Generations answered: vLLM's `request_success_total` and `generation_tokens_total`
    /// count them, one token each (the canary's `max_tokens: 1`).
    served: AtomicU64,
    /// Generations being answered now, and the most at once.
    in_flight: AtomicU32,
    most_in_flight: AtomicU32,
}

/// Counts a generation in flight until its answer is sent or its client is gone.
struct InFlight<'a>(&'a Fake);

impl<'a> InFlight<'a> {
    fn new(fake: &'a Fake) -> InFlight<'a> {
        let now = fake.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        fake.most_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(fake)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Stand {
    addr: SocketAddr,
    engine: Arc<Fake>,
}

impl Stand {
    async fn start() -> Stand {
        let engine = Arc::new(Fake {
            mode: Mutex::new(Mode::Answer),
            running: AtomicU32::new(0),
            steps: AtomicU64::new(100),
            awake: AtomicU32::new(1),
            model: Mutex::new("m1".into()),
            generations: Mutex::new(Vec::new()),
            models_asked: AtomicUsize::new(0),
            authorization: Mutex::new(None),
            served: AtomicU64::new(0),
            in_flight: AtomicU32::new(0),
            most_in_flight: AtomicU32::new(0),
        });
        let e = engine.clone();
        let metrics = move || {
            let e = e.clone();
            async move {
                let running = e.running.load(Ordering::SeqCst);
                let steps = e.steps.load(Ordering::SeqCst);
                let awake = e.awake.load(Ordering::SeqCst);
                let served = 100 + e.served.load(Ordering::SeqCst);
                format!(
                    "# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{engine=\"0\",model_name=\"m\"}} {running}
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{{engine=\"0\",le=\"+Inf\",model_name=\"m\"}} {steps}
vllm:iteration_tokens_total_sum{{engine=\"0\",model_name=\"m\"}} {steps}
vllm:iteration_tokens_total_count{{engine=\"0\",model_name=\"m\"}} {steps}
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{{engine=\"0\",model_name=\"m\",sleep_state=\"awake\"}} {awake}
vllm:engine_sleep_state{{engine=\"0\",model_name=\"m\",sleep_state=\"weights_offloaded\"}} {asleep}
# TYPE vllm:request_success_total counter
vllm:request_success_total{{engine=\"0\",finished_reason=\"length\",model_name=\"m\"}} {served}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{engine=\"0\",model_name=\"m\"}} {served}
",
                    asleep = 1 - awake
                )
            }
        };
        let e = engine.clone();
        let models = move |headers: HeaderMap| {
            let e = e.clone();
            async move {
                if headers
                    .get("authorization")
                    .is_some_and(|v| v == "Bearer sekret")
                {
                    e.models_asked.fetch_add(1, Ordering::SeqCst);
                }
                let id = e.model.lock().expect("lock").clone();
                json(serde_json::json!({"object": "list", "data": [{"id": id, "object": "model"}]}))
            }
        };
        let generate = |e: Arc<Fake>, answer: serde_json::Value| {
            move |headers: HeaderMap, uri: axum::http::Uri, body: String| {
                let e = e.clone();
                let answer = answer.clone();
                async move { e.generate(&headers, uri.path(), body, answer).await }
            }
        };
        let choices = serde_json::json!({"object": "text_completion",
            "choices": [{"index": 0, "text": "!", "finish_reason": "length"}]});
        let app = Router::new()
            // The same page at a second URL: a reload may move the upstream between them.
            .route("/engine/metrics", get(metrics.clone()))
            .route("/metrics", get(metrics))
            .route("/health", get(|| async { StatusCode::OK }))
            .route("/v1/models", get(models))
            .route("/v1/completions", post(generate(engine.clone(), choices)))
            .route(
                "/health_generate",
                get(generate(engine.clone(), serde_json::Value::Null)),
            )
            .route(
                "/v2/models/{model}/generate",
                post(generate(
                    engine.clone(),
                    serde_json::json!({"model_name": "ensemble", "text_output": "!"}),
                )),
            );
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Stand { addr, engine }
    }

    fn url(&self, path: &str) -> Url {
        Url::parse(&format!("http://{}{path}", self.addr)).expect("url")
    }

    fn set(&self, mode: Mode) {
        *self.engine.mode.lock().expect("lock") = mode;
    }

    fn generations(&self) -> Vec<(String, String)> {
        self.engine.generations.lock().expect("lock").clone()
    }

    fn count(&self) -> usize {
        self.engine.generations.lock().expect("lock").len()
    }
}

impl Fake {
    async fn generate(
        &self,
        headers: &HeaderMap,
        path: &str,
        body: String,
        answer: serde_json::Value,
    ) -> Response {
        *self.authorization.lock().expect("lock") = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        self.generations
            .lock()
            .expect("lock")
            .push((path.to_owned(), body));
        let mode = *self.mode.lock().expect("lock");
        let _in_flight = InFlight::new(self);
        match mode {
            Mode::Unauthorized => StatusCode::UNAUTHORIZED.into_response(),
            Mode::Hang => {
                // Bounded: far past any canary timeout.
                tokio::time::sleep(Duration::from_secs(30)).await;
                StatusCode::OK.into_response()
            }
            Mode::Fail500 => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
            Mode::NoChoices => json(serde_json::json!({"object": "error"})).into_response(),
            Mode::Answer => {
                // The engine's own counters move for a canary as for any request.
                self.steps.fetch_add(2, Ordering::SeqCst);
                self.served.fetch_add(1, Ordering::SeqCst);
                if answer.is_null() {
                    StatusCode::OK.into_response()
                } else {
                    json(answer).into_response()
                }
            }
        }
    }
}

/// A JSON answer.
fn json(value: serde_json::Value) -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

fn canary(stand: &Stand, engine: Engine, path: &str, body: Option<&str>) -> CanaryConfig {
    CanaryConfig {
        after: CANARY_AFTER,
        url: stand.url(path),
        body: body.map(str::to_owned),
        headers: vec![("Authorization".into(), "Bearer sekret".into())],
        timeout: TIMEOUT,
        live_failures: 2,
        model: None,
        answer: match engine {
            Engine::Vllm => CanaryAnswer::Choices,
            Engine::Triton => CanaryAnswer::TextOutput,
            _ => CanaryAnswer::Status,
        },
        idle: StallConfig::preset(Engine::Vllm, Duration::ZERO),
    }
}

/// sysport in front of the stand-in as a vLLM with canaries (the preset's request).
fn vllm_config(stand: &Stand) -> Config {
    let preset = Engine::Vllm.canary();
    let mut u = upstream_config("vllm", stand.url("/metrics").as_str(), &["vllm:"]);
    u.health_url = Some(stand.url("/health"));
    u.canary = Some(canary(stand, Engine::Vllm, preset.path, preset.body));
    let mut c = config(vec![u]);
    c.health.interval = INTERVAL;
    c
}

async fn health(sp: &Running) -> (StatusCode, serde_json::Value) {
    let (code, body) = sp.get("/health").await;
    (code, serde_json::from_str(&body).expect("JSON"))
}

async fn counter(sp: &Running, name: &str, labels: &[(&str, &str)]) -> f64 {
    let (_, body) = sp.get("/metrics").await;
    let mut m = metric(&body, name).label("upstream", "vllm");
    for (k, v) in labels {
        m = m.label(k, v);
    }
    if m.count() == 1 { m.value() } else { 0.0 }
}

async fn until_ready(sp: &Running) {
    until_health(sp, StatusCode::OK, MARGIN * 2).await;
}

/// Polls until `/health` answers `code`.
async fn until_health(sp: &Running, code: StatusCode, within: Duration) {
    eventually(within, &format!("/health {code}"), || async {
        sp.get("/health").await.0 == code
    })
    .await;
}

/// Polls until the stand-in has been sent a canary.
async fn until_canary(stand: &Stand, within: Duration) {
    eventually(within, "a canary", || async { stand.count() > 0 }).await;
}

/// Polls `/health` for `window`, asserting 200 at every poll.
async fn ready_throughout(sp: &Running, window: Duration) {
    let started = Instant::now();
    while started.elapsed() < window {
        let (code, body) = health(sp).await;
        assert_eq!(code, StatusCode::OK, "{body}");
        tokio::time::sleep(INTERVAL).await;
    }
}

#[tokio::test]
async fn idle_and_healthy_gets_about_one_canary_per_canary_after_and_stays_ready() {
    let stand = Stand::start().await;
    let sp = Running::start(vllm_config(&stand)).await;
    until_ready(&sp).await;
    let before = stand.count();
    let window = Duration::from_secs(5);
    ready_throughout(&sp, window).await;
    let sent = stand.count() - before;
    // Once per second of idleness, each counted from the previous one: at most one per
    // canary_after, and on a loaded machine no fewer than half as many.
    assert!((2..=5).contains(&sent), "{sent} canaries in {window:?}");
    let generations = stand.generations();
    let (path, body) = generations.last().expect("a canary");
    assert_eq!(path, "/v1/completions");
    let body: serde_json::Value = serde_json::from_str(body).expect("JSON body");
    assert_eq!(body["model"], "m1", "the first id of /v1/models");
    assert_eq!(body["max_tokens"], 1);
    assert_eq!(body["prompt"], "Test");
    assert_eq!(
        stand.engine.models_asked.load(Ordering::SeqCst),
        1,
        "the model is looked up once while canaries pass"
    );
    assert_eq!(
        stand.engine.authorization.lock().expect("lock").as_deref(),
        Some("Bearer sekret")
    );
    let successes = counter(
        &sp,
        "dynamo_sysport_canary_requests_total",
        &[("result", "success")],
    )
    .await;
    assert!(successes >= sent as f64 - 1.0, "{successes} vs {sent}");
    let timeouts = counter(
        &sp,
        "dynamo_sysport_canary_requests_total",
        &[("result", "timeout")],
    )
    .await;
    assert_eq!(timeouts, 0.0);
    let observed = counter(&sp, "dynamo_sysport_canary_duration_seconds_count", &[]).await;
    assert!(observed >= successes, "{observed}");
    // /status says when the last one was and how it went.
    let (_, status) = sp.get("/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    let c = &status["upstreams"][0]["health"]["canary"];
    assert_eq!(c["last"]["result"], "success", "{c}");
    assert!(c["last"]["duration_seconds"].as_f64().expect("duration") < TIMEOUT.as_secs_f64());
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_busy_engine_gets_no_canary() {
    let stand = Stand::start().await;
    stand.engine.running.store(3, Ordering::SeqCst);
    let engine = stand.engine.clone();
    let stepping = tokio::spawn(async move {
        for _ in 0..200 {
            engine.steps.fetch_add(5, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    });
    let sp = Running::start(vllm_config(&stand)).await;
    until_ready(&sp).await;
    ready_throughout(&sp, CANARY_AFTER * 4).await;
    assert_eq!(stand.count(), 0, "{:?}", stand.generations());
    let (_, body) = health(&sp).await;
    assert_eq!(body["upstreams"]["vllm"]["canary"]["none_because"], "busy");
    stepping.abort();
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn an_idle_engine_that_hangs_goes_not_ready_then_not_live_and_heals() {
    let stand = Stand::start().await;
    let sp = Running::start(vllm_config(&stand)).await;
    until_ready(&sp).await;
    stand.set(Mode::Hang);
    let started = Instant::now();
    eventually(
        CANARY_AFTER + TIMEOUT + INTERVAL + MARGIN,
        "/health 503",
        || async { sp.get("/health").await.0 == StatusCode::SERVICE_UNAVAILABLE },
    )
    .await;
    let took = started.elapsed();
    let (_, body) = health(&sp).await;
    let reason = body["reason"].as_str().expect("a reason");
    assert_eq!(
        reason, "vllm: canary failed: timed out after 500ms",
        "{body}"
    );
    assert_eq!(
        sp.get("/live").await.0,
        StatusCode::OK,
        "/live never changes"
    );
    // live_failures 2: the second failure in a row, one canary_after later.
    eventually(
        CANARY_AFTER + TIMEOUT + MARGIN,
        "/live/engine 503",
        || async { sp.get("/live/engine").await.0 == StatusCode::SERVICE_UNAVAILABLE },
    )
    .await;
    let (_, live) = sp.get("/live/engine").await;
    assert!(live.contains("canary failed"), "{live}");
    assert_eq!(sp.get("/live").await.0, StatusCode::OK);
    let timeouts = counter(
        &sp,
        "dynamo_sysport_canary_requests_total",
        &[("result", "timeout")],
    )
    .await;
    assert!(timeouts >= 2.0, "{timeouts}");
    // Healed: the next canary passes, and both probes are 200 again.
    stand.set(Mode::Answer);
    until_health(&sp, StatusCode::OK, CANARY_AFTER + TIMEOUT + MARGIN).await;
    assert_eq!(sp.get("/live/engine").await.0, StatusCode::OK);
    assert!(
        took < CANARY_AFTER + TIMEOUT + INTERVAL + MARGIN,
        "{took:?}"
    );
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn observed_progress_heals_a_failed_canary() {
    let stand = Stand::start().await;
    let sp = Running::start(vllm_config(&stand)).await;
    until_ready(&sp).await;
    stand.set(Mode::Fail500);
    until_health(&sp, StatusCode::SERVICE_UNAVAILABLE, CANARY_AFTER + MARGIN).await;
    let (_, body) = health(&sp).await;
    assert_eq!(body["reason"], "vllm: canary failed: answered HTTP 500");
    // Real traffic comes back: the engine's counters move (short requests, so the busy gauge
    // may read 0 at the checks).
    let engine = stand.engine.clone();
    let traffic = tokio::spawn(async move {
        for _ in 0..300 {
            engine.steps.fetch_add(5, Ordering::SeqCst);
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
    });
    until_health(&sp, StatusCode::OK, MARGIN).await;
    let sent = stand.count();
    ready_throughout(&sp, CANARY_AFTER * 2).await;
    assert_eq!(stand.count(), sent, "no canary while traffic flows");
    traffic.abort();
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn an_answer_without_choices_fails_and_the_model_is_looked_up_again() {
    let stand = Stand::start().await;
    let sp = Running::start(vllm_config(&stand)).await;
    until_ready(&sp).await;
    until_canary(&stand, CANARY_AFTER + MARGIN).await;
    assert_eq!(stand.engine.models_asked.load(Ordering::SeqCst), 1);
    stand.set(Mode::NoChoices);
    *stand.engine.model.lock().expect("lock") = "m2".into();
    until_health(&sp, StatusCode::SERVICE_UNAVAILABLE, CANARY_AFTER + MARGIN).await;
    let (_, body) = health(&sp).await;
    assert_eq!(body["reason"], "vllm: canary failed: answer has no choices");
    let bad = counter(
        &sp,
        "dynamo_sysport_canary_requests_total",
        &[("result", "bad_answer")],
    )
    .await;
    assert!(bad >= 1.0);
    stand.set(Mode::Answer);
    until_health(&sp, StatusCode::OK, CANARY_AFTER + MARGIN).await;
    assert!(stand.engine.models_asked.load(Ordering::SeqCst) >= 2);
    let generations = stand.generations();
    let (_, body) = generations.last().expect("a canary");
    assert!(
        body.contains("\"m2\""),
        "asked again after the failure: {body}"
    );
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_sleeping_engine_is_neither_canaried_nor_stalled() {
    let stand = Stand::start().await;
    stand.engine.awake.store(0, Ordering::SeqCst);
    let mut c = vllm_config(&stand);
    c.upstreams[0].stall = Some(StallConfig::preset(
        Engine::Vllm,
        Duration::from_millis(300),
    ));
    let sp = Running::start(c).await;
    until_ready(&sp).await;
    ready_throughout(&sp, CANARY_AFTER * 3).await;
    assert_eq!(stand.count(), 0, "{:?}", stand.generations());
    assert_eq!(sp.get("/live/engine").await.0, StatusCode::OK);
    let (_, status) = sp.get("/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    let u = &status["upstreams"][0];
    assert_eq!(u["state"], "sleeping", "{u}");
    assert_eq!(u["health"]["canary"]["none_because"], "sleeping");
    // Awake again: canaries resume.
    stand.engine.awake.store(1, Ordering::SeqCst);
    until_canary(&stand, CANARY_AFTER + MARGIN).await;
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn sglang_trtllm_and_triton_stand_ins_get_their_own_request() {
    for (engine, expected) in [
        (Engine::Sglang, "/health_generate"),
        (Engine::Trtllm, "/health_generate"),
        (Engine::Triton, "/v2/models/ensemble/generate"),
    ] {
        let stand = Stand::start().await;
        let preset = engine.canary();
        let mut u = upstream_config("vllm", stand.url("/metrics").as_str(), &["vllm:"]);
        u.engine = engine;
        u.health_url = Some(stand.url("/health"));
        let mut canary = canary(&stand, engine, preset.path, preset.body);
        canary.model = preset.model.map(str::to_owned);
        u.canary = Some(canary);
        let mut c = config(vec![u]);
        c.health.interval = INTERVAL;
        let sp = Running::start(c).await;
        until_ready(&sp).await;
        until_canary(&stand, CANARY_AFTER + MARGIN).await;
        let (path, body) = stand.generations()[0].clone();
        assert_eq!(path, expected, "{engine:?}");
        if engine == Engine::Triton {
            let body: serde_json::Value = serde_json::from_str(&body).expect("JSON");
            assert_eq!(body["text_input"], "Test");
        }
        assert_eq!(stand.engine.models_asked.load(Ordering::SeqCst), 0);
        ready_throughout(&sp, INTERVAL * 3).await;
        sp.shutdown().await.expect("clean shutdown");
    }
}

#[tokio::test]
async fn dynamo_env_names_turn_canaries_on_with_upstream_and_no_file() {
    let stand = Stand::start().await;
    let env: HashMap<String, String> = [
        ("DYN_HEALTH_CHECK_ENABLED", "true"),
        ("DYN_CANARY_WAIT_TIME", "2"),
        ("DYN_HEALTH_CHECK_REQUEST_TIMEOUT", "1.5"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let overrides = Overrides {
        upstreams: vec![format!("vllm={}", stand.url("/metrics"))],
        ..Overrides::default()
    };
    let mut c = sysport::config::load(&overrides, &env).expect("loads");
    let canary = c.upstreams[0].canary.as_ref().expect("canaries on");
    assert_eq!(canary.after, Duration::from_secs(2));
    assert_eq!(canary.timeout, Duration::from_millis(1500));
    assert_eq!(canary.url, stand.url("/v1/completions"));
    let shown = c.to_string();
    assert!(shown.contains("canary_after: 2s"), "{shown}");
    assert!(shown.contains("/v1/completions"), "{shown}");
    // On by default, after Dynamo's 10 s; off where Dynamo's operator says so; and a bad value
    // names its variable.
    let plain = sysport::config::load(&overrides, &HashMap::new()).expect("loads");
    let default = plain.upstreams[0].canary.as_ref().expect("on by default");
    assert_eq!(default.after, Duration::from_secs(10));
    assert!(plain.upstreams[0].stall.is_some(), "stall detection too");
    let off: HashMap<String, String> =
        [("DYN_HEALTH_CHECK_ENABLED".to_owned(), "false".to_owned())].into();
    let off = sysport::config::load(&overrides, &off).expect("loads");
    assert_eq!(off.upstreams[0].canary, None);
    assert!(off.to_string().contains("canary_after: 0s"));
    let bad: HashMap<String, String> = [
        ("DYN_HEALTH_CHECK_ENABLED", "true"),
        ("DYN_CANARY_WAIT_TIME", "soon"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let err = sysport::config::load(&overrides, &bad).expect_err("bad wait time");
    assert!(err.to_string().contains("DYN_CANARY_WAIT_TIME"), "{err}");
    // And it runs: a canary arrives after two seconds of idleness.
    c.listen.host = "127.0.0.1".parse().expect("ip");
    c.listen.port = 0;
    c.health.interval = INTERVAL;
    let sp = Running::start(c).await;
    until_ready(&sp).await;
    until_canary(&stand, Duration::from_secs(2) + MARGIN).await;
    assert_eq!(stand.generations()[0].0, "/v1/completions");
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_canary_that_ends_after_a_reload_removed_its_upstream_leaves_no_series() {
    let stand = Stand::start().await;
    let mut cfg = vllm_config(&stand);
    // A canary in flight for a while: long enough for the reload to come first.
    let timeout = Duration::from_secs(3);
    if let Some(c) = cfg.upstreams[0].canary.as_mut() {
        c.timeout = timeout;
    }
    let sp = Running::start(cfg).await;
    until_ready(&sp).await;
    stand.set(Mode::Hang);
    until_canary(&stand, CANARY_AFTER + MARGIN * 2).await;
    let sent = Instant::now();
    // The new configuration has no upstream `vllm`.
    let mut other = upstream_config("other", stand.url("/metrics").as_str(), &["vllm:"]);
    other.required = false;
    sp.handle.reload(config(vec![other]));
    assert!(
        sent.elapsed() < timeout,
        "the reload came after the canary ended"
    );
    tokio::time::sleep(timeout + MARGIN).await;
    let (_, body) = sp.get("/metrics").await;
    let left: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("dynamo_sysport_canary") && l.contains("upstream=\"vllm\""))
        .collect();
    assert!(left.is_empty(), "series of a removed upstream: {left:?}");
}

#[tokio::test]
async fn refused_credentials_pause_the_canaries_which_resume_when_the_engine_takes_them() {
    // vLLM started with --api-key answers /v1/* with 401 to a canary without the key. Measured
    // before: one 401 stopped the canaries until the engine was seen down, so when the key was
    // put right, nothing resumed.
    let stand = Stand::start().await;
    stand.set(Mode::Unauthorized);
    let sp = Running::start(vllm_config(&stand)).await;
    until_ready(&sp).await;
    until_canary(&stand, CANARY_AFTER + MARGIN).await;
    let refused = Instant::now();
    // Paused, and saying until when; readiness stays with the health check.
    let (_, status) = sp.get("/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    let h = &status["upstreams"][0]["health"];
    let stopped = h["canary_stopped"].as_str().expect("why they pause");
    assert!(stopped.contains("HTTP 401"), "{stopped}");
    assert!(
        stopped.contains("canary.headers"),
        "the setting that fixes it: {stopped}"
    );
    assert_eq!(h["canary"]["none_because"], "paused", "{h}");
    assert_eq!(
        h["canary"]["pause_seconds"],
        CANARY_AFTER.as_secs_f64(),
        "the first pause is canary_after: {h}"
    );
    assert!(h["canary_paused_until"].is_string(), "until when: {h}");
    assert!(h["canary"]["paused_until_unix_seconds"].is_f64(), "{h}");
    assert_eq!(h["canary_failed"], serde_json::Value::Null);
    assert_eq!(status["upstreams"][0]["state"], "up");
    let (_, page) = sp.get("/").await;
    assert!(page.contains("canaries paused until "), "{page}");
    assert!(page.contains("answered HTTP 401"), "{page}");
    assert_eq!(sp.get("/live/engine").await.0, StatusCode::OK);
    // The key is put right: the next canary, after the back-off, passes.
    stand.set(Mode::Answer);
    eventually(CANARY_AFTER + MARGIN, "a passing canary", || async {
        counter(
            &sp,
            "dynamo_sysport_canary_requests_total",
            &[("result", "success")],
        )
        .await
            == 1.0
    })
    .await;
    assert!(
        refused.elapsed() <= CANARY_AFTER + MARGIN,
        "resumed after {:?}",
        refused.elapsed()
    );
    let (_, body) = health(&sp).await;
    assert_eq!(
        body["upstreams"]["vllm"]["canary"]["stopped"],
        serde_json::Value::Null
    );
    assert_eq!(
        counter(
            &sp,
            "dynamo_sysport_canary_requests_total",
            &[("result", "unauthorized")]
        )
        .await,
        1.0
    );
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn refused_canaries_back_off_doubling_and_readiness_stays_with_the_health_check() {
    let stand = Stand::start().await;
    stand.set(Mode::Unauthorized);
    let sp = Running::start(vllm_config(&stand)).await;
    until_ready(&sp).await;
    until_canary(&stand, CANARY_AFTER + MARGIN).await;
    // Ready all along; refused again after 1 s, then 2 s, then 4 s: about 3 in 6 s, never
    // one per canary_after.
    ready_throughout(&sp, CANARY_AFTER * 6).await;
    let sent = stand.count();
    assert!((2..=4).contains(&sent), "{sent} canaries in 6 s");
    let (_, body) = health(&sp).await;
    let pause = body["upstreams"]["vllm"]["canary"]["pause_seconds"]
        .as_f64()
        .expect("paused");
    assert!(pause >= 2.0, "{body}");
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_model_that_cannot_generate_pauses_the_canaries_without_failing() {
    // A pooling or embedding model: vLLM serves no completion route (404).
    let stand = Stand::start().await;
    let mut c = vllm_config(&stand);
    let canary = c.upstreams[0].canary.as_mut().expect("on");
    canary.url = stand.url("/v1/embeddings-only");
    let sp = Running::start(c).await;
    until_ready(&sp).await;
    eventually(CANARY_AFTER + MARGIN, "a refused canary", || async {
        counter(
            &sp,
            "dynamo_sysport_canary_requests_total",
            &[("result", "cannot_generate")],
        )
        .await
            == 1.0
    })
    .await;
    ready_throughout(&sp, CANARY_AFTER * 2).await;
    let (_, body) = health(&sp).await;
    let stopped = body["upstreams"]["vllm"]["canary"]["stopped"]
        .as_str()
        .expect("why");
    assert!(stopped.contains("HTTP 404"), "{stopped}");
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn sighup_every_3s_keeps_one_canary_in_flight_and_the_failure_and_the_gauge_with_health() {
    // Measured before: with every canary hanging, each reload started the upstream afresh: a
    // second, third... canary in flight to one engine, /health 200 again after each reload, and
    // the old configuration's canary writing its readiness into health_ready.
    let stand = Stand::start().await;
    stand.set(Mode::Hang);
    let metrics = stand.url("/metrics");
    let health_url = stand.url("/health");
    let sp = common::sidecar::Sidecar::launch("canary-sighup")
        .config(|port| {
            format!(
                "listen: {{host: 127.0.0.1, port: {port}}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 health: {{interval: 100ms}}\n\
                 upstreams:\n  - name: vllm\n    url: {metrics}\n    health_url: {health_url}\n    \
                 keep: [\"vllm:\"]\n    canary_after: 1s\n    canary: {{timeout: 4s, model: m1}}\n"
            )
        })
        .start()
        .await;
    // Ready first (the first check passes; the first canary is a second of idleness away).
    eventually(MARGIN, "ready", || async {
        sp.get("/health", &[]).await.status == 200
    })
    .await;
    let started = Instant::now();
    let mut last_hup = Instant::now();
    let mut first_failure: Option<Duration> = None;
    let mut reads = 0;
    while started.elapsed() < Duration::from_secs(30) {
        if last_hup.elapsed() >= Duration::from_secs(3) {
            sp.signal("-HUP");
            last_hup = Instant::now();
        }
        let gauge = |body: &str| metric(body, "dynamo_sysport_health_ready").value();
        let before = gauge(&String::from_utf8_lossy(
            &sp.get("/metrics?name=dynamo_sysport_health_ready", &[])
                .await
                .body,
        ));
        let code = sp.get("/health", &[]).await.status;
        let after = gauge(&String::from_utf8_lossy(
            &sp.get("/metrics?name=dynamo_sysport_health_ready", &[])
                .await
                .body,
        ));
        if before == after {
            // Unless readiness changed between the two reads, the gauge says what /health says.
            assert_eq!(
                before,
                f64::from(u8::from(code == 200)),
                "at {:?}",
                started.elapsed()
            );
            reads += 1;
        }
        if code == 503 && first_failure.is_none() {
            first_failure = Some(started.elapsed());
        }
        if let Some(at) = first_failure {
            assert_eq!(
                code,
                503,
                "not ready from the first failed canary ({at:?}) on, at {:?}",
                started.elapsed()
            );
        }
        assert!(
            stand.engine.most_in_flight.load(Ordering::SeqCst) <= 1,
            "two canaries in flight at {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let failed = first_failure.expect("the hanging canary failed");
    assert!(
        failed < Duration::from_secs(12),
        "first failure at {failed:?}"
    );
    assert!(reads > 50, "{reads} reads agreed");
    assert!(stand.count() >= 3, "canaries went on: {}", stand.count());
    let log = sp.stop().await;
    assert!(log.matches("configuration reloaded").count() >= 8, "{log}");
}

#[tokio::test]
async fn a_url_changed_every_2_5s_keeps_one_canary_at_the_engine_and_readiness_steady() {
    // Measured before: a reload that changed the upstream's URL started its canaries afresh
    // while the old one ran on (9 canary connections held at once), and flipped /health to 503
    // ("not checked yet") until the first check under the new URL.
    let stand = Stand::start().await;
    stand.set(Mode::Hang);
    let health_url = stand.url("/health");
    let yaml = |port: u16, path: &str| {
        let metrics = stand.url(path);
        format!(
            "listen: {{host: 127.0.0.1, port: {port}}}\n\
             shutdown: {{drain_delay: 0s}}\n\
             health: {{interval: 100ms}}\n\
             upstreams:\n  - name: vllm\n    url: {metrics}\n    health_url: {health_url}\n    \
             keep: [\"vllm:\"]\n    canary_after: 1s\n    canary: {{timeout: 4s, model: m1}}\n"
        )
    };
    let sp = common::sidecar::Sidecar::launch("canary-url-flips")
        .config(|port| yaml(port, "/metrics"))
        .start()
        .await;
    eventually(MARGIN, "ready", || async {
        sp.get("/health", &[]).await.status == 200
    })
    .await;
    let started = Instant::now();
    let mut last_hup = Instant::now();
    let mut flips = 0;
    while started.elapsed() < Duration::from_secs(20) {
        if last_hup.elapsed() >= Duration::from_millis(2_500) {
            flips += 1;
            let path = if flips % 2 == 1 {
                "/engine/metrics"
            } else {
                "/metrics"
            };
            std::fs::write(sp.config_path(), yaml(sp.port, path)).expect("write config");
            sp.signal("-HUP");
            last_hup = Instant::now();
        }
        let answer = sp.get("/health", &[]).await;
        let (code, body) = (answer.status, String::from_utf8_lossy(&answer.body));
        assert_eq!(code, 200, "at {:?}: {body}", started.elapsed());
        assert!(
            stand.engine.in_flight.load(Ordering::SeqCst) <= 1
                && stand.engine.most_in_flight.load(Ordering::SeqCst) <= 1,
            "two canaries open at the engine at {:?}",
            started.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A canary under each URL: cancelled at the reload, never left running beside the next.
    assert!(stand.count() >= 5, "canaries went on: {}", stand.count());
    // Not ready for a moment, even between two polls, is logged.
    let log = sp.log();
    assert!(log.matches("configuration reloaded").count() >= 7, "{log}");
    assert!(!log.contains("ready=false"), "{log}");
    sp.stop().await;
}

#[tokio::test]
async fn an_idle_engines_vitals_leave_out_the_canaries_and_show_them_beside() {
    // Measured before: an idle engine's request and token rates were sysport's own canaries
    // (0.055/s on the status page).
    let stand = Stand::start().await;
    let sp = Running::start(vllm_config(&stand)).await;
    until_ready(&sp).await;
    eventually(CANARY_AFTER * 4 + MARGIN * 2, "three canaries", || async {
        stand.engine.served.load(Ordering::SeqCst) >= 3
    })
    .await;
    // The readings since the first canary span a canary or more.
    tokio::time::sleep(INTERVAL * 3).await;
    let (_, status) = sp.get("/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
    let vitals = &status["upstreams"][0]["vitals"];
    assert_eq!(vitals["requests_per_second"], 0.0, "{vitals}");
    assert_eq!(vitals["generation_tokens_per_second"], 0.0, "{vitals}");
    let canaries = vitals["canaries"]["requests_per_second"]
        .as_f64()
        .expect("the canaries' rate");
    assert!(canaries > 0.0, "{vitals}");
    assert_eq!(
        vitals["canaries"]["generation_tokens_per_second"].as_f64(),
        Some(canaries),
        "one token each: {vitals}"
    );
    let (_, page) = sp.get("/").await;
    assert!(
        page.contains("data-key=\"canaries.requests_per_second\""),
        "{page}"
    );
    assert!(
        page.contains("data-key=\"requests_per_second\" data-value=\"0\""),
        "{page}"
    );
    sp.shutdown().await.expect("clean shutdown");
}
