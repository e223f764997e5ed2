//! OTLP push against in-process receivers on loopback: what arrives is what `/metrics` serves;
//! gzip and headers; retries (429 with Retry-After, a receiver down for three intervals), a
//! receiver that hangs (the export ends at its timeout, `/live` unaffected), 413 and gRPC's
//! RESOURCE_EXHAUSTED about size (the request split), `partial_success`, delta temporality that
//! loses nothing, gRPC, mutual TLS, and the last export on shutdown.

mod common;

use std::collections::{HashMap, VecDeque};
use std::io::Read as _;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsPartialSuccess, ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::metrics::v1::{metric::Data, number_data_point::Value};
use prost::Message;
use sysport::config::{OtlpConfig, OtlpProtocol, Temporality};
use sysport::model::Url;
use tokio::net::TcpListener;

use common::*;

/// What the receiver answers to the next request (then 200).
#[derive(Clone)]
enum Script {
    Status(u16, Option<&'static str>),
    Hang,
    Partial(i64),
}

/// One request the receiver took.
#[derive(Clone)]
struct Got {
    headers: HeaderMap,
    bytes: usize,
    request: ExportMetricsServiceRequest,
}

#[derive(Default)]
struct Inner {
    script: Mutex<VecDeque<Script>>,
    got: Mutex<Vec<Got>>,
    /// Bodies larger than this get 413.
    limit: Mutex<Option<usize>>,
    answered: Mutex<Vec<(u16, Instant)>>,
}

/// An OTLP/HTTP receiver on loopback.
struct Receiver {
    addr: SocketAddr,
    inner: Arc<Inner>,
}

impl Receiver {
    async fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        Receiver::on(listener)
    }

    fn on(listener: TcpListener) -> Receiver {
        let addr = listener.local_addr().expect("addr");
        let inner = Arc::new(Inner::default());
        let app = Router::new()
            .route("/v1/metrics", axum::routing::post(take))
            .with_state(inner.clone());
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Receiver { addr, inner }
    }

    fn script(&self, steps: &[Script]) {
        self.inner
            .script
            .lock()
            .expect("lock")
            .extend(steps.iter().cloned());
    }

    fn got(&self) -> Vec<Got> {
        self.inner.got.lock().expect("lock").clone()
    }

    fn url(&self) -> Url {
        Url::parse(&format!("http://{}/v1/metrics", self.addr)).expect("url")
    }
}

async fn take(State(inner): State<Arc<Inner>>, headers: HeaderMap, body: Bytes) -> Response {
    let step = inner.script.lock().expect("lock").pop_front();
    let too_large = inner
        .limit
        .lock()
        .expect("lock")
        .is_some_and(|limit| body.len() > limit);
    let answer = |code: u16| {
        inner
            .answered
            .lock()
            .expect("lock")
            .push((code, Instant::now()));
        StatusCode::from_u16(code).expect("code")
    };
    if too_large {
        return (answer(413), "request too large").into_response();
    }
    match step {
        Some(Script::Status(code, retry_after)) => {
            let mut r = (answer(code), "not now").into_response();
            if let Some(after) = retry_after {
                r.headers_mut()
                    .insert("retry-after", after.parse().expect("header"));
            }
            return r;
        }
        Some(Script::Hang) => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            return answer(200).into_response();
        }
        _ => {}
    }
    let raw = if headers.get("content-encoding").is_some_and(|v| v == "gzip") {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(&body[..])
            .read_to_end(&mut out)
            .expect("gzip");
        out
    } else {
        body.to_vec()
    };
    let request = ExportMetricsServiceRequest::decode(&raw[..]).expect("a valid request");
    inner.got.lock().expect("lock").push(Got {
        headers,
        bytes: body.len(),
        request,
    });
    let response = ExportMetricsServiceResponse {
        partial_success: match step {
            Some(Script::Partial(n)) => Some(ExportMetricsPartialSuccess {
                rejected_data_points: n,
                error_message: "some points were out of order".into(),
            }),
            _ => None,
        },
    };
    (answer(200), response.encode_to_vec()).into_response()
}

