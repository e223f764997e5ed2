//! Stand-in engines for the control routes: each serves, on loopback, the routes sysport maps
//! to (see `sysport::model::control`), with the shapes the engine's source gives them, and
//! records every request so a test can tell whether the engine was asked.
//! - vLLM 0.32 (`vllm/entrypoints/serve/...`): `GET /version` `{"version"}`; `GET /v1/models`
//!   (an adapter's entry with `parent` and `root`); the dev-mode routes `POST /sleep?level=`
//!   `{"status":"sleeping","level"}`, `POST /wake_up` `{"status":"awake","tags"}`, `GET
//!   /is_sleeping` `{"is_sleeping"}`, `POST /reset_prefix_cache` `{"success"}`; `POST
//!   /v1/load_lora_adapter` (a plain-text success, served only with
//!   `VLLM_ALLOW_RUNTIME_LORA_UPDATING`, else FastAPI's 404 `{"detail":"Not Found"}`) and
//!   `/v1/unload_lora_adapter`; `/metrics` with `vllm:cache_config_info` and
//!   `vllm:lora_requests_info`.
//! - SGLang (`python/sglang/srt/entrypoints/http_server.py`): `GET /get_server_info` (the server
//!   arguments, `api_key` among them, and `version`), `POST /flush_cache`, `/v1/models`.
//! - llama.cpp (`tools/server/server-context.cpp`): `GET /props` (`build_info`, `model_path`,
//!   `default_generation_settings.n_ctx`), `GET /v1/models` (`meta.n_ctx`), `POST
//!   /slots/{id}?action=erase` `{"id_slot","n_erased"}`, `GET /lora-adapters`
//!   `[{"id","path","scale"}]` and `POST /lora-adapters` `[{"id","scale"}]` (an adapter left
//!   out is set to 0, `construct_lora_list`).
#![allow(dead_code, unreachable_pub)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, RawQuery, State};
use axum::http::{Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// What the stand-in does besides answering.
#[derive(Default)]
pub struct Behaviour {
    /// Every dev-mode route hangs this long before answering.
    pub hang: Mutex<Option<Duration>>,
    /// `/is_sleeping` answers this many bytes of JSON instead.
    pub huge: Mutex<Option<usize>>,
    /// vLLM's `VLLM_ALLOW_RUNTIME_LORA_UPDATING`.
    pub lora_updating: AtomicBool,
    /// `/metrics` answers 503 (the engine down, or restarting).
    pub down: AtomicBool,
    /// vLLM's `/version`, when not `0.32.0`.
    pub version: Mutex<Option<String>>,
    /// Added to vLLM's `process_start_time_seconds` (prometheus_client's process collector,
    /// which vLLM's `/metrics` serves): a restart.
    pub restarted_after: std::sync::atomic::AtomicU64,
}

struct Engine {
    requests: Mutex<Vec<String>>,
    sleeping: AtomicBool,
    prefix_resets: AtomicUsize,
    /// vLLM: loaded adapters (name, path); llama.cpp: adapters (path, scale).
    loras: Mutex<Vec<(String, String)>>,
    scales: Mutex<Vec<(String, f64)>>,
    behaviour: Behaviour,
}

/// A stand-in engine on loopback.
pub struct StandIn {
    pub addr: SocketAddr,
    engine: Arc<Engine>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for StandIn {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl StandIn {
    async fn serve(router: Router<Arc<Engine>>, scales: Vec<(String, f64)>) -> StandIn {
        let engine = Arc::new(Engine {
            requests: Mutex::new(Vec::new()),
            sleeping: AtomicBool::new(false),
            prefix_resets: AtomicUsize::new(0),
            loras: Mutex::new(Vec::new()),
            scales: Mutex::new(scales),
            behaviour: Behaviour::default(),
        });
        let recorder = engine.clone();
        let app = router
            .layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let recorder = recorder.clone();
                    async move {
                        let line = format!("{} {}", req.method(), req.uri());
                        recorder.requests.lock().expect("lock").push(line);
                        next.run(req).await
                    }
                },
            ))
            .with_state(engine.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        StandIn { addr, engine, task }
    }

    /// vLLM with its development-mode routes.
    pub async fn vllm() -> StandIn {
        let router = Router::new()
            .route("/metrics", get(vllm_metrics))
            .route("/health", get(|| async { StatusCode::OK }))
            .route(
                "/version",
                get(|State(e): State<Arc<Engine>>| async move {
                    let v = e.behaviour.version.lock().expect("lock").clone();
                    Json(json!({"version": v.as_deref().unwrap_or("0.32.0")}))
                }),
            )
            .route("/v1/models", get(vllm_models))
            .route("/sleep", post(sleep))
            .route("/wake_up", post(wake_up))
            .route("/is_sleeping", get(is_sleeping))
            .route("/reset_prefix_cache", post(reset_prefix_cache))
            .route("/v1/load_lora_adapter", post(load_lora))
            .route("/v1/unload_lora_adapter", post(unload_lora))
            .fallback(|| async { (StatusCode::NOT_FOUND, Json(json!({"detail": "Not Found"}))) });
        StandIn::serve(router, Vec::new()).await
    }

    /// SGLang.
    pub async fn sglang() -> StandIn {
        let router = Router::new()
            .route("/metrics", get(|| async {
                "# TYPE sglang:cache_config_info gauge\n\
                 sglang:cache_config_info{page_size=\"1\",max_total_num_tokens=\"8192\"} 1\n"
            }))
            .route("/health", get(|| async { StatusCode::OK }))
            .route("/get_server_info", get(|| async {
                Json(json!({"version": "0.5.4", "api_key": "sk-hidden-key",
                                  "model_path": "/m/tiny", "port": 30000}))
            }))
            .route("/v1/models", get(|| async {
                Json(json!({"object": "list", "data": [
                    {"id": "tiny", "root": "tiny", "max_model_len": 4096, "parent": null}]}))
            }))
            .route("/flush_cache", post(|State(e): State<Arc<Engine>>| async move {
                e.prefix_resets.fetch_add(1, Ordering::SeqCst);
                "Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n"
            }));
        StandIn::serve(router, Vec::new()).await
    }

    /// llama-server started with adapters `--lora a.gguf --lora b.gguf`.
    pub async fn llamacpp(adapters: &[&str]) -> StandIn {
        let router = Router::new()
            .route(
                "/metrics",
                get(|| async {
                    "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 0\n"
                }),
            )
            .route("/health", get(|| async { Json(json!({"status": "ok"})) }))
            .route(
                "/props",
                get(|| async {
                    Json(
                        json!({"build_info": "b7142-5d3a4e6a", "model_path": "/m/tiny.gguf",
                    "total_slots": 4, "default_generation_settings": {"n_ctx": 1024}}),
                    )
                }),
            )
            .route(
                "/v1/models",
                get(|| async {
                    Json(json!({"object": "list", "data": [
                    {"id": "tiny.gguf", "object": "model", "owned_by": "llamacpp",
                     "meta": {"n_ctx": 1024, "n_ctx_train": 2048}}]}))
                }),
            )
            .route("/slots/{id}", post(erase_slot))
            .route("/lora-adapters", get(get_scales).post(set_scales));
        let scales = adapters.iter().map(|a| (a.to_string(), 1.0)).collect();
        StandIn::serve(router, scales).await
    }

    /// An engine that answers any method on any path with 200 and what it was asked; for
    /// checking where each name is sent.
    pub async fn recorder() -> StandIn {
        let router = Router::new().fallback(|method: Method, uri: Uri| async move {
            Json(json!({"method": method.as_str(), "path": uri.to_string()}))
        });
        StandIn::serve(router, Vec::new()).await
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn behaviour(&self) -> &Behaviour {
        &self.engine.behaviour
    }

    /// Every request so far, as `METHOD /path?query`.
    pub fn requests(&self) -> Vec<String> {
        self.engine.requests.lock().expect("lock").clone()
    }

    /// The requests other than sysport's own reads (`/metrics`, `/health`, inventory).
    pub fn control_requests(&self) -> Vec<String> {
        self.requests()
            .into_iter()
            .filter(|r| {
                ![
                    "GET /metrics",
                    "GET /health",
                    "GET /version",
                    "GET /v1/models",
                    "GET /props",
                    "GET /get_server_info",
                ]
                .iter()
                .any(|p| r.starts_with(p))
            })
            .collect()
    }

    pub fn prefix_resets(&self) -> usize {
        self.engine.prefix_resets.load(Ordering::SeqCst)
    }

    pub fn scales(&self) -> Vec<(String, f64)> {
        self.engine.scales.lock().expect("lock").clone()
    }
}

async fn hang(e: &Engine) {
    let hang = *e.behaviour.hang.lock().expect("lock");
    if let Some(d) = hang {
        tokio::time::sleep(d).await;
    }
}

async fn vllm_metrics(State(e): State<Arc<Engine>>) -> Response {
    if e.behaviour.down.load(Ordering::SeqCst) {
        return StatusCode::SERVICE_UNAVAILABLE.into_response();
    }
    let running: Vec<String> = e
        .loras
        .lock()
        .expect("lock")
        .iter()
        .map(|l| l.0.clone())
        .collect();
    format!(
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n\
         # TYPE vllm:cache_config_info gauge\n\
         vllm:cache_config_info{{block_size=\"16\",cache_dtype=\"auto\",num_gpu_blocks=\"512\"}} 1.0\n\
         # TYPE vllm:lora_requests_info gauge\n\
         vllm:lora_requests_info{{max_lora=\"2\",running_lora_adapters=\"\",waiting_lora_adapters=\"\"}} 1.7e9\n\
         vllm:lora_requests_info{{max_lora=\"2\",running_lora_adapters=\"{}\",waiting_lora_adapters=\"\"}} 1.8e9\n\
         # HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n\
         # TYPE process_start_time_seconds gauge\n\
         process_start_time_seconds {}\n",
        running.join(","),
        1_700_000_000 + e.behaviour.restarted_after.load(Ordering::SeqCst),
    )
    .into_response()
}

async fn vllm_models(State(e): State<Arc<Engine>>) -> Json {
    let mut data = vec![json!({"id": "tiny", "object": "model", "root": "/m/tiny",
                              "parent": null, "max_model_len": 256})];
    for (name, path) in e.loras.lock().expect("lock").iter() {
        data.push(
            json!({"id": name, "object": "model", "root": path, "parent": "tiny",
                         "max_model_len": 256}),
        );
    }
    Json(json!({"object": "list", "data": data}))
}

async fn sleep(State(e): State<Arc<Engine>>, RawQuery(q): RawQuery) -> Json {
    hang(&e).await;
    e.sleeping.store(true, Ordering::SeqCst);
    let level: u32 = q
        .as_deref()
        .and_then(|q| q.strip_prefix("level="))
        .and_then(|l| l.parse().ok())
        .unwrap_or(1);
    Json(json!({"status": "sleeping", "level": level}))
}

async fn wake_up(State(e): State<Arc<Engine>>) -> Json {
    hang(&e).await;
    e.sleeping.store(false, Ordering::SeqCst);
    Json(json!({"status": "awake", "tags": null}))
}

async fn is_sleeping(State(e): State<Arc<Engine>>) -> Response {
    hang(&e).await;
    let huge = *e.behaviour.huge.lock().expect("lock");
    if let Some(n) = huge {
        let body = format!("{{\"pad\":\"{}\"}}", "x".repeat(n));
        return (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            body,
        )
            .into_response();
    }
    Json(json!({"is_sleeping": e.sleeping.load(Ordering::SeqCst)})).into_response()
}

async fn reset_prefix_cache(State(e): State<Arc<Engine>>) -> Json {
    hang(&e).await;
    e.prefix_resets.fetch_add(1, Ordering::SeqCst);
    Json(json!({"success": true}))
}

async fn load_lora(State(e): State<Arc<Engine>>, body: Bytes) -> Response {
    if !e.behaviour.lora_updating.load(Ordering::SeqCst) {
        return (StatusCode::NOT_FOUND, Json(json!({"detail": "Not Found"}))).into_response();
    }
    let v: Value = serde_json::from_slice(&body).expect("json");
    let name = v["lora_name"].as_str().expect("lora_name").to_owned();
    let path = v["lora_path"].as_str().expect("lora_path").to_owned();
    let mut loras = e.loras.lock().expect("lock");
    if loras.iter().any(|l| l.0 == name) {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message":
            format!("The lora adapter '{name}' has already been loaded."),
            "type": "InvalidUserInput", "code": 400}})),
        )
            .into_response();
    }
    loras.push((name.clone(), path));
    format!("Success: LoRA adapter '{name}' added successfully.").into_response()
}

