//! OTLP push to real receivers: the OpenTelemetry Collector (its OTLP receiver over gRPC and
//! HTTP, then over mutual TLS, its file exporter's output compared point by point with
//! `/metrics`) and Prometheus 3's own OTLP receiver (`--web.enable-otlp-receiver`, names kept
//! with `translation_strategy: NoTranslation`, every series queried back equal to `/metrics`).
//! Run by `tests/suites/otlp.sh` with `SYSPORT_OTELCOL` and `SYSPORT_PROMETHEUS3` from
//! `scripts/real-tools.sh env`: `cargo test --test otlp_real -- --ignored`.

mod common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::pki::Pki;
use common::*;
use sysport::config::{OtlpConfig, OtlpProtocol, Temporality};
use sysport::model::Url;

/// The engine page: vLLM's (text 0.0.4 from prometheus_client, `_created` gauges included).
const PAGE: &str = include_str!("fixtures/small.prom");

/// Series as Prometheus' text names them → value; `_created` as the start time in seconds.
type Flat = BTreeMap<String, f64>;

/// A series' key: its name and sorted labels, `le` and `quantile` as numbers (Prometheus 3
/// writes `le="1"` for a bucket the page calls `le="1.0"`).
fn key(name: &str, labels: &[(String, String)]) -> String {
    let mut l: Vec<String> = labels
        .iter()
        .map(|(k, v)| match (k.as_str(), v.parse::<f64>()) {
            ("le" | "quantile", Ok(n)) => format!("{k}={n:?}"),
            _ => format!("{k}={v:?}"),
        })
        .collect();
    l.sort();
    format!("{name}{{{}}}", l.join(","))
}

/// The `vllm:` series of a text page.
fn flat_page(text: &str) -> Flat {
    text.lines()
        .filter(|l| l.starts_with("vllm:"))
        .filter_map(|l| {
            let s = parse_sample(l)?;
            let v: f64 = s.rest.trim().parse().ok()?;
            Some((key(&s.name, &s.labels), v))
        })
        .collect()
}

fn num(v: &serde_json::Value) -> f64 {
    match v {
        serde_json::Value::String(s) => s.parse().unwrap_or(f64::NAN),
        v => v.as_f64().unwrap_or(f64::NAN),
    }
}

