//! What sysport knows about each inference engine, as plain data: where it serves its metrics
//! and health, which families are its own, which of them an endpoint picker reads, which labels
//! split one engine's numbers into copies, and which families it renamed.
//!
//! The vitals families (see the `vitals` module and `docs/vitals.md`): requests running and
//! waiting, KV cache usage, counters of finished requests, prompt and generation tokens,
//! preemptions, prefix-cache hits and queries, and the histograms of time to first token,
//! inter-token latency and end-to-end latency:
//! - vLLM: `vllm/v1/metrics/loggers.py` (`PrometheusStatLogger`), renamed families read under
//!   either name (`renames`).
//! - SGLang: `python/sglang/srt/metrics/collector.py` (`SchedulerMetricsCollector`,
//!   `TokenizerMetricsCollector`); its preemptions are retractions
//!   (`num_retracted_requests_total`), its prefix cache hits are `cached_tokens_total` out of
//!   `prompt_tokens_total`. Also written `sglang_` (the model gateway's `/engine_metrics`,
//!   sgl-project/sglang #12970 and #15758, llm-d/llm-d #1970, ai-dynamo/dynamo #5701), so
//!   every `sglang:` family is read under that spelling too (`spellings`).
//! - trtllm-serve: `tensorrt_llm/metrics/collector.py` (request success counter and the three
//!   latency histograms; it has no token or preemption counters).
//! - Triton: its metrics documentation (`docs/user_guide/metrics.md`): the TensorRT-LLM
//!   backend's request and KV block gauges and `nv_inference_request_success`; its latency
//!   figures are summaries and counters in microseconds, not histograms in seconds.
//!
//! Sources, per engine (also cited in docs/configuration.md):
//! - vLLM: `vllm serve` listens on 8000, `/metrics` and `/health`; families and deprecations from
//!   `vllm/v1/metrics/loggers.py` and the production metrics page; `engine` is the data-parallel
//!   rank (one series per engine core), `pid` the API-server process in prometheus_client's
//!   multiprocess mode (vllm #28792).
//! - SGLang: `--port` 30000 with `--enable-metrics`, `/metrics` and `/health`; scheduler gauges
//!   from `sglang/srt/metrics/collector.py` with `dp_rank` when data-parallel and `tp_rank`,
//!   `pp_rank`, `moe_ep_rank` on every scheduler (`--enable-metrics-for-all-schedulers`).
//! - trtllm-serve: port 8000, Prometheus text at `/prometheus/metrics` (its `/metrics` is JSON
//!   iteration stats), `/health`; families from `tensorrt_llm/metrics/collector.py`.
//! - Triton with the TensorRT-LLM backend: metrics on 8002 at `/metrics`, readiness at
//!   `/v2/health/ready` on the HTTP port 8000; `nv_trt_llm_*` families of the backend.
//! - llama.cpp's `llama-server`: port 8080; `/metrics` only with `--metrics`, `/health` (503
//!   while the model loads, answered on the HTTP thread), `/completion`
//!   (`tools/server/server.cpp`, the routes; `tools/server/server-context.cpp`, their
//!   handlers); its families in `tools/server/server-task.cpp`: no labels, no histograms, the
//!   slots being processed and the requests deferred (waiting for a slot), and counters of
//!   prompt and predicted tokens and of decode calls. Its two throughput gauges
//!   (`prompt_tokens_seconds`, `predicted_tokens_seconds`) average over the time since the
//!   last read of `/metrics` by anyone (`get_metrics` resets that bucket), so sysport's own
//!   reads shorten them for every other reader: the vitals take throughput from the counters.
//!
//! The router families are the ones the Gateway API Inference Extension's endpoint picker and
//! llm-d's read for each engine type (their `engineConfigs` defaults).
//!
//! The stall families (see the `stall` module) are a gauge of requests being worked on and
//! counters that move while they are, not only when one completes:
//! - vLLM: `vllm:num_requests_running`, and `vllm:iteration_tokens_total`, a histogram observed
//!   once per engine step (`vllm/v1/metrics/loggers.py`), whose `_count` is a step counter.
//! - SGLang: `sglang:num_running_reqs`, and `sglang:realtime_tokens_total` (`mode` = prefill
//!   compute, prefill cache, decode), which the scheduler adds to after every prefill batch and
//!   decode step (`sglang/srt/metrics/collector.py`, `increment_realtime_tokens`). Versions
//!   before it have no such counter: their `generation_tokens_total` moves when a request ends.
//! - trtllm-serve: `trtllm_num_requests_running`, and, with no iteration counter on offer, two
//!   counters of its iteration statistics (`tensorrt_llm/metrics/collector.py`,
//!   `log_iteration_stats`): `trtllm_kv_cache_gen_alloc_blocks_total`, a KV block for every
//!   `tokens_per_block` tokens a running request generates, and
//!   `trtllm_num_requests_completed_total`, for requests too short to fill a block.
//! - Triton's TensorRT-LLM backend: `nv_trt_llm_request_metrics{request_type="active"}`, and
//!   `nv_trt_llm_general_metrics{general_type="iteration_counter"}`, the executor's iteration
//!   number (a gauge that only counts up), from the backend's metrics documentation.
//! - llama.cpp: `llamacpp:requests_processing`, and `llamacpp:n_decode_total` (one per decode
//!   call of the inference loop) and `llamacpp:tokens_predicted_total`.
//!
//! Each engine's waiting gauge (requests queued, none of them running yet) makes it busy too:
//! vLLM `num_requests_waiting`, SGLang `num_queue_reqs`, trtllm-serve
//! `trtllm_num_requests_waiting`, Triton `request_type="waiting"`, llama.cpp
//! `requests_deferred`.

