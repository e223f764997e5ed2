//! `metric_relabel_configs` through the real server: rules from a configuration file shape what
//! every scraper gets in both formats, are counted, and never touch sysport's own metrics.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::*;
use sysport::config::{Config, load_file};

const PAGE: &str = "\
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.3\",model_name=\"org/m\"} 1.0
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"org/m\"} 2.0
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\",model_name=\"org/m\"} 3.0
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"org/m\"} 4.0
vllm:e2e_request_latency_seconds_count{engine=\"0\",model_name=\"org/m\"} 4.0
vllm:e2e_request_latency_seconds_sum{engine=\"0\",model_name=\"org/m\"} 2.5
# HELP vllm:request_prompt_tokens Number of prefill tokens processed.
# TYPE vllm:request_prompt_tokens histogram
vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"1.0\",model_name=\"org/m\"} 0.0
vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"+Inf\",model_name=\"org/m\"} 2.0
vllm:request_prompt_tokens_count{engine=\"0\",model_name=\"org/m\"} 2.0
vllm:request_prompt_tokens_sum{engine=\"0\",model_name=\"org/m\"} 300.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\",model_name=\"org/m\"} 3.0
vllm:num_requests_running{engine=\"1\",model_name=\"org/m\"} 4.0
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine=\"0\",model_name=\"org/m\"} 100.0
";

/// A configuration file for one upstream at `url` with rules of its own and for all.
fn config_with_rules(url: &str) -> Config {
    let yaml = format!(
        r#"
listen: {{ host: 127.0.0.1, port: 0 }}
labels: {{ worker_id: w-1 }}
upstreams:
  - name: vllm
    url: {url}
    keep: ["vllm:"]
    metric_relabel_configs:
      - source_labels: [__name__]
        regex: "vllm:request_(prompt|generation)_tokens_.*"
        action: drop
      - source_labels: [__name__, le]
        regex: 'vllm:e2e_request_latency_seconds_bucket;0\.5'
        action: drop
      - source_labels: [model_name]
        regex: "(.*)/(.*)"
        target_label: model
        replacement: "${{2}}"
      - regex: model_name
        action: labeldrop
metric_relabel_configs:
  - source_labels: [__name__]
    regex: "vllm:num_requests_running"
    target_label: engine
    replacement: all
  - source_labels: [worker_id]
    target_label: worker
  - regex: "upstream|version"
    action: labeldrop
"#
    );
    let path = temp_file(&yaml);
    let config = load_file(&path, &HashMap::new()).expect("a valid configuration");
    let _ = std::fs::remove_file(&path);
    config
}

fn temp_file(contents: &str) -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let path = std::env::temp_dir().join(format!(
        "sysport-relabel-test-{}-{}.yaml",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::write(&path, contents).expect("write the configuration");
    path
}

#[tokio::test]
async fn rules_shape_the_page_in_both_formats_and_are_counted() {
    let up = Upstream::start(Reply::text(PAGE)).await;
    let sp = Running::start(config_with_rules(&up.metrics_url())).await;
    let (_, text) = sp.get("/metrics").await;

    // Dropped families go with their HELP and TYPE.
    assert!(!text.contains("vllm:request_prompt_tokens"), "{text}");
    // A thinned histogram keeps its other buckets, count and sum.
    let bucket = |le| {
        metric(&text, "vllm:e2e_request_latency_seconds_bucket")
            .label("le", le)
            .count()
    };
    assert_eq!((bucket("0.3"), bucket("0.5"), bucket("+Inf")), (1, 0, 1));
    assert_eq!(
        metric(&text, "vllm:e2e_request_latency_seconds_count")
            .label("model", "m")
            .label("worker", "w-1")
            .value(),
        4.0
    );
    assert!(!text.contains("model_name="), "labeldrop: {text}");
    // Two series made equal: the first stays, the other is a duplicate.
    let running = metric(&text, "vllm:num_requests_running").label("engine", "all");
    assert_eq!((running.count(), running.value()), (1, 3.0));
    // The configured label is seen by the rules (copied to `worker`) and still served.
    assert_eq!(
        metric(&text, "vllm:prompt_tokens_total")
            .label("worker_id", "w-1")
            .label("worker", "w-1")
            .value(),
        100.0
    );
    assert_eq!(
        text.matches("# TYPE vllm:num_requests_running gauge")
            .count(),
        1
    );

    // sysport's own metrics never go through the rules (`upstream` would have been dropped).
    let series = |outcome| {
        metric(&text, "dynamo_sysport_upstream_series")
            .label("upstream", "vllm")
            .label("outcome", outcome)
            .value()
    };
    assert_eq!(
        series("relabel_dropped"),
        5.0,
        "4 prompt-token samples, 1 bucket"
    );
    assert_eq!(series("duplicate"), 1.0);
    assert_eq!(series("kept"), 7.0);
    assert_eq!(
        metric(&text, "dynamo_sysport_build_info").count(),
        1,
        "labeldrop of `version` left sysport's own series alone"
    );
    assert!(text.contains("dynamo_sysport_build_info{version="));

    // OpenMetrics: the same series, one EOF.
    let om = client()
        .get(sp.url("/metrics"))
        .header("accept", "application/openmetrics-text;version=1.0.0")
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("body");
    assert_eq!(om.matches("# EOF").count(), 1);
    assert_eq!(
        metric(&om, "vllm:e2e_request_latency_seconds_bucket")
            .label("le", "+Inf")
            .value(),
        4.0
    );
    assert_eq!(
        metric(&om, "vllm:e2e_request_latency_seconds_bucket").count(),
        3
    );
    assert!(!om.contains("vllm:request_prompt_tokens"));
    sp.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
async fn a_renamed_family_is_found_by_a_selective_read() {
    let up = Upstream::start(Reply::text(PAGE)).await;
    let yaml = format!(
        "listen: {{ host: 127.0.0.1, port: 0 }}\nupstreams:\n  - name: vllm\n    url: {}\n    \
         metric_relabel_configs:\n      - source_labels: [__name__]\n        \
         regex: \"vllm:num_requests_(.*)\"\n        target_label: __name__\n        \
         replacement: \"engine:requests_$1\"\n",
        up.metrics_url()
    );
    let path = temp_file(&yaml);
    let config = load_file(&path, &HashMap::new()).expect("valid");
    let _ = std::fs::remove_file(&path);
    let sp = Running::start(config).await;
    let (_, text) = sp.get("/metrics?name=engine:requests_running").await;
    assert_eq!(
        metric(&text, "engine:requests_running")
            .label("engine", "1")
            .value(),
        4.0
    );
    assert!(
        text.contains("# TYPE engine:requests_running untyped"),
        "{text}"
    );
    let (_, old) = sp.get("/metrics?name=vllm:num_requests_running").await;
    assert_eq!(metric(&old, "vllm:num_requests_running").count(), 0);
    // The engine is asked for its whole page: the renamed series come from other families.
    assert!(
        up.queries().iter().all(|q| !q.contains("name")),
        "{:?}",
        up.queries()
    );
    sp.shutdown().await.expect("clean shutdown");
}
