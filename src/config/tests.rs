//! One test per loading rule: defaults, precedence, `--upstream`, `${VAR}`, each validation
//! check with its position and field, and the `Display` round trip.

use std::collections::HashMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::assemble::load_text;
use super::*;
use crate::model::{Engine, FamilyKey, Op, Url, ViewFamily};

const FILE: &str = "sysport.yaml";

pub(crate) fn env(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|&(key, value)| (key.to_owned(), value.to_owned()))
        .collect()
}

pub(crate) fn no_env() -> HashMap<String, String> {
    HashMap::new()
}

pub(crate) fn url(text: &str) -> Url {
    Url::parse(text).expect("test URL")
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("test address")
}

/// Loads `yaml` as if read from `sysport.yaml`.
pub(crate) fn load_yaml(yaml: &str, env: &HashMap<String, String>) -> Result<Config, ConfigError> {
    load_text(yaml, Some(Path::new(FILE)), &Overrides::default(), env)
}

pub(crate) fn ok(yaml: &str) -> Config {
    match load_yaml(yaml, &no_env()) {
        Ok(config) => config,
        Err(err) => panic!("expected a valid config, got:\n{err}"),
    }
}

pub(crate) fn problems(yaml: &str, env: &HashMap<String, String>) -> Vec<ConfigIssue> {
    match load_yaml(yaml, env) {
        Ok(config) => panic!("expected an error, got:\n{config}"),
        Err(err) => {
            assert_eq!(err.to_string().lines().count(), err.issues.len());
            err.issues
        }
    }
}

/// The only problem in `yaml`, as displayed.
fn only_issue(yaml: &str) -> String {
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 1, "{issues:#?}");
    issues[0].to_string()
}

#[track_caller]
pub(crate) fn assert_issue(
    issue: &ConfigIssue,
    line: usize,
    column: usize,
    field: &str,
    contains: &str,
) {
    assert_eq!(issue.file.as_deref(), Some(Path::new(FILE)), "{issue}");
    assert_eq!(
        (issue.line, issue.column),
        (Some(line), Some(column)),
        "{issue}"
    );
    assert_eq!(issue.field, field, "{issue}");
    assert!(issue.message.contains(contains), "{issue}");
}

/// A file under the system temp directory, removed on drop.
pub(crate) struct TempFile(pub(crate) PathBuf);