const PAGE: &str = "\
# HELP vllm:prompt_tokens_total Number of prefill tokens processed.
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine=\"0\",model_name=\"m\"} 100
vllm:prompt_tokens_total{engine=\"1\",model_name=\"m\"} 7
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 3
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"} 2
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 5
vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 6
vllm:e2e_request_latency_seconds_count{engine=\"0\",model_name=\"m\"} 6
vllm:e2e_request_latency_seconds_sum{engine=\"0\",model_name=\"m\"} 4.5
";

/// `dynamo_sysport_otlp_exports_total{result}` on a `/metrics` page.
fn exports(text: &str, result: &str) -> f64 {
    metric(text, "dynamo_sysport_otlp_exports_total")
        .label("result", result)
        .value()
}
fn otlp(endpoint: Url, interval_ms: u64) -> OtlpConfig {
    OtlpConfig {
        endpoint,
        protocol: OtlpProtocol::HttpProtobuf,
        headers: Vec::new(),
        gzip: false,
        timeout: Duration::from_secs(2).min(Duration::from_millis(interval_ms)),
        certificate: None,
        client_key: None,
        client_certificate: None,
        interval: Duration::from_millis(interval_ms),
        temporality: Temporality::Cumulative,
        resource: vec![("service.name".into(), "worker-0".into())],
        max_request_bytes: None,
    }
}

async fn start(page: &str, o: OtlpConfig) -> (Upstream, Running) {
    let upstream = Upstream::start(Reply::text(page)).await;
    let mut config = config(vec![upstream_config(
        "vllm",
        &upstream.metrics_url(),
        &["vllm:"],
    )]);
    config.otlp = Some(o);
    (upstream, Running::start(config).await)
}

/// Each point of a request as (metric name, attributes, value or count).
/// A point as (metric name, sorted attributes, value or count).
type Point = (String, Vec<(String, String)>, f64);

fn points(r: &ExportMetricsServiceRequest) -> Vec<Point> {
    let mut out = Vec::new();
    for rm in &r.resource_metrics {
        for sm in &rm.scope_metrics {
            for m in &sm.metrics {
                let attrs = |kvs: &[opentelemetry_proto::tonic::common::v1::KeyValue]| {
                    let mut a: Vec<(String, String)> = kvs
                        .iter()
                        .map(|kv| {
                            let v = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                                Some(AnyValue::StringValue(s)) => s.clone(),
                                _ => String::new(),
                            };
                            (kv.key.clone(), v)
                        })
                        .collect();
                    a.sort();
                    a
                };
                match &m.data {
                    Some(Data::Sum(s)) => {
                        for p in &s.data_points {
                            let Some(Value::AsDouble(v)) = p.value else {
                                continue;
                            };
                            out.push((m.name.clone(), attrs(&p.attributes), v));
                        }
                    }
                    Some(Data::Gauge(g)) => {
                        for p in &g.data_points {
                            let Some(Value::AsDouble(v)) = p.value else {
                                continue;
                            };
                            out.push((m.name.clone(), attrs(&p.attributes), v));
                        }
                    }
                    Some(Data::Histogram(h)) => {
                        for p in &h.data_points {
                            out.push((m.name.clone(), attrs(&p.attributes), p.count as f64));
                        }
                    }
                    Some(Data::Summary(s)) => {
                        for p in &s.data_points {
                            out.push((m.name.clone(), attrs(&p.attributes), p.count as f64));
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out
}

fn value_of(r: &ExportMetricsServiceRequest, name: &str, engine: &str) -> Option<f64> {
    points(r)
        .into_iter()
        .find(|(n, a, _)| n == name && a.iter().any(|(k, v)| k == "engine" && v == engine))
        .map(|(_, _, v)| v)
}

async fn wait_for(receiver: &Receiver, n: usize, within: Duration) -> Vec<Got> {
    eventually(within, &format!("{n} requests received"), || async {
        receiver.got().len() >= n
    })
    .await;
    receiver.got()
}

#[tokio::test]
async fn the_page_arrives_as_served_with_gzip_headers_and_resource() {
    let receiver = Receiver::start().await;
    let mut o = otlp(receiver.url(), 300);
    o.gzip = true;
    o.headers = vec![("x-scope-orgid".into(), "tenant 1".into())];
    let (_upstream, sysport) = start(PAGE, o).await;
    let got = wait_for(&receiver, 1, Duration::from_secs(10)).await;
    let first = &got[0];
    assert_eq!(first.headers["content-encoding"], "gzip");
    assert_eq!(first.headers["content-type"], "application/x-protobuf");
    assert_eq!(first.headers["x-scope-orgid"], "tenant 1");
    let r = &first.request;
    let resource = r.resource_metrics[0].resource.as_ref().expect("resource");
    assert_eq!(resource.attributes[0].key, "service.name");
    assert_eq!(value_of(r, "vllm:prompt_tokens_total", "0"), Some(100.0));
    assert_eq!(value_of(r, "vllm:prompt_tokens_total", "1"), Some(7.0));
    assert_eq!(value_of(r, "vllm:num_requests_running", "0"), Some(3.0));
    assert_eq!(
        value_of(r, "vllm:e2e_request_latency_seconds", "0"),
        Some(6.0)
    );
    // sysport's own families go too, as /metrics serves them.
    let names: Vec<String> = points(r).into_iter().map(|(n, _, _)| n).collect();
    assert!(
        names.iter().any(|n| n == "dynamo_sysport_upstream_up"),
        "{names:?}"
    );
    // And the export counts itself.
    eventually(Duration::from_secs(10), "the export counted", || async {
        let text = get_text(&sysport.url("/metrics")).await;
        exports(&text, "success") >= 1.0
    })
    .await;
    let (_, status) = sysport.get("/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    assert!(
        status["otlp"]["last_success_at"].is_string(),
        "{}",
        status["otlp"]
    );
    assert_eq!(status["otlp"]["protocol"], "http/protobuf");
    let (_, page) = sysport.get("/").await;
    let line = page
        .lines()
        .find(|l| l.contains("id=\"otlp\""))
        .expect("the status page's OTLP line");
    assert!(line.contains("last success 20"), "{line}");
}

#[tokio::test]
async fn an_upstream_that_is_down_sends_no_points_for_its_families() {
    let receiver = Receiver::start().await;
    let (mut upstream, _sysport) = start(PAGE, otlp(receiver.url(), 300)).await;
    wait_for(&receiver, 1, Duration::from_secs(10)).await;
    upstream.stop().await;
    let before = receiver.got().len();
    let got = wait_for(&receiver, before + 2, Duration::from_secs(10)).await;
    let last = &got.last().expect("a request").request;
    assert!(points(last).iter().all(|(n, _, _)| !n.starts_with("vllm:")));
    let up = points(last)
        .into_iter()
        .find(|(n, _, _)| n == "dynamo_sysport_upstream_up")
        .expect("upstream_up");
    assert_eq!(up.2, 0.0);
}

#[tokio::test]
async fn a_429_with_retry_after_is_retried_after_it_within_the_interval() {
    let receiver = Receiver::start().await;
    receiver.script(&[Script::Status(429, Some("1"))]);
    let (_upstream, sysport) = start(PAGE, otlp(receiver.url(), 4000)).await;
    let got = wait_for(&receiver, 1, Duration::from_secs(15)).await;
    let answered = receiver.inner.answered.lock().expect("lock").clone();
    assert_eq!((answered[0].0, answered[1].0), (429, 200));
    let waited = answered[1].1 - answered[0].1;
    assert!(
        waited >= Duration::from_secs(1),
        "Retry-After: 1 honoured, waited {waited:?}"
    );
    let text = get_text(&sysport.url("/metrics")).await;
    assert_eq!(exports(&text, "success"), 1.0);
    assert_eq!(exports(&text, "failure"), 0.0);
    drop(got);
}

#[tokio::test]
async fn a_400_is_not_retried() {
    let receiver = Receiver::start().await;
    receiver.script(&[Script::Status(400, None)]);
    let (_upstream, sysport) = start(PAGE, otlp(receiver.url(), 1500)).await;
    eventually(Duration::from_secs(10), "a failed export", || async {
        let text = get_text(&sysport.url("/metrics")).await;
        exports(&text, "failure") == 1.0
    })
    .await;
    // One answer only until the next interval.
    assert_eq!(receiver.inner.answered.lock().expect("lock").len(), 1);
    let (_, status) = sysport.get("/status").await;
    assert!(status.contains("HTTP 400"), "{status}");
}

#[tokio::test]
async fn a_receiver_that_hangs_ends_at_the_timeout_and_probes_stay_fast() {
    let receiver = Receiver::start().await;
    receiver.script(&[Script::Hang, Script::Hang, Script::Hang]);
    let mut o = otlp(receiver.url(), 1500);
    o.timeout = Duration::from_millis(400);
    let (_upstream, sysport) = start(PAGE, o).await;
    // A probe held behind the export would wait its 30 s hang (or at least its 400 ms timeout).
    let probe = common::client();
    let until = Instant::now() + Duration::from_secs(5);
    while Instant::now() < until {
        let asked = Instant::now();
        let r = probe.get(sysport.url("/live")).send().await.expect("live");
        assert_eq!(r.status(), 200);
        assert!(
            asked.elapsed() < Duration::from_secs(1),
            "{:?}",
            asked.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let (_, status) = sysport.get("/status").await;
    let status: serde_json::Value = serde_json::from_str(&status).expect("json");
    let error = status["otlp"]["last_error"].as_str().unwrap_or_default();
    assert!(error.contains("no answer within 400ms"), "{error}");
}

#[tokio::test]
async fn a_413_splits_the_request_until_every_piece_fits() {
    let receiver = Receiver::start().await;
    *receiver.inner.limit.lock().expect("lock") = Some(1200);
    let (_upstream, sysport) = start(PAGE, otlp(receiver.url(), 500)).await;
    eventually(Duration::from_secs(10), "an export in pieces", || async {
        let text = get_text(&sysport.url("/metrics")).await;
        exports(&text, "success") >= 1.0
    })
    .await;
    let got = receiver.got();
    assert!(got.len() >= 2, "split into {} requests", got.len());
    assert!(got.iter().all(|g| g.bytes <= 1200));
    // Every point of the page arrived in the first export's pieces.
    let all: Vec<_> = got.iter().flat_map(|g| points(&g.request)).collect();
    for (name, engine) in [
        ("vllm:prompt_tokens_total", "0"),
        ("vllm:prompt_tokens_total", "1"),
        ("vllm:num_requests_running", "0"),
        ("vllm:e2e_request_latency_seconds", "0"),
    ] {
        assert!(
            all.iter()
                .any(|(n, a, _)| n == name && a.iter().any(|(k, v)| k == "engine" && v == engine)),
            "{name} {engine}"
        );
    }
    assert!(
        receiver
            .inner
            .answered
            .lock()
            .expect("lock")
            .iter()
            .any(|(code, _)| *code == 413)
    );
}

#[tokio::test]
async fn partial_success_is_counted() {
    let receiver = Receiver::start().await;
    receiver.script(&[Script::Partial(2)]);
    let (_upstream, sysport) = start(PAGE, otlp(receiver.url(), 300)).await;
    eventually(
        Duration::from_secs(10),
        "rejected points counted",
        || async {
            let text = get_text(&sysport.url("/metrics")).await;
            metric(&text, "dynamo_sysport_otlp_rejected_points_total").value() == 2.0
                && exports(&text, "partial") == 1.0
        },
    )
    .await;
}

fn counter_page(total: u64) -> String {
    format!(
        "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total{{engine=\"0\"}} {total}\n"
    )
}

#[tokio::test]
async fn down_for_three_intervals_then_back_delta_loses_nothing() {
    // The receiver's port is taken now and served only later: first nothing listens.
    let held = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = held.local_addr().expect("addr");
    drop(held);
    let url = Url::parse(&format!("http://{addr}/v1/metrics")).expect("url");
    let mut o = otlp(url, 400);
    o.temporality = Temporality::Delta;
    let (upstream, sysport) = start(&counter_page(10), o).await;
    tokio::time::sleep(Duration::from_millis(700)).await;
    upstream.set(Reply::text(counter_page(25)));
    tokio::time::sleep(Duration::from_millis(700)).await;
    let failures = {
        let text = get_text(&sysport.url("/metrics")).await;
        exports(&text, "failure")
    };
    assert!(failures >= 2.0, "{failures} failed exports while down");
    let receiver = Receiver::on(TcpListener::bind(addr).await.expect("rebind"));
    upstream.set(Reply::text(counter_page(40)));
    eventually(
        Duration::from_secs(10),
        "every increase delivered",
        || async {
            let got = receiver.got();
            let delivered: f64 = got
                .iter()
                .filter_map(|g| value_of(&g.request, "vllm:prompt_tokens_total", "0"))
                .sum();
            delivered == 40.0
        },
    )
    .await;
    // And it stays so: later exports send zero increases.
    let n = receiver.got().len();
    let got = wait_for(&receiver, n + 2, Duration::from_secs(10)).await;
    let delivered: f64 = got
        .iter()
        .filter_map(|g| value_of(&g.request, "vllm:prompt_tokens_total", "0"))
        .sum();
    assert_eq!(delivered, 40.0);
    let delta = got[0].request.resource_metrics[0].scope_metrics[0]
        .metrics
        .iter()
        .find(|m| m.name == "vllm:prompt_tokens_total")
        .and_then(|m| match &m.data {
            Some(Data::Sum(s)) => Some(s.aggregation_temporality),
            _ => None,
        });
    assert_eq!(delta, Some(1), "AGGREGATION_TEMPORALITY_DELTA");
}

#[tokio::test]
async fn shutdown_sends_a_last_export_within_the_drain_delay() {
    let receiver = Receiver::start().await;
    let upstream = Upstream::start(Reply::text(PAGE)).await;
    let mut config = config(vec![upstream_config(
        "vllm",
        &upstream.metrics_url(),
        &["vllm:"],
    )]);
    config.shutdown.drain_delay = Duration::from_secs(2);
    config.otlp = Some(otlp(receiver.url(), 3_600_000));
    let sysport = Running::start(config).await;
    // Wait until the page can be scraped, then stop.
    eventually(Duration::from_secs(10), "upstream up", || async {
        let text = get_text(&sysport.url("/metrics")).await;
        metric(&text, "dynamo_sysport_upstream_up")
            .label("upstream", "vllm")
            .value()
            == 1.0
    })
    .await;
    assert!(receiver.got().is_empty(), "nothing before the interval");
    sysport.shutdown().await.expect("clean shutdown");
    let got = receiver.got();
    assert_eq!(got.len(), 1);
    assert_eq!(
        value_of(&got[0].request, "vllm:prompt_tokens_total", "0"),
        Some(100.0)
    );
}

/// The gRPC receiver's calls: headers and request.
type Calls = Arc<Mutex<Vec<(HashMap<String, String>, ExportMetricsServiceRequest)>>>;

/// A gRPC receiver: h2c, `MetricsService/Export`, answering UNAVAILABLE to the first `refuse`
/// calls.
async fn grpc_receiver(refuse: usize, limit: usize) -> (SocketAddr, Calls) {
    use http_body_util::{BodyExt, Full};
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let got = Arc::new(Mutex::new(Vec::new()));
    let calls = Arc::new(Mutex::new(0usize));
    let store = got.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (store, calls) = (store.clone(), calls.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let (store, calls) = (store.clone(), calls.clone());
                        async move {
                            let path = req.uri().path().to_owned();
                            let headers: HashMap<String, String> = req
                                .headers()
                                .iter()
                                .map(|(k, v)| {
                                    (k.to_string(), v.to_str().unwrap_or_default().to_owned())
                                })
                                .collect();
                            let body = req.into_body().collect().await.expect("body").to_bytes();
                            let n = {
                                let mut c = calls.lock().expect("lock");
                                *c += 1;
                                *c
                            };
                            let mut trailers = HeaderMap::new();
                            let mut message = Vec::new();
                            if body.len() > limit {
                                // grpc-go's words for a message over its receive limit.
                                trailers.insert("grpc-status", "8".parse().expect("h"));
                                trailers.insert(
                                    "grpc-message",
                                    "grpc:%20received%20message%20larger%20than%20max"
                                        .parse()
                                        .expect("h"),
                                );
                            } else if n <= refuse {
                                trailers.insert("grpc-status", "14".parse().expect("h"));
                                trailers.insert("grpc-message", "warming%20up".parse().expect("h"));
                            } else {
                                assert_eq!(
                                    path,
                                    "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
                                );
                                let framed = &body[5..];
                                let raw = if body[0] == 1 {
                                    let mut out = Vec::new();
                                    flate2::read::GzDecoder::new(framed)
                                        .read_to_end(&mut out)
                                        .expect("gzip");
                                    out
                                } else {
                                    framed.to_vec()
                                };
                                let request =
                                    ExportMetricsServiceRequest::decode(&raw[..]).expect("request");
                                store.lock().expect("lock").push((headers, request));
                                let answer =
                                    ExportMetricsServiceResponse::default().encode_to_vec();
                                message.push(0u8);
                                message.extend_from_slice(&(answer.len() as u32).to_be_bytes());
                                message.extend_from_slice(&answer);
                                trailers.insert("grpc-status", "0".parse().expect("h"));
                            }
                            let body = Full::new(Bytes::from(message))
                                .with_trailers(async move { Some(Ok(trailers)) });
                            let mut r = hyper::Response::new(body);
                            r.headers_mut()
                                .insert("content-type", "application/grpc".parse().expect("h"));
                            Ok::<_, std::convert::Infallible>(r)
                        }
                    },
                );
                let _ =
                    hyper::server::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .serve_connection(hyper_util::rt::TokioIo::new(tcp), service)
                        .await;
            });
        }
    });
    (addr, got)
}

#[tokio::test]
async fn grpc_export_with_gzip_and_headers_retried_after_unavailable() {
    let (addr, got) = grpc_receiver(1, usize::MAX).await;
    let mut o = otlp(Url::parse(&format!("http://{addr}")).expect("url"), 3000);
    o.protocol = OtlpProtocol::Grpc;
    o.gzip = true;
    o.headers = vec![("Authorization".into(), "Bearer t".into())];
    let (_upstream, sysport) = start(PAGE, o).await;
    eventually(Duration::from_secs(15), "a gRPC export", || async {
        !got.lock().expect("lock").is_empty()
    })
    .await;
    let (headers, request) = got.lock().expect("lock")[0].clone();
    assert_eq!(headers["grpc-encoding"], "gzip");
    assert_eq!(headers["authorization"], "Bearer t");
    assert_eq!(
        value_of(&request, "vllm:prompt_tokens_total", "0"),
        Some(100.0)
    );
    let text = get_text(&sysport.url("/metrics")).await;
    assert_eq!(
        exports(&text, "success"),
        1.0,
        "UNAVAILABLE retried within the interval"
    );
}

/// A receiver over TLS that requires a client certificate signed by `ca.crt`: HTTP/2 with a
/// gRPC answer when `grpc`, else HTTP/1.1 with an OTLP/HTTP one. Counts the requests that got
/// through, and the handshakes that failed.
async fn mtls_receiver(pki: &common::pki::Pki, grpc: bool) -> (u16, Arc<Mutex<(usize, usize)>>) {
    use http_body_util::{BodyExt, Full};
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_file_iter(pki.path("ca.crt")).expect("ca") {
        roots.add(cert.expect("cert")).expect("root");
    }
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .expect("verifier");
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(pki.path("server.crt"))
        .expect("server cert")
        .collect::<Result<_, _>>()
        .expect("certs");
    let key = PrivateKeyDer::from_pem_file(pki.path("server.key")).expect("server key");
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .expect("server config");
    tls.alpn_protocols = vec![if grpc {
        b"h2".to_vec()
    } else {
        b"http/1.1".to_vec()
    }];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls));
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new((0usize, 0usize)));
    let counts = seen.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, counts) = (acceptor.clone(), counts.clone());
            tokio::spawn(async move {
                let Ok(stream) = acceptor.accept(tcp).await else {
                    counts.lock().expect("lock").1 += 1;
                    return;
                };
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let counts = counts.clone();
                        async move {
                            let _ = req.into_body().collect().await;
                            counts.lock().expect("lock").0 += 1;
                            let mut trailers = HeaderMap::new();
                            trailers.insert("grpc-status", "0".parse().expect("h"));
                            let answer = ExportMetricsServiceResponse::default().encode_to_vec();
                            let mut message = vec![0u8];
                            message.extend_from_slice(&(answer.len() as u32).to_be_bytes());
                            message.extend_from_slice(&answer);
                            let body = if grpc {
                                Full::new(Bytes::from(message))
                                    .with_trailers(async move { Some(Ok(trailers)) })
                                    .boxed()
                            } else {
                                Full::new(Bytes::from(answer)).boxed()
                            };
                            Ok::<_, std::convert::Infallible>(hyper::Response::new(body))
                        }
                    },
                );
                let io = hyper_util::rt::TokioIo::new(stream);
                if grpc {
                    let _ = hyper::server::conn::http2::Builder::new(
                        hyper_util::rt::TokioExecutor::new(),
                    )
                    .serve_connection(io, service)
                    .await;
                } else {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                }
            });
        }
    });
    (port, seen)
}

