//! A real Prometheus (Debian's `/usr/bin/prometheus`, or `PROMETHEUS_BIN`) scraping sysport
//! over HTTPS with `tls_config.ca_file` and `basic_auth`, as a PodMonitor with `tlsConfig` and
//! `basicAuth` makes it do. Run by `tests/suites/web-prometheus.sh` (which the test command
//! runs): `cargo test --test web_prometheus -- --ignored`.

mod common;

use std::collections::HashMap;
use std::process::Stdio;
use std::time::Duration;

use common::pki::Pki;
use common::{Reply, Running, Upstream, eventually};
use sysport::config::Overrides;

const PAGE: &str = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 4\n";

/// The value of a one-series instant query, if there is one.
async fn query(base: &str, expr: &str) -> Option<f64> {
    let r = common::client()
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", expr)])
        .send()
        .await
        .ok()?;
    let doc: serde_json::Value = serde_json::from_str(&r.text().await.ok()?).ok()?;
    let result = doc["data"]["result"].as_array()?;
    if result.len() != 1 {
        return None;
    }
    result[0]["value"][1].as_str()?.parse().ok()
}

#[tokio::test]
#[ignore = "needs Prometheus: tests/suites/web-prometheus.sh runs it"]
async fn prometheus_scrapes_over_https_with_basic_auth_and_a_wrong_password_fails() {
    let prometheus =
        std::env::var("PROMETHEUS_BIN").unwrap_or_else(|_| "/usr/bin/prometheus".to_owned());
    let pki = Pki::new("prometheus");
    pki.ca("ca");
    pki.leaf("ca", "server", "DNS:localhost,IP:127.0.0.1");
    let engine = Upstream::start(Reply::text(PAGE)).await;
    let hash = bcrypt::hash("scrape-secret", 10).expect("hash");
    std::fs::write(
        pki.path("web.yml"),
        format!(
            "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n\
             basic_auth_users:\n  prometheus: '{hash}'\n"
        ),
    )
    .expect("web config");
    let overrides = Overrides {
        host: Some("127.0.0.1".parse().expect("ip")),
        port: Some(0),
        upstreams: vec![format!("vllm={}", engine.metrics_url())],
        web_config: Some(pki.path("web.yml")),
        ..Overrides::default()
    };
    let config =
        sysport::server::load_config(&overrides, &HashMap::<String, String>::new()).expect("valid");
    let sp = Running::start(config).await;
    let target = sp.base.trim_start_matches("http://").to_owned();

    let prom_port = common::sidecar::free_port();
    let ca = pki.path("ca.crt").display().to_string();
    let job = |name: &str, password: &str| {
        format!(
            "  - job_name: {name}\n    scheme: https\n    scrape_interval: 1s\n    scrape_timeout: 1s\n    \
             tls_config: {{ ca_file: \"{ca}\" }}\n    \
             basic_auth: {{ username: prometheus, password: \"{password}\" }}\n    \
             static_configs: [{{ targets: [\"{target}\"] }}]\n"
        )
    };
    std::fs::write(
        pki.path("prometheus.yml"),
        format!(
            "scrape_configs:\n{}{}",
            job("sysport", "scrape-secret"),
            job("wrong", "guess")
        ),
    )
    .expect("prometheus config");
    let mut child = tokio::process::Command::new(&prometheus)
        .arg(format!(
            "--config.file={}",
            pki.path("prometheus.yml").display()
        ))
        .arg(format!(
            "--storage.tsdb.path={}",
            pki.path("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("{prometheus} starts (apt-get install prometheus): {e}"));
    let base = format!("http://127.0.0.1:{prom_port}");

    eventually(
        Duration::from_secs(60),
        "the https target is up",
        || async { query(&base, "up{job=\"sysport\"}").await == Some(1.0) },
    )
    .await;
    eventually(Duration::from_secs(30), "engine series stored", || async {
        query(&base, "vllm:num_requests_running{job=\"sysport\"}").await == Some(4.0)
    })
    .await;
    eventually(
        Duration::from_secs(30),
        "a wrong password is refused",
        || async { query(&base, "up{job=\"wrong\"}").await == Some(0.0) },
    )
    .await;
    let _ = child.start_kill();
    let _ = child.wait().await;
}