impl TempFile {
    pub(crate) fn new(contents: &str) -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let name = format!(
            "sysport-config-test-{}-{}.yaml",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, contents).expect("write temp config");
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

const EXAMPLE: &str = r#"
listen: { host: 0.0.0.0, port: 8081 }
health: { path: /health, live_path: /live, starting_status: notready, interval: 5s }
labels: { worker_id: "${POD_NAME}" }      # ordered map; keep file order
upstreams:
  - name: vllm
    url: http://127.0.0.1:8000/metrics
    keep: ["vllm:"]
    timeout: 2s
    health_url: http://127.0.0.1:8000/health
    required: true
    min_interval: 0s
limits: { max_body_bytes: 16MiB, max_line_bytes: 1048576B, max_series: 250000, max_labels: 64, max_label_value_bytes: 512Ki }
shutdown: { drain_delay: 5s }
"#;

#[test]
fn defaults_without_file_env_or_flags() {
    let config = load(&Overrides::default(), &no_env()).expect("defaults are valid");
    assert_eq!(config, Config::default());
    assert_eq!(config.listen.host, ip("0.0.0.0"));
    assert_eq!(config.listen.port, 8081);
    assert_eq!(config.health.path, "/health");
    assert_eq!(config.health.live_path, "/live");
    assert_eq!(config.health.starting_status, StartingStatus::NotReady);
    assert_eq!(config.health.interval, Duration::from_secs(5));
    assert_eq!(config.shutdown.drain_delay, Duration::from_secs(5));
    assert_eq!(config.limits, Limits::default());
    assert!(config.labels.is_empty());
    assert_eq!(config.source, None);
    let vllm = UpstreamConfig {
        name: "vllm".to_owned(),
        url: url("http://127.0.0.1:8000/metrics"),
        keep: vec!["vllm:".to_owned(), "lmcache:".to_owned()],
        timeout: Duration::from_secs(2),
        health_url: Some(url("http://127.0.0.1:8000/health")),
        required: true,
        min_interval: Duration::ZERO,
        engine: crate::model::Engine::Vllm,
        aliases: false,
        // The built-in upstream is on loopback: its page is asked for as it is.
        enable_compression: false,
        metric_relabel_configs: Vec::new(),
        stall: None,
        canary: None,
    };
    // Stall detection and canaries on, with vLLM's families and request.
    let stall = config.upstreams[0].stall.clone().expect("on by default");
    assert_eq!(stall.after, Duration::from_secs(60));
    let canary = config.upstreams[0].canary.clone().expect("on by default");
    assert_eq!(canary.after, Duration::from_secs(10));
    assert_eq!(canary.url.as_str(), "http://127.0.0.1:8000/v1/completions");
    assert_eq!(config.upstreams, [vllm.with_default_checks()]);
    assert!(config.metric_relabel_configs.is_empty());
}

#[test]
fn empty_file_and_empty_sections_mean_defaults() {
    assert_eq!(ok("").upstreams, Config::default().upstreams);
    assert_eq!(ok("# nothing yet\n").listen, Listen::default());
    let config = ok("listen:\nhealth:\nlabels:\nupstreams:\nlimits:\nshutdown:\n");
    assert_eq!(
        config,
        Config {
            source: Some(FILE.into()),
            ..Config::default()
        }
    );
}

#[test]
fn example_file_loads_to_the_expected_config() {
    let config = load_yaml(EXAMPLE, &env(&[("POD_NAME", "vllm-0")])).expect("example is valid");
    let mut vllm = UpstreamConfig::new("vllm", url("http://127.0.0.1:8000/metrics"));
    vllm.keep = vec!["vllm:".to_owned()];
    vllm.health_url = Some(url("http://127.0.0.1:8000/health"));
    let want = Config {
        labels: vec![("worker_id".to_owned(), "vllm-0".to_owned())],
        upstreams: vec![vllm.with_default_checks()],
        source: Some(FILE.into()),
        ..Config::default()
    };
    assert_eq!(config, want);
}

#[test]
fn upstream_fields_default_when_left_out() {
    let config = ok("upstreams:\n  - name: lmcache\n    url: http://127.0.0.1:8000/metrics\n");
    assert_eq!(
        config.upstreams,
        [
            UpstreamConfig::new("lmcache", url("http://127.0.0.1:8000/metrics"))
                .with_default_checks()
        ]
    );
    // An upstream that keeps none of its engine's families gets neither stall detection nor
    // canaries (LMCache's own endpoint), and no error.
    let config = ok(
        "upstreams:\n  - name: lmcache\n    url: http://127.0.0.1:9/metrics\n    keep: [\"lmcache:\"]\n",
    );
    assert_eq!(
        (&config.upstreams[0].stall, &config.upstreams[0].canary),
        (&None, &None)
    );
}

#[test]
fn file_values_in_every_supported_form() {
    let config = ok(r#"
listen: { host: "::1", port: 0 }
health: { starting_status: ready, interval: 250ms }
labels:
  zone: b
  cluster: a
  replica: 3
upstreams:
  - { name: a.b_c-1, url: "https://engine:8443/metrics", timeout: 1.5s, required: false, min_interval: 1m, keep: [x_] }
limits: { max_body_bytes: 1MiB, max_line_bytes: 512KiB, max_series: 1_000, max_labels: 8, max_label_value_bytes: 100B }
shutdown: { drain_delay: 0s }
"#);
    assert_eq!(
        config.listen,
        Listen {
            host: ip("::1"),
            port: 0,
            ..Listen::default()
        }
    );
    assert_eq!(config.health.starting_status, StartingStatus::Ready);
    assert_eq!(config.health.interval, Duration::from_millis(250));
    let labels: Vec<(&str, &str)> = config
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(labels, [("zone", "b"), ("cluster", "a"), ("replica", "3")]);
    let upstream = &config.upstreams[0];
    assert_eq!(upstream.name, "a.b_c-1");
    assert_eq!(upstream.timeout, Duration::from_millis(1500));
    assert!(!upstream.required);
    assert_eq!(upstream.min_interval, Duration::from_secs(60));
    assert_eq!(upstream.keep, ["x_"]);
    let limits = Limits {
        max_body_bytes: 1 << 20,
        max_line_bytes: 512 << 10,
        max_series: 1000,
        max_families: 20_000,
        max_labels: 8,
        max_label_value_bytes: 100,
    };
    assert_eq!(config.limits, limits);
    assert_eq!(config.shutdown.drain_delay, Duration::ZERO);
}

#[test]
fn precedence_is_flag_then_env_then_file_then_default() {
    let yaml = "listen: { host: 10.0.0.1, port: 9000 }\n";
    let env_vars = env(&[("DYN_SYSTEM_HOST", "10.0.0.2"), ("DYN_SYSTEM_PORT", "9100")]);
    let flags = Overrides {
        host: Some(ip("10.0.0.3")),
        port: Some(9200),
        ..Overrides::default()
    };
    let listen = |yaml: &str, flags: &Overrides, env: &HashMap<String, String>| {
        load_text(yaml, Some(Path::new(FILE)), flags, env)
            .expect("valid")
            .listen
    };
    let none = Overrides::default();
    assert_eq!(
        listen(yaml, &flags, &env_vars),
        Listen {
            host: ip("10.0.0.3"),
            port: 9200,
            ..Listen::default()
        }
    );
    assert_eq!(
        listen(yaml, &none, &env_vars),
        Listen {
            host: ip("10.0.0.2"),
            port: 9100,
            ..Listen::default()
        }
    );
    assert_eq!(
        listen(yaml, &none, &no_env()),
        Listen {
            host: ip("10.0.0.1"),
            port: 9000,
            ..Listen::default()
        }
    );
    assert_eq!(listen("", &none, &no_env()), Listen::default());
    // An empty variable counts as unset.
    let blank = env(&[("DYN_SYSTEM_PORT", "")]);
    assert_eq!(listen(yaml, &none, &blank).port, 9000);
}

#[test]
fn health_settings_take_env_over_file_over_default() {
    let yaml = "health: { path: /ready, live_path: /alive, starting_status: ready }\n";
    let health = load_yaml(yaml, &no_env()).expect("valid").health;
    assert_eq!(
        (health.path.as_str(), health.live_path.as_str()),
        ("/ready", "/alive")
    );
    assert_eq!(health.starting_status, StartingStatus::Ready);

    let vars = env(&[
        ("DYN_SYSTEM_HEALTH_PATH", "/h"),
        ("DYN_SYSTEM_LIVE_PATH", "/l"),
        ("DYN_SYSTEM_STARTING_HEALTH_STATUS", "notready"),
    ]);
    let health = load_yaml(yaml, &vars).expect("valid").health;
    assert_eq!(
        (health.path.as_str(), health.live_path.as_str()),
        ("/h", "/l")
    );
    assert_eq!(health.starting_status, StartingStatus::NotReady);

    let health = load_yaml("", &env(&[("DYN_SYSTEM_STARTING_HEALTH_STATUS", "ready")]))
        .expect("valid")
        .health;
    assert_eq!(health.starting_status, StartingStatus::Ready);
    assert_eq!(health.path, "/health");
}

#[test]
fn bad_environment_values_name_the_variable() {
    let vars = env(&[
        ("DYN_SYSTEM_PORT", "99999"),
        ("DYN_SYSTEM_HOST", "localhost"),
        ("DYN_SYSTEM_HEALTH_PATH", "health"),
        ("DYN_SYSTEM_STARTING_HEALTH_STATUS", "maybe"),
    ]);
    let err = load(&Overrides::default(), &vars).expect_err("four bad variables");
    let text = err.to_string();
    println!("{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines,
        [
            r#"DYN_SYSTEM_HOST: invalid address "localhost": must be an IP address, like 0.0.0.0 or ::"#,
            r#"DYN_SYSTEM_PORT: invalid port "99999": must be 0-65535"#,
            r#"DYN_SYSTEM_HEALTH_PATH: invalid path "health": must start with "/""#,
            r#"DYN_SYSTEM_STARTING_HEALTH_STATUS: invalid starting status "maybe": must be notready or ready"#,
        ]
    );
    assert!(
        err.issues
            .iter()
            .all(|issue| issue.file.is_none() && issue.line.is_none())
    );
}

#[test]
fn flags_win_without_checking_the_env_they_hide() {
    let flags = Overrides {
        port: Some(1234),
        ..Overrides::default()
    };
    let config = load(&flags, &env(&[("DYN_SYSTEM_PORT", "not-a-port")])).expect("flag wins");
    assert_eq!(config.listen.port, 1234);
}

#[test]
fn upstream_flags_replace_the_file_list_with_flag_defaults() {
    let flags = Overrides {
        upstreams: vec![
            "engine=http://10.0.0.5:8000/metrics".to_owned(),
            "cache=https://10.0.0.5:9000/m?x=1".to_owned(),
        ],
        ..Overrides::default()
    };
    let yaml = "upstreams:\n  - { name: vllm, url: http://127.0.0.1:1/metrics }\n";
    let config = load_text(yaml, Some(Path::new(FILE)), &flags, &no_env()).expect("valid");
    assert_eq!(
        config.upstreams,
        [
            UpstreamConfig::new("engine", url("http://10.0.0.5:8000/metrics"))
                .with_default_checks(),
            UpstreamConfig::new("cache", url("https://10.0.0.5:9000/m?x=1")).with_default_checks(),
        ]
    );
    let flag = &config.upstreams[0];
    assert_eq!(flag.keep, ["vllm:", "lmcache:"]);
    assert_eq!(flag.timeout, Duration::from_secs(2));
    assert!(flag.required && flag.health_url.is_none() && flag.min_interval.is_zero());
}

#[test]
fn bad_upstream_flags_are_each_reported() {
    let flags = Overrides {
        upstreams: vec![
            "vllm".to_owned(),
            "vllm=ftp://host/metrics".to_owned(),
            "=http://host/metrics".to_owned(),
            "a b=http://host/metrics".to_owned(),
            "ok=http://host/metrics".to_owned(),
            "ok=http://other/metrics".to_owned(),
            "x=not a url".to_owned(),
        ],
        ..Overrides::default()
    };
    let err = load(&flags, &no_env()).expect_err("bad flags");
    println!("{err}");
    let lines: Vec<String> = err.to_string().lines().map(str::to_owned).collect();
    assert_eq!(lines.len(), 6, "{err}");
    assert!(
        lines.iter().all(|line| line.starts_with("--upstream: ")),
        "{err}"
    );
    assert_eq!(
        lines[0],
        r#"--upstream: invalid value "vllm": expected NAME=URL, like vllm=http://127.0.0.1:8000/metrics"#
    );
    assert!(lines[1].contains("scheme must be http or https"), "{err}");
    assert!(lines[2].contains("empty upstream name"), "{err}");
    assert!(lines[3].contains("invalid upstream name \"a b\""), "{err}");
    assert!(lines[4].contains("duplicate upstream name \"ok\""), "{err}");
    assert!(lines[5].contains("invalid URL \"not a url\""), "{err}");
}

#[test]
fn variables_expand_inside_values_keeping_colons_hashes_and_quotes() {
    let yaml = r#"
labels:
  worker_id: "${POD_NAME}"
  plain: ${POD_NAME}
  tricky: ${TRICKY}
  quoted: 'x ${TRICKY} y'
  fallback: "${UNSET_ONE:-default: value}"
  literal: $${POD_NAME} costs $$5 or $6
upstreams:
  - name: ${NAME}
    url: http://${HOST}:${PORT}/metrics
    timeout: ${TIMEOUT}
listen: { port: "${PORT2}" }
"#;
    let vars = env(&[
        ("POD_NAME", "vllm-0"),
        ("TRICKY", "a: b # not a comment \"q\" 'q'\nnext: line"),
        ("NAME", "engine"),
        ("HOST", "10.1.2.3"),
        ("PORT", "8000"),
        ("PORT2", "9090"),
        ("TIMEOUT", "750ms"),
    ]);
    let config = load_yaml(yaml, &vars).expect("valid");
    let labels: Vec<(&str, &str)> = config
        .labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    assert_eq!(
        labels,
        [
            ("worker_id", "vllm-0"),
            ("plain", "vllm-0"),
            ("tricky", "a: b # not a comment \"q\" 'q'\nnext: line"),
            ("quoted", "x a: b # not a comment \"q\" 'q'\nnext: line y"),
            ("fallback", "default: value"),
            ("literal", "${POD_NAME} costs $5 or $6"),
        ]
    );
    assert_eq!(config.upstreams[0].name, "engine");
    assert_eq!(config.upstreams[0].url, url("http://10.1.2.3:8000/metrics"));
    assert_eq!(config.upstreams[0].timeout, Duration::from_millis(750));
    assert_eq!(config.listen.port, 9090);
}

#[test]
fn unset_variable_names_file_line_column_and_variable() {
    let yaml = "labels:\n  worker_id: \"${POD_NAME}\"\n  zone: x-${ZONE}-${POD_NAME}\n";
    let issues = problems(yaml, &no_env());
    println!(
        "{}",
        ConfigError {
            issues: issues.clone()
        }
    );
    assert_eq!(issues.len(), 3, "{issues:#?}");
    assert_issue(&issues[0], 2, 15, "labels.worker_id", "POD_NAME is not set");
    assert_issue(&issues[1], 3, 11, "labels.zone", "ZONE is not set");
    assert_issue(&issues[2], 3, 19, "labels.zone", "POD_NAME is not set");
    // Values with a variable that is set do not move the positions of later problems.
    let yaml = "labels:\n  a: \"${LONG}\"\n  b: ${MISSING}\n";
    let issues = problems(yaml, &env(&[("LONG", "x\ny: z\n# w\n")]));
    assert_issue(&issues[0], 3, 6, "labels.b", "MISSING is not set");
}

#[test]
fn unknown_fields_name_the_field_and_position() {
    let issue =
        only_issue("upstreams:\n  - name: vllm\n    url: http://h/metrics\n    tiemout: 2s\n");
    assert_eq!(
        issue,
        "sysport.yaml:4:5: upstreams[0].tiemout: unknown field `tiemout`, expected one of name, engine, url, keep, timeout, health_url, required, min_interval, aliases, enable_compression, metric_relabel_configs, stall_after, stall, canary_after, canary"
    );
    let issues = problems("listen:\n  port: 1\nhelth: {}\n", &no_env());
    assert_issue(&issues[0], 3, 1, "helth", "unknown field `helth`");
    let issues = problems("limits: { max_body: 1 }\n", &no_env());
    assert_issue(
        &issues[0],
        1,
        11,
        "limits.max_body",
        "unknown field `max_body`",
    );
}

#[test]
fn an_unknown_field_hides_no_other_problem() {
    let yaml = "\
listen: { port: 70000, hots: x }
helth: {}
upstreams:
  - name: vllm
    url: ftp://x
    tiemout: 2s
limits: { max_body: 1, max_series: 0 }
shutdown: { drain: 1s }
";
    let issues = problems(yaml, &no_env());
    let fields: Vec<&str> = issues.iter().map(|i| i.field.as_str()).collect();
    assert_eq!(
        fields,
        [
            "listen.port",
            "listen.hots",
            "helth",
            "upstreams[0].url",
            "upstreams[0].tiemout",
            "limits.max_body",
            "limits.max_series",
            "shutdown.drain",
        ],
        "{issues:#?}"
    );
    assert_issue(
        &issues[1],
        1,
        24,
        "listen.hots",
        "unknown field `hots`, expected one of host, port",
    );
    assert_issue(
        &issues[5],
        7,
        11,
        "limits.max_body",
        "unknown field `max_body`",
    );
    assert_issue(
        &issues[7],
        8,
        13,
        "shutdown.drain",
        "expected one of drain_delay",
    );
}

#[test]
fn unquoted_reference_in_a_flow_mapping_gets_a_hint() {
    let issue = only_issue("labels: { worker_id: ${POD_NAME} }\n");
    assert!(issue.starts_with("sysport.yaml:1:23: "), "{issue}");
    assert!(
        issue.ends_with("(quote a ${VAR} value inside { } or [ ])"),
        "{issue}"
    );
}

#[test]
fn wrong_shapes_name_the_field_and_position() {
    let issues = problems(
        "upstreams:\n  - name: vllm\n    url: http://h/m\n    keep: vllm\n",
        &no_env(),
    );
    assert_issue(&issues[0], 4, 11, "upstreams[0].keep", "expected a list");
    let issues = problems("listen: [1, 2]\n", &no_env());
    assert_issue(&issues[0], 1, 9, "listen", "expected a mapping");
}

#[test]
fn yaml_syntax_errors_have_a_position() {
    let issue = only_issue("upstreams:\n  - name: \"vllm\n");
    assert!(issue.starts_with("sysport.yaml:2:11: "), "{issue}");
    let issues = problems("listen: { port: 1\n", &no_env());
    assert_eq!(issues[0].line, Some(1), "{:?}", issues[0]);
    let issues = problems("labels: { a: x, a: y }\n", &no_env());
    assert_issue(&issues[0], 1, 17, "labels.a", "duplicate");
}

#[test]
fn bad_urls_are_rejected_with_their_field() {
    let yaml = r#"upstreams:
  - name: a
    url: ftp://host/metrics
  - name: b
    url: "http://"
  - name: c
    url: not a url
  - name: d
    url: http://ok/metrics
    health_url: file:///health
"#;
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 4, "{issues:#?}");
    assert_issue(
        &issues[0],
        3,
        10,
        "upstreams[0].url",
        "scheme must be http or https",
    );
    assert_issue(&issues[1], 5, 10, "upstreams[1].url", "invalid URL");
    assert_issue(
        &issues[2],
        7,
        10,
        "upstreams[2].url",
        "invalid URL \"not a url\"",
    );
    assert_issue(
        &issues[3],
        10,
        17,
        "upstreams[3].health_url",
        "scheme must be http or https",
    );
}

#[test]
fn a_url_refused_for_its_password_s_characters_is_quoted_without_it() {
    // A password with `#` or `/` not percent-encoded makes a URL that does not parse.
    let yaml = "upstreams:\n  - name: a\n    url: http://u:pa#ss/w@host/metrics\n  \
                - name: b\n    url: ftp://u:s3cret@host/metrics\n";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 2, "{issues:#?}");
    assert_issue(
        &issues[0],
        3,
        10,
        "upstreams[0].url",
        "invalid URL \"http://u:***@host/metrics\"",
    );
    assert_issue(
        &issues[1],
        5,
        10,
        "upstreams[1].url",
        "invalid URL \"ftp://u:***@host/metrics\": scheme",
    );
    let flags = Overrides {
        upstreams: vec![
            "vllm=http://u:pa#ss@host:80x/metrics".to_owned(),
            "vllm=http://u:s3cret@a/m".to_owned(),
            "vllm=http://u:s3cret@b/m".to_owned(),
        ],
        ..Overrides::default()
    };
    let err = load(&flags, &no_env()).expect_err("refused");
    let text = err.to_string();
    assert_eq!(err.issues.len(), 2, "{text}");
    assert!(
        !text.contains("pa#ss") && !text.contains("s3cret"),
        "{text}"
    );
    assert!(
        text.contains("\"vllm=http://u:***@b/m\": duplicate"),
        "{text}"
    );
}

