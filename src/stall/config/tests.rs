//! `stall_after` and `stall:`: the preset's families by default, overrides, and every problem
//! reported with its line, column and field.

use crate::config::tests::{assert_issue, no_env, ok, problems};
use std::time::Duration;

use crate::model::FamilyKey;

fn family(name: &str, select: &[(&str, &str)]) -> FamilyKey {
    FamilyKey {
        name: name.to_owned(),
        select: select
            .iter()
            .map(|&(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
    }
}

#[test]
fn stall_detection_is_on_by_default_and_stall_after_0s_turns_it_off() {
    let config = ok("\
upstreams:
  - name: a
  - name: b
    stall_after: 0s
  - name: c
    engine: llamacpp
");
    let a = config.upstreams[0].stall.as_ref().expect("on by default");
    assert_eq!(a.after, Duration::from_secs(60));
    assert_eq!(a.waiting, family("vllm:num_requests_waiting", &[]));
    assert!(config.upstreams[1].stall.is_none());
    let c = config.upstreams[2].stall.as_ref().expect("on by default");
    assert_eq!(c.busy, family("llamacpp:requests_processing", &[]));
    assert_eq!(c.waiting, family("llamacpp:requests_deferred", &[]));
    let text = config.to_string();
    for line in [
        "    stall_after: 0s",
        "    stall_after: 60s",
        "      waiting: \"vllm:num_requests_waiting\"",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
}

#[test]
fn stall_after_reads_the_engines_own_families() {
    let config = ok("\
upstreams:
  - name: v
    stall_after: 90s
  - name: t
    engine: triton
    stall_after: 2m
  - name: r
    engine: trtllm
    stall_after: 1m
");
    let v = config.upstreams[0].stall.as_ref().expect("on");
    assert_eq!(v.after, Duration::from_secs(90));
    assert_eq!(v.busy, family("vllm:num_requests_running", &[]));
    assert_eq!(v.progress, [family("vllm:iteration_tokens_total", &[])]);
    let t = config.upstreams[1].stall.as_ref().expect("on");
    assert_eq!(
        t.busy,
        family("nv_trt_llm_request_metrics", &[("request_type", "active")])
    );
    assert_eq!(
        t.progress,
        [family(
            "nv_trt_llm_general_metrics",
            &[("general_type", "iteration_counter")]
        )]
    );
    let r = config.upstreams[2].stall.as_ref().expect("on");
    assert_eq!(r.progress.len(), 2);
    let text = config.to_string();
    for line in [
        "    stall_after: 90s",
        "      busy: \"vllm:num_requests_running\"",
        "      progress: [\"vllm:iteration_tokens_total\"]",
        "      busy: \"nv_trt_llm_request_metrics{request_type=\\\"active\\\"}\"",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
}

#[test]
fn stall_overrides_one_family_or_both_and_progress_takes_a_list() {
    let config = ok(r#"
upstreams:
  - name: a
    stall_after: 1m
    stall: { progress: "vllm:generation_tokens_total" }
  - name: b
    engine: triton
    stall_after: 1m
    stall:
      busy: 'nv_trt_llm_request_metrics{request_type="scheduled"}'
      progress:
        - 'nv_trt_llm_general_metrics{general_type="iteration_counter"}'
        - nv_inference_exec_count
"#);
    let a = config.upstreams[0].stall.as_ref().expect("on");
    assert_eq!(a.busy, family("vllm:num_requests_running", &[]));
    assert_eq!(a.progress, [family("vllm:generation_tokens_total", &[])]);
    let b = config.upstreams[1].stall.as_ref().expect("on");
    assert_eq!(
        b.busy,
        family(
            "nv_trt_llm_request_metrics",
            &[("request_type", "scheduled")]
        )
    );
    assert_eq!(
        b.progress,
        [
            family(
                "nv_trt_llm_general_metrics",
                &[("general_type", "iteration_counter")]
            ),
            family("nv_inference_exec_count", &[]),
        ]
    );
}

#[test]
fn every_stall_problem_is_reported_where_it_is() {
    let issues = problems(
        r#"
upstreams:
  - name: a
    stall_after: 0s
    stall: { busy: "vllm:num_requests_running" }
  - name: b
    stall_after: soon
  - name: c
    stall_after: 1m
    stall: { busy: "sglang:num_running_reqs", progress: [], speed: 1 }
  - name: d
    keep: ["lmcache:"]
    stall_after: 1m
"#,
        &no_env(),
    );
    assert_eq!(issues.len(), 6, "{issues:#?}");
    assert_issue(
        &issues[0],
        5,
        12,
        "upstreams[0].stall",
        "has no effect: stall_after is 0s",
    );
    assert_issue(
        &issues[1],
        7,
        18,
        "upstreams[1].stall_after",
        "invalid duration",
    );
    assert_issue(
        &issues[2],
        10,
        20,
        "upstreams[2].stall.busy",
        "\"sglang:num_running_reqs\" is not kept by this upstream",
    );
    assert_issue(
        &issues[3],
        10,
        57,
        "upstreams[2].stall.progress",
        "empty list",
    );
    assert_issue(
        &issues[4],
        10,
        61,
        "upstreams[2].stall.speed",
        "unknown field `speed`, expected one of busy, waiting, progress",
    );
    assert_issue(
        &issues[5],
        13,
        18,
        "upstreams[3].stall_after",
        "stall detection reads vllm:num_requests_running, vllm:num_requests_waiting, \
         vllm:iteration_tokens_total, which keep [\"lmcache:\"] leaves out",
    );
    // A list's elements share the list's position (the file gives none of their own).
    let issues = problems(
        "upstreams:\n  - name: e\n    stall_after: 1m\n    stall: { progress: [\"vllm:a\", \"1bad\"] }\n",
        &no_env(),
    );
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_issue(
        &issues[0],
        4,
        24,
        "upstreams[0].stall.progress[1]",
        "\"1bad\" is not a metric family name",
    );
}

#[test]
fn the_engine_liveness_path_cannot_be_taken_by_the_probes() {
    let issues = problems("health:\n  live_path: /live/engine\n", &no_env());
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_issue(
        &issues[0],
        2,
        14,
        "health.live_path",
        "serves the engine container's liveness",
    );
}