#[tokio::test]
async fn mutual_tls_over_both_protocols_and_no_client_certificate_refused() {
    let pki = common::pki::Pki::new("otlp-mtls");
    pki.ca("ca");
    pki.leaf("ca", "server", "DNS:localhost,IP:127.0.0.1");
    pki.leaf("ca", "client", "DNS:sysport");
    for grpc in [true, false] {
        let (port, seen) = mtls_receiver(&pki, grpc).await;
        let (protocol, path) = if grpc {
            (OtlpProtocol::Grpc, "")
        } else {
            (OtlpProtocol::HttpProtobuf, "/v1/metrics")
        };
        let url = |port: u16| Url::parse(&format!("https://localhost:{port}{path}")).expect("url");
        let mut o = otlp(url(port), 300);
        o.protocol = protocol;
        o.certificate = Some(pki.path("ca.crt"));
        o.client_key = Some(pki.path("client.key"));
        o.client_certificate = Some(pki.path("client.crt"));
        let (_upstream, sysport) = start(PAGE, o.clone()).await;
        eventually(
            Duration::from_secs(10),
            &format!("{protocol}: an export over mTLS"),
            || async {
                let text = get_text(&sysport.url("/metrics")).await;
                exports(&text, "success") >= 1.0
            },
        )
        .await;
        assert!(seen.lock().expect("lock").0 >= 1);
        drop(sysport);
        // Without the client certificate the handshake fails and nothing gets through.
        let (port, seen) = mtls_receiver(&pki, grpc).await;
        o.endpoint = url(port);
        o.client_key = None;
        o.client_certificate = None;
        let (_upstream, sysport) = start(PAGE, o).await;
        eventually(
            Duration::from_secs(10),
            &format!("{protocol}: refused without a certificate"),
            || async {
                let text = get_text(&sysport.url("/metrics")).await;
                exports(&text, "failure") >= 1.0
            },
        )
        .await;
        let (through, refused) = *seen.lock().expect("lock");
        assert_eq!(through, 0, "{protocol}");
        assert!(refused >= 1, "{protocol}");
    }
}

#[tokio::test]
async fn grpc_resource_exhausted_about_size_splits_the_request() {
    let (addr, got) = grpc_receiver(0, 700).await;
    let mut o = otlp(Url::parse(&format!("http://{addr}")).expect("url"), 3000);
    o.protocol = OtlpProtocol::Grpc;
    let (_upstream, sysport) = start(PAGE, o).await;
    eventually(Duration::from_secs(15), "an export in pieces", || async {
        let text = get_text(&sysport.url("/metrics")).await;
        exports(&text, "success") >= 1.0
    })
    .await;
    let calls = got.lock().expect("lock").clone();
    let sizes: Vec<usize> = calls.iter().map(|(_, r)| r.encoded_len()).collect();
    assert!(
        calls.len() >= 2,
        "split into {} calls: {sizes:?}",
        calls.len()
    );
    let all: Vec<Point> = calls.iter().flat_map(|(_, r)| points(r)).collect();
    for name in [
        "vllm:prompt_tokens_total",
        "vllm:num_requests_running",
        "vllm:e2e_request_latency_seconds",
    ] {
        assert!(all.iter().any(|(n, _, _)| n == name), "{name} arrived");
    }
}
