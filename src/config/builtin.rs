//! The built-in configuration: what sysport runs with no file, no flag and no environment.

use super::control::ControlConfig;
use super::data::{
    Config, HealthConfig, Limits, Listen, ShutdownConfig, UpstreamConfig, VitalsConfig,
};
use crate::model::{Engine, Url};

impl Default for Config {
    /// The built-in configuration: every default, scraping vLLM at
    /// `http://127.0.0.1:8000/metrics`.
    fn default() -> Self {
        let preset = Engine::Vllm.preset();
        let url = |u: &str| Url::parse(u).expect("a preset's URLs are valid");
        let mut vllm = UpstreamConfig::new("vllm", url(preset.metrics_url));
        vllm.health_url = Some(url(preset.health_url));
        let vllm = vllm.with_default_checks();
        Config {
            listen: Listen::default(),
            health: HealthConfig::default(),
            labels: Vec::new(),
            upstreams: vec![vllm],
            limits: Limits::default(),
            shutdown: ShutdownConfig::default(),
            vitals: VitalsConfig::default(),
            views: Vec::new(),
            metric_relabel_configs: Vec::new(),
            control: ControlConfig::default(),
            otlp: None,
            incidents: super::IncidentsConfig::default(),
            source: None,
        }
    }
}
