//! The `sysport` binary as users run it: configuration errors, signals, reload.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::sidecar::{BIN, Sidecar};
use common::*;

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sysport-cli-{}-{}", std::process::id(), name));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("sysport.yaml");
    std::fs::write(&path, contents).expect("write config");
    path
}

/// What `sysport check-config ARGS` prints, with `env` set (or, with `None`, removed): it must
/// succeed.
fn shown_config(args: &[&str], env: &[(&str, Option<&str>)]) -> String {
    let mut cmd = Command::new(BIN);
    cmd.arg("check-config")
        .args(args)
        .env_remove("SYSPORT_CONFIG");
    for (key, value) in env {
        match value {
            Some(value) => cmd.env(key, value),
            None => cmd.env_remove(key),
        };
    }
    let out = cmd.output().expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn check_config_reports_every_problem_with_file_line_and_field() {
    let path = temp_file(
        "bad",
        "listen: { port: 99999 }\nupstreams:\n  - name: vllm\n    url: not a url\n    keep: []\n  - name: sglang\n    url: http://127.0.0.1:8000/metrics\n    tiemout: 2s\n    keep: [dynamo_sysport_]\n",
    );
    let out = Command::new(BIN)
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = path.display().to_string();
    // An unknown field hides none of the other problems.
    for needle in [
        format!("{file}:1:17: listen.port"),
        format!("{file}:4:10: upstreams[0].url"),
        format!("{file}:5:11: upstreams[0].keep"),
        format!("{file}:8:5: upstreams[1].tiemout: unknown field `tiemout`"),
        format!("{file}:9:12: upstreams[1].keep[0]: prefix \"dynamo_sysport_\" can never match"),
    ] {
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    }
    assert_eq!(err.lines().count(), 5, "{err}");
    // Starting the server with the same file fails the same way, before binding anything.
    let out = Command::new(BIN)
        .arg("--config")
        .arg(&path)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn check_config_reports_semantic_errors_with_locations() {
    let path = temp_file(
        "semantic",
        "listen: { port: 99999 }\nupstreams:\n  - name: vllm\n    url: \"not a url\"\n    keep: []\n  - name: vllm\n    url: http://127.0.0.1:8000/metrics\nlabels: { pod: \"${SYSPORT_TEST_SURELY_UNSET}\" }\n",
    );
    let out = Command::new(BIN)
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .env_remove("SYSPORT_TEST_SURELY_UNSET")
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = path.display().to_string();
    for needle in [
        format!("{file}:1:17: listen.port"),
        format!("{file}:4:10: upstreams[0].url"),
        format!("{file}:5:11: upstreams[0].keep"),
        format!("{file}:6:11: upstreams[1].name"),
        "SYSPORT_TEST_SURELY_UNSET".to_string(),
    ] {
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    }
}

/// The ConfigMap's `config.yaml`.
fn configmap_config() -> String {
    #[derive(serde::Deserialize)]
    struct ConfigMap {
        data: std::collections::HashMap<String, String>,
    }
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/deploy/kubernetes/configmap.yaml"
    );
    let text = std::fs::read_to_string(path).expect("read the ConfigMap");
    let map: ConfigMap = serde_saphyr::from_str(&text).expect("the ConfigMap is YAML");
    map.data["config.yaml"].clone()
}

#[test]
fn the_shipped_configurations_are_valid() {
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/config/sysport.example.yaml");
    // The ConfigMap's incidents directory is the pod's volume; here, a directory of the test's.
    let incidents = std::env::temp_dir().join(format!("sysport-cli-{}-kept", std::process::id()));
    let configmap = temp_file(
        "configmap",
        &configmap_config().replace(
            "/var/lib/sysport/incidents",
            &incidents.display().to_string(),
        ),
    );
    for path in [PathBuf::from(example), configmap] {
        let out = Command::new(BIN)
            .arg("check-config")
            .arg("--config")
            .arg(&path)
            .env("POD_NAME", "vllm-worker-0")
            .env("POD_NAMESPACE", "inference")
            // The Deployment gives it from the vllm-api-key Secret, for the canary's headers.
            .env("VLLM_API_KEY", "example-key")
            .output()
            .expect("runs");
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            path.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn check_config_prints_the_effective_configuration() {
    let path = temp_file(
        "good",
        "upstreams:\n  - name: vllm\n    url: http://127.0.0.1:8000/metrics\n",
    );
    let path = path.display().to_string();
    let text = shown_config(&["--config", &path], &[("DYN_SYSTEM_PORT", Some("9123"))]);
    assert!(
        text.contains("port: 9123"),
        "environment overrides the file: {text}"
    );
    assert!(text.contains("http://127.0.0.1:8000/metrics"));
    for line in [
        "request_head_timeout: 5s",
        "idle_timeout: 120s",
        "max_request_head_bytes: 16KiB",
        "# max_connections: not set: ",
    ] {
        assert!(
            text.contains(line),
            "the listener's limits are printed: {text}"
        );
    }
}

#[test]
fn a_port_in_use_is_named_in_the_error_for_the_server_and_the_demo() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port().to_string();
    let server = Command::new(BIN)
        .args(["--host", "127.0.0.1", "--port", &port])
        .env_remove("SYSPORT_CONFIG")
        .output()
        .expect("runs");
    let demo = Command::new(BIN)
        .args(["demo", "--host", "127.0.0.1", "--port", &port])
        .output()
        .expect("runs");
    for out in [server, demo] {
        assert_eq!(out.status.code(), Some(1));
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(&format!("cannot listen on 127.0.0.1:{port}")),
            "the address is named: {err}"
        );
    }
}

#[test]
fn check_config_refuses_bad_relabel_rules_and_prints_good_ones() {
    let bad = temp_file(
        "relabel-bad",
        "metric_relabel_configs:\n  - source_labels: [__name__]\n    regex: \"vllm:(\"\n    action: drop\n  - action: rename\n    target_label: x\n  - action: hashmod\n    modulus: 8\n",
    );
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&bad)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    let file = bad.display().to_string();
    for needle in [
        format!("{file}:3:12: metric_relabel_configs[0].regex: invalid regular expression"),
        format!("{file}:5:13: metric_relabel_configs[1].action: unknown action \"rename\""),
        format!(
            "{file}:7:5: metric_relabel_configs[2].target_label: missing: the hashmod action \
             needs a target_label"
        ),
    ] {
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    }

    let good = temp_file(
        "relabel-good",
        "upstreams:\n  - name: vllm\n    url: http://127.0.0.1:8000/metrics\n    metric_relabel_configs:\n      - source_labels: [__name__]\n        regex: vllm:request_params_.*\n        action: drop\n",
    );
    let out = Command::new(BIN)
        .args(["check-config", "--config"])
        .arg(&good)
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    // The effective rule, defaults filled in.
    for line in [
        "      - source_labels: [\"__name__\"]",
        "        separator: \";\"",
        "        regex: \"vllm:request_params_.*\"",
        "        replacement: \"$1\"",
        "        action: drop",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line:?} in:\n{text}");
    }
}