use std::sync::LazyLock;

use super::family::{FamilyKey, Op, ViewFamily};

/// An inference engine sysport has a preset for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Vllm,
    Sglang,
    Trtllm,
    Triton,
    Llamacpp,
}

/// The name of the built-in view of every engine's router families (`/metrics/router`).
pub const ROUTER_VIEW: &str = "router";

/// What tells a busy engine from a stuck one: gauges of requests being worked on and waiting to
/// be, and counters (or a histogram's `_count`) that move while they are.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StallFamilies {
    pub busy: FamilyKey,
    pub waiting: FamilyKey,
    pub progress: Vec<FamilyKey>,
}

/// The families the vitals read (see the `vitals` module): gauges read now, counters as rates,
/// histograms (declared names) as quantiles. `None`: the engine has no such family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VitalsFamilies {
    pub running: FamilyKey,
    pub waiting: FamilyKey,
    pub kv_usage: Option<FamilyKey>,
    pub requests: Option<FamilyKey>,
    pub prompt_tokens: Option<FamilyKey>,
    pub generation_tokens: Option<FamilyKey>,
    pub preemptions: Option<FamilyKey>,
    pub prefix_hits: Option<FamilyKey>,
    pub prefix_queries: Option<FamilyKey>,
    pub ttft: Option<&'static str>,
    pub itl: Option<&'static str>,
    pub e2e: Option<&'static str>,
}

/// A family the engine renamed: `old` was deprecated in favour of `new` (declared names; a
/// counter's samples carry `_total` after either).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rename {
    pub old: &'static str,
    pub new: &'static str,
}

/// The defaults and facts of one engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preset {
    pub engine: Engine,
    /// The `engine:` value in the configuration.
    pub name: &'static str,
    /// Family-name prefixes of the engine's own families.
    pub keep: &'static [&'static str],
    /// Where the engine serves its metrics by default.
    pub metrics_url: &'static str,
    /// Where it tells whether it is ready.
    pub health_url: &'static str,
    /// What an endpoint picker reads, and how copies of each number combine.
    pub router: Vec<ViewFamily>,
    /// Labels that tell processes of one server apart (prometheus_client's multiprocess mode):
    /// copies of one number, the live process's the largest.
    pub process_labels: &'static [&'static str],
    /// Labels that tell apart copies of one data-parallel rank (tensor- and pipeline-parallel
    /// workers report the same scheduler): combined with `max`.
    pub replica_labels: &'static [&'static str],
    /// Labels that tell data-parallel ranks apart: combined with each family's operation.
    pub rank_labels: &'static [&'static str],
    /// Families renamed by the engine, from its own deprecation notes.
    pub renames: &'static [Rename],
    /// The families `stall_after` watches.
    pub stall: StallFamilies,
    /// The families the vitals read.
    pub vitals: VitalsFamilies,
    /// Prefixes the engine's families are also written with (`sglang:` as `sglang_`): every
    /// family is read under either.
    pub spellings: &'static [(&'static str, &'static str)],
}