#[test]
fn duplicate_upstream_names_point_at_the_second() {
    let yaml =
        "upstreams:\n  - name: vllm\n    url: http://a/m\n  - name: vllm\n    url: http://b/m\n";
    let issue = only_issue(yaml);
    assert_eq!(
        issue,
        r#"sysport.yaml:4:11: upstreams[1].name: duplicate upstream name "vllm" (first at line 2)"#
    );
}

#[test]
fn upstream_names_must_be_nonempty_and_simple() {
    let yaml =
        "upstreams:\n  - name: \"\"\n    url: http://a/m\n  - name: a/b\n    url: http://a/m\n";
    let issues = problems(yaml, &no_env());
    assert_issue(
        &issues[0],
        2,
        11,
        "upstreams[0].name",
        "empty upstream name",
    );
    assert_issue(
        &issues[1],
        4,
        11,
        "upstreams[1].name",
        "invalid upstream name \"a/b\"",
    );
}

#[test]
fn upstream_name_is_required() {
    let issues = problems("upstreams:\n  - keep: [\"vllm:\"]\n", &no_env());
    assert_eq!(issues.len(), 1, "{issues:#?}");
    assert_issue(&issues[0], 2, 5, "upstreams[0].name", "missing");
}

#[test]
fn keep_must_list_nonempty_prefixes() {
    let yaml = "\
upstreams:
  - name: a
    url: http://a/m
    keep: []
  - name: b
    url: http://a/m
    keep: [\"vllm:\", \"\"]
";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 2, "{issues:#?}");
    assert_issue(&issues[0], 4, 11, "upstreams[0].keep", "empty list");
    assert_issue(&issues[1], 7, 21, "upstreams[1].keep[1]", "empty prefix");
}

#[test]
fn keep_refuses_prefixes_that_can_never_match() {
    let yaml = "\
upstreams:
  - name: a
    url: http://a/m
    keep: [\"vllm:\", dynamo_sysport_, dynamo_sysport_upstream]
  - name: b
    url: http://a/m
    keep: [dynamo_sysport, dynamo_]
";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 2, "{issues:#?}");
    assert_issue(
        &issues[0],
        4,
        21,
        "upstreams[0].keep[1]",
        "prefix \"dynamo_sysport_\" can never match: names under \"dynamo_sysport_\" are sysport's own",
    );
    assert_issue(&issues[1], 4, 38, "upstreams[0].keep[2]", "can never match");
}

#[test]
fn empty_upstream_list_is_an_error() {
    let issue = only_issue("upstreams: []\n");
    assert!(
        issue.starts_with("sysport.yaml:1:12: upstreams: empty list"),
        "{issue}"
    );
}

#[test]
fn ports_out_of_range_in_the_file() {
    let issue = only_issue("listen:\n  port: 99999\n");
    assert_eq!(
        issue,
        r#"sysport.yaml:2:9: listen.port: invalid port "99999": must be 0-65535"#
    );
    let issues = problems("listen: { host: 'example.com', port: -1 }\n", &no_env());
    assert_issue(&issues[0], 1, 17, "listen.host", "invalid address");
    assert_issue(&issues[1], 1, 38, "listen.port", "invalid port \"-1\"");
}

#[test]
fn health_paths_must_start_with_a_slash_and_differ() {
    let issues = problems("health:\n  path: health\n  live_path: /live\n", &no_env());
    assert_issue(&issues[0], 2, 9, "health.path", "must start with \"/\"");
    let issue = only_issue("health:\n  path: /probe\n  live_path: /probe\n");
    assert!(
        issue.starts_with(
            "sysport.yaml:3:14: health.live_path: readiness and liveness both use \"/probe\""
        ),
        "{issue}"
    );
    // A clash with a default is reported where the other value was set.
    let issues = problems("health: { path: /live }\n", &no_env());
    assert_issue(&issues[0], 1, 17, "health.path", "both use \"/live\"");
    let err = load(
        &Overrides::default(),
        &env(&[("DYN_SYSTEM_LIVE_PATH", "/health")]),
    )
    .expect_err("clash");
    assert!(
        err.to_string()
            .starts_with("DYN_SYSTEM_LIVE_PATH: readiness and liveness"),
        "{err}"
    );
}

#[test]
fn starting_status_must_be_ready_or_notready() {
    let issues = problems("health: { starting_status: maybe }\n", &no_env());
    assert_issue(
        &issues[0],
        1,
        28,
        "health.starting_status",
        "must be notready or ready",
    );
}

#[test]
fn zero_timeout_and_interval_are_rejected() {
    let yaml =
        "health:\n  interval: 0s\nupstreams:\n  - name: a\n    url: http://a/m\n    timeout: 0ms\n";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 2, "{issues:#?}");
    assert_issue(
        &issues[0],
        2,
        13,
        "health.interval",
        "must be greater than 0",
    );
    assert_issue(
        &issues[1],
        6,
        14,
        "upstreams[0].timeout",
        "must be greater than 0",
    );
    let issues = problems("shutdown: { drain_delay: soon }\n", &no_env());
    assert_issue(
        &issues[0],
        1,
        26,
        "shutdown.drain_delay",
        "invalid duration \"soon\"",
    );
}

#[test]
fn durations_and_sizes_are_written_with_a_unit() {
    let yaml = "\
health: { interval: 5 }
upstreams:
  - { name: a, url: http://a/m, min_interval: 0 }
limits: { max_body_bytes: 1000, max_line_bytes: 16M, max_label_value_bytes: 64MB }
";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 5, "{issues:#?}");
    assert_issue(
        &issues[0],
        1,
        21,
        "health.interval",
        "needs a unit, like 5s",
    );
    assert_issue(
        &issues[1],
        3,
        47,
        "upstreams[0].min_interval",
        "needs a unit, like 0s",
    );
    assert_issue(
        &issues[2],
        4,
        27,
        "limits.max_body_bytes",
        "needs a unit, like 1000B",
    );
    assert_issue(
        &issues[3],
        4,
        49,
        "limits.max_line_bytes",
        "write 16MiB, or 16000000B",
    );
    assert_issue(
        &issues[4],
        4,
        77,
        "limits.max_label_value_bytes",
        "write 64MiB, or 64000000B",
    );
}

#[test]
fn label_names_must_be_valid_prometheus_names() {
    let yaml = "labels:\n  ok_1: a\n  1bad: b\n  __reserved: c\n  has-dash: d\n";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 3, "{issues:#?}");
    assert_issue(&issues[0], 3, 3, "labels.1bad", "invalid label name");
    assert_issue(&issues[1], 4, 3, "labels.__reserved", "reserved");
    assert_issue(&issues[2], 5, 3, "labels.has-dash", "invalid label name");
}

#[test]
fn zero_or_malformed_limits_are_rejected() {
    let yaml = "\
limits:
  max_body_bytes: 0B
  max_line_bytes: 1MiB
  max_series: 0
  max_labels: lots
  max_label_value_bytes: 0KiB
";
    let issues = problems(yaml, &no_env());
    assert_eq!(issues.len(), 4, "{issues:#?}");
    assert_issue(
        &issues[0],
        2,
        19,
        "limits.max_body_bytes",
        "must be greater than 0",
    );
    assert_issue(
        &issues[1],
        4,
        15,
        "limits.max_series",
        "must be greater than 0",
    );
    assert_issue(
        &issues[2],
        5,
        15,
        "limits.max_labels",
        "invalid number \"lots\"",
    );
    assert_issue(
        &issues[3],
        6,
        26,
        "limits.max_label_value_bytes",
        "must be greater than 0",
    );
}

#[test]
fn every_problem_is_reported_together() {
    let yaml = r#"listen: { port: 70000 }
health: { path: /h, live_path: /h, interval: 0s }
labels: { "0x": "${NOPE}" }
upstreams:
  - name: vllm
    url: http://127.0.0.1:8000/metrics
    keep: []
  - name: vllm
    url: gopher://x
    timeout: 0s
limits: { max_series: 0 }
"#;
    let err = load_yaml(yaml, &env(&[("DYN_SYSTEM_HOST", "nowhere")])).expect_err("many");
    println!("{err}");
    let fields: Vec<&str> = err
        .issues
        .iter()
        .map(|issue| issue.field.as_str())
        .collect();
    assert_eq!(
        fields,
        [
            "listen.port",
            "health.live_path",
            "health.interval",
            "labels.0x",
            "labels.0x",
            "upstreams[0].keep",
            "upstreams[1].name",
            "upstreams[1].url",
            "upstreams[1].timeout",
            "limits.max_series",
            "DYN_SYSTEM_HOST",
        ]
    );
    let lines: Vec<String> = err.to_string().lines().map(str::to_owned).collect();
    assert_eq!(
        lines[0],
        r#"sysport.yaml:1:17: listen.port: invalid port "70000": must be 0-65535"#
    );
    assert!(
        lines[3].starts_with("sysport.yaml:3:11: labels.0x: invalid label name"),
        "{err}"
    );
    assert!(
        lines[4].starts_with("sysport.yaml:3:18: labels.0x: environment variable NOPE"),
        "{err}"
    );
}

#[test]
fn display_round_trips_through_load() {
    let mut upstream = UpstreamConfig::new("cache.1", url("https://[::1]:9000/m?a=b&c=$d"));
    upstream.keep = vec!["lmcache:".to_owned(), "x\"y".to_owned()];
    upstream.timeout = Duration::from_millis(1250);
    upstream.health_url = Some(url("http://127.0.0.1:9000/health"));
    upstream.required = false;
    upstream.min_interval = Duration::from_micros(50);
    upstream.engine = Engine::Sglang;
    upstream.aliases = true;
    let mut config = Config {
        listen: Listen {
            host: ip("::"),
            port: 0,
            ..Listen::default()
        },
        ..Config::default()
    };
    config.health.path = "/ready".to_owned();
    config.health.starting_status = StartingStatus::Ready;
    config.health.interval = Duration::from_millis(100);
    config.labels = vec![
        ("worker_id".to_owned(), "vllm-0".to_owned()),
        (
            "tricky".to_owned(),
            "a: b # c \"d\" 'e' ${NOT_A_VAR} $$ \\ \n\t end".to_owned(),
        ),
        ("empty".to_owned(), String::new()),
    ];
    config.upstreams[0].stall = Some(StallConfig {
        after: Duration::from_secs(90),
        busy: FamilyKey {
            name: "vllm:num_requests_running".to_owned(),
            select: vec![("engine".to_owned(), "0".to_owned())],
        },
        waiting: FamilyKey {
            name: "vllm:num_requests_waiting".to_owned(),
            select: vec![("engine".to_owned(), "0".to_owned())],
        },
        progress: vec![
            FamilyKey {
                name: "vllm:iteration_tokens_total_count".to_owned(),
                select: Vec::new(),
            },
            FamilyKey {
                name: "lmcache:steps_total".to_owned(),
                select: vec![("kind".to_owned(), "a b".to_owned())],
            },
        ],
    });
    // Canaries tell idle with the stall detection's families.
    let stall = config.upstreams[0].stall.clone();
    if let (Some(canary), Some(stall)) = (config.upstreams[0].canary.as_mut(), stall) {
        canary.idle = stall;
    }
    config.upstreams.push(upstream);
    config.limits.max_series = 12_345;
    config.limits.max_body_bytes = 1000;
    config.shutdown.drain_delay = Duration::ZERO;
    config.views = vec![ViewConfig {
        name: "router".to_owned(),
        families: vec![
            ViewFamily {
                key: FamilyKey {
                    name: "lmcache:x".to_owned(),
                    select: vec![("kind".to_owned(), "a b".to_owned())],
                },
                op: Op::Avg,
            },
            ViewFamily {
                key: FamilyKey {
                    name: "vllm:num_requests_waiting".to_owned(),
                    select: Vec::new(),
                },
                op: Op::Pass,
            },
        ],
        aggregate: Some(vec!["engine".to_owned(), "dp_rank".to_owned()]),
    }];

    let file = TempFile::new(&config.to_string());
    let reloaded = load_file(&file.0, &no_env()).expect("rendered config reloads");
    config.source = Some(file.0.clone());
    assert_eq!(reloaded, config);
    assert_eq!(reloaded.to_string(), config.to_string());
}

#[test]
fn display_renders_durations_and_sizes_readably() {
    let text = Config::default().to_string();
    println!("{text}");
    for line in [
        "  host: \"0.0.0.0\"",
        "  port: 8081",
        "  starting_status: notready",
        "  interval: 5s",
        "labels: {}",
        "  - name: \"vllm\"",
        "    keep: [\"vllm:\", \"lmcache:\"]",
        "    timeout: 2s",
        "    min_interval: 0s",
        "  max_body_bytes: 16MiB",
        "  max_label_value_bytes: 512KiB",
        "  drain_delay: 5s",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in:\n{text}"
        );
    }
    let config = load_text(&text, None, &Overrides::default(), &no_env()).expect("reloads");
    assert_eq!(config, Config::default());
}

#[test]
fn config_file_comes_from_flag_or_sysport_config() {
    let from_env = TempFile::new("listen: { port: 1111 }\n");
    let from_flag = TempFile::new("listen: { port: 2222 }\n");
    let vars = env(&[(
        "SYSPORT_CONFIG",
        from_env.0.to_str().expect("UTF-8 temp path"),
    )]);
    let config = load(&Overrides::default(), &vars).expect("valid");
    assert_eq!(
        (config.listen.port, config.source),
        (1111, Some(from_env.0.clone()))
    );
    let flags = Overrides {
        config: Some(from_flag.0.clone()),
        ..Overrides::default()
    };
    assert_eq!(load(&flags, &vars).expect("valid").listen.port, 2222);
}

#[test]
fn file_errors_carry_the_real_path() {
    let file = TempFile::new("\nupstreams:\n  - name: vllm\n    url: http://h:99999/metrics\n");
    let err = load_file(&file.0, &no_env()).expect_err("bad port in URL");
    println!("{err}");
    let issue = &err.issues[0];
    assert_eq!(issue.file.as_deref(), Some(file.0.as_path()));
    assert_eq!((issue.line, issue.column), (Some(4), Some(10)));
    assert_eq!(issue.field, "upstreams[0].url");
    assert!(err.to_string().starts_with(&format!(
        "{}:4:10: upstreams[0].url: invalid URL",
        file.0.display()
    )));
}

#[test]
fn missing_file_is_reported_with_its_path() {
    let path = std::env::temp_dir().join("sysport-config-test-does-not-exist.yaml");
    let err = load_file(&path, &no_env()).expect_err("missing");
    let text = err.to_string();
    assert!(
        text.starts_with(&format!("{}: cannot read", path.display())),
        "{text}"
    );
}

#[test]
fn listen_limits_are_read_and_bounded() {
    let config = ok(
        "listen:\n  request_head_timeout: 3s\n  idle_timeout: 5m\n  max_request_head_bytes: 8KiB\n  max_connections: 300\n",
    );
    assert_eq!(config.listen.request_head_timeout, Duration::from_secs(3));
    assert_eq!(config.listen.idle_timeout, Duration::from_secs(300));
    assert_eq!(config.listen.max_request_head_bytes, 8 << 10);
    assert_eq!(config.listen.max_connections, Some(300));
    let issues = problems(
        "listen:\n  request_head_timeout: 0s\n  idle_timeout: soon\n  max_request_head_bytes: 400KB\n  max_connections: 0\n",
        &no_env(),
    );
    assert_eq!(issues.len(), 4, "{issues:#?}");
    assert_issue(
        &issues[0],
        2,
        25,
        "listen.request_head_timeout",
        "greater than 0",
    );
    assert_issue(&issues[1], 3, 17, "listen.idle_timeout", "invalid duration");
    assert_issue(
        &issues[2],
        4,
        27,
        "listen.max_request_head_bytes",
        "write 400KiB",
    );
    assert_issue(
        &issues[3],
        5,
        20,
        "listen.max_connections",
        "greater than 0",
    );
    assert!(
        ok("listen: { max_request_head_bytes: 1MiB }")
            .listen
            .max_request_head_bytes
            == 1 << 20
    );
    for bad in ["512B", "2MiB"] {
        let issue = only_issue(&format!("listen: {{ max_request_head_bytes: {bad} }}"));
        assert!(issue.contains("1KiB to 1MiB"), "{issue}");
    }
}

#[test]
fn at_most_eight_labels_are_added() {
    let labels = |n: usize| {
        let pairs: Vec<String> = (0..n).map(|i| format!("l{i}: v")).collect();
        format!("labels: {{ {} }}\n", pairs.join(", "))
    };
    assert_eq!(ok(&labels(8)).labels.len(), 8);
    let issue = only_issue(&labels(9));
    assert!(issue.contains("labels.l8: at most 8 labels"), "{issue}");
}

#[test]
fn vitals_window_defaults_to_a_minute_and_zero_turns_it_off() {
    assert_eq!(ok("{}\n").vitals.window, Duration::from_secs(60));
    assert_eq!(
        ok("vitals: { window: 5m }\n").vitals.window,
        Duration::from_secs(300)
    );
    assert_eq!(ok("vitals: { window: 0s }\n").vitals.window, Duration::ZERO);
    let issues = problems("vitals:\n  window: 500ms\n  windw: 1m\n", &no_env());
    assert_eq!(issues.len(), 2, "{issues:#?}");
    assert_issue(
        &issues[0],
        2,
        11,
        "vitals.window",
        "must be 0s (off) or at least 1s",
    );
    assert_issue(&issues[1], 3, 3, "vitals.windw", "unknown");
}
