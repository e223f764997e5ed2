//! An upstream's `canary_after` and `canary:`, and Dynamo's `DYN_HEALTH_CHECK_*` names for them:
//! when an idle engine is sent a one-token request, and which one (the engine preset's unless
//! given).
//!
//! Canaries are on by default for every engine whose preset has a generation route of its own
//! ([`crate::model::engine::CanaryPreset::on_by_default`]) on an upstream that keeps the
//! families that tell it idle, after Dynamo's 10 s; `canary_after: 0s` turns them off.
//!
//! Dynamo's semantics (ai-dynamo/dynamo `lib/runtime/src/health_check.rs`,
//! `lib/runtime/src/system_health.rs`, `lib/runtime/src/config.rs`): `DYN_HEALTH_CHECK_ENABLED`
//! turns canaries on (`true`: for every upstream that does not set `canary_after`) or off
//! (`false`, as Dynamo's operator sets it: for every upstream, whatever the file says),
//! `DYN_CANARY_WAIT_TIME` is the idle time in seconds before one (10),
//! `DYN_HEALTH_CHECK_REQUEST_TIMEOUT` the seconds its first answer may take (3), and
//! `DYN_HEALTH_CHECK_PAYLOAD` the request body.

use std::time::Duration;

use serde_saphyr::Spanned;

use crate::config::check::{CheckError, parse_bool, parse_url, positive_duration};
use crate::config::env;
use crate::config::loader::{Loader, Origin};
use crate::config::quote::{quoted, shown};
use crate::config::section::{RawLabels, Text, section};
use crate::config::units::{format_duration, parse_duration};
use crate::model::{Engine, Url};
use crate::stall::config::{StallConfig, unkept};

/// Dynamo's default `DYN_CANARY_WAIT_TIME`.
const DEFAULT_WAIT: Duration = Duration::from_secs(10);
/// Dynamo's default `DYN_HEALTH_CHECK_REQUEST_TIMEOUT`, and `canary.timeout`'s.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(3);
/// Default `canary.live_failures`.
const DEFAULT_LIVE_FAILURES: u32 = 3;

/// Canary requests of one upstream: after `after` of idleness, one one-token request through
/// the engine must answer within `timeout` for the upstream to stay ready (see `crate::canary`).
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryConfig {
    /// Idle time before a canary; more than zero.
    pub after: Duration,
    /// Where the request goes; `{model}` in the path stands for the model.
    pub url: Url,
    /// The JSON body of a `POST` (`{model}` stands for the model as a JSON string); `None`: `GET`.
    pub body: Option<String>,
    /// Headers sent with the request and the model lookup, values expanded.
    pub headers: Vec<(String, String)>,
    /// How long the answer may take, default 3 s.
    pub timeout: Duration,
    /// Failed canaries in a row (with no progress between them) that make `/live/engine` 503;
    /// 0 = never; default 3.
    pub live_failures: u32,
    /// The model; `None`: asked of the engine (vLLM's `GET /v1/models`).
    pub model: Option<String>,
    /// How the answer is judged (the engine's).
    pub answer: crate::model::engine::CanaryAnswer,
    /// The families that tell idle from busy: the stall detection's, or the engine's.
    pub idle: StallConfig,
}

/// What a canary's defaults read of its upstream. A trait, so that the upstream's section (which
/// holds its canary) and this one do not import each other.
pub trait CanaryUpstream {
    /// The engine behind the upstream.
    fn engine(&self) -> Engine;
    /// The metrics URL.
    fn metrics_url(&self) -> &Url;
    /// The health URL, if any: the engine's HTTP origin when there is one.
    fn health_url(&self) -> Option<&Url>;
    /// The family-name prefixes the upstream keeps.
    fn keep(&self) -> &[String];
    /// The upstream's stall detection, if on.
    fn stall(&self) -> Option<&StallConfig>;
}

section! {
    /// `canary:` of an upstream.
    RawCanary {
        /// Where the canary goes, default the engine's on its HTTP origin (the `health_url`'s, or
        /// else the metrics URL's): vLLM `/v1/completions`, SGLang and trtllm-serve
        /// `/health_generate`, Triton `/v2/models/{model}/generate`.
        url: Text,
        /// The JSON body (then a `POST`; `{model}` stands for the model as a JSON string),
        /// default the engine's.
        body: Text,
        /// Headers of the request (`{ Authorization: "Bearer ${API_KEY}" }`).
        headers: RawLabels,
        /// How long the answer may take (`3s`, default 3s).
        timeout: Text,
        /// Failed canaries in a row that make `/live/engine` 503 (default 3; 0 = never).
        live_failures: Text,
        /// The model (default: vLLM asks `GET /v1/models`; Triton `ensemble`).
        model: Text,
    }
}

