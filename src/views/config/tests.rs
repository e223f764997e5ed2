//! `views:`: families read in order with their operations and selections, and every view
//! problem reported with its line, column and field.

use crate::config::tests::{assert_issue, no_env, ok, problems};
use crate::model::Op;

#[test]
fn views_are_read_in_order_with_their_operations_and_selections() {
    let config = ok(r#"
upstreams:
  - name: vllm
  - name: triton
    engine: triton
views:
  - name: load
    families:
      "vllm:num_requests_waiting": sum
      'nv_trt_llm_request_metrics{request_type="waiting"}': max
      "vllm:lora_requests_info": pass
    aggregate: [engine, dp_rank]
  - name: router
    families: { "vllm:kv_cache_usage_perc": min }
"#);
    assert_eq!(config.views.len(), 2);
    let load = &config.views[0];
    assert_eq!(load.name, "load");
    let families: Vec<(String, Op)> = load
        .families
        .iter()
        .map(|f| (f.key.to_string(), f.op))
        .collect();
    assert_eq!(
        families,
        [
            ("vllm:num_requests_waiting".to_owned(), Op::Sum),
            (
                "nv_trt_llm_request_metrics{request_type=\"waiting\"}".to_owned(),
                Op::Max
            ),
            ("vllm:lora_requests_info".to_owned(), Op::Pass),
        ]
    );
    assert_eq!(
        load.aggregate.as_deref(),
        Some(&["engine".to_owned(), "dp_rank".to_owned()][..])
    );
    assert_eq!(config.views[1].aggregate, None);
}

#[test]
fn view_problems_name_file_line_and_field() {
    let yaml = r#"
upstreams:
  - name: vllm
views:
  - families: { "vllm:a": sum }
  - name: load
    families:
      "vllm:a": median
      "sglang:num_queue_reqs": sum
      "1bad": sum
      "vllm:b{x}": sum
  - name: load
    families: { "vllm:a": sum }
  - name: x/y
    families: {}
  - name: ok
    families: { "vllm:a": sum, "vllm:a{}": max }
    aggregate: [engine, "__name__"]
  - name: ready
    families: { "vllm:a": sum }
"#;
    let env = no_env();
    let issues = problems(yaml, &env);
    let lines: Vec<String> = issues.iter().map(ToString::to_string).collect();
    assert_eq!(issues.len(), 10, "{lines:#?}");
    assert_issue(
        &issues[0],
        5,
        5,
        "views[0].name",
        "missing: every view needs a name",
    );
    assert_issue(
        &issues[1],
        8,
        17,
        "views[1].families.vllm:a",
        "bad operation \"median\": must be one of sum, avg, max, min, pass",
    );
    assert_issue(
        &issues[2],
        9,
        7,
        "views[1].families.sglang:num_queue_reqs",
        "unknown family \"sglang:num_queue_reqs\": no upstream keeps it",
    );
    assert_issue(
        &issues[3],
        10,
        7,
        "views[1].families.1bad",
        "not a metric family name",
    );
    assert_issue(
        &issues[4],
        11,
        7,
        "views[1].families.vllm:b{x}",
        "is not label=value",
    );
    assert_issue(
        &issues[5],
        12,
        11,
        "views[2].name",
        "duplicate view name \"load\": /metrics/load is already the view at line 6",
    );
    assert_issue(
        &issues[6],
        14,
        11,
        "views[3].name",
        "invalid view name \"x/y\"",
    );
    assert_issue(&issues[7], 15, 15, "views[3].families", "empty");
    assert_issue(
        &issues[8],
        17,
        32,
        "views[4].families.vllm:a{}",
        "vllm:a is listed twice",
    );
    assert_issue(
        &issues[9],
        18,
        25,
        "views[4].aggregate[1]",
        "reserved by Prometheus",
    );
    let clash = problems(
        "health: { path: /metrics/ready }\nviews:\n  - name: ready\n    families: { \"vllm:a\": sum }\n",
        &env,
    );
    assert_issue(
        &clash[0],
        3,
        11,
        "views[0].name",
        "/metrics/ready is also the readiness or liveness path",
    );
}
