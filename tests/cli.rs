//! The `sysport` binary as users run it: configuration errors, signals, reload.

mod common;

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

const BIN: &str = env!("CARGO_BIN_EXE_sysport");

fn temp_file(name: &str, contents: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sysport-cli-{}-{}", std::process::id(), name));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("sysport.yaml");
    std::fs::write(&path, contents).expect("write config");
    path
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn signal(child: &Child, sig: &str) {
    let ok = Command::new("kill")
        .args([sig, &child.id().to_string()])
        .status()
        .expect("kill runs")
        .success();
    assert!(ok, "kill {sig} failed");
}

/// Starts the binary and waits until `/live` answers.
async fn start(config: &PathBuf, port: u16) -> Child {
    let child = Command::new(BIN)
        .arg("--config")
        .arg(config)
        .env("SYSPORT_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sysport starts");
    let url = format!("http://127.0.0.1:{port}/live");
    eventually(Duration::from_secs(10), "sysport listening", || {
        let url = url.clone();
        async move {
            client()
                .get(url)
                .send()
                .await
                .is_ok_and(|r| r.status() == 200)
        }
    })
    .await;
    child
}

fn wait_exit(child: &mut Child, within: Duration) -> std::process::ExitStatus {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "sysport did not exit in {within:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn check_config_reports_every_problem_with_file_line_and_field() {
    let path = temp_file(
        "bad",
        "listen: { port: 99999 }\nupstreams:\n  - name: vllm\n    url: not a url\n    keep: []\n  - name: vllm\n    url: http://127.0.0.1:8000/metrics\n    tiemout: 2s\n",
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
    assert!(
        err.contains(&format!("{file}:8:5: upstreams[1].tiemout")),
        "{err}"
    );
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

#[test]
fn check_config_prints_the_effective_configuration() {
    let path = temp_file(
        "good",
        "upstreams:\n  - name: vllm\n    url: http://127.0.0.1:8000/metrics\n",
    );
    let out = Command::new(BIN)
        .arg("check-config")
        .arg("--config")
        .arg(&path)
        .env("DYN_SYSTEM_PORT", "9123")
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("port: 9123"),
        "environment overrides the file: {text}"
    );
    assert!(text.contains("http://127.0.0.1:8000/metrics"));
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
    let port = free_port();
    let config = |url: &str| {
        format!(
            "listen: {{ host: 127.0.0.1, port: {port} }}\nshutdown: {{ drain_delay: 300ms }}\nupstreams:\n  - name: engine\n    url: {url}\n    keep: [\"vllm:\"]\n"
        )
    };
    let path = temp_file("signals", &config(&a.metrics_url()));
    let mut child = start(&path, port).await;
    let metrics = format!("http://127.0.0.1:{port}/metrics");
    let body = client()
        .get(&metrics)
        .send()
        .await
        .expect("answers")
        .text()
        .await
        .expect("body");
    assert_eq!(metric(&body, "vllm:a").value(), 1.0);

    // A valid new file replaces the configuration.
    std::fs::write(&path, config(&b.metrics_url())).expect("rewrite");
    signal(&child, "-HUP");
    eventually(Duration::from_secs(5), "reloaded", || {
        let metrics = metrics.clone();
        async move {
            let body = get_text(&metrics).await;
            body.contains("vllm:b 2")
        }
    })
    .await;
    // An invalid one is refused and the running configuration keeps serving.
    std::fs::write(&path, "upstreams: [ { name: x } ]\n").expect("rewrite");
    signal(&child, "-HUP");
    eventually(Duration::from_secs(5), "refusal counted", || {
        let metrics = metrics.clone();
        async move {
            let body = get_text(&metrics).await;
            body.contains("vllm:b 2")
                && body.contains("dynamo_sysport_config_reloads_total{result=\"failure\"} 1")
        }
    })
    .await;

    signal(&child, "-TERM");
    let status = wait_exit(&mut child, Duration::from_secs(10));
    assert_eq!(status.code(), Some(0));
    let mut log = String::new();
    for line in BufReader::new(child.stderr.take().expect("stderr")).lines() {
        log.push_str(&line.expect("log line"));
        log.push('\n');
    }
    assert!(log.contains("configuration reload refused"), "{log}");
    assert!(
        log.contains(&path.display().to_string()),
        "the refusal names the file: {log}"
    );
    assert!(log.contains("shutting down"), "{log}");
}
