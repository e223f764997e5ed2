//! `/metrics/router` and configured views, checked against a deliberately naive reading of the
//! engine's page: data-parallel ranks and process copies combined, one series per family,
//! renamed families under both names, values written back exactly; and `aliases: true` on the
//! full `/metrics`.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use axum::http::StatusCode;
use common::*;
use sysport::config::ViewConfig;
use sysport::model::{Engine, FamilyKey, Op, ViewFamily};

const MEDIUM: &str = include_str!("fixtures/medium.prom");
const MULTIPROC_PID: &str = include_str!("fixtures/medium_multiproc_gauge_all_pid.prom");
const MODEL: &str = "meta-llama/Llama-3.1-8B-Instruct";

/// `(labels, value)` of every sample named `name` in `page`.
fn series(page: &str, name: &str) -> Vec<(BTreeMap<String, String>, f64)> {
    page.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(parse_sample)
        .filter(|s| s.name == name)
        .map(|s| {
            let value = s.rest.split_whitespace().next().expect("a value");
            (
                s.labels.into_iter().collect(),
                value.parse().expect("a number"),
            )
        })
        .collect()
}

/// The values of `name` in `page` per label set without `drop`, combined with `f`.
fn grouped(
    page: &str,
    name: &str,
    drop: &[&str],
    f: fn(&[f64]) -> f64,
) -> BTreeMap<BTreeMap<String, String>, f64> {
    let mut groups: BTreeMap<BTreeMap<String, String>, Vec<f64>> = BTreeMap::new();
    for (mut labels, v) in series(page, name) {
        labels.retain(|k, _| !drop.contains(&k.as_str()));
        groups.entry(labels).or_default().push(v);
    }
    groups.into_iter().map(|(k, vs)| (k, f(&vs))).collect()
}

fn sum(v: &[f64]) -> f64 {
    v.iter().sum()
}

fn avg(v: &[f64]) -> f64 {
    sum(v) / v.len() as f64
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

async fn start_with(engine: Engine, page: &str) -> (Upstream, Running) {
    let up = Upstream::start(Reply::text(page)).await;
    let mut u = upstream_config("engine", &up.metrics_url(), engine.preset().keep);
    u.engine = engine;
    let sp = Running::start(config(vec![u])).await;
    (up, sp)
}

async fn router(sp: &Running) -> String {
    let (code, body) = sp.get("/metrics/router").await;
    assert_eq!(code, StatusCode::OK, "{body}");
    body
}

#[tokio::test]
async fn data_parallel_vllm_engines_become_one_series_per_family() {
    let (_up, sp) = start_with(Engine::Vllm, MEDIUM).await;
    let body = router(&sp).await;
    let model = labels(&[("model_name", MODEL)]);
    for (name, f) in [
        ("vllm:num_requests_waiting", sum as fn(&[f64]) -> f64),
        ("vllm:num_requests_running", sum),
        ("vllm:kv_cache_usage_perc", avg),
    ] {
        let want = grouped(MEDIUM, name, &["engine"], f);
        assert_eq!(want.len(), 1, "{name}: one model");
        assert_eq!(
            series(&body, name),
            vec![(model.clone(), want[&model])],
            "{name}"
        );
        assert!(body.contains(&format!("# TYPE {name} gauge\n")), "{name}");
    }
    // The engine has only the new name: the old one is made from it.
    assert_eq!(
        series(&body, "vllm:gpu_cache_usage_perc"),
        series(&body, "vllm:kv_cache_usage_perc")
    );
    assert!(body.contains("# TYPE vllm:gpu_cache_usage_perc gauge\n"));
    // Info families pass through: every series, labels and values as they were.
    for name in ["vllm:lora_requests_info", "vllm:cache_config_info"] {
        assert_eq!(series(&body, name), series(MEDIUM, name), "{name}");
        assert!(!series(&body, name).is_empty());
    }
    // Nothing else.
    let names: Vec<&str> = body
        .lines()
        .filter(|l| l.starts_with("# TYPE "))
        .map(|l| l.split(' ').nth(2).expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "vllm:num_requests_waiting",
            "vllm:num_requests_running",
            "vllm:kv_cache_usage_perc",
            "vllm:gpu_cache_usage_perc",
            "vllm:lora_requests_info",
            "vllm:cache_config_info"
        ]
    );
}

