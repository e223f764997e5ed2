//! sysport's own metrics, all under `dynamo_sysport_`.
//!
//! They live in one registry of their own, so nothing an upstream sends can reach it, and are
//! rendered after the engine families on every `/metrics`.

use std::time::Instant;

use prometheus::{
    Encoder, Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec,
    Opts, Registry, TextEncoder,
};

/// Namespace of every metric here.
pub const NAMESPACE: &str = "dynamo_sysport";

/// Outcomes counted in `dynamo_sysport_upstream_series`.
pub const SERIES_OUTCOMES: [&str; 5] = ["kept", "dropped", "conflict", "duplicate", "malformed"];

/// The sidecar's own metrics.
#[derive(Clone)]
pub struct Telemetry {
    registry: Registry,
    started: Instant,
    uptime: Gauge,
    /// `upstream_up{upstream}`: 1 when the last scrape of the upstream succeeded.
    pub upstream_up: IntGaugeVec,
    /// `upstream_scrape_duration_seconds{upstream}`.
    pub scrape_duration: HistogramVec,
    /// `upstream_scrapes_total{upstream,result}`.
    pub scrapes: IntCounterVec,
    /// `upstream_response_bytes{upstream}`: decoded body size of the last successful scrape.
    pub response_bytes: IntGaugeVec,
    /// `upstream_series{upstream,outcome}` in the last scrape.
    pub series: IntGaugeVec,
    /// `health_ready`: 1 when `/health` answers 200.
    pub health_ready: IntGauge,
    /// `http_requests_total{path,code}`.
    pub http_requests: IntCounterVec,
    /// `config_reloads_total{result}`.
    pub config_reloads: IntCounterVec,
    /// `openmetrics_dropped_series_total`: series OpenMetrics output could not express.
    pub openmetrics_dropped: IntCounter,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NAMESPACE)
}

impl Telemetry {
    /// Registers every metric.
    pub fn new() -> Telemetry {
        let registry = Registry::new();
        let uptime = Gauge::with_opts(opts("uptime_seconds", "Seconds since sysport started."))
            .expect("valid metric");
        let build_info = IntGaugeVec::new(
            opts("build_info", "sysport build information."),
            &["version"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        let upstream_up = IntGaugeVec::new(
            opts(
                "upstream_up",
                "1 if the last scrape of the upstream succeeded, else 0.",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let scrape_duration = HistogramVec::new(
            HistogramOpts::from(opts(
                "upstream_scrape_duration_seconds",
                "Time to fetch an upstream's metrics.",
            ))
            .buckets(vec![
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ]),
            &["upstream"],
        )
        .expect("valid metric");
        let scrapes = IntCounterVec::new(
            opts(
                "upstream_scrapes_total",
                "Upstream scrapes by result (success or the reason it failed).",
            ),
            &["upstream", "result"],
        )
        .expect("valid metric");
        let response_bytes = IntGaugeVec::new(
            opts(
                "upstream_response_bytes",
                "Decoded size of the upstream's last successful response.",
            ),
            &["upstream"],
        )
        .expect("valid metric");
        let series = IntGaugeVec::new(
            opts(
                "upstream_series",
                "Series of the upstream in the last scrape, by what became of them.",
            ),
            &["upstream", "outcome"],
        )
        .expect("valid metric");
        let health_ready =
            IntGauge::with_opts(opts("health_ready", "1 if /health reports ready, else 0."))
                .expect("valid metric");
        let http_requests = IntCounterVec::new(
            opts(
                "http_requests_total",
                "HTTP requests served by sysport, by route and status code.",
            ),
            &["path", "code"],
        )
        .expect("valid metric");
        let config_reloads = IntCounterVec::new(
            opts(
                "config_reloads_total",
                "Configuration reloads (SIGHUP) by result.",
            ),
            &["result"],
        )
        .expect("valid metric");
        let openmetrics_dropped = IntCounter::with_opts(opts(
            "openmetrics_dropped_series_total",
            "Series left out of OpenMetrics responses because OpenMetrics cannot express their family.",
        ))
        .expect("valid metric");
        for c in [
            Box::new(uptime.clone()) as Box<dyn prometheus::core::Collector>,
            Box::new(build_info),
            Box::new(upstream_up.clone()),
            Box::new(scrape_duration.clone()),
            Box::new(scrapes.clone()),
            Box::new(response_bytes.clone()),
            Box::new(series.clone()),
            Box::new(health_ready.clone()),
            Box::new(http_requests.clone()),
            Box::new(config_reloads.clone()),
            Box::new(openmetrics_dropped.clone()),
        ] {
            registry.register(c).expect("metric names are unique");
        }
        #[cfg(target_os = "linux")]
        registry
            .register(Box::new(
                prometheus::process_collector::ProcessCollector::new(
                    std::process::id() as i32,
                    NAMESPACE,
                ),
            ))
            .expect("process metrics register once");
        Telemetry {
            registry,
            started: Instant::now(),
            uptime,
            upstream_up,
            scrape_duration,
            scrapes,
            response_bytes,
            series,
            health_ready,
            http_requests,
            config_reloads,
            openmetrics_dropped,
        }
    }

    /// Seconds since start.
    pub fn uptime_seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Makes the per-upstream series exist from the start (at 0), so dashboards see every
    /// configured upstream before its first scrape.
    pub fn register_upstream(&self, name: &str) {
        self.upstream_up.with_label_values(&[name]).set(0);
        for outcome in SERIES_OUTCOMES {
            self.series.with_label_values(&[name, outcome]);
        }
    }

    /// Forgets an upstream that a reload removed.
    pub fn forget_upstream(&self, name: &str) {
        let _ = self.upstream_up.remove_label_values(&[name]);
        let _ = self.response_bytes.remove_label_values(&[name]);
        let _ = self.scrape_duration.remove_label_values(&[name]);
        for outcome in SERIES_OUTCOMES {
            let _ = self.series.remove_label_values(&[name, outcome]);
        }
    }

    /// Renders every metric as text 0.0.4, or only the named families.
    pub fn render_text(&self, names: Option<&[&str]>, out: &mut Vec<u8>) {
        self.uptime.set(self.uptime_seconds());
        let mut families = self.registry.gather();
        if let Some(names) = names {
            families.retain(|f| names.iter().any(|n| *n == f.name()));
        }
        if let Err(err) = TextEncoder::new().encode(&families, out) {
            tracing::error!(error = %err, "could not encode sysport's own metrics");
        }
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new()
    }
}
