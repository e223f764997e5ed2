//! `canary_after`, `canary:` and Dynamo's `DYN_HEALTH_CHECK_*`: the preset's request by default,
//! overrides, the environment's place, and every problem reported where it is.

use crate::config::tests::{TempFile, assert_issue, env, load_yaml, no_env, ok, problems};
use crate::config::*;
use std::time::Duration;

use crate::model::Engine;
use crate::model::engine::CanaryAnswer;

#[test]
fn canaries_are_on_by_default_where_the_engine_generates_and_0s_turns_them_off() {
    let config = ok("\
upstreams:
  - name: a
  - name: b
    canary_after: 0s
  - name: t
    engine: triton
  - name: l
    engine: llamacpp
    url: http://127.0.0.1:9090/metrics
  - name: lmcache
    keep: [\"lmcache:\"]
");
    let c = |i: usize| config.upstreams[i].canary.clone();
    let a = c(0).expect("on by default");
    assert_eq!(a.after, Duration::from_secs(10), "Dynamo's wait");
    assert_eq!(c(1), None);
    assert_eq!(
        c(2),
        None,
        "Triton's model name is a guess: off unless asked"
    );
    let l = c(3).expect("on by default");
    assert_eq!(l.url.as_str(), "http://127.0.0.1:9090/completion");
    assert_eq!(l.answer, CanaryAnswer::Content);
    assert!(l.body.expect("a POST").contains("\"n_predict\": 1"));
    assert_eq!(c(4), None, "keeps none of the engine's families");
    assert!(config.to_string().contains("    canary_after: 0s"));
    assert!(config.to_string().contains("    canary_after: 10s"));
}

#[test]
fn each_engine_gets_its_own_request_on_its_http_origin() {
    let config = ok("\
upstreams:
  - name: v
    canary_after: 10s
  - name: s
    engine: sglang
    canary_after: 10s
  - name: r
    engine: trtllm
    canary_after: 10s
  - name: t
    engine: triton
    canary_after: 10s
");
    let c = |i: usize| config.upstreams[i].canary.clone().expect("on");
    let v = c(0);
    assert_eq!(v.url.as_str(), "http://127.0.0.1:8000/v1/completions");
    assert!(v.body.expect("a POST").contains("\"max_tokens\": 1"));
    assert_eq!((v.model, v.answer), (None, CanaryAnswer::Choices));
    assert_eq!((v.timeout, v.live_failures), (Duration::from_secs(3), 3));
    assert_eq!(
        v.idle,
        StallConfig::preset(Engine::Vllm, Duration::from_secs(60))
    );
    let s = c(1);
    assert_eq!(s.url.as_str(), "http://127.0.0.1:30000/health_generate");
    assert_eq!((s.body, s.answer), (None, CanaryAnswer::Status));
    assert_eq!(c(2).url.as_str(), "http://127.0.0.1:8000/health_generate");
    let t = c(3);
    // Triton generates on its HTTP port (the health URL's), not its metrics port.
    assert_eq!(t.url.path(), "/v2/models/%7Bmodel%7D/generate");
    assert_eq!(t.url.port(), Some(8000));
    assert_eq!(t.model.as_deref(), Some("ensemble"));
    assert_eq!(t.answer, CanaryAnswer::TextOutput);
}

#[test]
fn canary_overrides_the_preset_and_expands_header_values() {
    let yaml = "\
upstreams:
  - name: v
    canary_after: 30s
    stall_after: 1m
    canary:
      url: http://10.0.0.1:9000/v1/completions
      body: '{\"model\": {model}, \"prompt\": \"hi\", \"max_tokens\": 1}'
      headers: { Authorization: \"Bearer ${KEY}\" }
      timeout: 5s
      live_failures: 0
      model: llama
";
    let config = load_yaml(yaml, &env(&[("KEY", "s3cret")])).expect("loads");
    let c = config.upstreams[0].canary.clone().expect("on");
    assert_eq!(c.after, Duration::from_secs(30));
    assert_eq!(c.url.as_str(), "http://10.0.0.1:9000/v1/completions");
    assert!(c.body.expect("body").contains("\"hi\""));
    assert_eq!(
        c.headers,
        [("Authorization".into(), "Bearer s3cret".into())]
    );
    assert_eq!((c.timeout, c.live_failures), (Duration::from_secs(5), 0));
    assert_eq!(c.model.as_deref(), Some("llama"));
    // The stall detection's families tell idle too.
    assert_eq!(Some(c.idle), config.upstreams[0].stall);
    let shown = config.to_string();
    assert!(
        shown.contains("# headers (values not shown): Authorization"),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[test]
fn problems_name_their_field() {
    let issues = problems(
        "upstreams:\n  - name: v\n    canary_after: 0s\n    canary: { timeout: 2s }\n",
        &no_env(),
    );
    assert_issue(
        &issues[0],
        4,
        13,
        "upstreams[0].canary",
        "canary_after is 0s",
    );
    let issues = problems(
        "upstreams:\n  - name: v\n    canary_after: 5s\n    canary: { body: 'not json', live_failures: -1, color: red }\n",
        &no_env(),
    );
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert!(fields.contains(&"upstreams[0].canary.body"), "{fields:?}");
    assert!(
        fields.contains(&"upstreams[0].canary.live_failures"),
        "{fields:?}"
    );
    assert!(fields.contains(&"upstreams[0].canary.color"), "{fields:?}");
}

#[test]
fn dynamo_names_fill_in_what_the_file_leaves_unset() {
    let yaml = "\
upstreams:
  - name: v
  - name: off
    canary_after: 0s
  - name: s
    engine: sglang
    canary_after: 4s
  - name: t
    engine: triton
";
    let payload = TempFile::new("{\"model\": \"x\", \"prompt\": \"p\", \"max_tokens\": 1}");
    let at = format!("@{}", payload.0.display());
    let e = env(&[
        ("DYN_HEALTH_CHECK_ENABLED", "true"),
        ("DYN_HEALTH_CHECK_REQUEST_TIMEOUT", "7"),
        ("DYN_HEALTH_CHECK_PAYLOAD", &at),
    ]);
    let config = load_yaml(yaml, &e).expect("loads");
    let v = config.upstreams[0].canary.clone().expect("on");
    assert_eq!(
        v.after,
        Duration::from_secs(10),
        "DYN_CANARY_WAIT_TIME's default"
    );
    assert_eq!(v.timeout, Duration::from_secs(7));
    assert!(v.body.expect("payload").contains("\"x\""));
    assert_eq!(config.upstreams[1].canary, None, "the file's 0s stands");
    let s = config.upstreams[2].canary.clone().expect("on");
    assert_eq!(s.after, Duration::from_secs(4));
    assert_eq!(s.body, None, "a GET of /health_generate takes no payload");
    assert!(
        config.upstreams[3].canary.is_some(),
        "enabled turns Triton's on too"
    );
    // Unset: the defaults, waiting DYN_CANARY_WAIT_TIME.
    let config = load_yaml(yaml, &env(&[("DYN_CANARY_WAIT_TIME", "3")])).expect("loads");
    let v = config.upstreams[0].canary.clone().expect("on by default");
    assert_eq!(v.after, Duration::from_secs(3));
    assert_eq!(config.upstreams[3].canary, None);
    // Dynamo's operator says false: off everywhere, whatever the file says.
    let config = load_yaml(yaml, &env(&[("DYN_HEALTH_CHECK_ENABLED", "false")])).expect("loads");
    assert!(config.upstreams.iter().all(|u| u.canary.is_none()));
    // Bad values name their variable.
    let issues = problems(
        yaml,
        &env(&[
            ("DYN_HEALTH_CHECK_ENABLED", "yes please"),
            ("DYN_HEALTH_CHECK_PAYLOAD", "@/nonexistent/payload.json"),
            ("DYN_HEALTH_CHECK_REQUEST_TIMEOUT", "-1"),
        ]),
    );
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "DYN_HEALTH_CHECK_ENABLED",
            "DYN_HEALTH_CHECK_REQUEST_TIMEOUT",
            "DYN_HEALTH_CHECK_PAYLOAD"
        ]
    );
}