/// What the file says of one upstream's canary, before the environment.
pub(crate) struct FileCanary {
    /// `canary_after` as written (zero = off); `None` when not written.
    after: Option<Duration>,
    url: Option<Url>,
    body: Option<String>,
    headers: Vec<(String, String)>,
    timeout: Option<Duration>,
    live_failures: Option<u32>,
    model: Option<String>,
}

impl FileCanary {
    /// Nothing written: an upstream of `--upstream`, or the default one.
    pub(crate) fn none() -> FileCanary {
        FileCanary {
            after: None,
            url: None,
            body: None,
            headers: Vec::new(),
            timeout: None,
            live_failures: None,
            model: None,
        }
    }
}

impl Loader<'_> {
    /// Upstream `i`'s `canary_after` and `canary:`; `None` when a problem was recorded.
    pub(crate) fn file_canary(
        &mut self,
        i: usize,
        after: Option<&Text>,
        raw: Option<Spanned<RawCanary>>,
    ) -> Option<FileCanary> {
        let field = |key: &str| format!("upstreams[{i}].{key}");
        let mut ok = true;
        let after = match after {
            None => None,
            Some(text) => {
                let after = self.file_value(Some(text), &field("canary_after"), parse_duration);
                ok &= after.is_some();
                after.map(|(d, _)| d)
            }
        };
        let mut canary = FileCanary {
            after,
            ..FileCanary::none()
        };
        let Some(raw) = raw else {
            return ok.then_some(canary);
        };
        let at = raw.referenced;
        let raw = raw.value;
        self.unknown_keys(&raw.unknown, &field("canary"), RawCanary::FIELDS);
        if ok && after.is_some_and(|d| d.is_zero()) {
            let message = "has no effect: canary_after is 0s (off); remove one of the two";
            self.issue(Origin::File(at), &field("canary"), message);
            ok = false;
        }
        canary.url = self.optional(raw.url.as_ref(), &field("canary.url"), &mut ok, parse_url);
        canary.body = self.optional(
            raw.body.as_ref(),
            &field("canary.body"),
            &mut ok,
            parse_body,
        );
        canary.timeout = self.optional(
            raw.timeout.as_ref(),
            &field("canary.timeout"),
            &mut ok,
            positive_duration,
        );
        canary.live_failures = self.optional(
            raw.live_failures.as_ref(),
            &field("canary.live_failures"),
            &mut ok,
            parse_failures,
        );
        canary.model = self.optional(
            raw.model.as_ref(),
            &field("canary.model"),
            &mut ok,
            parse_model,
        );
        for (name, text) in raw.headers.map(|h| h.0).unwrap_or_default() {
            let key = format!("canary.headers.{}", name.value);
            if let Err(problem) = check_header(&name.value) {
                self.issue(
                    Origin::File(name.referenced),
                    &field(&key),
                    problem.to_string(),
                );
                ok = false;
            }
            match self.expand(&text, &field(&key)) {
                Some(v) if reqwest::header::HeaderValue::from_str(&v).is_ok() => {
                    canary.headers.push((name.value, v));
                }
                Some(_) => {
                    let message = "invalid header value (control characters or non-ASCII)";
                    self.issue(Origin::File(text.referenced), &field(&key), message);
                    ok = false;
                }
                None => ok = false,
            }
        }
        ok.then_some(canary)
    }

    /// The canary of an upstream: the file's, under Dynamo's environment names.
    pub(crate) fn canary(
        &mut self,
        file: FileCanary,
        upstream: &impl CanaryUpstream,
        dynamo: &Dynamo,
    ) -> Option<CanaryConfig> {
        let preset = CanaryConfig::preset(upstream, dynamo.wait);
        // Only where the upstream keeps what tells the engine idle (not LMCache's endpoint).
        let on = match dynamo.enabled {
            Some(enabled) => enabled && unkept(upstream.keep(), &preset.idle).is_empty(),
            None => CanaryConfig::default_for(upstream).is_some(),
        };
        let after = match (dynamo.enabled, file.after) {
            (Some(false), _) => Duration::ZERO,
            (_, Some(after)) => after,
            (_, None) if on => dynamo.wait,
            (_, None) => Duration::ZERO,
        };
        if after.is_zero() {
            return None;
        }
        // The environment over the file, as every DYN_SYSTEM_* name; the payload only where the
        // engine's canary has a body (a GET of /health_generate takes none).
        let body = match &dynamo.payload {
            Some(payload) if file.body.is_some() || preset.body.is_some() => Some(payload.clone()),
            _ => file.body.or(preset.body),
        };
        Some(CanaryConfig {
            after,
            url: file.url.unwrap_or(preset.url),
            body,
            headers: file.headers,
            timeout: dynamo.timeout.or(file.timeout).unwrap_or(preset.timeout),
            live_failures: file.live_failures.unwrap_or(preset.live_failures),
            model: file.model.or(preset.model),
            ..preset
        })
    }

    /// Dynamo's `DYN_HEALTH_CHECK_*` settings, each problem named after its variable.
    pub(crate) fn dynamo(&mut self) -> Dynamo {
        let enabled = self.env_setting(env::DYN_HEALTH_CHECK_ENABLED, parse_bool);
        let wait = self
            .env_setting(env::DYN_CANARY_WAIT_TIME, parse_seconds)
            .unwrap_or(DEFAULT_WAIT);
        let timeout = self.env_setting(env::DYN_HEALTH_CHECK_REQUEST_TIMEOUT, parse_seconds);
        let payload = self.env_setting(env::DYN_HEALTH_CHECK_PAYLOAD, read_payload);
        Dynamo {
            enabled,
            wait,
            timeout,
            payload,
        }
    }
}

