//! Engine presets and `views:`: what a preset fills in, and every view problem reported with
//! its line, column and field.

use super::tests::{assert_issue, no_env, ok, problems, url};
use crate::model::{Engine, Op, Url};

#[test]
fn a_preset_fills_in_url_keep_and_health_of_its_engine() {
    let config = ok("\
upstreams:
  - name: a
  - name: b
    engine: sglang
  - name: c
    engine: trtllm
  - name: d
    engine: triton
");
    let got: Vec<(Engine, &str, Vec<&str>, Option<&str>)> = config
        .upstreams
        .iter()
        .map(|u| {
            (
                u.engine,
                u.url.as_str(),
                u.keep.iter().map(String::as_str).collect(),
                u.health_url.as_ref().map(Url::as_str),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            (
                Engine::Vllm,
                "http://127.0.0.1:8000/metrics",
                vec!["vllm:", "lmcache:"],
                Some("http://127.0.0.1:8000/health")
            ),
            (
                Engine::Sglang,
                "http://127.0.0.1:30000/metrics",
                vec!["sglang:", "sglang_"],
                Some("http://127.0.0.1:30000/health")
            ),
            (
                Engine::Trtllm,
                "http://127.0.0.1:8000/prometheus/metrics",
                vec!["trtllm_"],
                Some("http://127.0.0.1:8000/health")
            ),
            (
                Engine::Triton,
                "http://127.0.0.1:8002/metrics",
                vec!["nv_"],
                Some("http://127.0.0.1:8000/v2/health/ready")
            ),
        ]
    );
    assert!(config.upstreams.iter().all(|u| !u.aliases));
}

#[test]
fn everything_a_preset_sets_can_be_overridden() {
    let config = ok("\
upstreams:
  - name: s
    engine: sglang
    url: http://10.0.0.5:31000/metrics
    keep: [\"sglang:\", \"custom_\"]
    aliases: true
  - name: t
    engine: triton
    url: http://127.0.0.1:9002/metrics
    health_url: http://127.0.0.1:9000/v2/health/ready
");
    let s = &config.upstreams[0];
    assert_eq!(s.url, url("http://10.0.0.5:31000/metrics"));
    assert_eq!(s.keep, ["sglang:", "custom_"]);
    // The engine is named: its health endpoint on the metrics URL's origin.
    assert_eq!(s.health_url, Some(url("http://10.0.0.5:31000/health")));
    assert!(s.aliases);
    let t = &config.upstreams[1];
    assert_eq!(
        t.health_url,
        Some(url("http://127.0.0.1:9000/v2/health/ready"))
    );
}

#[test]
fn a_named_engine_with_its_own_url_is_checked_on_that_url_s_origin_unless_told_otherwise() {
    let config = ok("\
upstreams:
  - name: v
    engine: vllm
    url: https://scraper:pw@10.0.0.7:9000/metrics?x=1
  - name: l
    engine: llamacpp
    url: http://127.0.0.1:18080/metrics
  - name: t
    engine: triton
    url: http://10.0.0.8:18002/metrics
  - name: off
    engine: vllm
    url: http://127.0.0.1:8000/metrics
    health_url: none
  - name: lmcache
    url: http://127.0.0.1:8000/metrics
    keep: [\"lmcache:\"]
");
    let health: Vec<Option<&str>> = config
        .upstreams
        .iter()
        .map(|u| u.health_url.as_ref().map(Url::as_str))
        .collect();
    assert_eq!(
        health,
        [
            Some("https://scraper:pw@10.0.0.7:9000/health"),
            Some("http://127.0.0.1:18080/health"),
            // Triton's metrics port serves nothing else: its HTTP port.
            Some("http://10.0.0.8:8000/v2/health/ready"),
            None,
            // No engine named: a metrics URL of something else; readiness follows scrapes.
            None,
        ]
    );
    let text = config.to_string();
    assert!(
        text.contains("    health_url: \"http://127.0.0.1:18080/health\""),
        "{text}"
    );
    assert!(
        text.contains("    health_url: none"),
        "check-config shows it off: {text}"
    );
    // The derived health URL keeps the credentials, and shows them masked.
    assert!(!text.contains("pw@"), "{text}");
}

#[test]
fn check_config_shows_what_the_preset_filled_in() {
    let config = ok("upstreams:\n  - name: engine\n    engine: triton\n");
    let text = config.to_string();
    for line in [
        "    engine: triton",
        "    url: \"http://127.0.0.1:8002/metrics\"",
        "    keep: [\"nv_\"]",
        "    health_url: \"http://127.0.0.1:8000/v2/health/ready\"",
        "    aliases: false",
        "    # /metrics/router: nv_trt_llm_request_metrics{request_type=\"waiting\"}: sum, \
         nv_trt_llm_request_metrics{request_type=\"scheduled\"}: sum, \
         nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=\"fraction\"}: avg",
        "views: []",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
}

#[test]
fn an_unknown_engine_is_named_with_the_known_ones() {
    let issues = problems("upstreams:\n  - name: a\n    engine: tgi\n", &no_env());
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_issue(
        &issues[0],
        3,
        13,
        "upstreams[0].engine",
        "unknown engine \"tgi\": must be one of vllm, sglang, trtllm, triton",
    );
}

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