#[tokio::test]
async fn process_copies_are_combined_with_max_before_the_ranks() {
    let (_up, sp) = start_with(Engine::Vllm, MULTIPROC_PID).await;
    let body = router(&sp).await;
    let model = labels(&[("model_name", MODEL)]);
    for (name, f) in [
        ("vllm:num_requests_waiting", sum as fn(&[f64]) -> f64),
        ("vllm:num_requests_running", sum),
        ("vllm:kv_cache_usage_perc", avg),
    ] {
        let per_engine = grouped(MULTIPROC_PID, name, &["pid"], max);
        assert_eq!(per_engine.len(), 4, "{name}: four engines");
        let values: Vec<f64> = per_engine.values().copied().collect();
        let want = f(&values);
        assert_eq!(series(&body, name), vec![(model.clone(), want)], "{name}");
        // Not what a picker reading the first process's first engine would see.
        assert_ne!(want, series(MULTIPROC_PID, name)[0].1, "{name}");
    }
}

#[tokio::test]
async fn an_older_vllm_with_only_gpu_cache_usage_perc_is_served_under_both_names() {
    let page = "\
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.1
vllm:gpu_cache_usage_perc{engine=\"1\",model_name=\"m\"} 0.2
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} 2.0
vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 1.0
";
    let (_up, sp) = start_with(Engine::Vllm, page).await;
    let body = router(&sp).await;
    let m = labels(&[("model_name", "m")]);
    // Written back in the shortest form that reads back exactly: 0.15000000000000002, 3.
    assert!(
        body.contains("vllm:kv_cache_usage_perc{model_name=\"m\"} 0.15000000000000002\n"),
        "{body}"
    );
    assert!(body.contains("vllm:gpu_cache_usage_perc{model_name=\"m\"} 0.15000000000000002\n"));
    assert!(
        body.contains("vllm:num_requests_waiting{model_name=\"m\"} 3\n"),
        "{body}"
    );
    assert_eq!(
        series(&body, "vllm:kv_cache_usage_perc"),
        vec![(m, (0.1 + 0.2) / 2.0)]
    );
    assert!(body.contains(
        "# HELP vllm:kv_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.\n"
    ));
}

#[tokio::test]
async fn sglang_ranks_are_summed_after_tensor_parallel_copies() {
    // --dp 2 --tp 2 --enable-metrics-for-all-schedulers: every scheduler reports its rank.
    let mut page = String::from(
        "# HELP sglang:num_queue_reqs The number of requests in the waiting queue.\n\
         # TYPE sglang:num_queue_reqs gauge\n",
    );
    for (dp, tp, v) in [(0, 0, 3.0), (0, 1, 3.0), (1, 0, 5.0), (1, 1, 5.0)] {
        page.push_str(&format!(
            "sglang:num_queue_reqs{{dp_rank=\"{dp}\",engine_type=\"unified\",model_name=\"q\",pp_rank=\"0\",tp_rank=\"{tp}\"}} {v}\n"
        ));
    }
    page.push_str("# HELP sglang:token_usage The token usage.\n# TYPE sglang:token_usage gauge\n");
    for (dp, tp, v) in [(0, 0, 0.25), (0, 1, 0.25), (1, 0, 0.75), (1, 1, 0.75)] {
        page.push_str(&format!(
            "sglang:token_usage{{dp_rank=\"{dp}\",engine_type=\"unified\",model_name=\"q\",pp_rank=\"0\",tp_rank=\"{tp}\"}} {v}\n"
        ));
    }
    let (_up, sp) = start_with(Engine::Sglang, &page).await;
    let body = router(&sp).await;
    let rest = labels(&[("engine_type", "unified"), ("model_name", "q")]);
    assert_eq!(
        series(&body, "sglang:num_queue_reqs"),
        vec![(rest.clone(), 8.0)]
    );
    assert_eq!(series(&body, "sglang:token_usage"), vec![(rest, 0.5)]);
}

