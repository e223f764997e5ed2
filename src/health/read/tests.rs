//! Reading the judged families from pages parsed as the scraper parses them.

use super::*;
use crate::expfmt::Format;
use crate::model::{Engine, FamilyKey, Url};
use crate::numbers::testing::parsed;

/// The preset's stall families of `engine`.
fn preset(engine: Engine) -> StallConfig {
    StallConfig::preset(engine, std::time::Duration::from_secs(60))
}

/// What an upstream of `engine` with `stall` judges.
fn families(engine: Engine, stall: StallConfig) -> Families {
    let mut u = UpstreamConfig::new("u", Url::parse("http://127.0.0.1:1/metrics").expect("url"));
    u.engine = engine;
    u.keep = engine.default_keep();
    u.stall = Some(stall);
    Families::of(&u, &[])
}

fn reading(engine: Engine, page: &str, format: Format) -> Reading {
    let p = engine.preset();
    families(engine, preset(engine))
        .read(&parsed(page, format, p.keep))
        .expect("judged")
}

const VLLM_DP2: &str = "\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 2.0
vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 1.0
# HELP vllm:iteration_tokens_total Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_sum{engine=\"0\",model_name=\"m\"} 9000.0
vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 3.0
vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 120.0
vllm:iteration_tokens_total_count{engine=\"0\",model_name=\"m\"} 120.0
vllm:iteration_tokens_total_sum{engine=\"1\",model_name=\"m\"} 400.0
vllm:iteration_tokens_total_bucket{engine=\"1\",le=\"1.0\",model_name=\"m\"} 1.0
vllm:iteration_tokens_total_bucket{engine=\"1\",le=\"+Inf\",model_name=\"m\"} 30.0
vllm:iteration_tokens_total_count{engine=\"1\",model_name=\"m\"} 30.0
# HELP vllm:iteration_tokens_total_created Histogram of number of tokens per engine_step.
# TYPE vllm:iteration_tokens_total_created gauge
vllm:iteration_tokens_total_created{engine=\"0\",model_name=\"m\"} 1.7e9
";

#[test]
fn vllm_counts_engine_steps_over_every_data_parallel_engine() {
    let r = reading(Engine::Vllm, VLLM_DP2, Format::Text);
    assert_eq!(r.running, Some(3.0));
    // The `_count` samples only: not the buckets, the sum or `_created`.
    assert_eq!(r.progress, Some(150.0));
    assert!(r.busy());
}

#[test]
fn an_openmetrics_page_reads_the_same() {
    let page = "\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\"} 2.0
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_bucket{engine=\"0\",le=\"+Inf\"} 120.0
vllm:iteration_tokens_total_count{engine=\"0\"} 120.0
vllm:iteration_tokens_total_sum{engine=\"0\"} 9000.0
vllm:iteration_tokens_total_created{engine=\"0\"} 1.7e9
# EOF
";
    let r = reading(Engine::Vllm, page, Format::OpenMetrics);
    assert_eq!((r.running, r.progress), (Some(2.0), Some(120.0)));
}

#[test]
fn api_server_processes_count_once_and_ranks_add_up() {
    // prometheus_client's multiprocess mode: one copy of the gauge per API-server process, only
    // the one that logged the engine's stats is not 0 (vllm #28792).
    let page = "\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\",pid=\"11\"} 0.0
vllm:num_requests_running{engine=\"0\",pid=\"12\"} 4.0
vllm:num_requests_running{engine=\"0\",pid=\"13\"} 4.0
vllm:num_requests_running{engine=\"1\",pid=\"11\"} 1.0
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_count{engine=\"0\"} 7.0
";
    let r = reading(Engine::Vllm, page, Format::Text);
    assert_eq!((r.running, r.progress), (Some(5.0), Some(7.0)));
}

#[test]
fn triton_reads_the_selected_series_of_its_shared_families() {
    let page = "\
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"context\",version=\"1\"} 1
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"scheduled\",version=\"1\"} 2
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"max\",version=\"1\"} 512
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"active\",version=\"1\"} 3
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"waiting\",version=\"1\"} 9
# HELP nv_trt_llm_general_metrics General TRT LLM metrics
# TYPE nv_trt_llm_general_metrics gauge
nv_trt_llm_general_metrics{general_type=\"iteration_counter\",model=\"tensorrt_llm\",version=\"1\"} 8812
nv_trt_llm_general_metrics{general_type=\"timestamp\",model=\"tensorrt_llm\",version=\"1\"} 1700074049
";
    let r = reading(Engine::Triton, page, Format::Text);
    assert_eq!((r.running, r.progress), (Some(3.0), Some(8812.0)));
}

#[test]
fn trtllm_sums_its_two_progress_counters_and_sglang_every_mode() {
    let page = "\
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{engine_type=\"pytorch\",model_name=\"m\"} 2.0
# TYPE trtllm_kv_cache_gen_alloc_blocks_total counter
trtllm_kv_cache_gen_alloc_blocks_total{engine_type=\"pytorch\",model_name=\"m\"} 40.0
# TYPE trtllm_num_requests_completed_total counter
trtllm_num_requests_completed_total{engine_type=\"pytorch\",model_name=\"m\"} 5.0
";
    let r = reading(Engine::Trtllm, page, Format::Text);
    assert_eq!((r.running, r.progress), (Some(2.0), Some(45.0)));
    let page = "\
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"0\"} 6.0
sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"1\"} 6.0
sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"0\"} 2.0
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{dp_rank=\"0\",mode=\"prefill_compute\",tp_rank=\"0\"} 100.0
sglang:realtime_tokens_total{dp_rank=\"0\",mode=\"decode\",tp_rank=\"0\"} 50.0
";
    let r = reading(Engine::Sglang, page, Format::Text);
    // Tensor-parallel workers report one scheduler's number: once per data-parallel rank.
    assert_eq!((r.running, r.progress), (Some(8.0), Some(150.0)));
}

#[test]
fn missing_or_nan_families_read_as_unknown() {
    let r = reading(
        Engine::Vllm,
        "# TYPE vllm:other gauge\nvllm:other 1\n",
        Format::Text,
    );
    assert_eq!((r.running, r.progress), (None, None));
    assert!(!r.busy());
    let page = "\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running NaN
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_count NaN
";
    let r = reading(Engine::Vllm, page, Format::Text);
    assert!(!r.busy(), "NaN is not above zero");
    assert_eq!(r.progress, None);
}

#[test]
fn a_progress_name_may_be_the_histograms_count() {
    let mut stall = preset(Engine::Vllm);
    stall.progress = vec![FamilyKey {
        name: "vllm:iteration_tokens_total_count".into(),
        select: vec![("engine".into(), "1".into())],
    }];
    let exp = parsed(VLLM_DP2, Format::Text, &["vllm:"]);
    let f = families(Engine::Vllm, stall.clone());
    assert_eq!(f.read(&exp).expect("judged").progress, Some(30.0));
    let selection = crate::expfmt::Selection::new(f.names().iter().map(String::as_str));
    let asked: Vec<String> = selection.sample_names().collect();
    for name in [
        "vllm:num_requests_running",
        "vllm:num_requests_waiting",
        "vllm:engine_sleep_state",
        "vllm:iteration_tokens_total_count",
        "vllm:iteration_tokens_total_bucket",
    ] {
        assert!(asked.contains(&name.to_owned()), "{name} in {asked:?}");
    }
    // A gauge named `_count` is read as itself, not as a histogram's.
    let page = "# TYPE vllm:steps_count gauge\nvllm:steps_count 4\n";
    stall.progress[0] = FamilyKey {
        name: "vllm:steps_count".into(),
        select: Vec::new(),
    };
    let exp = parsed(page, Format::Text, &["vllm:"]);
    let f = families(Engine::Vllm, stall);
    assert_eq!(f.read(&exp).expect("judged").progress, Some(4.0));
}

#[test]
fn waiting_requests_and_the_sleep_gauge_are_read_with_the_rest() {
    let page = "\
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\"} 0.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine=\"0\"} 5.0
vllm:num_requests_waiting{engine=\"1\"} 2.0
# TYPE vllm:iteration_tokens_total histogram
vllm:iteration_tokens_total_count{engine=\"0\"} 7.0
# TYPE vllm:engine_sleep_state gauge
vllm:engine_sleep_state{engine=\"0\",sleep_state=\"awake\"} 1.0
vllm:engine_sleep_state{engine=\"0\",sleep_state=\"weights_offloaded\"} 0.0
";
    let r = reading(Engine::Vllm, page, Format::Text);
    assert_eq!(
        (r.running, r.waiting, r.asleep),
        (Some(0.0), Some(7.0), false)
    );
    assert!(r.busy(), "queued with none running is busy");
    let asleep = page.replace("sleep_state=\"awake\"} 1.0", "sleep_state=\"awake\"} 0.0");
    let r = reading(Engine::Vllm, &asleep, Format::Text);
    assert!(r.asleep && !r.busy());
    // llama.cpp: its processing and deferred gauges, and both of its progress counters.
    let page = "\
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 0
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 3
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 12
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 40
";
    let r = reading(Engine::Llamacpp, page, Format::Text);
    assert_eq!(
        (r.running, r.waiting, r.progress),
        (Some(0.0), Some(3.0), Some(52.0))
    );
}