/// The `vllm:` series of one OTLP JSON export (the Collector's file exporter), in the page's
/// terms: buckets cumulated again with `+Inf`, `_count`, `_sum`, and `_created` from the start
/// time; also each metric's unit and the resource's attributes.
fn flat_export(doc: &serde_json::Value) -> (Flat, BTreeMap<String, String>) {
    let mut out = Flat::new();
    let mut resource = BTreeMap::new();
    for rm in doc["resourceMetrics"].as_array().into_iter().flatten() {
        for a in rm["resource"]["attributes"]
            .as_array()
            .into_iter()
            .flatten()
        {
            resource.insert(
                a["key"].as_str().unwrap_or_default().to_owned(),
                a["value"]["stringValue"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
        for sm in rm["scopeMetrics"].as_array().into_iter().flatten() {
            for m in sm["metrics"].as_array().into_iter().flatten() {
                let name = m["name"].as_str().unwrap_or_default();
                if !name.starts_with("vllm:") {
                    continue;
                }
                let labels = |p: &serde_json::Value| -> Vec<(String, String)> {
                    p["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| {
                            (
                                a["key"].as_str().unwrap_or_default().to_owned(),
                                a["value"]["stringValue"]
                                    .as_str()
                                    .unwrap_or_default()
                                    .to_owned(),
                            )
                        })
                        .collect()
                };
                let created = |out: &mut Flat, stem: &str, p: &serde_json::Value| {
                    let start = num(&p["startTimeUnixNano"]);
                    out.insert(key(&format!("{stem}_created"), &labels(p)), start / 1e9);
                };
                if let Some(points) = m["sum"]["dataPoints"].as_array() {
                    for p in points {
                        out.insert(key(name, &labels(p)), num(&p["asDouble"]));
                        if m["sum"]["isMonotonic"] == true {
                            created(&mut out, name.trim_end_matches("_total"), p);
                        }
                    }
                }
                for p in m["gauge"]["dataPoints"].as_array().into_iter().flatten() {
                    out.insert(key(name, &labels(p)), num(&p["asDouble"]));
                }
                for p in m["histogram"]["dataPoints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    let l = labels(p);
                    let bounds: Vec<f64> = p["explicitBounds"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(num)
                        .collect();
                    let mut running = 0.0;
                    for (i, c) in p["bucketCounts"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .enumerate()
                    {
                        running += num(c);
                        let le = bounds.get(i).map_or("+Inf".to_owned(), f64::to_string);
                        let mut with_le = l.clone();
                        with_le.push(("le".to_owned(), le));
                        out.insert(key(&format!("{name}_bucket"), &with_le), running);
                    }
                    out.insert(key(&format!("{name}_count"), &l), num(&p["count"]));
                    out.insert(key(&format!("{name}_sum"), &l), num(&p["sum"]));
                    created(&mut out, name, p);
                }
            }
        }
    }
    (out, resource)
}

/// Compares what arrived with the page: every series, `_created` within a microsecond; with
/// `ulps`, values within that many units in the last place (the Collector's file exporter
/// writes a float in JSON with at most 16 significant digits: 1408.5526872003759 is written
/// 1408.552687200376, one unit off).
fn assert_same(page: &Flat, got: &Flat, receiver: &str, ulps: f64) {
    let missing: Vec<&String> = page.keys().filter(|k| !got.contains_key(*k)).collect();
    assert!(missing.is_empty(), "{receiver}: missing {missing:#?}");
    for (k, v) in page {
        let g = got[k];
        let same = if k.contains("_created{") {
            (g - v).abs() < 1e-6 * v.abs().max(1.0)
        } else {
            g == *v || (g.is_nan() && v.is_nan()) || (g - v).abs() <= ulps * f64::EPSILON * v.abs()
        };
        assert!(same, "{receiver}: {k} is {g}, /metrics says {v}");
    }
    let extra: Vec<&String> = got.keys().filter(|k| !page.contains_key(*k)).collect();
    assert!(extra.is_empty(), "{receiver}: not on /metrics: {extra:#?}");
}

struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port()
}

fn tool(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| panic!("{var} (eval \"$(scripts/real-tools.sh env)\")"))
}

fn otlp(endpoint: &str, protocol: OtlpProtocol) -> OtlpConfig {
    OtlpConfig {
        endpoint: Url::parse(endpoint).expect("url"),
        protocol,
        headers: vec![("x-tenant".into(), "suite".into())],
        gzip: true,
        timeout: Duration::from_secs(2),
        certificate: None,
        client_key: None,
        client_certificate: None,
        interval: Duration::from_millis(700),
        temporality: Temporality::Cumulative,
        resource: vec![
            ("service.name".into(), "vllm-worker".into()),
            ("service.instance.id".into(), "worker-0".into()),
        ],
        max_request_bytes: None,
    }
}

async fn sysport_with(o: OtlpConfig) -> (Upstream, Running) {
    let upstream = Upstream::start(Reply::text(PAGE)).await;
    let mut c = config(vec![upstream_config(
        "vllm",
        &upstream.metrics_url(),
        &["vllm:"],
    )]);
    c.otlp = Some(o);
    (upstream, Running::start(c).await)
}

/// Starts the Collector writing what it receives to `out`, with TLS settings `tls` (YAML lines
/// under each protocol) when given.
fn collector(dir: &std::path::Path, grpc: u16, http: u16, tls: &str) -> Process {
    let out = dir.join("received.jsonl");
    let config = format!(
        "receivers:\n  otlp:\n    protocols:\n      grpc:\n        endpoint: 127.0.0.1:{grpc}\n{tls}\
         \n      http:\n        endpoint: 127.0.0.1:{http}\n{tls}\n\
         exporters:\n  file:\n    path: {}\n    format: json\n\
         service:\n  telemetry:\n    metrics:\n      level: none\n  pipelines:\n    metrics:\n      receivers: [otlp]\n      exporters: [file]\n",
        out.display()
    );
    let path = dir.join("otelcol.yaml");
    std::fs::write(&path, config).expect("config");
    let log = std::fs::File::create(dir.join("otelcol.log")).expect("log");
    let child = Command::new(tool("SYSPORT_OTELCOL"))
        .arg("--config")
        .arg(&path)
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("the Collector starts");
    Process(child)
}

/// Lines in the Collector's file so far.
fn lines_in(dir: &std::path::Path) -> usize {
    std::fs::read_to_string(dir.join("received.jsonl")).map_or(0, |t| t.lines().count())
}

/// The last export in the Collector's file, after its first `skip` lines, that holds `vllm:`
/// points.
fn last_export(dir: &std::path::Path, skip: usize) -> Option<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("received.jsonl")).ok()?;
    let lines: Vec<&str> = text.lines().skip(skip).collect();
    lines
        .into_iter()
        .rev()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|d| d.to_string().contains("\"vllm:"))
}

