//! Configuration: YAML file + `DYN_SYSTEM_*` environment + CLI flags → one validated [`Config`].
//!
//! Precedence: CLI flag > environment > file > default. Loading happens in two stages: the
//! file is parsed into raw values that keep their line and column (`raw`, and each feature's
//! `config` module for its section), then every value is expanded (`${VAR}`), parsed and checked
//! (`assemble`, and the features' sections), collecting every problem into one
//! [`ConfigError`] whose lines read `FILE:LINE:COL: FIELD: MESSAGE`.
//!
//! The file (every section optional; values may use `${VAR}`, `${VAR:-default}` and `$$` for a
//! literal `$`):
//!
//! ```yaml
//! listen: { host: 0.0.0.0, port: 8081, request_head_timeout: 5s, idle_timeout: 2m,
//!           max_request_head_bytes: 16KiB, max_connections: 1024 }
//! health: { path: /health, live_path: /live, starting_status: notready, interval: 5s }
//! labels: { worker_id: "${POD_NAME}" }
//! upstreams:
//!   - name: vllm
//!     engine: vllm
//!     url: http://127.0.0.1:8000/metrics
//!     keep: ["vllm:"]
//!     timeout: 2s
//!     health_url: http://127.0.0.1:8000/health
//!     required: true
//!     min_interval: 0s
//!     aliases: false
//!     metric_relabel_configs:            # Prometheus' rules, applied before the wire
//!       - source_labels: [__name__]
//!         regex: "vllm:request_params_.*"
//!         action: drop
//! metric_relabel_configs: []            # applied to every upstream, after its own rules
//!     stall_after: 0s
//!     stall: { busy: "vllm:num_requests_running", progress: "vllm:iteration_tokens_total" }
//!     canary_after: 0s                  # 10s: a one-token request after 10 s of idleness
//!     canary: { timeout: 3s, live_failures: 3, headers: { Authorization: "Bearer ${KEY}" } }
//! limits:
//!   max_body_bytes: 16MiB
//!   max_line_bytes: 1MiB
//!   max_series: 250000
//!   max_families: 20000
//!   max_labels: 64
//!   max_label_value_bytes: 512KiB
//! shutdown: { drain_delay: 5s }
//! otlp:                                 # OTEL_* variables override each field
//!   exporter: otlp                      # none (default): no push
//!   endpoint: http://collector:4317
//!   protocol: grpc                      # or http/protobuf
//!   headers: "authorization=Bearer%20${TOKEN}"
//!   compression: gzip
//!   interval: 60s
//!   temporality: cumulative             # or delta
//! views:
//!   - name: queue
//!     families: { "vllm:num_requests_waiting": sum }
//!     aggregate: [engine]
//! ```
//!
//! [`Config`]'s `Display` renders the effective configuration in this same schema.
//! `metric_relabel_configs` values are taken literally (no `${VAR}`): see `relabel`.

mod assemble;
pub(crate) mod check;
pub(crate) mod data;
pub(crate) mod env;
pub(crate) mod error;
mod expand;
pub(crate) mod loader;
mod path;
pub(crate) mod quote;
mod raw;
mod render;
pub(crate) mod section;
#[cfg(test)]
pub(crate) mod tests;
pub(crate) mod units;
mod whole;

pub use crate::canary::config::{CanaryConfig, CanaryUpstream};
pub use crate::control::config::{
    ControlConfig, DYN_DISABLE_ENGINE_ROUTES, DYN_ENGINE_ROUTES_ALLOW, DYN_ENGINE_ROUTES_DENY,
    DYN_LORA_ENABLED, NotTruthy, RoutePolicy,
};
pub use crate::incidents::config::IncidentsConfig;
pub use crate::otlp::config::{
    OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, OTEL_METRIC_EXPORT_INTERVAL,
    OTEL_METRICS_EXPORTER, OTEL_RESOURCE_ATTRIBUTES, OTEL_SERVICE_NAME,
};
pub use crate::otlp::config::{OtlpConfig, OtlpProtocol, Temporality};
pub use crate::scrape::config::{MAX_UPSTREAMS, UpstreamConfig};
pub use crate::stall::config::StallConfig;
pub use crate::views::config::ViewConfig;
pub use crate::vitals::config::VitalsConfig;
pub use crate::web::config::{
    ClientAuth, MAX_BCRYPT_COST, Pem, TlsPlaces, TlsSettings, TlsVersion, TlsVersionError,
    WebConfig,
};
pub use assemble::{Overrides, load, load_file};
pub use data::{HealthConfig, Limits, Listen, ShutdownConfig, StartingStatus};
pub use env::{
    DYN_CANARY_WAIT_TIME, DYN_HEALTH_CHECK_ENABLED, DYN_HEALTH_CHECK_PAYLOAD,
    DYN_HEALTH_CHECK_REQUEST_TIMEOUT, DYN_SYSTEM_HEALTH_PATH, DYN_SYSTEM_HOST,
    DYN_SYSTEM_LIVE_PATH, DYN_SYSTEM_PORT, DYN_SYSTEM_STARTING_HEALTH_STATUS, Env, ProcessEnv,
    SYSPORT_CONFIG, SYSPORT_WEB_CONFIG,
};
pub use error::{ConfigError, ConfigIssue};
pub use render::Rendered;
pub use whole::Config;
