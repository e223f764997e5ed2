//! One upstream's part of a view, from pages parsed as the scraper parses them.

use super::*;
use crate::expfmt::Format;
use crate::model::{Engine, FamilyKey, Op};
use crate::numbers::testing::parsed;

/// View `families` of `page` for an upstream of `engine`, as text.
fn view(engine: Engine, page: &str, format: Format, families: &[(&str, Op)]) -> String {
    let preset = engine.preset();
    let exp = parsed(page, format, preset.keep);
    let wanted: Vec<Wanted> = families
        .iter()
        .map(|&(key, op)| {
            let key = FamilyKey::parse(key).expect("family key");
            wanted(&ViewFamily { key, op }, preset)
        })
        .collect();
    let mut upstream = UpstreamConfig::new("u", "http://127.0.0.1:1/m".parse().expect("url"));
    upstream.engine = engine;
    let mut out = Vec::new();
    write_upstream(&wanted, None, &upstream, &exp, &mut out);
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn a_mean_counts_each_rank_once_however_many_copies_it_had() {
    let page = "\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine=\"0\",pid=\"1\"} 0
vllm:kv_cache_usage_perc{engine=\"0\",pid=\"2\"} 0.8
vllm:kv_cache_usage_perc{engine=\"0\",pid=\"3\"} 0
vllm:kv_cache_usage_perc{engine=\"1\",pid=\"1\"} 0.4
";
    let out = view(
        Engine::Vllm,
        page,
        Format::Text,
        &[("vllm:kv_cache_usage_perc", Op::Avg)],
    );
    assert_eq!(
        out,
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.6000000000000001\n"
    );
}

#[test]
fn copies_take_the_largest_before_ranks_are_summed() {
    let page = "\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"0\",m=\"a\"} 4
sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"1\",m=\"a\"} 3
sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"0\",m=\"a\"} 1
sglang:num_running_reqs{dp_rank=\"1\",tp_rank=\"1\",m=\"a\"} NaN
sglang:num_running_reqs{dp_rank=\"0\",tp_rank=\"0\",m=\"b\"} 2.50
";
    let out = view(
        Engine::Sglang,
        page,
        Format::Text,
        &[("sglang:num_running_reqs", Op::Sum)],
    );
    // A copy that is NaN does not hide its rank; a lone series keeps its text ("2.50").
    assert_eq!(
        out,
        "# HELP sglang:num_running_reqs The number of running requests.\n\
         # TYPE sglang:num_running_reqs gauge\n\
         sglang:num_running_reqs{m=\"a\"} 5\n\
         sglang:num_running_reqs{m=\"b\"} 2.50\n"
    );
}

#[test]
fn selections_compare_label_values_as_written_escapes_and_all() {
    let page = "\
# TYPE nv_x gauge
nv_x{kind=\"a\\\"b\",r=\"1\"} 1
nv_x{kind=\"a\",r=\"1\"} 2
nv_x{kind=\"a\\\"b\",r=\"2\"} 3
";
    let out = view(
        Engine::Triton,
        page,
        Format::Text,
        &[("nv_x{kind=a}", Op::Sum), ("nv_x{kind=b}", Op::Sum)],
    );
    assert_eq!(out, "# TYPE nv_x gauge\nnv_x{kind=\"a\",r=\"1\"} 2\n");
}

#[test]
fn openmetrics_pages_with_escaped_names_and_timestamps_read_the_same() {
    // prometheus_client's OpenMetrics with escaping=underscores (client_python#1177), and a
    // timestamp in seconds on an info family, which passes with it converted to milliseconds.
    let page = "\
# TYPE vllm:num_requests_waiting gauge
vllm_num_requests_waiting{engine=\"0\"} 1.0
vllm_num_requests_waiting{engine=\"1\"} 2.0
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size=\"16\"} 1.0 1700000000.5
# EOF
";
    let out = view(
        Engine::Vllm,
        page,
        Format::OpenMetrics,
        &[
            ("vllm:num_requests_waiting", Op::Sum),
            ("vllm:cache_config_info", Op::Pass),
        ],
    );
    assert_eq!(
        out,
        "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting 3\n\
         # TYPE vllm:cache_config_info gauge\n\
         vllm:cache_config_info{block_size=\"16\"} 1.0 1700000000500\n"
    );
}

#[test]
fn aliases_rename_every_sample_of_a_histogram_and_only_one_side() {
    let page = "\
# HELP vllm:time_per_output_token_seconds Histogram of time per output token in seconds.
# TYPE vllm:time_per_output_token_seconds histogram
vllm:time_per_output_token_seconds_bucket{engine=\"0\",le=\"0.01\"} 1.0
vllm:time_per_output_token_seconds_bucket{engine=\"0\",le=\"+Inf\"} 2.0
vllm:time_per_output_token_seconds_count{engine=\"0\"} 2.0
vllm:time_per_output_token_seconds_sum{engine=\"0\"} 0.5
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine=\"0\"} 0.5
";
    let exp = parsed(page, Format::Text, &["vllm:"]);
    let mut out = Vec::new();
    let n = aliases::write_aliases(&exp, Engine::Vllm.preset(), &mut out);
    assert_eq!(n, 5);
    assert_eq!(
        String::from_utf8(out).expect("utf-8"),
        "# HELP vllm:inter_token_latency_seconds Histogram of time per output token in seconds.\n\
         # TYPE vllm:inter_token_latency_seconds histogram\n\
         vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"0.01\"} 1.0\n\
         vllm:inter_token_latency_seconds_bucket{engine=\"0\",le=\"+Inf\"} 2.0\n\
         vllm:inter_token_latency_seconds_count{engine=\"0\"} 2.0\n\
         vllm:inter_token_latency_seconds_sum{engine=\"0\"} 0.5\n\
         # TYPE vllm:gpu_cache_usage_perc gauge\n\
         vllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\n"
    );
}