impl Loader<'_> {
    /// An optional file value; a problem with it clears `ok`.
    fn optional<T, E: std::fmt::Display>(
        &mut self,
        text: Option<&Text>,
        field: &str,
        ok: &mut bool,
        parse: fn(&str) -> Result<T, E>,
    ) -> Option<T> {
        let parsed = self.file_value(text, field, parse).map(|(v, _)| v);
        *ok &= text.is_none() || parsed.is_some();
        parsed
    }

    /// An environment setting; a problem with it is named after the variable.
    fn env_setting<T, E: std::fmt::Display>(
        &mut self,
        var: &'static str,
        parse: fn(&str) -> Result<T, E>,
    ) -> Option<T> {
        let text = env::setting(self.env(), var)?;
        parse(&text)
            .map_err(|problem| self.issue(Origin::Env(var), var, problem.to_string()))
            .ok()
    }
}

/// Dynamo's environment names for canaries.
pub(crate) struct Dynamo {
    /// `DYN_HEALTH_CHECK_ENABLED`; `None` when unset.
    enabled: Option<bool>,
    wait: Duration,
    timeout: Option<Duration>,
    payload: Option<String>,
}

impl CanaryConfig {
    /// The canaries `upstream` gets when nothing says otherwise: its engine's request after
    /// Dynamo's 10 s of idleness, where the engine has a generation route of its own and the
    /// upstream keeps the families that tell it idle; else none.
    pub fn default_for(upstream: &impl CanaryUpstream) -> Option<CanaryConfig> {
        let canary = CanaryConfig::preset(upstream, DEFAULT_WAIT);
        let on = upstream.engine().canary().on_by_default
            && unkept(upstream.keep(), &canary.idle).is_empty();
        on.then_some(canary)
    }

    /// The engine preset's canary of `upstream` after `after` of idleness: its request on the
    /// engine's HTTP origin (the health URL's, as Triton generates on its HTTP port and not its
    /// metrics port; else the metrics URL's), a 3 s timeout, `live_failures` 3, and the stall
    /// detection's families (else the engine's) to tell idle.
    pub fn preset(upstream: &impl CanaryUpstream, after: Duration) -> CanaryConfig {
        let engine = upstream.engine();
        let preset = engine.canary();
        let mut url = upstream
            .health_url()
            .unwrap_or_else(|| upstream.metrics_url())
            .clone();
        url.set_path(preset.path);
        url.set_query(None);
        CanaryConfig {
            after,
            url,
            body: preset.body.map(str::to_owned),
            headers: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            live_failures: DEFAULT_LIVE_FAILURES,
            model: preset.model.map(str::to_owned),
            answer: preset.answer,
            idle: upstream
                .stall()
                .cloned()
                .unwrap_or_else(|| StallConfig::preset(engine, Duration::ZERO)),
        }
    }
}

