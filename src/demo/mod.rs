//! Simulated vLLM and LMCache upstreams for `sysport demo`, so the sidecar can be tried without a
//! GPU.
//!
//! [`DemoUpstreams::start`] serves two pages on OS-assigned ports: the vLLM API server
//! (`/metrics`, `/health`) and LMCache's API server (`/metrics`). Both are rendered from one
//! simulated workload (two data-parallel engines of `demo-model`, each with an LMCache worker)
//! that advances to the current wall time on every scrape, so counters grow, histograms fill and
//! gauges swing while the demo runs. The text is what Python `prometheus_client` prints for these
//! engines, including the families the sidecar has to drop (`python_*`, `process_*`, `http_*`).
//!
//! `POST /demo/stall` on the vLLM server hangs the engines at their next step with requests
//! running, the way a deadlocked engine hangs: every number stands still while its `/health`
//! stays 200. `POST /demo/break-generate` breaks generation on a quiet engine: no request
//! arrives any more, the engines drain and go idle, and `/v1/completions` hangs while `/health`
//! stays 200, for sysport's canaries to find. `POST /demo/resume` heals both.
//!
//! The vLLM server also answers `GET /v1/models` and `POST /v1/completions` in the shapes of
//! vLLM's OpenAI server (`vllm/entrypoints/openai/api_server.py`), for canary requests.
//!
//! - `sim`: the workload (queueing, prefill, decode, preemption, prefix cache).
//! - `lmcache`: the LMCache worker and its page; `vllm`: the vLLM page.
//! - `process`: Python runtime and HTTP instrumentator families.
//! - `expo`: the text writer (`prometheus_client` formatting); `rng`: a SplitMix64 PRNG.

mod expo;
mod lmcache;
mod pages;
mod process;
mod rng;
mod served;
mod sim;

use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use self::served::MODEL;
use self::sim::Sim;

/// The content type `prometheus_client` answers with for text 0.0.4.
const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// One fixed seed: every demo run tells the same story.
const SEED: u64 = 0x5EED_0DE3_0C0D_E5A1;
/// The engines have been running this long when the demo starts, so the first scrape already
/// shows filled histograms.
const WARM_UP_SECONDS: f64 = 120.0;

/// The two simulated upstreams, serving until the `shutdown` future given to [`start`] resolves.
///
/// [`start`]: DemoUpstreams::start
#[derive(Debug)]
pub struct DemoUpstreams {
    /// Address of the simulated vLLM API server (`/metrics`, `/health`).
    pub vllm: SocketAddr,
    /// Address of the simulated LMCache API server (`/metrics`).
    pub lmcache: SocketAddr,
    servers: [JoinHandle<()>; 2],
}

impl DemoUpstreams {
    /// Binds both servers on `host` with OS-assigned ports and serves until `shutdown` resolves.
    ///
    /// Binding happens before anything is spawned, so an unusable address fails here.
    pub async fn start(
        host: IpAddr,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> io::Result<Self> {
        let vllm_listener = TcpListener::bind(SocketAddr::new(host, 0)).await?;
        let lmcache_listener = TcpListener::bind(SocketAddr::new(host, 0)).await?;
        let vllm = vllm_listener.local_addr()?;
        let lmcache = lmcache_listener.local_addr()?;

        let workload = Workload::new();
        let vllm_app = Router::new()
            .route("/metrics", get(vllm_metrics))
            .route("/health", get(|| async { StatusCode::OK }))
            .route("/demo/stall", post(stall))
            .route("/demo/resume", post(resume))
            .route("/demo/break-generate", post(break_generate))
            .route("/v1/models", get(models))
            .route("/v1/completions", post(completions))
            .with_state(workload.clone());
        let lmcache_app = Router::new()
            .route("/metrics", get(lmcache_metrics))
            .with_state(workload);

        let (stop_tx, stop_rx) = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            stop_tx.send_replace(true);
        });
        let servers = [
            tokio::spawn(serve("vllm", vllm_listener, vllm_app, stop_rx.clone())),
            tokio::spawn(serve("lmcache", lmcache_listener, lmcache_app, stop_rx)),
        ];
        tracing::info!(%vllm, %lmcache, "demo upstreams listening");
        Ok(DemoUpstreams {
            vllm,
            lmcache,
            servers,
        })
    }

    /// `http://ADDR/metrics` of the simulated vLLM server.
    pub fn vllm_metrics_url(&self) -> String {
        format!("http://{}/metrics", self.vllm)
    }

    /// `http://ADDR/health` of the simulated vLLM server (200, empty body, like vLLM).
    pub fn vllm_health_url(&self) -> String {
        format!("http://{}/health", self.vllm)
    }

    /// `http://ADDR/demo/stall` of the simulated vLLM server: `POST` hangs its engines.
    pub fn vllm_stall_url(&self) -> String {
        format!("http://{}/demo/stall", self.vllm)
    }

    /// `http://ADDR/demo/resume` of the simulated vLLM server: `POST` lets them go on.
    pub fn vllm_resume_url(&self) -> String {
        format!("http://{}/demo/resume", self.vllm)
    }

    /// `http://ADDR/demo/break-generate` of the simulated vLLM server: `POST` breaks generation.
    pub fn vllm_break_generate_url(&self) -> String {
        format!("http://{}/demo/break-generate", self.vllm)
    }

    /// `http://ADDR/metrics` of the simulated LMCache server.
    pub fn lmcache_metrics_url(&self) -> String {
        format!("http://{}/metrics", self.lmcache)
    }

    /// Waits until both servers have stopped (after shutdown and their open requests).
    pub async fn wait(self) {
        for server in self.servers {
            if let Err(err) = server.await {
                tracing::error!(error = %err, "demo upstream task failed");
            }
        }
    }
}

