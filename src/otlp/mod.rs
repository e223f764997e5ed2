//! OTLP push of the `/metrics` page (`OTEL_METRICS_EXPORTER=otlp`): every interval, on a task
//! of its own on the worker runtime, the page sysport serves (the engines' families after keep
//! and relabelling, and sysport's own) is converted (`convert`) and sent (`send`, `grpc`), at
//! most one export at a time. Answers worth retrying are retried with backoff until the next
//! interval; a request over the receiver's size limit is split in halves; on shutdown one last
//! export goes out within the drain delay. See docs/otlp.md.

mod answer;
pub(crate) mod config;
mod convert;
mod delta;
mod grpc;
mod send;

pub(crate) use answer::Answer;
pub use convert::{Converter, PageError};
pub use delta::Delta;
pub(crate) use send::{ClientError, Transport};

use std::io::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use futures_util::future::BoxFuture;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::common::v1::InstrumentationScope;
use opentelemetry_proto::tonic::metrics::v1::{
    Metric, ResourceMetrics, ScopeMetrics, metric::Data,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prometheus::{Histogram, HistogramOpts, IntCounter, IntCounterVec, Opts};
use prost::Message;
use tokio::sync::watch;

use crate::config::{OtlpConfig, Temporality};
use crate::telemetry::{NAMESPACE, Telemetry};

/// How an export is given the page: sysport's `/metrics` as OpenMetrics, rendered in process.
pub(crate) type PageSource = Arc<dyn Fn() -> BoxFuture<'static, Bytes> + Send + Sync>;

/// The `result` label of `otlp_exports_total`.
const RESULTS: [&str; 3] = ["success", "partial", "failure"];
/// Halvings of one export before a piece too large is given up.
const MAX_SPLIT_DEPTH: u32 = 8;

/// What `/status` and the status page show of the export.
#[derive(Debug, Clone, Default)]
pub(crate) struct Report {
    /// The receiver, its password as `***`.
    pub(crate) endpoint: String,
    pub(crate) protocol: String,
    pub(crate) last_success: Option<SystemTime>,
    /// Data points in the last export that succeeded.
    pub(crate) last_points: u64,
    pub(crate) last_error: Option<String>,
    pub(crate) last_error_at: Option<SystemTime>,
}

/// The export's own metrics (`dynamo_sysport_otlp_*`).
#[derive(Clone)]
struct Metrics {
    exports: IntCounterVec,
    points: IntCounter,
    rejected: IntCounter,
    duration: Histogram,
}

impl Metrics {
    fn register(telemetry: &Telemetry) -> Metrics {
        let opts = |name: &str, help: &str| Opts::new(name, help).namespace(NAMESPACE);
        let exports = IntCounterVec::new(
            opts(
                "otlp_exports_total",
                "OTLP exports by result: success, partial (some points rejected), failure.",
            ),
            &["result"],
        )
        .expect("valid metric");
        for r in RESULTS {
            exports.with_label_values(&[r]);
        }
        let points = IntCounter::with_opts(opts(
            "otlp_points_total",
            "Data points the OTLP receiver took.",
        ))
        .expect("valid metric");
        let rejected = IntCounter::with_opts(opts(
            "otlp_rejected_points_total",
            "Data points the OTLP receiver rejected (partial_success).",
        ))
        .expect("valid metric");
        let duration = Histogram::with_opts(
            HistogramOpts::from(opts(
                "otlp_export_duration_seconds",
                "Time of one OTLP export, retries and splits included.",
            ))
            .buckets(vec![
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ]),
        )
        .expect("valid metric");
        telemetry.register(Box::new(exports.clone()));
        telemetry.register(Box::new(points.clone()));
        telemetry.register(Box::new(rejected.clone()));
        telemetry.register(Box::new(duration.clone()));
        Metrics {
            exports,
            points,
            rejected,
            duration,
        }
    }
}

/// A running exporter: its report, and the task that ends after the last export.
pub(crate) struct Exporter {
    pub(crate) report: Arc<Mutex<Report>>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

/// Starts exporting with `config`: one export every interval until `stop` turns true, then a
/// last one within `drain`.
///
/// # Errors
/// When the transport cannot be made (a TLS file unreadable or unusable).
pub(crate) fn start(
    config: OtlpConfig,
    page: PageSource,
    telemetry: &Telemetry,
    stop: watch::Receiver<bool>,
    drain: Duration,
) -> Result<Exporter, ClientError> {
    let transport = Transport::new(&config)?;
    let report = Arc::new(Mutex::new(Report {
        endpoint: crate::model::ShownUrl(&config.endpoint).to_string(),
        protocol: config.protocol.to_string(),
        ..Report::default()
    }));
    let state = State {
        metrics: Metrics::register(telemetry),
        config,
        transport,
        page,
        converter: Converter::default(),
        delta: Delta::default(),
        report: report.clone(),
        logged_partial: false,
    };
    let task = tokio::spawn(state.run(stop, drain));
    Ok(Exporter { report, task })
}

struct State {
    config: OtlpConfig,
    transport: Transport,
    page: PageSource,
    converter: Converter,
    delta: Delta,
    metrics: Metrics,
    report: Arc<Mutex<Report>>,
    logged_partial: bool,
}

impl State {
    async fn run(mut self, mut stop: watch::Receiver<bool>, drain: Duration) {
        let interval = self.config.interval;
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        tracing::info!(
            endpoint = %crate::model::ShownUrl(&self.config.endpoint),
            protocol = %self.config.protocol,
            ?interval,
            "OTLP export on"
        );
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = stop.wait_for(|&s| s) => break,
            }
            let deadline = Instant::now() + interval;
            tokio::select! {
                () = self.export(deadline) => {}
                // An export cut short is not committed: the last one below carries it.
                _ = stop.wait_for(|&s| s) => break,
            }
        }
        let deadline = Instant::now() + drain;
        if tokio::time::timeout(drain, self.export(deadline))
            .await
            .is_err()
        {
            tracing::warn!(
                ?drain,
                "the last OTLP export did not finish within the drain delay"
            );
        }
    }

    /// One export: the page, converted, sent (retried, split) until `deadline`.
    async fn export(&mut self, deadline: Instant) {
        let started = Instant::now();
        let page = (self.page)().await;
        let now = unix_nanos();
        // The work in proportion to the page (a 16 MB page: some 200 ms) leaves the worker
        // runtime free for /metrics meanwhile.
        let mut converter = std::mem::take(&mut self.converter);
        let (converter, converted) = tokio::task::spawn_blocking(move || {
            let converted = converter.convert(page, now);
            (converter, converted)
        })
        .await
        .expect("converting a page does not panic");
        self.converter = converter;
        let mut metrics = match converted {
            Ok(m) => m,
            Err(err) => {
                self.failed(&err.to_string());
                return;
            }
        };
        let pending = match self.config.temporality {
            Temporality::Delta => Some(self.delta.apply(&mut metrics)),
            Temporality::Cumulative => None,
        };
        let points = count_points(&metrics);
        let result = self.send_all(metrics, deadline).await;
        self.metrics
            .duration
            .observe(started.elapsed().as_secs_f64());
        match result {
            Ok(rejected) => {
                if let Some(p) = pending {
                    self.delta.commit(p);
                }
                self.metrics.points.inc_by(points.saturating_sub(rejected));
                let mut r = self.report.lock().expect("report lock");
                r.last_success = Some(SystemTime::now());
                r.last_points = points;
                drop(r);
                let result = if rejected > 0 { "partial" } else { "success" };
                self.metrics.exports.with_label_values(&[result]).inc();
                tracing::debug!(points, "OTLP export sent");
            }
            Err(why) => self.failed(&why),
        }
    }

    fn failed(&self, why: &str) {
        tracing::warn!(error = %why, "OTLP export failed");
        self.metrics.exports.with_label_values(&["failure"]).inc();
        let mut r = self.report.lock().expect("report lock");
        r.last_error = Some(why.to_owned());
        r.last_error_at = Some(SystemTime::now());
    }

    /// Sends `metrics` as one request, or in halves while a piece is too large. Returns the
    /// points the receiver rejected.
    async fn send_all(&mut self, metrics: Vec<Metric>, deadline: Instant) -> Result<u64, String> {
        let mut queue = vec![(metrics, 0u32)];
        let mut rejected = 0u64;
        while let Some((piece, depth)) = queue.pop() {
            let config = self.config.clone();
            let (piece, body) = tokio::task::spawn_blocking(move || encode(&config, piece))
                .await
                .expect("encoding does not panic");
            let over = self
                .config
                .max_request_bytes
                .is_some_and(|max| body.len() > max);
            let answer = if over {
                Answer::TooLarge {
                    why: format!("{} bytes over otlp.max_request_bytes", body.len()),
                }
            } else {
                self.send_retrying(body, deadline).await
            };
            match answer {
                Answer::Taken {
                    rejected: r,
                    message,
                } => {
                    if r > 0 || !message.is_empty() {
                        rejected += u64::try_from(r).unwrap_or(0);
                        self.metrics.rejected.inc_by(u64::try_from(r).unwrap_or(0));
                        if !self.logged_partial {
                            self.logged_partial = true;
                            tracing::warn!(rejected = r, message = %message,
                                "the OTLP receiver rejected part of an export (logged once)");
                        }
                    }
                }
                Answer::TooLarge { why } => match split(piece) {
                    Some((a, b)) if depth < MAX_SPLIT_DEPTH => {
                        queue.push((b, depth + 1));
                        queue.push((a, depth + 1));
                    }
                    _ => return Err(format!("{why}; cannot split further")),
                },
                Answer::Retry { why, .. } | Answer::Refused { why } => return Err(why),
            }
        }
        Ok(rejected)
    }

    /// Sends one body, retrying answers worth retrying with backoff (or the receiver's
    /// `Retry-After`) while `deadline` allows.
    async fn send_retrying(&self, body: Bytes, deadline: Instant) -> Answer {
        let mut backoff = Duration::from_millis(500);
        loop {
            let answer = self
                .transport
                .send(&self.config, body.clone(), self.config.gzip)
                .await;
            let Answer::Retry { after, why } = answer else {
                return answer;
            };
            let wait = after.unwrap_or(backoff);
            if Instant::now() + wait >= deadline {
                return Answer::Retry { after, why };
            }
            tracing::debug!(error = %why, ?wait, "OTLP export retried");
            tokio::time::sleep(wait).await;
            backoff = (backoff * 2).min(Duration::from_secs(30));
        }
    }
}