/// Why a canary setting was refused; shown after the value's location or variable.
#[derive(Debug, thiserror::Error)]
enum CanaryError {
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error("invalid seconds {0:?}: must be greater than 0")]
    Seconds(String),
    #[error("cannot read the payload file {path:?}: {error}")]
    PayloadFile { path: String, error: std::io::Error },
    #[error("{path}: invalid JSON body: {error}")]
    PayloadFileJson {
        path: String,
        error: serde_json::Error,
    },
    #[error("invalid JSON body: {0}")]
    Body(serde_json::Error),
    #[error("invalid count {0:?}: a whole number, 0 for never")]
    Failures(String),
    #[error("empty model name")]
    EmptyModel,
    #[error("invalid header name {0:?}")]
    HeaderName(String),
}

/// Seconds, as Dynamo writes them (`10`, `2.5`), or a duration (`10s`); more than zero.
fn parse_seconds(text: &str) -> Result<Duration, CanaryError> {
    let seconds = match text.trim().parse::<f64>() {
        Ok(s) if s.is_finite() && s > 0.0 && s < 1e9 => Duration::from_secs_f64(s),
        Ok(_) => return Err(CanaryError::Seconds(text.to_owned())),
        Err(_) => positive_duration(text)?,
    };
    Ok(seconds)
}

/// `DYN_HEALTH_CHECK_PAYLOAD`: inline JSON, or `@/path/file.json`.
fn read_payload(text: &str) -> Result<String, CanaryError> {
    match text.trim().strip_prefix('@') {
        Some(path) => {
            let body = std::fs::read_to_string(path).map_err(|error| CanaryError::PayloadFile {
                path: path.to_owned(),
                error,
            })?;
            check_json(&body).map_err(|error| CanaryError::PayloadFileJson {
                path: path.to_owned(),
                error,
            })?;
            Ok(body.trim().to_owned())
        }
        None => parse_body(text),
    }
}

/// A canary body: JSON once `{model}` stands for a string.
fn parse_body(text: &str) -> Result<String, CanaryError> {
    check_json(text).map_err(CanaryError::Body)?;
    Ok(text.trim().to_owned())
}

fn check_json(text: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<serde_json::Value>(&text.replace("{model}", "\"m\"")).map(|_| ())
}

fn parse_failures(text: &str) -> Result<u32, CanaryError> {
    text.trim()
        .parse()
        .map_err(|_| CanaryError::Failures(text.to_owned()))
}

fn parse_model(text: &str) -> Result<String, CanaryError> {
    match text.trim() {
        "" => Err(CanaryError::EmptyModel),
        model => Ok(model.to_owned()),
    }
}

fn check_header(name: &str) -> Result<(), CanaryError> {
    reqwest::header::HeaderName::from_bytes(name.as_bytes())
        .map(|_| ())
        .map_err(|_| CanaryError::HeaderName(name.to_owned()))
}

/// `canary_after` and `canary:`. Header values are left out: they hold credentials.
pub(crate) fn render(
    f: &mut std::fmt::Formatter<'_>,
    canary: Option<&CanaryConfig>,
) -> std::fmt::Result {
    let Some(canary) = canary else {
        return writeln!(f, "    canary_after: 0s");
    };
    writeln!(f, "    canary_after: {}", format_duration(canary.after))?;
    writeln!(f, "    canary:")?;
    writeln!(f, "      url: {}", shown(&canary.url))?;
    if let Some(body) = &canary.body {
        writeln!(f, "      body: {}", quoted(body))?;
    }
    writeln!(f, "      timeout: {}", format_duration(canary.timeout))?;
    writeln!(f, "      live_failures: {}", canary.live_failures)?;
    if let Some(model) = &canary.model {
        writeln!(f, "      model: {}", quoted(model))?;
    }
    if !canary.headers.is_empty() {
        let names: Vec<&str> = canary.headers.iter().map(|(n, _)| n.as_str()).collect();
        writeln!(
            f,
            "      # headers (values not shown): {}",
            names.join(", ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
