//! The cost of `metric_relabel_configs` on the large text input (`large`: ~2.3 MB, 48 engines
//! with LMCache, LoRA and spec decode; the exposition crate's benchmark inputs, see
//! `crates/expfmt/benches/expfmt.rs`): the pipeline of one `/metrics` request (parse, rules,
//! merge, write text 0.0.4) with no rules, ten typical rules (the README's example and the
//! like), and one rule that changes every vLLM series; page after page with the same rule set
//! (as an upstream's scrapes go), and on a first page (`-first`).
//!
//! `cargo bench --bench relabel`; in test mode (`cargo test --all-targets`) each runs once on
//! the fixtures.

use std::hint::black_box;
use std::time::Duration;

use bytes::Bytes;
use criterion::{Criterion, SamplingMode, Throughput};
use sysport::expfmt::{self, Exposition, Format, MergeOptions, Output, PairHasher, ParseOptions};
use sysport::relabel::{self, Page, Rule, RuleSet};
use sysport_bench_inputs::{self as inputs, Input, KEEP, LIMITS, is_test_mode};

fn main() {
    let test_mode = is_test_mode();
    let python = inputs::generator(test_mode);
    let input = inputs::input("large", Format::Text, python.as_ref());
    eprintln!("large text: {} bytes  {}", input.body.len(), input.source);
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    bench_relabel(&mut c, &input);
    c.final_summary();
}

/// Ten typical rules: the README's example (request-size histograms dropped, latency buckets
/// thinned), a few more families dropped, and a label rewritten on two small families.
const TYPICAL_RULES: &str = r#"
- source_labels: [__name__]
  regex: "vllm:request_(prompt|generation)_tokens_(bucket|sum|count|created)"
  action: drop
- source_labels: [__name__, le]
  regex: 'vllm:(time_to_first_token|inter_token_latency|e2e_request_latency)_seconds_bucket;(0\.1|0\.5|1\.0|2\.5|5\.0|10\.0|20\.0|40\.0|80\.0|\+Inf)'
  target_label: __keep_bucket
  replacement: "yes"
- source_labels: [__name__, __keep_bucket]
  regex: 'vllm:(time_to_first_token|inter_token_latency|e2e_request_latency)_seconds_bucket;'
  action: drop
- regex: __keep_bucket
  action: labeldrop
- source_labels: [__name__]
  regex: "vllm:request_params_(n|max_tokens)_.*"
  action: drop
- source_labels: [__name__]
  regex: "vllm:(cache_config_info|lora_requests_info)"
  action: drop
- source_labels: [__name__]
  regex: "vllm:iteration_tokens_total_.*"
  action: drop
- source_labels: [__name__]
  regex: "lmcache:p2p_.*"
  action: drop
- regex: pid
  action: labeldrop
- source_labels: [__name__, model_name]
  regex: "vllm:num_requests_(running|waiting);(?:.*/)?(.*)"
  target_label: model
  replacement: "$2"
"#;

/// One rule that changes every vLLM series: every vLLM family is written anew.
const REWRITE_ALL_RULES: &str = r#"
- source_labels: [model_name]
  regex: "(?:.*/)?(.*)"
  target_label: model_name
"#;

/// The rules of a YAML list, read by sysport's own configuration loader.
fn rules(rules: &str) -> Vec<Rule> {
    let mut yaml = String::from(
        "upstreams:\n  - name: bench\n    url: http://127.0.0.1:1/metrics\n    metric_relabel_configs:\n",
    );
    for line in rules.lines().filter(|l| !l.is_empty()) {
        yaml.push_str("      ");
        yaml.push_str(line);
        yaml.push('\n');
    }
    let path =
        std::env::temp_dir().join(format!("sysport-bench-rules-{}.yaml", std::process::id()));
    std::fs::write(&path, yaml).expect("write the rules");
    let env: std::collections::HashMap<String, String> = Default::default();
    let config = sysport::config::load_file(&path, &env).expect("valid rules");
    let _ = std::fs::remove_file(&path);
    config.upstreams[0].metric_relabel_configs.clone()
}

fn rule_set(rules: &[Rule]) -> RuleSet {
    RuleSet::new(rules, &[], &[]).expect("some rules")
}

/// What one `/metrics` request does with the large page (parse, merge, write text 0.0.4), with
/// the page through `rules` between the parse and the merge.
fn relabelled_pipeline(body: &Bytes, rules: Option<&RuleSet>) -> Vec<u8> {
    let hasher = PairHasher::new(0x5eed);
    let keep: Vec<String> = KEEP.iter().map(|s| s.to_string()).collect();
    let opts = ParseOptions {
        keep: &keep,
        limits: LIMITS,
        added_labels: &[],
        hasher,
        allow_reserved: false,
    };
    let exp = expfmt::parse(body.clone(), Format::Text, &opts).expect("within the limits");
    let exp = std::sync::Arc::new(exp);
    let page = match rules {
        None => Page::unchanged(exp),
        Some(rules) => relabel::relabel(exp, rules, LIMITS, hasher).expect("within the limits"),
    };
    // What a request does with the parsed pages: merge them, write text 0.0.4 into a fresh
    // buffer sized by `Merge::size_hint`.
    let sources: Vec<&Exposition> = page.served.iter().map(|e| &**e).collect();
    let opts = MergeOptions {
        added: &[],
        names: None,
        hasher,
    };
    expfmt::merge_write::<Vec<u8>>(&sources, &opts, Output::Text).out
}

/// The cost of `metric_relabel_configs` on the large text input.
fn bench_relabel(c: &mut Criterion, input: &Input) {
    let typical = rules(TYPICAL_RULES);
    let rewrite_all = rules(REWRITE_ALL_RULES);
    let sets = [
        ("none", None),
        ("typical", Some(rule_set(&typical))),
        ("rewrite-all", Some(rule_set(&rewrite_all))),
    ];
    for (name, rules) in &sets {
        let out = relabelled_pipeline(&input.body, rules.as_ref());
        let lines = out.iter().filter(|&&b| b == b'\n').count();
        eprintln!("relabel {name}: {} bytes out, {lines} lines", out.len());
    }
    let mut group = c.benchmark_group("relabel/text");
    group
        .throughput(Throughput::Bytes(input.body.len() as u64))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10);
    // The same rule set page after page, as an upstream's scrapes go: what the rules made of
    // each family of the last page is reused (only values change between scrapes).
    for (name, rules) in &sets {
        group.bench_function(format!("{name}/{}", input.name), |b| {
            b.iter(|| black_box(relabelled_pipeline(&input.body, rules.as_ref())))
        });
    }
    // The first page of an upstream: nothing known yet.
    for (name, rules) in [
        ("typical-first", &typical),
        ("rewrite-all-first", &rewrite_all),
    ] {
        group.bench_function(format!("{name}/{}", input.name), |b| {
            b.iter(|| black_box(relabelled_pipeline(&input.body, Some(&rule_set(rules)))))
        });
    }
    group.finish();
}