#[tokio::test]
async fn sigterm_drains_and_exits_zero_and_sighup_reloads() {
    let a = Upstream::start(Reply::text("# TYPE vllm:a gauge\nvllm:a 1\n")).await;
    let b = Upstream::start(Reply::text("# TYPE vllm:b gauge\nvllm:b 2\n")).await;
    let config = |url: &str, port: u16| {
        format!(
            "listen: {{ host: 127.0.0.1, port: {port} }}\nshutdown: {{ drain_delay: 300ms }}\nupstreams:\n  - name: engine\n    url: {url}\n    keep: [\"vllm:\"]\n"
        )
    };
    let a_url = a.metrics_url();
    let sp = Sidecar::launch("signals")
        .config(|port| config(&a_url, port))
        .start()
        .await;
    let metrics = sp.url("/metrics");
    let body = get_text(&metrics).await;
    assert_eq!(metric(&body, "vllm:a").value(), 1.0);

    // A valid new file replaces the configuration.
    let path = sp.config_path().to_path_buf();
    std::fs::write(&path, config(&b.metrics_url(), sp.port)).expect("rewrite");
    sp.signal("-HUP");
    eventually(Duration::from_secs(5), "reloaded", || {
        let metrics = metrics.clone();
        async move {
            let body = get_text(&metrics).await;
            body.contains("vllm:b 2")
        }
    })
    .await;
    // An invalid one is refused and the running configuration keeps serving.
    std::fs::write(&path, "upstreams: [ { name: x, engine: tgi } ]\n").expect("rewrite");
    sp.signal("-HUP");
    eventually(Duration::from_secs(5), "refusal counted", || {
        let metrics = metrics.clone();
        async move {
            let body = get_text(&metrics).await;
            body.contains("vllm:b 2")
                && body.contains("dynamo_sysport_config_reloads_total{result=\"failure\"} 1")
        }
    })
    .await;

    // SIGTERM: a clean exit (code 0), which `stop` asserts.
    let log = sp.stop().await;
    assert!(log.contains("configuration reload refused"), "{log}");
    assert!(
        log.contains(&path.display().to_string()),
        "the refusal names the file: {log}"
    );
    assert!(log.contains("shutting down"), "{log}");
}