/// The encoded request (gzipped when configured) of `metrics`, and the metrics back.
fn encode(config: &OtlpConfig, metrics: Vec<Metric>) -> (Vec<Metric>, Bytes) {
    let mut r = request(config, metrics);
    let encoded = r.encode_to_vec();
    let metrics = std::mem::take(&mut r.resource_metrics[0].scope_metrics[0].metrics);
    if !config.gzip {
        return (metrics, Bytes::from(encoded));
    }
    let mut gz = flate2::write::GzEncoder::new(
        Vec::with_capacity(encoded.len() / 4),
        flate2::Compression::fast(),
    );
    gz.write_all(&encoded).expect("writing to memory");
    (
        metrics,
        Bytes::from(gz.finish().expect("writing to memory")),
    )
}

/// The request of `metrics` under the configured resource.
pub fn request(config: &OtlpConfig, metrics: Vec<Metric>) -> ExportMetricsServiceRequest {
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: config
                    .resource
                    .iter()
                    .map(|(k, v)| convert::string_kv(k, v))
                    .collect(),
                dropped_attributes_count: 0,
                entity_refs: Vec::new(),
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "sysport".to_owned(),
                    version: env!("CARGO_PKG_VERSION").to_owned(),
                    attributes: Vec::new(),
                    dropped_attributes_count: 0,
                }),
                metrics,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// Halves of `metrics`: by metric, or a lone metric's points.
