//! The vLLM API server's `/metrics` page: Python runtime families, the `vllm:` families of
//! `vllm/v1/metrics/loggers.py` in registration order, then the HTTP instrumentator's families.

use crate::demo::expo::{Hist, Writer};
use crate::demo::sim::{Engine, EngineHists, FINISH_REASONS, Sim};

/// The vLLM page, rendered from the current simulation state.
pub(in crate::demo) fn render(sim: &Sim, out: &mut String) {
    let mut w = Writer::new(out, sim.created_unix);
    sim.api_process
        .render(&mut w, sim.now, sim.finished_requests());

    let engines = &sim.engines;
    let gauge = |w: &mut Writer<'_>, name: &str, help: &str, value: &dyn Fn(&Engine) -> f64| {
        w.gauge(name, help, |emit| {
            engines.iter().for_each(|e| emit(&e.labels(), value(e)))
        });
    };
    gauge(
        &mut w,
        "vllm:num_requests_running",
        "Number of requests in model execution batches.",
        &|e| e.num_running() as f64,
    );
    gauge(
        &mut w,
        "vllm:num_requests_waiting",
        "Number of requests waiting to be processed.",
        &|e| e.num_waiting() as f64,
    );
    w.gauge(
        "vllm:num_requests_waiting_by_reason",
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; \
         'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). \
         Sum of all reasons equals vllm:num_requests_waiting.",
        |emit| {
            for e in engines {
                let [engine, model] = e.labels();
                emit(&[engine, model, ("reason", "capacity")], e.num_waiting() as f64);
                emit(&[engine, model, ("reason", "deferred")], 0.0);
            }
        },
    );
    w.gauge(
        "vllm:engine_sleep_state",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; \
         weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        |emit| {
            for e in engines {
                let [engine, model] = e.labels();
                for (state, value) in [
                    ("awake", 1.0),
                    ("weights_offloaded", 0.0),
                    ("discard_all", 0.0),
                ] {
                    emit(&[engine, model, ("sleep_state", state)], value);
                }
            }
        },
    );
    gauge(
        &mut w,
        "vllm:kv_cache_usage_perc",
        "KV-cache usage. 1 means 100 percent usage.",
        &|e| e.kv_cache_usage(),
    );

    let counter = |w: &mut Writer<'_>, name: &str, help: &str, value: &dyn Fn(&Engine) -> f64| {
        w.counter(name, help, |emit| {
            engines.iter().for_each(|e| emit(&e.labels(), value(e)))
        });
    };
    counter(
        &mut w,
        "vllm:prefix_cache_queries",
        "Prefix cache queries, in terms of number of queried tokens.",
        &|e| e.counters.prefix_cache_queries,
    );
    counter(
        &mut w,
        "vllm:prefix_cache_hits",
        "Prefix cache hits, in terms of number of cached tokens.",
        &|e| e.counters.prefix_cache_hits,
    );
    counter(
        &mut w,
        "vllm:external_prefix_cache_queries",
        "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
        &|e| e.counters.external_prefix_cache_queries,
    );
    counter(
        &mut w,
        "vllm:external_prefix_cache_hits",
        "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
        &|e| e.counters.external_prefix_cache_hits,
    );
    counter(
        &mut w,
        "vllm:mm_cache_queries",
        "Multi-modal cache queries, in terms of number of queried items.",
        &|_| 0.0,
    );
    counter(
        &mut w,
        "vllm:mm_cache_hits",
        "Multi-modal cache hits, in terms of number of cached items.",
        &|_| 0.0,
    );
    counter(
        &mut w,
        "vllm:num_preemptions",
        "Cumulative number of preemption from the engine.",
        &|e| e.counters.num_preemptions,
    );
    counter(
        &mut w,
        "vllm:prompt_tokens",
        "Number of prefill tokens processed.",
        &|e| e.counters.prompt_tokens,
    );
    w.counter(
        "vllm:prompt_tokens_by_source",
        "Number of prompt tokens by source.",
        |emit| {
            for e in engines {
                let [engine, model] = e.labels();
                let sources = ["local_compute", "local_cache_hit", "external_kv_transfer"];
                for (source, value) in sources.iter().zip(e.counters.prompt_tokens_by_source) {
                    emit(&[engine, model, ("source", source)], value);
                }
            }
        },
    );
    counter(
        &mut w,
        "vllm:prompt_tokens_cached",
        "Number of cached prompt tokens (local + external).",
        &|e| e.counters.prompt_tokens_cached,
    );
    counter(
        &mut w,
        "vllm:generation_tokens",
        "Number of generation tokens processed.",
        &|e| e.counters.generation_tokens,
    );
    w.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        |emit| {
            for e in engines {
                let [engine, model] = e.labels();
                for (reason, value) in FINISH_REASONS.iter().zip(e.counters.request_success) {
                    emit(&[engine, ("finished_reason", reason), model], value);
                }
            }
        },
    );

    for (name, help, hist) in HISTOGRAMS {
        w.histogram(name, help, |emit| {
            engines
                .iter()
                .for_each(|e| emit(&e.labels(), hist(&e.hists)))
        });
    }

    w.gauge(
        "vllm:cache_config_info",
        "Information of the LLMEngine CacheConfig",
        |emit| {
            engines
                .iter()
                .for_each(|e| emit(&cache_config_labels(e.id), 1.0));
        },
    );

    sim.api.render(&mut w);
}

