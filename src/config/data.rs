//! The top-level sections of the validated configuration (`listen`, `health`, `upstreams`,
//! `limits`, `shutdown`): plain data, every field checked by the loader.

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use crate::model::routes;
use crate::web::config::WebConfig;

/// Where the system port listens, and what one client may hold there.
#[derive(Debug, Clone, PartialEq)]
pub struct Listen {
    /// `DYN_SYSTEM_HOST`, default `0.0.0.0`.
    pub host: IpAddr,
    /// `DYN_SYSTEM_PORT`, default 8081. Port 0 asks the OS for a free port.
    pub port: u16,
    /// Time to send a request head, from the connection's start or the next request's first
    /// byte, default 5 s.
    pub request_head_timeout: Duration,
    /// Time a kept-alive connection may wait for its next request, default 2 min.
    pub idle_timeout: Duration,
    /// Time an answer may go without the client taking a byte of it, default 30 s.
    pub write_timeout: Duration,
    /// Largest request head, default 16 KiB.
    pub max_request_head_bytes: usize,
    /// Most bytes the answers being written may hold at once, default 64 MiB.
    pub max_answer_bytes_held: usize,
    /// Most connections held at once; `None`: 1024, or half the open-file limit when lower.
    pub max_connections: Option<usize>,
    /// A plain-HTTP port serving only the probes (`/live`, `/health`), for when the main port
    /// requires client certificates the kubelet cannot present.
    pub probe_port: Option<u16>,
    /// The web configuration (TLS, client certificates, basic auth, headers), loaded from
    /// `--web.config.file`, `SYSPORT_WEB_CONFIG` or `listen.web_config_file`.
    pub web: Option<WebConfig>,
}

/// Readiness before the first health check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartingStatus {
    /// `/health` answers 503 until the first check succeeds (default).
    NotReady,
    /// `/health` answers 200 until a check fails.
    Ready,
}

/// Health endpoint settings.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthConfig {
    /// `DYN_SYSTEM_HEALTH_PATH`, default `/health`.
    pub path: String,
    /// `DYN_SYSTEM_LIVE_PATH`, default `/live`.
    pub live_path: String,
    /// `DYN_SYSTEM_STARTING_HEALTH_STATUS`, default `notready`.
    pub starting_status: StartingStatus,
    /// How often each upstream's health is checked, default 5 s.
    pub interval: Duration,
}

/// Limits applied to each upstream response.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Body bytes after decoding, default 16 MiB.
    pub max_body_bytes: usize,
    /// Longest line, default 1 MiB.
    pub max_line_bytes: usize,
    /// Series per upstream, default 250 000.
    pub max_series: usize,
    /// Metric families (distinct names) per upstream, default 20 000.
    pub max_families: usize,
    /// Labels per series, default 64.
    pub max_labels: usize,
    /// Bytes in one label value, default 512 KiB.
    pub max_label_value_bytes: usize,
}

impl Limits {
    /// The limits a parse of one upstream body applies (all but the body size, which the
    /// fetch applies).
    pub fn parse_limits(&self) -> crate::expfmt::ParseLimits {
        crate::expfmt::ParseLimits {
            max_line_bytes: self.max_line_bytes,
            max_series: self.max_series,
            max_families: self.max_families,
            max_labels: self.max_labels,
            max_label_value_bytes: self.max_label_value_bytes,
        }
    }
}

/// Shutdown settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ShutdownConfig {
    /// After SIGTERM: `/health` is 503 at once, the listener keeps serving this long, default 5 s.
    pub drain_delay: Duration,
}

impl Default for Listen {
    fn default() -> Self {
        Listen {
            host: IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            port: 8081,
            request_head_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(120),
            write_timeout: Duration::from_secs(30),
            max_request_head_bytes: 16 << 10,
            max_answer_bytes_held: 64 << 20,
            max_connections: None,
            probe_port: None,
            web: None,
        }
    }
}

impl Default for HealthConfig {
    fn default() -> Self {
        HealthConfig {
            path: routes::HEALTH.to_owned(),
            live_path: routes::LIVE.to_owned(),
            starting_status: StartingStatus::NotReady,
            interval: Duration::from_secs(5),
        }
    }
}

impl Default for ShutdownConfig {
    fn default() -> Self {
        ShutdownConfig {
            drain_delay: Duration::from_secs(5),
        }
    }
}

impl std::fmt::Display for StartingStatus {
    /// `notready` or `ready`, as in the file and `DYN_SYSTEM_STARTING_HEALTH_STATUS`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StartingStatus::NotReady => "notready",
            StartingStatus::Ready => "ready",
        })
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_body_bytes: 16 << 20,
            max_line_bytes: 1 << 20,
            max_series: 250_000,
            max_families: 20_000,
            max_labels: 64,
            max_label_value_bytes: super::units::DEFAULT_MAX_LABEL_VALUE_BYTES,
        }
    }
}
