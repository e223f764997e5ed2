//! `metric_relabel_configs` in the file: read with Prometheus' defaults and literally (no
//! `${VAR}`), each problem at its file, line, column and field, and rendered back.

use crate::config::tests::{TempFile, assert_issue, load_yaml, no_env, ok, problems};
use crate::config::*;
use crate::relabel::Action;

const RULES: &str = r#"
upstreams:
  - name: vllm
    url: http://127.0.0.1:8000/metrics
    metric_relabel_configs:
      - source_labels: [__name__]
        regex: "vllm:request_(prompt|generation)_tokens_.*"
        action: drop
      - source_labels: [__name__, le]
        separator: "|"
        regex: 'vllm:e2e_request_latency_seconds_bucket\|(0\.3|0\.5)'
        action: Drop
metric_relabel_configs:
  - source_labels: [model_name]
    regex: "(.*)/(.*)"
    target_label: model
    replacement: "${2}@$1 $$"
  - source_labels: [engine]
    target_label: shard
    modulus: 4
    action: hashmod
"#;

#[test]
fn rules_load_per_upstream_and_for_all_with_prometheus_defaults() {
    let config = ok(RULES);
    let own = &config.upstreams[0].metric_relabel_configs;
    assert_eq!(own.len(), 2);
    assert_eq!(own[0].source_labels, ["__name__"]);
    assert_eq!(own[0].separator, ";");
    assert_eq!(own[0].replacement, "$1");
    assert_eq!(own[0].action, Action::Drop);
    assert_eq!(own[1].separator, "|");
    assert_eq!(own[1].action, Action::Drop, "actions in any case");
    let all = &config.metric_relabel_configs;
    assert_eq!(all[0].action, Action::Replace);
    assert_eq!(all[0].target_label, "model");
    assert_eq!(all[1].modulus, 4);
    assert_eq!(all[1].regex.as_str(), "(.*)");
}

#[test]
fn rule_values_are_taken_literally() {
    // `${2}` and `$$` are Prometheus' own syntax: no environment expansion, no error for `2`.
    let config = ok(RULES);
    assert_eq!(config.metric_relabel_configs[0].replacement, "${2}@$1 $$");
}

#[test]
fn bad_rules_name_file_line_column_and_field() {
    let yaml = "metric_relabel_configs:\n  - regex: \"(\"\n    target_label: t\n  - action: rename\n  - source_labels: [a]\n  - action: hashmod\n    target_label: t\n    modulus: four\n";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 4, "{issues:#?}");
    assert_issue(
        &issues[0],
        2,
        12,
        "metric_relabel_configs[0].regex",
        "invalid regular expression \"(\"",
    );
    assert_issue(
        &issues[1],
        4,
        13,
        "metric_relabel_configs[1].action",
        "unknown action \"rename\"",
    );
    // A missing field is reported at its rule.
    assert_issue(
        &issues[2],
        5,
        5,
        "metric_relabel_configs[2].target_label",
        "missing: the replace action needs a target_label",
    );
    assert_issue(
        &issues[3],
        8,
        14,
        "metric_relabel_configs[3].modulus",
        "invalid modulus \"four\"",
    );
    assert!(issues[0].to_string().starts_with(
        "sysport.yaml:2:12: metric_relabel_configs[0].regex: invalid regular expression"
    ));
}

#[test]
fn rule_problems_inside_an_upstream_name_it() {
    let yaml = "upstreams:\n  - name: vllm\n    url: http://h/metrics\n    metric_relabel_configs:\n      - action: labeldrop\n        source_labels: [pid]\n";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_issue(
        &issues[0],
        6,
        24,
        "upstreams[0].metric_relabel_configs[0].source_labels",
        "the labeldrop action takes only regex",
    );
    let issues = problems("metric_relabel_configs:\n  - target_lable: x\n", &no_env());
    assert_issue(
        &issues[0],
        2,
        5,
        "metric_relabel_configs[0].target_lable",
        "unknown field `target_lable`",
    );
}

#[test]
fn rules_render_and_load_back_the_same() {
    let config = ok(RULES);
    let text = config.to_string();
    for line in [
        "    metric_relabel_configs:",
        "      - source_labels: [\"__name__\"]",
        "        action: drop",
        "metric_relabel_configs:",
        "    replacement: \"${2}@$1 $$\"",
        "    modulus: 4",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
    let file = TempFile::new(&text);
    let mut reloaded = load_file(&file.0, &no_env()).expect("rendered rules reload");
    reloaded.source = None;
    let mut want = config;
    want.source = None;
    assert_eq!(reloaded, want);
    let tricky = load_yaml(
        "metric_relabel_configs:\n  - regex: 'a\"b\\\\c\\n'\n    action: labeldrop\n",
        &no_env(),
    )
    .expect("valid");
    let file = TempFile::new(&tricky.to_string());
    let again = load_file(&file.0, &no_env()).expect("reloads");
    assert_eq!(again.metric_relabel_configs, tricky.metric_relabel_configs);
    assert!(
        Config::default()
            .to_string()
            .lines()
            .any(|l| l == "metric_relabel_configs: []")
    );
}

#[test]
fn the_example_file_loads_with_its_rules() {
    let example = include_str!("../../../config/sysport.example.yaml");
    let env: std::collections::HashMap<String, String> =
        [("POD_NAME".to_owned(), "vllm-0".to_owned())].into();
    let config = load_yaml(example, &env).expect("the example is valid");
    let rules = &config.upstreams[0].metric_relabel_configs;
    assert_eq!(rules.len(), 1);
    assert_eq!(rules[0].action, Action::Drop);
    assert!(rules[0].regex.is_match("vllm:request_prompt_tokens_bucket"));
    assert!(config.metric_relabel_configs.is_empty());
}