async fn unload_lora(State(e): State<Arc<Engine>>, body: Bytes) -> Response {
    if !e.behaviour.lora_updating.load(Ordering::SeqCst) {
        return (StatusCode::NOT_FOUND, Json(json!({"detail": "Not Found"}))).into_response();
    }
    let v: Value = serde_json::from_slice(&body).expect("json");
    let name = v["lora_name"].as_str().expect("lora_name");
    let mut loras = e.loras.lock().expect("lock");
    let before = loras.len();
    loras.retain(|l| l.0 != name);
    if loras.len() == before {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": {"message":
            format!("The lora adapter '{name}' cannot be found."),
            "type": "NotFoundError", "code": 404}})),
        )
            .into_response();
    }
    format!("Success: LoRA adapter '{name}' removed successfully.").into_response()
}

async fn erase_slot(Path(id): Path<u32>, uri: Uri, method: Method) -> Response {
    assert_eq!(method, Method::POST);
    if uri.query() != Some("action=erase") {
        return (
            StatusCode::BAD_REQUEST,
            Json(json!({"error": {"message": "Invalid action"}})),
        )
            .into_response();
    }
    Json(json!({"id_slot": id, "n_erased": 7})).into_response()
}

async fn get_scales(State(e): State<Arc<Engine>>) -> Json {
    let list: Vec<Value> = (e.scales.lock().expect("lock").iter().enumerate())
        .map(|(i, (path, scale))| json!({"id": i, "path": path, "scale": scale}))
        .collect();
    Json(Value::Array(list))
}

async fn set_scales(State(e): State<Arc<Engine>>, body: Bytes) -> Json {
    let v: Value = serde_json::from_slice(&body).expect("json");
    let mut scales = e.scales.lock().expect("lock");
    for (i, (_, scale)) in scales.iter_mut().enumerate() {
        *scale = v
            .as_array()
            .expect("a list")
            .iter()
            .find(|a| a["id"].as_u64() == Some(i as u64))
            .and_then(|a| a["scale"].as_f64())
            .unwrap_or(0.0);
    }
    Json(json!({"success": true}))
}

/// A JSON answer (sysport builds axum without its `json` feature).
pub struct Json(pub Value);

impl IntoResponse for Json {
    fn into_response(self) -> Response {
        (
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            self.0.to_string(),
        )
            .into_response()
    }
}