/// One run against the Collector: sysport pushes with `o`; the file's last export equals
/// `/metrics` read while the engine page stands still.
async fn against_collector(dir: &std::path::Path, o: OtlpConfig, what: &str) {
    let skip = lines_in(dir);
    let (_upstream, sysport) = sysport_with(o).await;
    eventually(
        Duration::from_secs(30),
        &format!("{what}: an export in the file"),
        || async { last_export(dir, skip).is_some() },
    )
    .await;
    let page = flat_page(&get_text(&sysport.url("/metrics")).await);
    assert!(page.len() > 100, "{what}: the page has the engine's series");
    let doc = last_export(dir, skip).expect("an export");
    let (got, resource) = flat_export(&doc);
    assert_same(&page, &got, what, 2.0);
    assert_eq!(resource["service.name"], "vllm-worker");
    assert_eq!(resource["service.instance.id"], "worker-0");
    // HELP and units as on the page.
    let text = doc.to_string();
    assert!(
        text.contains("Number of prefill tokens processed."),
        "{what}: descriptions"
    );
    let (_, status) = sysport.get("/status").await;
    assert!(
        status.contains("\"last_success_at\":\"20"),
        "{what}: {status}"
    );
    sysport.shutdown().await.expect("clean shutdown");
}

#[tokio::test]
#[ignore = "needs the Collector: tests/suites/otlp.sh runs it"]
async fn the_collector_receives_the_page_over_grpc_and_http() {
    let pki = Pki::new("otelcol-plain");
    let (grpc, http) = (free_port(), free_port());
    let _collector = collector(&pki.dir, grpc, http, "");
    let grpc_url = format!("http://127.0.0.1:{grpc}");
    against_collector(&pki.dir, otlp(&grpc_url, OtlpProtocol::Grpc), "grpc").await;
    let http_url = format!("http://127.0.0.1:{http}/v1/metrics");
    against_collector(
        &pki.dir,
        otlp(&http_url, OtlpProtocol::HttpProtobuf),
        "http/protobuf",
    )
    .await;
}