/// `sysport demo` on a free port, and what it printed up to its last line ("Ctrl-C stops it.").
async fn start_demo(test: &str) -> (Sidecar, Vec<String>) {
    let mut sp = Sidecar::launch(test)
        .args(|port| {
            ["demo", "--port", &port.to_string(), "--host", "127.0.0.1"]
                .map(String::from)
                .to_vec()
        })
        .stdout()
        .start()
        .await;
    let printed = sp.printed_until("Ctrl-C", 41).await;
    (sp, printed)
}

/// The URL on the first printed line that contains `marker`.
fn url_in(printed: &[String], marker: &str) -> String {
    printed
        .iter()
        .find(|l| l.contains(marker))
        .and_then(|l| l.split_whitespace().find(|w| w.starts_with("http://")))
        .map(|u| u.trim_end_matches(',').to_owned())
        .unwrap_or_else(|| panic!("no {marker} URL in {printed:#?}"))
}

#[tokio::test]
async fn demo_serves_the_router_view_of_its_two_data_parallel_engines() {
    let (sp, printed) = start_demo("demo-router").await;
    let port = sp.port;
    let url_in = |marker: &str| url_in(&printed, marker);
    let router = url_in("/metrics/router");
    assert_eq!(router, format!("http://127.0.0.1:{port}/metrics/router"));
    let engine = url_in("simulated vLLM");
    let page = get_text(&engine).await;
    let view = get_text(&router).await;
    sp.stop().await;
    for e in ["0", "1"] {
        assert_eq!(
            metric(&page, "vllm:num_requests_waiting")
                .label("engine", e)
                .count(),
            1,
            "engine {e} in {page}"
        );
    }
    assert_eq!(
        metric(&view, "vllm:num_requests_waiting").count(),
        1,
        "{view}"
    );
    let combined = view
        .lines()
        .filter(|l| l.starts_with("vllm:num_requests") || l.starts_with("vllm:kv_cache"));
    for line in combined {
        assert!(!line.contains("engine=\""), "ranks combined: {line}");
    }
    assert_eq!(metric(&view, "vllm:gpu_cache_usage_perc").count(), 1);
}

#[tokio::test]
async fn the_demo_engine_can_be_hung_and_let_go_as_it_prints() {
    let (sp, printed) = start_demo("demo-stall").await;
    let port = sp.port;
    let url_in = |marker: &str| url_in(&printed, marker);
    let live_engine = url_in("/live/engine");
    assert_eq!(live_engine, format!("http://127.0.0.1:{port}/live/engine"));
    let (stall, resume) = (url_in("/demo/stall"), url_in("/demo/resume"));
    let health = format!("http://127.0.0.1:{port}/health");
    let code = |url: String| async move {
        client()
            .get(url)
            .send()
            .await
            .map_or(0, |r| r.status().as_u16())
    };
    let post = |url: String| async move {
        let r = client()
            .post(url)
            .send()
            .await
            .expect("the demo engine answers");
        assert_eq!(r.status(), 200);
    };
    eventually(Duration::from_secs(20), "demo ready", || async {
        code(health.clone()).await == 200
    })
    .await;
    post(stall).await;
    // stall_after 10s, checked every 2s; a wide margin for a loaded machine.
    eventually(Duration::from_secs(60), "/live/engine 503", || async {
        code(live_engine.clone()).await == 503
    })
    .await;
    assert_eq!(code(health.clone()).await, 503);
    assert_eq!(
        code(url_in("simulated vLLM").replace("/metrics", "/health")).await,
        200
    );
    post(resume).await;
    eventually(Duration::from_secs(30), "/live/engine 200", || async {
        code(live_engine.clone()).await == 200
    })
    .await;
    eventually(Duration::from_secs(30), "/health 200", || async {
        code(health.clone()).await == 200
    })
    .await;
    sp.stop().await;
}