fn split(mut metrics: Vec<Metric>) -> Option<(Vec<Metric>, Vec<Metric>)> {
    if metrics.len() > 1 {
        let b = metrics.split_off(metrics.len() / 2);
        return Some((metrics, b));
    }
    let mut m = metrics.pop()?;
    let mut other = m.clone();
    macro_rules! halve {
        ($a:expr, $b:expr) => {{
            if $a.data_points.len() < 2 {
                return None;
            }
            $b.data_points = $a.data_points.split_off($a.data_points.len() / 2);
        }};
    }
    match (&mut m.data, &mut other.data) {
        (Some(Data::Gauge(a)), Some(Data::Gauge(b))) => halve!(a, b),
        (Some(Data::Sum(a)), Some(Data::Sum(b))) => halve!(a, b),
        (Some(Data::Histogram(a)), Some(Data::Histogram(b))) => halve!(a, b),
        (Some(Data::Summary(a)), Some(Data::Summary(b))) => halve!(a, b),
        _ => return None,
    }
    Some((vec![m], vec![other]))
}

/// Data points in `metrics`.
pub fn count_points(metrics: &[Metric]) -> u64 {
    metrics
        .iter()
        .map(|m| match &m.data {
            Some(Data::Gauge(g)) => g.data_points.len(),
            Some(Data::Sum(s)) => s.data_points.len(),
            Some(Data::Histogram(h)) => h.data_points.len(),
            Some(Data::Summary(s)) => s.data_points.len(),
            _ => 0,
        } as u64)
        .sum()
}

fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;