#[tokio::test]
#[ignore = "needs the Collector: tests/suites/otlp.sh runs it"]
async fn the_collector_receives_the_page_over_mutual_tls() {
    let pki = Pki::new("otelcol-mtls");
    pki.ca("ca");
    pki.leaf("ca", "server", "DNS:localhost,IP:127.0.0.1");
    pki.leaf("ca", "client", "DNS:sysport");
    let (grpc, http) = (free_port(), free_port());
    let d = pki.dir.display();
    let tls = format!(
        "        tls:\n          cert_file: {d}/server.crt\n          key_file: {d}/server.key\n          client_ca_file: {d}/ca.crt"
    );
    let _collector = collector(&pki.dir, grpc, http, &tls);
    for (url, protocol, what) in [
        (
            format!("https://localhost:{grpc}"),
            OtlpProtocol::Grpc,
            "grpc+mtls",
        ),
        (
            format!("https://localhost:{http}/v1/metrics"),
            OtlpProtocol::HttpProtobuf,
            "http+mtls",
        ),
    ] {
        let mut o = otlp(&url, protocol);
        o.certificate = Some(pki.path("ca.crt"));
        o.client_key = Some(pki.path("client.key"));
        o.client_certificate = Some(pki.path("client.crt"));
        against_collector(&pki.dir, o, what).await;
    }
    // Without the client certificate the receiver refuses, and sysport says why.
    let mut o = otlp(
        &format!("https://localhost:{http}/v1/metrics"),
        OtlpProtocol::HttpProtobuf,
    );
    o.certificate = Some(pki.path("ca.crt"));
    let (_upstream, sysport) = sysport_with(o).await;
    eventually(Duration::from_secs(20), "a refused export", || async {
        let (_, status) = sysport.get("/status").await;
        status.contains("\"last_error\":\"") && !status.contains("\"last_success_at\":\"20")
    })
    .await;
}

/// The value of every series an instant query returns, keyed as on the page (without the
/// `job` and `instance` labels Prometheus adds from the resource).
async fn query_all(base: &str) -> Flat {
    let r = client()
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", "{__name__=~\"vllm:.*\"}")])
        .send()
        .await
        .expect("query");
    let doc: serde_json::Value =
        serde_json::from_str(&r.text().await.expect("body")).expect("json");
    let mut out = Flat::new();
    for s in doc["data"]["result"].as_array().into_iter().flatten() {
        let metric = s["metric"].as_object().expect("labels");
        let name = metric["__name__"].as_str().unwrap_or_default();
        let labels: Vec<(String, String)> = metric
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "__name__" | "job" | "instance"))
            .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_owned()))
            .collect();
        out.insert(key(name, &labels), num(&s["value"][1]));
    }
    out
}

#[tokio::test]
#[ignore = "needs Prometheus 3: tests/suites/otlp.sh runs it"]
async fn prometheus_3_stores_every_series_as_served() {
    let pki = Pki::new("prometheus3-otlp");
    let port = free_port();
    std::fs::write(
        pki.path("prometheus.yml"),
        "otlp:\n  translation_strategy: NoTranslation\n",
    )
    .expect("config");
    let log = std::fs::File::create(pki.path("prometheus.log")).expect("log");
    let _prometheus = Process(
        Command::new(tool("SYSPORT_PROMETHEUS3"))
            .arg(format!(
                "--config.file={}",
                pki.path("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                pki.path("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .arg("--web.enable-otlp-receiver")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("prometheus starts"),
    );
    let base = format!("http://127.0.0.1:{port}");
    eventually(Duration::from_secs(30), "prometheus ready", || async {
        client()
            .get(format!("{base}/-/ready"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    let (_upstream, sysport) = sysport_with(otlp(
        &format!("{base}/api/v1/otlp/v1/metrics"),
        OtlpProtocol::HttpProtobuf,
    ))
    .await;
    let mut page = flat_page(&get_text(&sysport.url("/metrics")).await);
    // Start times are no series in Prometheus.
    page.retain(|k, _| !k.contains("_created{"));
    eventually(Duration::from_secs(30), "every series stored", || async {
        query_all(&base).await.len() >= page.len()
    })
    .await;
    let got = query_all(&base).await;
    assert_same(&page, &got, "prometheus 3", 0.0);
    let log = std::fs::read_to_string(pki.path("prometheus.log")).unwrap_or_default();
    assert!(!log.contains("level=ERROR"), "{log}");
}
