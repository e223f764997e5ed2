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
    let configmap = temp_file("configmap", &configmap_config());
    for path in [PathBuf::from(example), configmap] {
        let out = Command::new(BIN)
            .arg("check-config")
            .arg("--config")
            .arg(&path)
            .env("POD_NAME", "vllm-worker-0")
            .env("POD_NAMESPACE", "inference")
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
