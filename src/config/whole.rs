//! The whole configuration, assembled from every section (each feature's own, and the top-level
//! ones of `data`), and the built-in one: what sysport runs with no file, no flag and no
//! environment.

use std::path::PathBuf;

use super::data::{HealthConfig, Limits, Listen, ShutdownConfig};
use crate::control::config::ControlConfig;
use crate::incidents::config::IncidentsConfig;
use crate::otlp::config::OtlpConfig;
use crate::relabel::Rule;
use crate::scrape::config::UpstreamConfig;
use crate::views::config::ViewConfig;
use crate::vitals::config::VitalsConfig;

/// The validated configuration the server runs with.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// Address and port of the system port.
    pub listen: Listen,
    /// Readiness / liveness settings.
    pub health: HealthConfig,
    /// Labels added to every engine series that does not already carry them, in file order.
    pub labels: Vec<(String, String)>,
    /// The engine endpoints to scrape, in file order (their families are emitted in this order).
    pub upstreams: Vec<UpstreamConfig>,
    /// Resource limits applied to every upstream response.
    pub limits: Limits,
    /// Graceful shutdown behaviour.
    pub shutdown: ShutdownConfig,
    /// The engine vitals.
    pub vitals: VitalsConfig,
    /// Views served at `/metrics/<name>` besides the built-in `router` (which one named
    /// `router` replaces), in file order.
    pub views: Vec<ViewConfig>,
    /// Rules applied to every engine series, after its upstream's own.
    pub metric_relabel_configs: Vec<Rule>,
    /// Dynamo's control routes: who may reach them and which are served.
    pub control: ControlConfig,
    /// OTLP push of the `/metrics` page; `None`: off.
    pub otlp: Option<OtlpConfig>,
    /// Where incidents are kept.
    pub incidents: IncidentsConfig,
    /// The file this configuration was read from, if any (used by `SIGHUP` reload).
    pub source: Option<PathBuf>,
}

impl Default for Config {
    /// The built-in configuration: every default, scraping vLLM at
    /// `http://127.0.0.1:8000/metrics`.
    fn default() -> Self {
        Config {
            listen: Listen::default(),
            health: HealthConfig::default(),
            labels: Vec::new(),
            upstreams: crate::scrape::config::builtin(),
            limits: Limits::default(),
            shutdown: ShutdownConfig::default(),
            vitals: VitalsConfig::default(),
            views: Vec::new(),
            metric_relabel_configs: Vec::new(),
            control: ControlConfig::default(),
            otlp: None,
            incidents: IncidentsConfig::default(),
            source: None,
        }
    }
}
