//! Dynamo's control and inventory routes, forwarded to each engine's own (docs/control.md):
//! - `/engine/{name}`: an engine-neutral name mapped to the engine's route
//!   (`model::control`), the body passed through, the engine's answer passed back with its
//!   status ([`engine`]);
//! - `/v1/loras`: adapters listed, loaded and unloaded in Dynamo's shapes ([`lora`]);
//! - `/metadata`: what each upstream is, read from the engine and kept ([`metadata`]).
//!
//! Who may ask is the server's to decide (the web configuration's authentication); which
//! `/engine` names and whether `/v1/loras` are served is the configuration's (Dynamo's
//! variables). Every call to an engine goes through [`forward`]: a timeout, a bounded answer,
//! at most a few in flight, one log line.

pub(crate) mod config;
pub mod engine;
pub mod forward;
pub mod lora;
pub mod metadata;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use bytes::Bytes;

use crate::config::{Config, UpstreamConfig};
use crate::incidents::Incidents;
use crate::model::control::Method;
use crate::model::{ShownUrl, Url};
use crate::scrape::Scraper;
use forward::{Answer, CallError, Gate};

/// A request to a control route, as the server read it.
#[derive(Debug, Clone)]
pub struct Call {
    /// Who asks: the basic-auth user, the client certificate, or the peer's address.
    pub who: String,
    pub method: axum::http::Method,
    pub path: String,
    pub query: Option<String>,
    pub body: Bytes,
}

impl Call {
    /// The value of query parameter `key`, when given.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .as_deref()?
            .split('&')
            .filter_map(|pair| pair.split_once('=').or(Some((pair, ""))))
            .find(|(k, _)| *k == key)
            .map(|(_, v)| v)
    }

    /// The query without `upstream=`, to pass on to the engine.
    fn passed_query(&self) -> Option<String> {
        let rest: Vec<&str> = self
            .query
            .as_deref()?
            .split('&')
            .filter(|pair| !pair.is_empty() && !pair.starts_with("upstream="))
            .collect();
        (!rest.is_empty()).then(|| rest.join("&"))
    }
}

/// sysport's answer to a control route.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: StatusCode,
    pub content_type: String,
    pub body: Bytes,
}

impl Reply {
    /// A JSON answer.
    pub fn json(status: StatusCode, value: &serde_json::Value) -> Reply {
        Reply {
            status,
            content_type: "application/json".to_owned(),
            body: Bytes::from(value.to_string()),
        }
    }

    /// Dynamo's error shape (`{"error","message"}`).
    pub fn error(status: StatusCode, error: &str, message: impl std::fmt::Display) -> Reply {
        Reply::json(
            status,
            &serde_json::json!({"error": error, "message": message.to_string()}),
        )
    }

    /// The engine's answer as it gave it.
    fn passed(answer: Answer) -> Reply {
        Reply {
            status: answer.status,
            content_type: answer
                .content_type
                .unwrap_or_else(|| "application/octet-stream".to_owned()),
            body: answer.body,
        }
    }
}

/// The control routes of one configuration.
#[derive(Debug)]
pub struct Control {
    config: Config,
    client: reqwest::Client,
    gate: Gate,
    metadata: Arc<metadata::Cache>,
    /// The configuration's scraper: the cache configuration is read through it.
    scraper: Arc<Scraper>,
    /// Where the engines' restarts are seen: `/metadata` reads an engine again after one.
    incidents: Arc<Incidents>,
}

impl Control {
    /// The control routes of `config`; `metadata` must be one of `scraper`'s recorders.
    pub(crate) fn new(
        config: &Config,
        client: reqwest::Client,
        scraper: Arc<Scraper>,
        metadata: Arc<metadata::Cache>,
        incidents: Arc<Incidents>,
    ) -> Control {
        Control {
            scraper,
            incidents,
            metadata,
            config: config.clone(),
            client,
            gate: Gate::default(),
        }
    }

    /// Whether `/v1/loras` is served (`DYN_LORA_ENABLED`).
    pub fn lora_enabled(&self) -> bool {
        self.config.control.lora
    }

    /// Whether a port without authentication may serve the control routes.
    pub fn allows_unauthenticated(&self) -> bool {
        self.config.control.allow_unauthenticated
    }

    /// The upstream `?upstream=` names, else the first that `fits`; an error reply when the
    /// named one does not exist or none fits.
    fn upstream(
        &self,
        call: &Call,
        fits: impl Fn(&UpstreamConfig) -> bool,
        what: &str,
    ) -> Result<usize, Reply> {
        let upstreams = &self.config.upstreams;
        match call.param("upstream") {
            Some(name) => upstreams
                .iter()
                .position(|u| u.name == name)
                .ok_or_else(|| {
                    Reply::error(
                        StatusCode::NOT_FOUND,
                        "Upstream not found",
                        format!("no upstream is named {name:?}"),
                    )
                }),
            None => upstreams.iter().position(fits).ok_or_else(|| {
                Reply::error(
                    StatusCode::NOT_FOUND,
                    "Route not found",
                    format!("no upstream's engine serves {what}"),
                )
            }),
        }
    }

    /// Calls `path` (with its query) on upstream `u`'s engine, logs the call, and returns the
    /// engine's answer.
    async fn forward(
        &self,
        call: &Call,
        route: &str,
        u: usize,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Answer, CallError> {
        let upstream = &self.config.upstreams[u];
        let url = engine_url(upstream, path);
        let started = Instant::now();
        let result = match self.gate.enter() {
            Ok(_permit) => {
                forward::call(
                    &self.client,
                    method,
                    url.clone(),
                    body,
                    self.config.control.timeout,
                    forward::MAX_ANSWER_BYTES,
                )
                .await
            }
            Err(busy) => Err(busy),
        };
        let status = match &result {
            Ok(answer) => answer.status.as_u16().to_string(),
            Err(err) => err.to_string(),
        };
        tracing::info!(
            who = %call.who,
            route,
            upstream = %upstream.name,
            url = %ShownUrl(&url),
            status,
            duration_ms = started.elapsed().as_millis() as u64,
            "control call"
        );
        result
    }

    /// The configuration's check interval: how old `/metadata` may be.
    fn interval(&self) -> Duration {
        self.config.health.interval
    }
}

/// Where upstream `u`'s engine serves `path`: the origin of its health URL when it has one
/// (Triton's HTTP port, apart from its metrics port), else of its metrics URL.
pub fn engine_url(upstream: &UpstreamConfig, path: &str) -> Url {
    let base = upstream.health_url.as_ref().unwrap_or(&upstream.url);
    let mut url = base.clone();
    let (path, query) = path
        .split_once('?')
        .map_or((path, None), |(p, q)| (p, Some(q)));
    url.set_path(path);
    url.set_query(query);
    url.set_fragment(None);
    url
}
