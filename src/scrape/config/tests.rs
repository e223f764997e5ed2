//! Engine presets in `upstreams:`: what a preset fills in, what can be overridden, and every
//! problem reported with its line, column and field.

use crate::config::tests::{assert_issue, no_env, ok, problems, url};
use crate::model::{Engine, Url};

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
fn compression_is_asked_for_off_loopback_only_unless_the_file_says() {
    let config = ok("\
upstreams:
  - name: a
  - name: b
    url: http://localhost:30000/metrics
  - name: c
    url: http://127.0.0.2:8000/metrics
  - name: d
    url: http://[::1]:8000/metrics
  - name: e
    url: http://engine.localhost:8000/metrics
  - name: f
    url: http://10.0.0.5:8000/metrics
  - name: g
    url: https://vllm.inference.svc.cluster.local/metrics
  - name: h
    url: http://[::ffff:10.0.0.5]:8000/metrics
  - name: i
    enable_compression: true
  - name: j
    url: http://10.0.0.5:8000/metrics
    enable_compression: FALSE
");
    let got: Vec<(&str, bool)> = config
        .upstreams
        .iter()
        .map(|u| (u.name.as_str(), u.enable_compression))
        .collect();
    assert_eq!(
        got,
        [
            ("a", false),
            ("b", false),
            ("c", false),
            ("d", false),
            ("e", false),
            ("f", true),
            ("g", true),
            ("h", true),
            ("i", true),
            ("j", false),
        ]
    );
    // check-config shows what was decided.
    let text = config.to_string();
    let shown: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("    enable_compression: "))
        .collect();
    assert_eq!(shown.len(), 10, "{text}");
    assert_eq!(shown[0], "    enable_compression: false");
    assert_eq!(shown[5], "    enable_compression: true");
}

#[test]
fn enable_compression_that_is_no_boolean_names_its_line_and_field() {
    let issues = problems(
        "upstreams:\n  - name: a\n    enable_compression: gzip\n",
        &no_env(),
    );
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_issue(
        &issues[0],
        3,
        25,
        "upstreams[0].enable_compression",
        "\"gzip\"",
    );
}