fn family(name: &str, op: Op) -> ViewFamily {
    ViewFamily {
        key: FamilyKey::named(name),
        op,
    }
}

fn selected(name: &str, label: &str, value: &str, op: Op) -> ViewFamily {
    ViewFamily {
        key: FamilyKey::selected(name, label, value),
        op,
    }
}

fn read(name: &str) -> FamilyKey {
    FamilyKey::named(name)
}

fn some(name: &str) -> Option<FamilyKey> {
    Some(read(name))
}

/// Every preset, `vllm` (the default) first.
pub static PRESETS: LazyLock<[Preset; 5]> = LazyLock::new(|| {
    [
        Preset {
            engine: Engine::Vllm,
            name: "vllm",
            keep: &["vllm:", "lmcache:"],
            metrics_url: "http://127.0.0.1:8000/metrics",
            health_url: "http://127.0.0.1:8000/health",
            router: vec![
                family("vllm:num_requests_waiting", Op::Sum),
                family("vllm:num_requests_running", Op::Sum),
                family("vllm:kv_cache_usage_perc", Op::Avg),
                family("vllm:gpu_cache_usage_perc", Op::Avg),
                family("vllm:lora_requests_info", Op::Pass),
                family("vllm:cache_config_info", Op::Pass),
            ],
            process_labels: &["pid"],
            replica_labels: &[],
            rank_labels: &["engine"],
            // Deprecated in 0.9.2 (the first three) and 0.11 (the last), hidden one minor version
            // later, removed the one after (vllm/v1/metrics/loggers.py).
            renames: &[
                Rename {
                    old: "vllm:gpu_cache_usage_perc",
                    new: "vllm:kv_cache_usage_perc",
                },
                Rename {
                    old: "vllm:gpu_prefix_cache_queries",
                    new: "vllm:prefix_cache_queries",
                },
                Rename {
                    old: "vllm:gpu_prefix_cache_hits",
                    new: "vllm:prefix_cache_hits",
                },
                Rename {
                    old: "vllm:time_per_output_token_seconds",
                    new: "vllm:inter_token_latency_seconds",
                },
            ],
            stall: StallFamilies {
                busy: read("vllm:num_requests_running"),
                waiting: read("vllm:num_requests_waiting"),
                progress: vec![read("vllm:iteration_tokens_total")],
            },
            vitals: VitalsFamilies {
                running: read("vllm:num_requests_running"),
                waiting: read("vllm:num_requests_waiting"),
                kv_usage: some("vllm:kv_cache_usage_perc"),
                requests: some("vllm:request_success_total"),
                prompt_tokens: some("vllm:prompt_tokens_total"),
                generation_tokens: some("vllm:generation_tokens_total"),
                preemptions: some("vllm:num_preemptions_total"),
                prefix_hits: some("vllm:prefix_cache_hits_total"),
                prefix_queries: some("vllm:prefix_cache_queries_total"),
                ttft: Some("vllm:time_to_first_token_seconds"),
                itl: Some("vllm:inter_token_latency_seconds"),
                e2e: Some("vllm:e2e_request_latency_seconds"),
            },
            spellings: &[],
        },
        Preset {
            engine: Engine::Sglang,
            name: "sglang",
            keep: &["sglang:", "sglang_"],
            metrics_url: "http://127.0.0.1:30000/metrics",
            health_url: "http://127.0.0.1:30000/health",
            router: vec![
                family("sglang:num_queue_reqs", Op::Sum),
                family("sglang:num_running_reqs", Op::Sum),
                family("sglang:token_usage", Op::Avg),
                family("sglang:cache_config_info", Op::Pass),
            ],
            process_labels: &["pid"],
            replica_labels: &["tp_rank", "pp_rank", "moe_ep_rank"],
            rank_labels: &["dp_rank"],
            renames: &[],
            stall: StallFamilies {
                busy: read("sglang:num_running_reqs"),
                waiting: read("sglang:num_queue_reqs"),
                progress: vec![read("sglang:realtime_tokens_total")],
            },
            vitals: VitalsFamilies {
                running: read("sglang:num_running_reqs"),
                waiting: read("sglang:num_queue_reqs"),
                kv_usage: some("sglang:token_usage"),
                requests: some("sglang:num_requests_total"),
                prompt_tokens: some("sglang:prompt_tokens_total"),
                generation_tokens: some("sglang:generation_tokens_total"),
                preemptions: some("sglang:num_retracted_requests_total"),
                prefix_hits: some("sglang:cached_tokens_total"),
                prefix_queries: some("sglang:prompt_tokens_total"),
                ttft: Some("sglang:time_to_first_token_seconds"),
                itl: Some("sglang:inter_token_latency_seconds"),
                e2e: Some("sglang:e2e_request_latency_seconds"),
            },
            spellings: &[("sglang:", "sglang_")],
        },
        Preset {
            engine: Engine::Trtllm,
            name: "trtllm",
            keep: &["trtllm_"],
            metrics_url: "http://127.0.0.1:8000/prometheus/metrics",
            health_url: "http://127.0.0.1:8000/health",
            router: vec![
                family("trtllm_num_requests_waiting", Op::Sum),
                family("trtllm_num_requests_running", Op::Sum),
                family("trtllm_kv_cache_utilization", Op::Avg),
            ],
            process_labels: &["pid"],
            replica_labels: &[],
            rank_labels: &[],
            renames: &[],
            stall: StallFamilies {
                busy: read("trtllm_num_requests_running"),
                waiting: read("trtllm_num_requests_waiting"),
                progress: vec![
                    read("trtllm_kv_cache_gen_alloc_blocks_total"),
                    read("trtllm_num_requests_completed_total"),
                ],
            },
            vitals: VitalsFamilies {
                running: read("trtllm_num_requests_running"),
                waiting: read("trtllm_num_requests_waiting"),
                kv_usage: some("trtllm_kv_cache_utilization"),
                requests: some("trtllm_request_success_total"),
                prompt_tokens: None,
                generation_tokens: None,
                preemptions: None,
                prefix_hits: None,
                prefix_queries: None,
                ttft: Some("trtllm_time_to_first_token_seconds"),
                itl: Some("trtllm_time_per_output_token_seconds"),
                e2e: Some("trtllm_e2e_request_latency_seconds"),
            },
            spellings: &[],
        },
        Preset {
            engine: Engine::Triton,
            name: "triton",
            keep: &["nv_"],
            metrics_url: "http://127.0.0.1:8002/metrics",
            health_url: "http://127.0.0.1:8000/v2/health/ready",
            router: vec![
                selected(
                    "nv_trt_llm_request_metrics",
                    "request_type",
                    "waiting",
                    Op::Sum,
                ),
                selected(
                    "nv_trt_llm_request_metrics",
                    "request_type",
                    "scheduled",
                    Op::Sum,
                ),
                selected(
                    "nv_trt_llm_kv_cache_block_metrics",
                    "kv_cache_block_type",
                    "fraction",
                    Op::Avg,
                ),
            ],
            process_labels: &[],
            replica_labels: &[],
            rank_labels: &[],
            renames: &[],
            stall: StallFamilies {
                busy: FamilyKey::selected("nv_trt_llm_request_metrics", "request_type", "active"),
                waiting: FamilyKey::selected(
                    "nv_trt_llm_request_metrics",
                    "request_type",
                    "waiting",
                ),
                progress: vec![FamilyKey::selected(
                    "nv_trt_llm_general_metrics",
                    "general_type",
                    "iteration_counter",
                )],
            },
            vitals: VitalsFamilies {
                running: FamilyKey::selected(
                    "nv_trt_llm_request_metrics",
                    "request_type",
                    "scheduled",
                ),
                waiting: FamilyKey::selected(
                    "nv_trt_llm_request_metrics",
                    "request_type",
                    "waiting",
                ),
                kv_usage: Some(FamilyKey::selected(
                    "nv_trt_llm_kv_cache_block_metrics",
                    "kv_cache_block_type",
                    "fraction",
                )),
                requests: some("nv_inference_request_success"),
                prompt_tokens: None,
                generation_tokens: None,
                preemptions: None,
                prefix_hits: None,
                prefix_queries: None,
                ttft: None,
                itl: None,
                e2e: None,
            },
            spellings: &[],
        },
        Preset {
            engine: Engine::Llamacpp,
            name: "llamacpp",
            keep: &["llamacpp:"],
            metrics_url: "http://127.0.0.1:8080/metrics",
            health_url: "http://127.0.0.1:8080/health",
            router: vec![
                family("llamacpp:requests_deferred", Op::Sum),
                family("llamacpp:requests_processing", Op::Sum),
            ],
            process_labels: &[],
            replica_labels: &[],
            rank_labels: &[],
            renames: &[],
            stall: StallFamilies {
                busy: read("llamacpp:requests_processing"),
                waiting: read("llamacpp:requests_deferred"),
                progress: vec![
                    read("llamacpp:n_decode_total"),
                    read("llamacpp:tokens_predicted_total"),
                ],
            },
            vitals: VitalsFamilies {
                running: read("llamacpp:requests_processing"),
                waiting: read("llamacpp:requests_deferred"),
                kv_usage: None,
                requests: None,
                prompt_tokens: some("llamacpp:prompt_tokens_total"),
                generation_tokens: some("llamacpp:tokens_predicted_total"),
                preemptions: None,
                prefix_hits: None,
                prefix_queries: None,
                ttft: None,
                itl: None,
                e2e: None,
            },
            spellings: &[],
        },
    ]
});

