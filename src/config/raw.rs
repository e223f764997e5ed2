//! The configuration file as written: every value a string with its position, checked and
//! converted later (see `build`), so that each problem names its line and column.
//!
//! Every value may hold `${VAR}` references (see `expand`). In a flow mapping such as
//! `labels: { worker_id: "${POD_NAME}" }` quote the value: `{` and `}` end a flow mapping.

use std::fmt;

use serde::Deserialize;
use serde::de::{MapAccess, Visitor};
use serde_saphyr::Spanned;

use super::relabel::RawRules;

/// A scalar value as written in the file, with its position.
pub(crate) type Text = Spanned<String>;

/// The whole file. Every section is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    /// Where the system port listens.
    pub(crate) listen: Option<RawListen>,
    /// Readiness (`/health`) and liveness (`/live`) settings.
    pub(crate) health: Option<RawHealth>,
    /// Labels added to every engine series that lacks them, in this order
    /// (`{ worker_id: "${POD_NAME}" }`).
    pub(crate) labels: Option<RawLabels>,
    /// The engine endpoints to scrape, in order. Without this section (and without
    /// `--upstream`), sysport scrapes vLLM at `http://127.0.0.1:8000/metrics`.
    pub(crate) upstreams: Option<Spanned<Vec<Spanned<RawUpstream>>>>,
    /// Resource limits applied to every upstream response.
    pub(crate) limits: Option<RawLimits>,
    /// Graceful shutdown.
    pub(crate) shutdown: Option<RawShutdown>,
    /// Prometheus `metric_relabel_configs` applied to every engine series, after the
    /// upstream's own.
    pub(crate) metric_relabel_configs: Option<RawRules>,
}

/// `listen:` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawListen {
    /// IP address to listen on, default `0.0.0.0`; `DYN_SYSTEM_HOST` and `--host` override it.
    pub(crate) host: Option<Text>,
    /// TCP port, default 8081 (0 asks the OS for a free port); `DYN_SYSTEM_PORT` and `--port`
    /// override it.
    pub(crate) port: Option<Text>,
}

/// `health:` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawHealth {
    /// Readiness route, default `/health`; `DYN_SYSTEM_HEALTH_PATH` overrides it.
    pub(crate) path: Option<Text>,
    /// Liveness route, default `/live`; `DYN_SYSTEM_LIVE_PATH` overrides it. Must differ from
    /// `path`: liveness never depends on the engine's health.
    pub(crate) live_path: Option<Text>,
    /// Readiness before the first health check: `notready` (default) or `ready`;
    /// `DYN_SYSTEM_STARTING_HEALTH_STATUS` overrides it.
    pub(crate) starting_status: Option<Text>,
    /// How often each upstream's health is checked (`5s`, default 5s); more than zero.
    pub(crate) interval: Option<Text>,
}

/// One entry of `upstreams:`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawUpstream {
    /// Unique name, made of `A-Z a-z 0-9 _ . -`; the `upstream` label of sysport's own metrics.
    pub(crate) name: Option<Text>,
    /// The Prometheus endpoint, `http://` or `https://`. Several upstreams may share a URL: it
    /// is fetched once per scrape.
    pub(crate) url: Option<Text>,
    /// Family-name prefixes to keep, default `["vllm:", "lmcache:"]`; not empty.
    pub(crate) keep: Option<Spanned<Vec<Text>>>,
    /// Per-scrape timeout (`2s`, default 2s), further capped by Prometheus' scrape timeout; more
    /// than zero.
    pub(crate) timeout: Option<Text>,
    /// Health URL checked every `health.interval`; without one, readiness follows the last
    /// scrape.
    pub(crate) health_url: Option<Text>,
    /// Whether readiness needs this upstream (`true`, default, or `false`).
    pub(crate) required: Option<Text>,
    /// Reuse a fetch younger than this (`0s`, default: always fetch). Bounds the load that
    /// frequent readers such as inference gateways put on the engine.
    pub(crate) min_interval: Option<Text>,
    /// Prometheus `metric_relabel_configs` applied to this upstream's series before they are
    /// served (then the top-level ones), with Prometheus' meaning.
    pub(crate) metric_relabel_configs: Option<RawRules>,
}

/// `limits:` section. Sizes take a plain number of bytes or a unit (`512KiB`, `16MiB`).
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawLimits {
    /// Largest upstream body after decompression, default `16MiB`. Over it, the upstream is
    /// down for that scrape.
    pub(crate) max_body_bytes: Option<Text>,
    /// Longest line of an upstream body, default `1MiB`.
    pub(crate) max_line_bytes: Option<Text>,
    /// Most series kept from one upstream, default 250000.
    pub(crate) max_series: Option<Text>,
    /// Most metric families (distinct names) from one upstream, default 20000; vLLM exposes a
    /// few hundred. Each costs far more than a series, so this bounds memory separately.
    pub(crate) max_families: Option<Text>,
    /// Most labels on one series, default 64.
    pub(crate) max_labels: Option<Text>,
    /// Longest label value, default `512KiB`.
    pub(crate) max_label_value_bytes: Option<Text>,
}

/// `shutdown:` section.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawShutdown {
    /// After SIGTERM, `/health` answers 503 at once and the listener keeps serving this long
    /// (`5s`, default 5s) so load balancers stop sending traffic first.
    pub(crate) drain_delay: Option<Text>,
}

/// `labels:` as an ordered list of (name, value); the parser rejects duplicate names.
#[derive(Debug, Default)]
pub(crate) struct RawLabels(pub(crate) Vec<(Text, Text)>);

impl<'de> Deserialize<'de> for RawLabels {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct LabelsVisitor;

        impl<'de> Visitor<'de> for LabelsVisitor {
            type Value = RawLabels;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of label name to value")
            }

            fn visit_unit<E: serde::de::Error>(self) -> Result<RawLabels, E> {
                Ok(RawLabels::default())
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawLabels, A::Error> {
                let mut labels = Vec::new();
                while let Some(name) = map.next_key()? {
                    labels.push((name, map.next_value()?));
                }
                Ok(RawLabels(labels))
            }
        }

        deserializer.deserialize_map(LabelsVisitor)
    }
}