async fn serve(
    name: &'static str,
    listener: TcpListener,
    app: Router,
    mut stop: watch::Receiver<bool>,
) {
    let signal = async move {
        // An error means the sender is gone, so nothing can signal shutdown any more: stop too.
        let _ = stop.wait_for(|stopped| *stopped).await;
    };
    if let Err(err) = axum::serve(listener, app)
        .with_graceful_shutdown(signal)
        .await
    {
        tracing::error!(error = %err, upstream = name, "demo upstream failed");
    }
}

/// The shared simulation and the instant its clock counts from.
#[derive(Clone)]
struct Workload {
    sim: Arc<Mutex<Sim>>,
    started: Instant,
}

#[derive(Clone, Copy)]
enum Page {
    Vllm = 0,
    Lmcache = 1,
}

impl Workload {
    fn new() -> Self {
        let unix_now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        let mut sim = Sim::new(SEED, unix_now - WARM_UP_SECONDS);
        sim.advance_to(WARM_UP_SECONDS);
        Workload {
            sim: Arc::new(Mutex::new(sim)),
            started: Instant::now(),
        }
    }

    /// Advances the workload to now and applies `f` to it.
    fn with_sim<T>(&self, f: impl FnOnce(&mut Sim) -> T) -> T {
        let now = WARM_UP_SECONDS + self.started.elapsed().as_secs_f64();
        let mut sim = self.sim.lock().unwrap_or_else(PoisonError::into_inner);
        sim.advance_to(now);
        f(&mut sim)
    }

    /// Advances the workload to now and renders one page into a buffer sized by the last one.
    fn scrape(&self, page: Page) -> impl IntoResponse + use<> {
        let out = self.with_sim(|sim| {
            let mut out = String::with_capacity(sim.size_hints[page as usize] + 4096);
            match page {
                Page::Vllm => pages::vllm(sim, &mut out),
                Page::Lmcache => pages::lmcache(sim, &mut out),
            }
            sim.size_hints[page as usize] = out.len();
            out
        });
        ([(header::CONTENT_TYPE, CONTENT_TYPE_TEXT)], out)
    }
}

async fn vllm_metrics(State(workload): State<Workload>) -> impl IntoResponse {
    workload.scrape(Page::Vllm)
}

async fn lmcache_metrics(State(workload): State<Workload>) -> impl IntoResponse {
    workload.scrape(Page::Lmcache)
}

async fn stall(State(workload): State<Workload>) -> &'static str {
    workload.with_sim(Sim::hang);
    "the engines hang at their next step with requests running: their numbers stand still, \
     their /health stays 200\n"
}

async fn resume(State(workload): State<Workload>) -> &'static str {
    workload.with_sim(Sim::resume);
    "the engines step again, and generate again\n"
}

async fn break_generate(State(workload): State<Workload>) -> &'static str {
    workload.with_sim(|sim| sim.broken = true);
    "no more requests arrive and generation hangs: /health stays 200, /v1/completions never \
     answers\n"
}

/// vLLM's model list: one model, its `id` what a completion names.
async fn models() -> impl IntoResponse {
    let body = serde_json::json!({
        "object": "list",
        "data": [{"id": MODEL, "object": "model", "owned_by": "vllm", "root": MODEL}],
    });
    json(body)
}

/// A one-token completion in the OpenAI shape, or, while generation is broken, no answer (until
/// the client gives up; bounded so a forgotten request ends).
async fn completions(State(workload): State<Workload>) -> axum::response::Response {
    if workload.with_sim(|sim| sim.broken) {
        tokio::time::sleep(std::time::Duration::from_secs(300)).await;
        return StatusCode::GATEWAY_TIMEOUT.into_response();
    }
    let created = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let body = serde_json::json!({
        "id": format!("cmpl-demo-{created}"),
        "object": "text_completion",
        "created": created,
        "model": MODEL,
        "choices": [{"index": 0, "text": ".", "logprobs": null, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    });
    json(body).into_response()
}

fn json(body: serde_json::Value) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
}

#[cfg(test)]
mod tests;