/// How a canary request's answer is judged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CanaryAnswer {
    /// Any 2xx: the engine generated before it answered (SGLang's and trtllm-serve's
    /// `/health_generate`).
    Status,
    /// A 2xx JSON object whose `choices` is a non-empty list (an OpenAI completion).
    Choices,
    /// A 2xx JSON object with a `text_output` (Triton's generate extension).
    TextOutput,
    /// A 2xx JSON object with a `content` (llama.cpp's `POST /completion`).
    Content,
}

/// The one-token request that proves an idle engine can still generate (see `crate::canary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CanaryPreset {
    pub engine: Engine,
    /// `GET` when `None`, else `POST` with this JSON body, where `{model}` stands for the model
    /// (as a JSON string).
    pub body: Option<&'static str>,
    /// The path on the engine's HTTP origin; `{model}` stands for the model.
    pub path: &'static str,
    /// How the answer is judged.
    pub answer: CanaryAnswer,
    /// The model when `canary.model` is not given: `None` asks the engine (vLLM's
    /// `GET /v1/models`, first `id`).
    pub model: Option<&'static str>,
    /// The gauge that is 0 while the engine sleeps (neither stalled nor canaried then): its
    /// name and the label value that picks its series ([`CanaryPreset::awake_key`]).
    pub awake: Option<(&'static str, &'static str, &'static str)>,
    /// Canaries are on unless configured off: the request is the engine's own generation
    /// route and needs nothing the engine does not say (Triton's model name is a guess).
    pub on_by_default: bool,
}