#[tokio::test]
async fn sglang_in_underscore_spelling_keeps_its_series_and_fills_the_router_view_and_vitals() {
    // The SGLang model gateway's `/engine_metrics` (sgl-project/sglang #12970) and some
    // versions (#15758) write `sglang_` for `sglang:`.
    let mut page = String::from(
        "# HELP sglang_num_queue_reqs The number of requests in the waiting queue.\n\
         # TYPE sglang_num_queue_reqs gauge\n",
    );
    for (dp, v) in [(0, 3.0), (1, 5.0)] {
        page.push_str(&format!(
            "sglang_num_queue_reqs{{dp_rank=\"{dp}\",model_name=\"q\"}} {v}\n"
        ));
    }
    page.push_str("# TYPE sglang_num_running_reqs gauge\n");
    for (dp, v) in [(0, 2.0), (1, 4.0)] {
        page.push_str(&format!(
            "sglang_num_running_reqs{{dp_rank=\"{dp}\",model_name=\"q\"}} {v}\n"
        ));
    }
    page.push_str("# TYPE sglang_token_usage gauge\n");
    for (dp, v) in [(0, 0.25), (1, 0.75)] {
        page.push_str(&format!(
            "sglang_token_usage{{dp_rank=\"{dp}\",model_name=\"q\"}} {v}\n"
        ));
    }
    let (_up, sp) = start_with(Engine::Sglang, &page).await;
    // The preset keeps them: `/metrics` has every series as the engine wrote it.
    let (_, metrics) = sp.get("/metrics").await;
    assert_eq!(
        series(&metrics, "sglang_num_queue_reqs"),
        series(&page, "sglang_num_queue_reqs")
    );
    // The router view reads them, served under the names endpoint pickers ask for.
    let body = router(&sp).await;
    let model = labels(&[("model_name", "q")]);
    assert_eq!(
        series(&body, "sglang:num_queue_reqs"),
        vec![(model.clone(), 8.0)]
    );
    assert_eq!(
        series(&body, "sglang:num_running_reqs"),
        vec![(model.clone(), 6.0)]
    );
    assert_eq!(series(&body, "sglang:token_usage"), vec![(model, 0.5)]);
    // And the vitals, from the health checks' reads.
    eventually(Duration::from_secs(10), "vitals read", || async {
        let (_, status) = sp.get("/status").await;
        let status: serde_json::Value = serde_json::from_str(&status).expect("JSON");
        let v = &status["upstreams"][0]["vitals"];
        v["running"] == 6.0
            && v["waiting"] == 8.0
            && v["kv_cache_usage"] == 0.5
            && v["rank_label"] == "dp_rank"
            && v["ranks"][1]["waiting"] == 5.0
    })
    .await;
}