type HistOf = fn(&EngineHists) -> &Hist;

const HISTOGRAMS: [(&str, &str, HistOf); 15] = [
    (
        "vllm:request_prompt_tokens",
        "Number of prefill tokens processed.",
        |h| &h.prompt_tokens,
    ),
    (
        "vllm:request_generation_tokens",
        "Number of generation tokens processed.",
        |h| &h.generation_tokens,
    ),
    (
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        |h| &h.iteration_tokens,
    ),
    (
        "vllm:request_max_num_generation_tokens",
        "Histogram of maximum number of requested generation tokens.",
        |h| &h.max_num_generation_tokens,
    ),
    (
        "vllm:request_params_n",
        "Histogram of the n request parameter.",
        |h| &h.params_n,
    ),
    (
        "vllm:request_params_max_tokens",
        "Histogram of the max_tokens request parameter.",
        |h| &h.params_max_tokens,
    ),
    (
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        |h| &h.ttft,
    ),
    (
        "vllm:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        |h| &h.itl,
    ),
    (
        "vllm:request_time_per_output_token_seconds",
        "Histogram of time_per_output_token_seconds per request.",
        |h| &h.time_per_output_token,
    ),
    (
        "vllm:e2e_request_latency_seconds",
        "Histogram of e2e request latency in seconds.",
        |h| &h.e2e,
    ),
    (
        "vllm:request_queue_time_seconds",
        "Histogram of time spent in WAITING phase for request.",
        |h| &h.queue,
    ),
    (
        "vllm:request_inference_time_seconds",
        "Histogram of time spent in RUNNING phase for request.",
        |h| &h.inference,
    ),
    (
        "vllm:request_prefill_time_seconds",
        "Histogram of time spent in PREFILL phase for request.",
        |h| &h.prefill,
    ),
    (
        "vllm:request_decode_time_seconds",
        "Histogram of time spent in DECODE phase for request.",
        |h| &h.decode,
    ),
    (
        "vllm:request_prefill_kv_computed_tokens",
        "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
        |h| &h.prefill_kv_computed_tokens,
    ),
];

/// `CacheConfig.metrics_info()` as `str()` values plus `engine`, sorted as printed.
fn cache_config_labels(engine: &'static str) -> [(&'static str, &'static str); 29] {
    [
        ("_block_size_resolved", "True"),
        ("block_size", "16"),
        ("cache_dtype", "auto"),
        ("calculate_kv_scales", "False"),
        ("enable_prefix_caching", "True"),
        ("engine", engine),
        ("gpu_memory_utilization", "0.9"),
        ("is_attention_free", "False"),
        ("kv_cache_dtype_skip_layers", "[]"),
        ("kv_cache_max_concurrency", "4.0"),
        ("kv_cache_memory_bytes", "None"),
        ("kv_cache_size_tokens", "32768"),
        ("kv_offloading_backend", "None"),
        ("kv_offloading_size", "None"),
        ("kv_sharing_fast_prefill", "False"),
        ("mamba_block_size", "None"),
        ("mamba_cache_dtype", "auto"),
        ("mamba_cache_mode", "none"),
        ("mamba_page_size_padded", "None"),
        ("mamba_ssm_cache_dtype", "auto"),
        ("num_cpu_blocks", "None"),
        ("num_gpu_blocks", "2048"),
        ("num_gpu_blocks_override", "None"),
        ("prefix_caching_hash_algo", "sha256"),
        ("prefix_match_unit", "None"),
        ("skip_page_size_padded", "None"),
        ("sliding_window", "None"),
        ("user_specified_block_size", "False"),
        ("user_specified_mamba_block_size", "False"),
    ]
}