#[test]
fn check_config_into_a_pipe_closed_early_exits_zero_without_a_panic() {
    // `sysport check-config | head -1`: the reader goes away before sysport writes.
    let mut child = Command::new(BIN)
        .arg("check-config")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("runs");
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("exits");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(out.status.code(), Some(0), "{stderr}");
}

/// The fenced block after the line that starts with `marker` in `text`, and the one after it.
fn example_after(text: &str, marker: &str) -> (String, String) {
    let rest = &text[text.find(marker).expect("the marked example")..];
    let mut blocks = rest.split("```").skip(1).step_by(2).map(|b| {
        // Drop the info string (`yaml`) on the fence's line.
        b.split_once('\n').map_or("", |(_, body)| body).to_owned()
    });
    let input = blocks.next().expect("the example file");
    let output = blocks.next().expect("its output");
    (input, output)
}

#[test]
fn the_documented_check_config_example_prints_what_the_docs_say() {
    let doc = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/docs/configuration.md"
    ))
    .expect("docs/configuration.md");
    let (yaml, expected) = example_after(&doc, "<!-- tests/cli.rs runs this example");
    let path = temp_file("documented", &yaml);
    let out = Command::new(BIN)
        .current_dir(path.parent().expect("a folder"))
        .env("DYN_SYSTEM_PORT", "99999")
        .args(["check-config", "--config", "sysport.yaml"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(String::from_utf8_lossy(&out.stderr), expected);
}

/// An upstream whose error text carries what reads like more log fields.
async fn forging_upstream() -> Upstream {
    let mut reply = Reply::text("<html><body>maintenance</body></html>\n");
    reply.content_type = "text/html error=none INFO forged=1";
    Upstream::start(reply).await
}

/// The log line of upstream `name` going down.
async fn down_line(sidecar: &Sidecar) -> String {
    let mut line = None;
    for _ in 0..100 {
        line = sidecar
            .log()
            .lines()
            .find(|l| l.contains("upstream is down"))
            .map(str::to_owned);
        if line.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    line.unwrap_or_else(|| panic!("no down line in:\n{}", sidecar.log()))
}

#[tokio::test]
async fn values_from_upstreams_are_quoted_in_the_log_and_json_is_one_object_a_line() {
    let up = forging_upstream().await;
    let url = up.metrics_url();
    let spec = [common::sidecar::UpstreamSpec {
        name: "vllm",
        url: &url,
        timeout: "2s",
        required: false,
    }];
    let sidecar = Sidecar::start("log-text", &spec, "").await;
    let line = down_line(&sidecar).await;
    // One quoted value: the forged "fields" stay inside it.
    assert!(
        line.contains(r#"error="not an exposition (text/html error=none INFO forged=1):"#),
        "{line}"
    );

    let sidecar = Sidecar::launch("log-json")
        .env("SYSPORT_LOG_FORMAT", "json")
        .config(|port| common::sidecar::config_yaml(port, &spec, ""))
        .start()
        .await;
    let line = down_line(&sidecar).await;
    let event: serde_json::Value = serde_json::from_str(&line).expect("one JSON object a line");
    assert_eq!(event["level"], "WARN", "{line}");
    assert_eq!(event["message"], "upstream is down", "{line}");
    assert!(
        event["error"].as_str().is_some_and(
            |e| e.starts_with("not an exposition (text/html error=none INFO forged=1)")
        ),
        "{line}"
    );
    for l in sidecar.log().lines().filter(|l| !l.is_empty()) {
        serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
}

#[test]
fn an_unknown_log_format_is_refused_with_its_variable() {
    let out = Command::new(BIN)
        .env("SYSPORT_LOG_FORMAT", "logfmt")
        .args(["check-config"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "SYSPORT_LOG_FORMAT: unknown log format \"logfmt\": expected text or json\n"
    );
}

#[test]
fn check_config_shows_stall_detection_and_canaries_on_by_default_and_dynamo_can_turn_canaries_off()
{
    let run = |enabled: Option<&str>| {
        let upstream = ["--upstream", "vllm=http://127.0.0.1:8000/metrics"];
        shown_config(&upstream, &[("DYN_HEALTH_CHECK_ENABLED", enabled)])
    };
    let shown = run(None);
    for line in [
        "    stall_after: 60s",
        "      busy: \"vllm:num_requests_running\"",
        "      waiting: \"vllm:num_requests_waiting\"",
        "    canary_after: 10s",
        "      url: \"http://127.0.0.1:8000/v1/completions\"",
    ] {
        assert!(shown.lines().any(|l| l == line), "{line:?} in:\n{shown}");
    }
    let off = run(Some("false"));
    assert!(off.lines().any(|l| l == "    canary_after: 0s"), "{off}");
    assert!(
        off.lines().any(|l| l == "    stall_after: 60s"),
        "stall detection stays: {off}"
    );
}

/// An upstream whose `url`, `health_url` and `canary.url` carry the password `s3cret`, none of
/// which answers.
const PASSWORDS: &str = "  - name: vllm\n    url: http://u:s3cret@127.0.0.1:1/metrics\n    \
                         health_url: http://u:s3cret@127.0.0.1:1/health\n    \
                         required: false\n    canary_after: 10s\n    \
                         canary: {url: http://u:s3cret@127.0.0.1:1/v1/completions}\n";

#[test]
fn check_config_shows_url_passwords_as_stars() {
    let path = temp_file("passwords", &format!("upstreams:\n{PASSWORDS}"));
    let path = path.display().to_string();
    let text = shown_config(&["--config", &path], &[("DYN_HEALTH_CHECK_ENABLED", None)]);
    assert!(!text.contains("s3cret"), "{text}");
    for line in [
        "    url: \"http://u:***@127.0.0.1:1/metrics\"",
        "    health_url: \"http://u:***@127.0.0.1:1/health\"",
        "      url: \"http://u:***@127.0.0.1:1/v1/completions\"",
    ] {
        assert!(text.lines().any(|l| l == line), "{line:?} in:\n{text}");
    }
}

#[tokio::test]
async fn a_down_upstream_is_logged_without_its_url_password() {
    let sidecar = Sidecar::launch("log-passwords")
        .config(|port| {
            format!(
                "listen: {{host: 127.0.0.1, port: {port}}}\n\
                 shutdown: {{drain_delay: 0s}}\n\
                 upstreams:\n{PASSWORDS}"
            )
        })
        .start()
        .await;
    sidecar.get("/metrics", &[]).await;
    let line = down_line(&sidecar).await;
    assert!(line.contains("http://u:***@127.0.0.1:1/metrics"), "{line}");
    let log = sidecar.log();
    assert!(!log.contains("s3cret"), "{log}");
}

/// Runs `sysport ARGS --config PATH`; returns its exit code and stderr.
fn run_with_config(args: &[&str], path: &std::path::Path) -> (Option<i32>, String) {
    let out = Command::new(BIN)
        .args(args)
        .arg("--config")
        .arg(path)
        .env_remove("SYSPORT_CONFIG")
        .output()
        .expect("runs");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn configured_label_values_longer_than_an_engines_are_refused_where_written() {
    // A value written into every series: 50 MB of it would make every page 50 MB a series.
    let huge = "x".repeat(50 << 20);
    let path = temp_file(
        "huge-label",
        &format!(
            "labels:\n  pod: \"{huge}\"\nupstreams:\n  - name: vllm\n    url: http://127.0.0.1:8000/metrics\n"
        ),
    );
    let file = path.display().to_string();
    for args in [&["check-config"][..], &[][..]] {
        let (code, err) = run_with_config(args, &path);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        let needle = format!("{file}:2:8: labels.pod: 52428800 bytes");
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
        assert!(err.contains("limits.max_label_value_bytes"), "{err}");
        assert!(
            err.len() < 4096,
            "the value itself is not echoed: {} bytes",
            err.len()
        );
    }
    // Under a lower limit: the upstream's name (its `upstream` label) and a relabel
    // replacement too.
    let path = temp_file(
        "long-name",
        &format!(
            "limits: {{ max_label_value_bytes: 1KiB }}\nupstreams:\n  - name: {name}\n    url: http://127.0.0.1:8000/metrics\nmetric_relabel_configs:\n  - target_label: pod\n    replacement: {value}\n",
            name = "n".repeat(1025),
            value = "v".repeat(1025),
        ),
    );
    let (code, err) = run_with_config(&["check-config"], &path);
    assert_eq!(code, Some(2), "{err}");
    for needle in [
        format!("{}:3:11: upstreams[0].name: 1025 bytes", path.display()),
        format!(
            "{}:7:18: metric_relabel_configs[0].replacement: 1025 bytes",
            path.display()
        ),
    ] {
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    }
    // At the limit: accepted.
    let path = temp_file(
        "label-at-limit",
        &format!(
            "limits: {{ max_label_value_bytes: 1KiB }}\nlabels: {{ pod: \"{}\" }}\nupstreams:\n  - name: vllm\n    url: http://127.0.0.1:8000/metrics\n",
            "x".repeat(1024)
        ),
    );
    let (code, err) = run_with_config(&["check-config"], &path);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn more_upstreams_than_the_limit_are_refused_at_the_first_one_over_it() {
    let entries = |n: usize| -> String {
        (0..n)
            .map(|i| {
                format!(
                    "  - name: u{i}\n    url: http://127.0.0.1:{}/metrics\n",
                    1024 + i
                )
            })
            .collect()
    };
    let path = temp_file("at-limit", &format!("upstreams:\n{}", entries(2_000)));
    let (code, err) = run_with_config(&["check-config"], &path);
    assert_eq!(code, Some(0), "{err}");
    let path = temp_file("over-limit", &format!("upstreams:\n{}", entries(2_001)));
    for args in [&["check-config"][..], &[][..]] {
        let (code, err) = run_with_config(args, &path);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        // The 2,001st entry starts at line 2 + 2 × 2,000.
        let needle = format!(
            "{}:4002:5: upstreams[2000]: 2001 upstreams: at most 2000 can be configured",
            path.display()
        );
        assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    }
}

#[test]
fn bad_otel_variables_exit_2_naming_the_variable_and_check_config_masks_headers() {
    for (var, value) in [
        ("OTEL_METRICS_EXPORTER", "prometheus"),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
        ("OTEL_EXPORTER_OTLP_HEADERS", "authorization"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "not a url"),
    ] {
        let out = Command::new(BIN)
            .arg("check-config")
            .env_remove("SYSPORT_CONFIG")
            .env("OTEL_METRICS_EXPORTER", "otlp")
            .env(var, value)
            .output()
            .expect("runs");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert!(err.contains(var), "{var}: {err}");
    }
    let shown = shown_config(
        &[],
        &[
            ("OTEL_METRICS_EXPORTER", Some("otlp")),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", Some("http/protobuf")),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", Some("http://127.0.0.1:4318")),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                Some("authorization=Bearer%20s3cret"),
            ),
        ],
    );
    assert!(
        shown.contains("  endpoint: http://127.0.0.1:4318/v1/metrics\n"),
        "{shown}"
    );
    assert!(
        shown.contains("  headers: \"authorization=***\"\n"),
        "{shown}"
    );
    assert!(!shown.contains("s3cret"), "{shown}");
}

#[test]
fn an_incidents_dir_that_cannot_be_written_stops_the_start_naming_it() {
    // A directory under a regular file can be neither made nor written to, even by root.
    let blocker = temp_file("blocker", "not a directory\n");
    let dir = blocker.join("incidents");
    let path = temp_file(
        "incidents-dir",
        &format!(
            "upstreams:\n  - name: vllm\n    url: http://127.0.0.1:9/metrics\nincidents:\n  dir: {}\n  keep: 5\n",
            dir.display()
        ),
    );
    let (code, err) = run_with_config(&[], &path);
    assert_eq!(code, Some(2), "{err}");
    let needle = format!("{}:5:8: incidents.dir", path.display());
    assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    assert!(err.contains(&dir.display().to_string()), "{err}");
}

#[test]
fn an_incidents_processes_pattern_that_does_not_compile_stops_the_start_naming_it() {
    let path = temp_file(
        "incidents-processes",
        "upstreams:\n  - name: vllm\n    url: http://127.0.0.1:9/metrics\nincidents:\n  processes:\n    vllm: 'vllm serve ('\n",
    );
    let (code, err) = run_with_config(&[], &path);
    assert_eq!(code, Some(2), "{err}");
    let needle = format!("{}:6:11: incidents.processes.vllm", path.display());
    assert!(err.contains(&needle), "missing {needle:?} in:\n{err}");
    assert!(err.contains("not a regular expression"), "{err}");
}