#[tokio::test]
async fn trtllm_serve_and_triton_read_their_own_families() {
    let trtllm = "\
# HELP trtllm_num_requests_waiting Number of queued requests
# TYPE trtllm_num_requests_waiting gauge
trtllm_num_requests_waiting{engine_type=\"pytorch\",model_name=\"t\"} 4.0
# HELP trtllm_num_requests_running Number of active requests
# TYPE trtllm_num_requests_running gauge
trtllm_num_requests_running{engine_type=\"pytorch\",model_name=\"t\"} 7.0
# HELP trtllm_kv_cache_utilization KV cache utilization
# TYPE trtllm_kv_cache_utilization gauge
trtllm_kv_cache_utilization{engine_type=\"pytorch\",model_name=\"t\"} 0.125
# HELP trtllm_kv_cache_hit_rate KV cache hit rate
# TYPE trtllm_kv_cache_hit_rate gauge
trtllm_kv_cache_hit_rate{engine_type=\"pytorch\",model_name=\"t\"} 0.5
";
    let (_up, sp) = start_with(Engine::Trtllm, trtllm).await;
    let body = router(&sp).await;
    let want: String = trtllm.lines().take(9).map(|l| format!("{l}\n")).collect();
    assert_eq!(body, want, "one rank: passed on as the engine wrote it");

    let triton = "\
# HELP nv_trt_llm_request_metrics TRT LLM request metrics
# TYPE nv_trt_llm_request_metrics gauge
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"context\",version=\"1\"} 1
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"scheduled\",version=\"1\"} 6
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"max\",version=\"1\"} 512
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"active\",version=\"1\"} 6
nv_trt_llm_request_metrics{model=\"tensorrt_llm\",request_type=\"waiting\",version=\"1\"} 2
# HELP nv_trt_llm_kv_cache_block_metrics TRT LLM KV cache block metrics
# TYPE nv_trt_llm_kv_cache_block_metrics gauge
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"tokens_per\",model=\"tensorrt_llm\",version=\"1\"} 64
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"used\",model=\"tensorrt_llm\",version=\"1\"} 1
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\",model=\"tensorrt_llm\",version=\"1\"} 0.25
# HELP nv_inference_pending_request_count Instantaneous number of pending requests awaiting execution per-model.
# TYPE nv_inference_pending_request_count gauge
nv_inference_pending_request_count{model=\"tensorrt_llm\",version=\"1\"} 0
";
    let (_up, sp) = start_with(Engine::Triton, triton).await;
    let body = router(&sp).await;
    let req = series(&body, "nv_trt_llm_request_metrics");
    let types: Vec<(&str, f64)> = req
        .iter()
        .map(|(l, v)| (l["request_type"].as_str(), *v))
        .collect();
    assert_eq!(types, [("waiting", 2.0), ("scheduled", 6.0)]);
    assert_eq!(
        series(&body, "nv_trt_llm_kv_cache_block_metrics"),
        vec![(
            labels(&[
                ("kv_cache_block_type", "fraction"),
                ("model", "tensorrt_llm"),
                ("version", "1")
            ]),
            0.25
        )]
    );
    assert_eq!(body.matches("# TYPE ").count(), 2, "{body}");
}

#[tokio::test]
async fn view_values_survive_nan_infinity_and_configured_labels() {
    let page = "\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine=\"0\",model_name=\"m\"} NaN
vllm:num_requests_waiting{engine=\"1\",model_name=\"m\"} 1
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} +Inf
vllm:num_requests_running{engine=\"1\",model_name=\"m\"} 1e300
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 1e-7
vllm:kv_cache_usage_perc{engine=\"1\",model_name=\"m\"} 3e-7
";
    let up = Upstream::start(Reply::text(page)).await;
    let mut cfg = config(vec![upstream_config("vllm", &up.metrics_url(), &["vllm:"])]);
    cfg.labels = vec![("pod".into(), "w-0".into())];
    let sp = Running::start(cfg).await;
    let body = router(&sp).await;
    assert!(
        body.contains("vllm:num_requests_waiting{model_name=\"m\",pod=\"w-0\"} NaN\n"),
        "{body}"
    );
    assert!(body.contains("vllm:num_requests_running{model_name=\"m\",pod=\"w-0\"} +Inf\n"));
    assert!(body.contains("vllm:kv_cache_usage_perc{model_name=\"m\",pod=\"w-0\"} 2e-7\n"));
}

#[tokio::test]
async fn views_are_read_like_selective_reads_in_both_formats() {
    let up = Upstream::start(Reply::text(MEDIUM)).await;
    let mut u = upstream_config("vllm", &up.metrics_url(), &["vllm:", "lmcache:"]);
    u.health_url = Some(up.health_url().parse().expect("url"));
    u.min_interval = Duration::from_secs(60);
    let mut cfg = config(vec![u]);
    cfg.health.interval = Duration::from_secs(3600);
    // The vitals' reads at each check would be upstream hits too.
    cfg.vitals.window = Duration::ZERO;
    let sp = Running::start(cfg).await;
    let reads = (0..10).map(|i| {
        let url = sp.url("/metrics/router");
        tokio::spawn(async move {
            let mut req = client().get(url);
            if i % 2 == 1 {
                req = req.header("accept", "application/openmetrics-text; version=1.0.0");
            }
            let r = req.send().await.expect("answers");
            let age = r.headers().get("sysport-age").is_some();
            let ct = r.headers()["content-type"]
                .to_str()
                .expect("ascii")
                .to_owned();
            (ct, age, r.text().await.expect("body"))
        })
    });
    for read in futures_util::future::join_all(reads).await {
        let (ct, age, body) = read.expect("read task");
        assert!(age, "Sysport-Age on every view read");
        if ct.starts_with("application/openmetrics-text") {
            assert!(body.ends_with("# EOF\n"), "{body}");
            assert!(body.contains("# TYPE vllm:num_requests_waiting gauge\n"));
        } else {
            assert!(ct.starts_with("text/plain; version=0.0.4"), "{ct}");
        }
        assert_eq!(metric(&body, "vllm:num_requests_waiting").count(), 1);
    }
    // One full page to check the engine's selection against, then the selection itself.
    let queries = up.queries();
    assert!(queries.len() <= 2, "{queries:?}");
    assert!(
        queries
            .iter()
            .any(|q| q.contains("name%5B%5D=vllm%3Akv_cache_usage_perc"))
    );
    assert!(
        queries
            .iter()
            .any(|q| q.contains("name%5B%5D=vllm%3Agpu_cache_usage_perc"))
    );
    // gzip when asked, as Go's default transport asks.
    let raw = reqwest::Client::builder()
        .no_proxy()
        .no_gzip()
        .build()
        .expect("client")
        .get(sp.url("/metrics/router"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .expect("answers");
    assert_eq!(raw.headers()["content-encoding"], "gzip");
    let (_, page) = sp.get("/metrics").await;
    assert_eq!(
        metric(&page, "dynamo_sysport_http_requests_total")
            .label("path", "/metrics/router")
            .label("read", "view")
            .value(),
        11.0
    );
    assert_eq!(sp.get("/metrics/nope").await.0, StatusCode::NOT_FOUND);
    let post = client()
        .post(sp.url("/metrics/router"))
        .send()
        .await
        .expect("answers");
    assert_eq!(post.status(), 405);
}

#[tokio::test]
async fn configured_views_add_pages_and_can_replace_the_router() {
    let up = Upstream::start(Reply::text(MEDIUM)).await;
    let mut cfg = config(vec![upstream_config(
        "vllm",
        &up.metrics_url(),
        &["vllm:", "lmcache:"],
    )]);
    let family = |name: &str, op| ViewFamily {
        key: FamilyKey::named(name),
        op,
    };
    cfg.views = vec![
        ViewConfig {
            name: "router".into(),
            families: vec![family("vllm:num_requests_waiting", Op::Max)],
            aggregate: None,
        },
        ViewConfig {
            name: "per-engine".into(),
            families: vec![
                family("vllm:prompt_tokens_total", Op::Sum),
                family("vllm:e2e_request_latency_seconds", Op::Sum),
            ],
            aggregate: Some(vec!["model_name".into()]),
        },
    ];
    let sp = Running::start(cfg).await;
    let body = router(&sp).await;
    let waiting = grouped(MEDIUM, "vllm:num_requests_waiting", &["engine"], max);
    let model = labels(&[("model_name", MODEL)]);
    assert_eq!(
        series(&body, "vllm:num_requests_waiting"),
        vec![(model, waiting[&labels(&[("model_name", MODEL)])])]
    );
    assert_eq!(
        body.matches("# TYPE").count(),
        1,
        "the configured router replaced it"
    );

    let (code, body) = sp.get("/metrics/per-engine").await;
    assert_eq!(code, StatusCode::OK);
    let want = grouped(MEDIUM, "vllm:prompt_tokens_total", &["model_name"], sum);
    let got: BTreeMap<_, _> = series(&body, "vllm:prompt_tokens_total")
        .into_iter()
        .collect();
    assert_eq!(got, want);
    // A histogram's buckets, count and sum, each combined per `le`.
    for name in [
        "vllm:e2e_request_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count",
    ] {
        let want = grouped(MEDIUM, name, &["model_name"], sum);
        let got: BTreeMap<_, _> = series(&body, name).into_iter().collect();
        assert_eq!(got, want, "{name}");
    }
    assert!(body.contains("# TYPE vllm:e2e_request_latency_seconds histogram\n"));
}

#[tokio::test]
async fn aliases_serve_a_renamed_family_under_its_other_name_once() {
    let old = "\
# HELP vllm:gpu_prefix_cache_hits_total GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.
# TYPE vllm:gpu_prefix_cache_hits_total counter
vllm:gpu_prefix_cache_hits_total{engine=\"0\",model_name=\"m\"} 12.0
# HELP vllm:gpu_prefix_cache_hits_created GPU prefix cache hits, in terms of number of cached tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.
# TYPE vllm:gpu_prefix_cache_hits_created gauge
vllm:gpu_prefix_cache_hits_created{engine=\"0\",model_name=\"m\"} 1.7e+09
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine=\"0\",model_name=\"m\"} 0.5
";
    let up = Upstream::start(Reply::text(old)).await;
    let mut with = upstream_config("with", &up.metrics_url(), &["vllm:"]);
    with.aliases = true;
    let sp = Running::start(config(vec![with])).await;
    let (_, page) = sp.get("/metrics").await;
    assert_eq!(
        metric(&page, "vllm:prefix_cache_hits_total")
            .label("engine", "0")
            .value(),
        12.0
    );
    assert_eq!(
        metric(&page, "vllm:prefix_cache_hits_created").value(),
        1.7e9
    );
    assert!(page.contains("# TYPE vllm:prefix_cache_hits_total counter\n"));
    // Both names already there: nothing added, never two copies of one name.
    assert_eq!(metric(&page, "vllm:kv_cache_usage_perc").count(), 1);
    assert_eq!(metric(&page, "vllm:gpu_cache_usage_perc").count(), 1);
    assert_eq!(page.matches("# TYPE vllm:kv_cache_usage_perc ").count(), 1);
    assert_eq!(
        metric(&page, "dynamo_sysport_upstream_series")
            .label("outcome", "aliased")
            .value(),
        2.0
    );
    // In OpenMetrics too, as one counter.
    let om = client()
        .get(sp.url("/metrics"))
        .header("accept", "application/openmetrics-text")
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("body");
    assert!(
        om.contains("# TYPE vllm:prefix_cache_hits counter\n"),
        "{om}"
    );

    let without = upstream_config("without", &up.metrics_url(), &["vllm:"]);
    let sp = Running::start(config(vec![without])).await;
    let (_, page) = sp.get("/metrics").await;
    assert_eq!(metric(&page, "vllm:prefix_cache_hits_total").count(), 0);
    assert_eq!(
        metric(&page, "dynamo_sysport_upstream_series")
            .label("outcome", "aliased")
            .value(),
        0.0
    );
}

#[tokio::test]
async fn every_read_of_a_new_fetch_gets_a_new_rendering() {
    let page = |v: u32| {
        format!(
            "# TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting{{engine=\"0\"}} {v}\n\
             vllm:num_requests_waiting{{engine=\"1\"}} 1\n"
        )
    };
    let up = Upstream::start(Reply::text(page(1))).await;
    let sp = Running::start(config(vec![upstream_config(
        "vllm",
        &up.metrics_url(),
        &["vllm:"],
    )]))
    .await;
    for v in [1, 5, 5, 9] {
        up.set(Reply::text(page(v)));
        for _ in 0..2 {
            let body = router(&sp).await;
            assert_eq!(
                metric(&body, "vllm:num_requests_waiting").value(),
                f64::from(v + 1),
                "{body}"
            );
        }
    }
}