impl CanaryPreset {
    /// The sleep gauge as a family key.
    pub fn awake_key(&self) -> Option<FamilyKey> {
        self.awake
            .map(|(name, label, value)| FamilyKey::selected(name, label, value))
    }
}

/// The canary of every engine, in [`PRESETS`] order. Sources:
/// - vLLM: `POST /v1/completions` and `GET /v1/models` of its OpenAI server
///   (`vllm/entrypoints/openai/api_server.py`); a completion carries a `choices` list. The sleep
///   gauge `vllm:engine_sleep_state{sleep_state="awake"}` is 0 while `/sleep` has put the engine
///   to sleep (`vllm/v1/metrics/loggers.py`).
/// - SGLang: `GET /health_generate` runs a one-token generation through the scheduler before it
///   answers 200 (`python/sglang/srt/entrypoints/http_server.py`).
/// - trtllm-serve: `GET /health_generate` generates one token before it answers 200
///   (`tensorrt_llm/serve/openai_server.py`).
/// - Triton: the generate extension, `POST /v2/models/<model>/generate` with `text_input` and
///   parameters, answering `text_output` (`docs/protocol/extension_generate.md` of
///   triton-inference-server/server); the TensorRT-LLM backend's model is `ensemble`.
/// - llama.cpp: `POST /completion` with `prompt` and `n_predict`, answering a JSON object with
///   the generated `content` (`tools/server/server.cpp`, `post_completions` in
///   `tools/server/server-context.cpp`).
pub const CANARIES: [CanaryPreset; 5] = [
    CanaryPreset {
        engine: Engine::Vllm,
        body: Some(r#"{"model": {model}, "prompt": "Test", "max_tokens": 1, "temperature": 0}"#),
        path: "/v1/completions",
        answer: CanaryAnswer::Choices,
        model: None,
        awake: Some(("vllm:engine_sleep_state", "sleep_state", "awake")),
        on_by_default: true,
    },
    CanaryPreset {
        engine: Engine::Sglang,
        body: None,
        path: "/health_generate",
        answer: CanaryAnswer::Status,
        model: None,
        awake: None,
        on_by_default: true,
    },
    CanaryPreset {
        engine: Engine::Trtllm,
        body: None,
        path: "/health_generate",
        answer: CanaryAnswer::Status,
        model: None,
        awake: None,
        on_by_default: true,
    },
    CanaryPreset {
        engine: Engine::Triton,
        body: Some(r#"{"text_input": "Test", "max_tokens": 1}"#),
        path: "/v2/models/{model}/generate",
        answer: CanaryAnswer::TextOutput,
        model: Some("ensemble"),
        awake: None,
        on_by_default: false,
    },
    CanaryPreset {
        engine: Engine::Llamacpp,
        body: Some(r#"{"prompt": "Test", "n_predict": 1}"#),
        path: "/completion",
        answer: CanaryAnswer::Content,
        model: None,
        awake: None,
        on_by_default: true,
    },
];

impl Engine {
    /// The engine's preset.
    pub fn preset(self) -> &'static Preset {
        PRESETS
            .iter()
            .find(|p| p.engine == self)
            .expect("every engine has a preset")
    }

    /// Reads an `engine:` value.
    pub fn parse(text: &str) -> Option<Engine> {
        PRESETS
            .iter()
            .find(|p| p.name.eq_ignore_ascii_case(text.trim()))
            .map(|p| p.engine)
    }

    /// The `engine:` value.
    pub fn name(self) -> &'static str {
        self.preset().name
    }

    /// The engine's own family prefixes (vLLM: `["vllm:", "lmcache:"]`, with LMCache's
    /// families when it runs in-process), as an upstream's `keep`.
    pub fn default_keep(self) -> Vec<String> {
        self.preset().keep.iter().map(|k| (*k).to_owned()).collect()
    }

    /// The engine's canary request.
    pub fn canary(self) -> &'static CanaryPreset {
        CANARIES
            .iter()
            .find(|c| c.engine == self)
            .expect("every engine has a canary")
    }
}

impl Preset {
    /// Where the engine whose metrics are at `metrics` says whether it is ready: its health
    /// path on the same origin (credentials included); Triton's on its HTTP port, 8000, as
    /// its metrics port (8002) serves nothing else.
    pub fn health_url_of(&self, metrics: &reqwest::Url) -> reqwest::Url {
        let preset = |u: &str| reqwest::Url::parse(u).expect("a preset's URLs are valid");
        let (default_metrics, default_health) = (preset(self.metrics_url), preset(self.health_url));
        let mut url = metrics.clone();
        url.set_path(default_health.path());
        url.set_query(None);
        url.set_fragment(None);
        if default_metrics.port() != default_health.port() {
            // Only a URL that cannot have a port fails here, and an http(s) URL can.
            let _ = url.set_port(default_health.port());
        }
        url
    }

    /// The labels whose series are copies of one number: processes, then replicas of a rank.
    pub fn copy_labels(&self) -> Vec<&'static str> {
        self.process_labels
            .iter()
            .chain(self.replica_labels)
            .copied()
            .collect()
    }

    /// For a text-format family or sample name this engine renamed: the declared name it starts
    /// with and the other one (`vllm:prefix_cache_hits_total` → `vllm:prefix_cache_hits`,
    /// `vllm:gpu_prefix_cache_hits`).
    pub fn rename_of(&self, name: &str) -> Option<(&'static str, &'static str)> {
        self.renames.iter().find_map(|r| {
            [(r.old, r.new), (r.new, r.old)]
                .into_iter()
                .find(|(from, _)| {
                    name.strip_prefix(from).is_some_and(|tail| {
                        tail.is_empty() || sysport_expfmt::Suffix::parse(tail.as_bytes()).is_some()
                    })
                })
        })
    }

    /// Every name `name` may be written under on this engine's page: itself, the other name of
    /// a renamed family, and each of those in the engine's other spelling (`sglang_`).
    pub fn names_of(&self, name: &str) -> Vec<String> {
        let mut names = vec![name.to_owned()];
        names.extend(self.renamed(name));
        for i in 0..names.len() {
            for (from, to) in self.spellings {
                if let Some(rest) = names[i].strip_prefix(from) {
                    names.push(format!("{to}{rest}"));
                }
            }
        }
        names
    }

    /// The other name of a text-format family or sample name that this engine renamed
    /// (`vllm:gpu_prefix_cache_hits_total` ↔ `vllm:prefix_cache_hits_total`).
    pub fn renamed(&self, name: &str) -> Option<String> {
        let (from, to) = self.rename_of(name)?;
        Some(format!("{to}{}", &name[from.len()..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_keeps_its_router_families_and_names_itself() {
        for p in PRESETS.iter() {
            assert_eq!(Engine::parse(p.name), Some(p.engine));
            assert_eq!(p.engine.preset(), p);
            for f in &p.router {
                assert!(
                    p.keep.iter().any(|k| f.key.name.starts_with(k)),
                    "{}: {} is not kept",
                    p.name,
                    f.key
                );
            }
            for f in std::iter::once(&p.stall.busy).chain(&p.stall.progress) {
                assert!(
                    p.keep.iter().any(|k| f.name.starts_with(k)),
                    "{}: stall family {} is not kept",
                    p.name,
                    f.name
                );
            }
            assert!(!p.stall.progress.is_empty(), "{}", p.name);
            let v = &p.vitals;
            let plain = [
                &v.kv_usage,
                &v.requests,
                &v.prompt_tokens,
                &v.generation_tokens,
                &v.preemptions,
                &v.prefix_hits,
                &v.prefix_queries,
            ];
            let reads = [&v.running, &v.waiting]
                .into_iter()
                .chain(plain.into_iter().flatten())
                .map(|r| r.name.as_str())
                .chain([v.ttft, v.itl, v.e2e].into_iter().flatten());
            for name in reads {
                assert!(
                    p.keep.iter().any(|k| name.starts_with(k)),
                    "{}: vitals family {name} is not kept",
                    p.name
                );
            }
            for u in [p.metrics_url, p.health_url] {
                assert!(reqwest::Url::parse(u).is_ok(), "{u}");
            }
        }
        assert_eq!(Engine::parse("TRITON"), Some(Engine::Triton));
        assert_eq!(Engine::parse("tgi"), None);
    }

    #[test]
    fn names_of_covers_renames_and_spellings() {
        assert_eq!(
            Engine::Vllm.preset().names_of("vllm:kv_cache_usage_perc"),
            ["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"]
        );
        assert_eq!(
            Engine::Sglang.preset().names_of("sglang:num_queue_reqs"),
            ["sglang:num_queue_reqs", "sglang_num_queue_reqs"]
        );
        assert_eq!(
            Engine::Trtllm
                .preset()
                .names_of("trtllm_num_requests_waiting"),
            ["trtllm_num_requests_waiting"]
        );
    }

    #[test]
    fn renamed_families_map_both_ways_with_their_suffixes() {
        let vllm = Engine::Vllm.preset();
        assert_eq!(
            vllm.renamed("vllm:gpu_cache_usage_perc").as_deref(),
            Some("vllm:kv_cache_usage_perc")
        );
        assert_eq!(
            vllm.renamed("vllm:kv_cache_usage_perc").as_deref(),
            Some("vllm:gpu_cache_usage_perc")
        );
        assert_eq!(
            vllm.renamed("vllm:prefix_cache_hits_total").as_deref(),
            Some("vllm:gpu_prefix_cache_hits_total")
        );
        assert_eq!(
            vllm.renamed("vllm:time_per_output_token_seconds_bucket")
                .as_deref(),
            Some("vllm:inter_token_latency_seconds_bucket")
        );
        assert_eq!(vllm.renamed("vllm:kv_cache_usage_percent"), None);
        assert_eq!(vllm.renamed("vllm:num_requests_waiting"), None);
        assert_eq!(
            Engine::Sglang.preset().renamed("vllm:kv_cache_usage_perc"),
            None
        );
    }
}
