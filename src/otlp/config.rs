//! The `otlp:` section and the OpenTelemetry variables NVIDIA Dynamo reads: OTLP push of the
//! `/metrics` page, off unless `OTEL_METRICS_EXPORTER=otlp` (or `otlp.exporter: otlp`).
//!
//! Each setting is taken from the metrics-specific variable, else the generic one, else the
//! file, else the OpenTelemetry default (the specification's "Exporter configuration" page).
//! Only the generic endpoint of http/protobuf gets `/v1/metrics` appended; the metrics-specific
//! one and the file's are used as given.

use std::path::PathBuf;
use std::time::Duration;

use crate::config::check::CheckError;
use crate::config::env;
use crate::config::loader::{Loader, Origin};
use crate::config::section::{Text, section};
use crate::model::Url;

/// The wire protocol of OTLP export.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OtlpProtocol {
    /// `grpc`: `opentelemetry.proto.collector.metrics.v1.MetricsService/Export` (Dynamo's).
    Grpc,
    /// `http/protobuf`: `POST` of the protobuf request to `/v1/metrics`.
    HttpProtobuf,
}

/// How counters and histograms are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Temporality {
    /// The totals since the series started (default).
    Cumulative,
    /// The change since the last export that reached the receiver.
    Delta,
}

/// OTLP push, when on.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpConfig {
    /// Where requests go: for http/protobuf the whole URL, for gRPC its origin.
    pub endpoint: Url,
    pub protocol: OtlpProtocol,
    /// Sent with every request, in order.
    pub headers: Vec<(String, String)>,
    /// gzip the request body.
    pub gzip: bool,
    /// How long one request may take, default 10 s (and never more than the interval).
    pub timeout: Duration,
    /// PEM CA certificates the receiver's certificate must chain to (else the system's roots).
    pub certificate: Option<PathBuf>,
    /// PEM private key of the client certificate (mTLS), with `client_certificate`.
    pub client_key: Option<PathBuf>,
    /// PEM client certificate chain (mTLS), with `client_key`.
    pub client_certificate: Option<PathBuf>,
    /// Time between exports, default 60 s.
    pub interval: Duration,
    pub temporality: Temporality,
    /// The resource's attributes, `service.name` first.
    pub resource: Vec<(String, String)>,
    /// Requests larger than this (encoded, before gzip) are split in halves; `None`: only when
    /// the receiver says a request is too large.
    pub max_request_bytes: Option<usize>,
}

impl std::fmt::Display for OtlpProtocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OtlpProtocol::Grpc => "grpc",
            OtlpProtocol::HttpProtobuf => "http/protobuf",
        })
    }
}

impl std::fmt::Display for Temporality {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Temporality::Cumulative => "cumulative",
            Temporality::Delta => "delta",
        })
    }
}

section! {
    /// `otlp:` section; each field is overridden by its OpenTelemetry variable.
    RawOtlp {
        /// `otlp` to push, `none` (default) not to; `OTEL_METRICS_EXPORTER`.
        exporter: Text,
        /// The receiver's URL, used as given (`http://collector:4317`, or for http/protobuf
        /// `http://collector:4318/v1/metrics`); `OTEL_EXPORTER_OTLP[_METRICS]_ENDPOINT`.
        endpoint: Text,
        /// `grpc` (default) or `http/protobuf`; `OTEL_EXPORTER_OTLP[_METRICS]_PROTOCOL`.
        protocol: Text,
        /// Request headers as `key=value,key2=value2` (percent-encoded where needed);
        /// `OTEL_EXPORTER_OTLP[_METRICS]_HEADERS`.
        headers: Text,
        /// `gzip` or `none` (default); `OTEL_EXPORTER_OTLP[_METRICS]_COMPRESSION`.
        compression: Text,
        /// How long one request may take (`10s`, default 10s, at most the interval);
        /// `OTEL_EXPORTER_OTLP[_METRICS]_TIMEOUT` in milliseconds.
        timeout: Text,
        /// PEM CA certificates for the receiver; `OTEL_EXPORTER_OTLP[_METRICS]_CERTIFICATE`.
        certificate: Text,
        /// PEM client key (mTLS); `OTEL_EXPORTER_OTLP[_METRICS]_CLIENT_KEY`.
        client_key: Text,
        /// PEM client certificate (mTLS); `OTEL_EXPORTER_OTLP[_METRICS]_CLIENT_CERTIFICATE`.
        client_certificate: Text,
        /// Time between exports (`60s`, default 60s); `OTEL_METRIC_EXPORT_INTERVAL` in
        /// milliseconds.
        interval: Text,
        /// `cumulative` (default) or `delta`;
        /// `OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE`.
        temporality: Text,
        /// `service.name` of the resource (default `sysport`); `OTEL_SERVICE_NAME`.
        service_name: Text,
        /// More resource attributes as `key=value,...`; `OTEL_RESOURCE_ATTRIBUTES`.
        resource_attributes: Text,
        /// Requests larger than this (`4MiB`) are split in halves; default: only when the
        /// receiver answers that one is too large.
        max_request_bytes: Text,
    }
}

pub const OTEL_METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
pub const OTEL_EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub const OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
pub const OTEL_METRIC_EXPORT_INTERVAL: &str = "OTEL_METRIC_EXPORT_INTERVAL";
pub const OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: &str =
    "OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE";
pub const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
pub const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// The settings with a generic and a metrics-specific variable: (metrics, generic).
const PROTOCOL: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
    "OTEL_EXPORTER_OTLP_PROTOCOL",
);
const HEADERS: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
    "OTEL_EXPORTER_OTLP_HEADERS",
);
const COMPRESSION: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
);
const TIMEOUT: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
);
const CERTIFICATE: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
);
const CLIENT_KEY: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY",
    "OTEL_EXPORTER_OTLP_CLIENT_KEY",
);
const CLIENT_CERTIFICATE: (&str, &str) = (
    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
);

/// Default request timeout (the specification's `OTEL_EXPORTER_OTLP_TIMEOUT`).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default interval (`OTEL_METRIC_EXPORT_INTERVAL`).
const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

impl Loader<'_> {
    /// The OTLP settings; `None` when export is off.
    pub(crate) fn otlp(&mut self, raw: Option<RawOtlp>) -> Option<OtlpConfig> {
        let raw = raw.unwrap_or_default();
        self.unknown_keys(&raw.unknown, "otlp", RawOtlp::FIELDS);
        let file_on = self
            .file_value(raw.exporter.as_ref(), "otlp.exporter", parse_exporter)
            .map(|(on, _)| on);
        let on = match env::setting(self.env(), OTEL_METRICS_EXPORTER) {
            Some(text) => match parse_exporter(&text) {
                Ok(on) => on,
                Err(message) => {
                    self.issue(Origin::Env(OTEL_METRICS_EXPORTER), "", message.to_string());
                    false
                }
            },
            None => file_on.unwrap_or(false),
        };
        if !on {
            return None;
        }
        let protocol = self
            .pick(
                PROTOCOL,
                raw.protocol.as_ref(),
                "otlp.protocol",
                parse_protocol,
            )
            .unwrap_or(OtlpProtocol::Grpc);
        let endpoint = self.endpoint(raw.endpoint.as_ref(), protocol)?;
        let headers = self
            .pick(
                HEADERS,
                raw.headers.as_ref(),
                "otlp.headers",
                parse_header_list,
            )
            .unwrap_or_default();
        let gzip = self
            .pick(
                COMPRESSION,
                raw.compression.as_ref(),
                "otlp.compression",
                parse_compression,
            )
            .unwrap_or(false);
        let interval = self.single(
            OTEL_METRIC_EXPORT_INTERVAL,
            raw.interval.as_ref(),
            "otlp.interval",
            DEFAULT_INTERVAL,
        );
        let timeout = match self.pick(TIMEOUT, None, "otlp.timeout", parse_ms) {
            Some(t) => t,
            None => self
                .file_value(raw.timeout.as_ref(), "otlp.timeout", positive)
                .map_or(DEFAULT_TIMEOUT, |(t, _)| t),
        };
        let path = |t: &str| -> Result<PathBuf, String> { Ok(PathBuf::from(t.trim())) };
        let certificate = self.pick(
            CERTIFICATE,
            raw.certificate.as_ref(),
            "otlp.certificate",
            path,
        );
        let client_key = self.pick(CLIENT_KEY, raw.client_key.as_ref(), "otlp.client_key", path);
        let client_certificate = self.pick(
            CLIENT_CERTIFICATE,
            raw.client_certificate.as_ref(),
            "otlp.client_certificate",
            path,
        );
        if client_key.is_some() != client_certificate.is_some() {
            self.issue(
                Origin::Default,
                "otlp.client_key",
                "a client key and a client certificate go together: set both or neither",
            );
        }
        for file in [&certificate, &client_key, &client_certificate]
            .into_iter()
            .flatten()
        {
            if let Err(err) = std::fs::metadata(file) {
                self.issue(
                    Origin::Default,
                    "otlp",
                    format!("cannot read {}: {err}", file.display()),
                );
            }
        }
        let temporality = self
            .pick(
                (OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE, ""),
                raw.temporality.as_ref(),
                "otlp.temporality",
                parse_temporality,
            )
            .unwrap_or(Temporality::Cumulative);
        let max_request_bytes = self
            .file_value(
                raw.max_request_bytes.as_ref(),
                "otlp.max_request_bytes",
                crate::config::units::parse_bytes,
            )
            .map(|(n, _)| n);
        let resource = self.resource(raw.service_name.as_ref(), raw.resource_attributes.as_ref());
        Some(OtlpConfig {
            endpoint,
            protocol,
            headers,
            gzip,
            timeout: timeout.min(interval),
            certificate,
            client_key,
            client_certificate,
            interval,
            temporality,
            resource,
            max_request_bytes,
        })
    }

    /// The metrics-specific variable, else the generic one, else the file's value.
    fn pick<T, E: std::fmt::Display>(
        &mut self,
        (metrics, generic): (&'static str, &'static str),
        file: Option<&Text>,
        field: &str,
        parse: impl Fn(&str) -> Result<T, E>,
    ) -> Option<T> {
        for var in [metrics, generic] {
            if var.is_empty() {
                continue;
            }
            if let Some(text) = env::setting(self.env(), var) {
                return match parse(&text) {
                    Ok(value) => Some(value),
                    Err(problem) => {
                        self.issue(Origin::Env(var), var, problem.to_string());
                        None
                    }
                };
            }
        }
        self.file_value(file, field, parse).map(|(value, _)| value)
    }

    /// A duration set in milliseconds by `var` or as a duration in the file.
    fn single(
        &mut self,
        var: &'static str,
        file: Option<&Text>,
        field: &str,
        default: Duration,
    ) -> Duration {
        if let Some(text) = env::setting(self.env(), var) {
            match parse_ms(&text) {
                Ok(d) => return d,
                Err(problem) => self.issue(Origin::Env(var), var, problem.to_string()),
            }
        }
        self.file_value(file, field, positive)
            .map_or(default, |(d, _)| d)
    }

    fn endpoint(&mut self, file: Option<&Text>, protocol: OtlpProtocol) -> Option<Url> {
        let specific = OTEL_EXPORTER_OTLP_METRICS_ENDPOINT;
        let generic = OTEL_EXPORTER_OTLP_ENDPOINT;
        let (url, append) = if let Some(text) = env::setting(self.env(), specific) {
            (self.env_url(specific, &text)?, false)
        } else if let Some(text) = env::setting(self.env(), generic) {
            (self.env_url(generic, &text)?, true)
        } else if let Some((url, _)) = self.file_value(file, "otlp.endpoint", parse_endpoint) {
            (url, false)
        } else {
            let default = match protocol {
                OtlpProtocol::Grpc => "http://localhost:4317",
                OtlpProtocol::HttpProtobuf => "http://localhost:4318/v1/metrics",
            };
            (Url::parse(default).expect("a valid default"), false)
        };
        Some(match (protocol, append) {
            (OtlpProtocol::HttpProtobuf, true) => with_metrics_path(url),
            _ => url,
        })
    }

    fn env_url(&mut self, var: &'static str, text: &str) -> Option<Url> {
        match parse_endpoint(text) {
            Ok(url) => Some(url),
            Err(problem) => {
                self.issue(Origin::Env(var), var, problem.to_string());
                None
            }
        }
    }

    /// `service.name` from `OTEL_SERVICE_NAME`, else `OTEL_RESOURCE_ATTRIBUTES`, else the file,
    /// else `sysport`; then the other attributes (the environment's over the file's).
    fn resource(
        &mut self,
        service: Option<&Text>,
        attributes: Option<&Text>,
    ) -> Vec<(String, String)> {
        let mut attrs: Vec<(String, String)> = self
            .file_value(attributes, "otlp.resource_attributes", parse_headers)
            .map(|(a, _)| a)
            .unwrap_or_default();
        if let Some(text) = env::setting(self.env(), OTEL_RESOURCE_ATTRIBUTES) {
            match parse_headers(&text) {
                Ok(env_attrs) => {
                    for (k, v) in env_attrs {
                        attrs.retain(|(key, _)| *key != k);
                        attrs.push((k, v));
                    }
                }
                Err(problem) => self.issue(
                    Origin::Env(OTEL_RESOURCE_ATTRIBUTES),
                    OTEL_RESOURCE_ATTRIBUTES,
                    problem.to_string(),
                ),
            }
        }
        let file_service = self
            .file_value(service, "otlp.service_name", |t| {
                Ok::<_, std::convert::Infallible>(t.trim().to_owned())
            })
            .map(|(s, _)| s);
        let from_attrs = attrs
            .iter()
            .position(|(k, _)| k == "service.name")
            .map(|i| attrs.remove(i).1);
        let name = env::setting(self.env(), OTEL_SERVICE_NAME)
            .or(from_attrs)
            .or(file_service)
            .unwrap_or_else(|| "sysport".to_owned());
        let mut resource = vec![("service.name".to_owned(), name)];
        resource.extend(attrs);
        resource
    }
}

/// Why an OTLP setting was refused; shown after its variable or the value's location.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum OtlpError {
    #[error(transparent)]
    Check(#[from] CheckError),
    #[error("unknown metrics exporter {0:?}: sysport exports `otlp`, or `none` for no export")]
    Exporter(String),
    #[error("unknown OTLP protocol {0:?}: must be grpc or http/protobuf")]
    Protocol(String),
    #[error("unknown compression {0:?}: must be gzip or none")]
    Compression(String),
    #[error("unknown temporality preference {0:?}: must be cumulative or delta")]
    Temporality(String),
    #[error("invalid value {0:?}: must be a whole number of milliseconds above 0")]
    Milliseconds(String),
    #[error("entry {entry} {text:?} is not key=value (a list of key=value, separated by commas)")]
    NotKeyValue { entry: usize, text: String },
    #[error("entry {entry}: {error}")]
    Entry { entry: usize, error: PercentError },
    #[error("entry {0} has an empty key")]
    EmptyKey(usize),
    #[error("{0:?} is not a valid header name")]
    HeaderName(String),
    #[error("the value of {0:?} is not a valid header value")]
    HeaderValue(String),
}

/// A percent-encoded key or value that does not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum PercentError {
    #[error("bad percent escape in {0:?}")]
    Escape(String),
    #[error("{0:?} does not decode to UTF-8")]
    Utf8(String),
}

fn parse_exporter(text: &str) -> Result<bool, OtlpError> {
    match text.trim() {
        "otlp" => Ok(true),
        "none" => Ok(false),
        other => Err(OtlpError::Exporter(other.to_owned())),
    }
}

fn parse_protocol(text: &str) -> Result<OtlpProtocol, OtlpError> {
    match text.trim() {
        "grpc" => Ok(OtlpProtocol::Grpc),
        "http/protobuf" => Ok(OtlpProtocol::HttpProtobuf),
        other => Err(OtlpError::Protocol(other.to_owned())),
    }
}

fn parse_compression(text: &str) -> Result<bool, OtlpError> {
    match text.trim() {
        "gzip" => Ok(true),
        "none" | "" => Ok(false),
        other => Err(OtlpError::Compression(other.to_owned())),
    }
}

fn parse_temporality(text: &str) -> Result<Temporality, OtlpError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "cumulative" => Ok(Temporality::Cumulative),
        "delta" => Ok(Temporality::Delta),
        other => Err(OtlpError::Temporality(other.to_owned())),
    }
}

fn parse_endpoint(text: &str) -> Result<Url, CheckError> {
    crate::config::check::parse_url(text)
}

/// Milliseconds, as the OpenTelemetry variables give durations; more than zero.
fn parse_ms(text: &str) -> Result<Duration, OtlpError> {
    match text.trim().parse::<u64>() {
        Ok(0) | Err(_) => Err(OtlpError::Milliseconds(text.to_owned())),
        Ok(ms) => Ok(Duration::from_millis(ms)),
    }
}

fn positive(text: &str) -> Result<Duration, CheckError> {
    crate::config::check::positive_duration(text)
}

/// The W3C Baggage-like list of `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_RESOURCE_ATTRIBUTES`:
/// `key=value` entries separated by commas, each split on its first `=`, both sides
/// percent-decoded and trimmed.
fn parse_headers(text: &str) -> Result<Vec<(String, String)>, OtlpError> {
    let mut out = Vec::new();
    for (i, entry) in text.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = entry.split_once('=') else {
            return Err(OtlpError::NotKeyValue {
                entry: i + 1,
                text: entry.trim().to_owned(),
            });
        };
        let in_entry = |error| OtlpError::Entry {
            entry: i + 1,
            error,
        };
        let key = percent_decode(key.trim()).map_err(in_entry)?;
        let value = percent_decode(value.trim()).map_err(in_entry)?;
        if key.is_empty() {
            return Err(OtlpError::EmptyKey(i + 1));
        }
        out.push((key, value));
    }
    Ok(out)
}

/// [`parse_headers`], each key a valid HTTP header name and each value a valid header value.
fn parse_header_list(text: &str) -> Result<Vec<(String, String)>, OtlpError> {
    let headers = parse_headers(text)?;
    for (key, value) in &headers {
        if axum::http::HeaderName::from_bytes(key.as_bytes()).is_err() {
            return Err(OtlpError::HeaderName(key.clone()));
        }
        if axum::http::HeaderValue::from_str(value).is_err() {
            return Err(OtlpError::HeaderValue(key.clone()));
        }
    }
    Ok(headers)
}

fn percent_decode(text: &str) -> Result<String, PercentError> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| PercentError::Escape(text.to_owned()))?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| PercentError::Utf8(text.to_owned()))
}

/// The generic endpoint's URL with the metrics signal's path appended.
fn with_metrics_path(mut url: Url) -> Url {
    let path = format!("{}/v1/metrics", url.path().trim_end_matches('/'));
    url.set_path(&path);
    url
}

/// The `otlp:` section as `check-config` prints it: header values as `***` (they often hold
/// a token).
pub(crate) fn render(
    otlp: Option<&OtlpConfig>,
    f: &mut std::fmt::Formatter<'_>,
) -> std::fmt::Result {
    use crate::config::units::{format_bytes, format_duration};
    use std::fmt::Write as _;
    let Some(o) = otlp else {
        return writeln!(f, "otlp:\n  exporter: none");
    };
    let list = |pairs: &mut dyn Iterator<Item = (&str, &str)>| {
        let mut out = String::new();
        for (k, v) in pairs {
            let _ = write!(out, "{}{k}={v}", if out.is_empty() { "" } else { "," });
        }
        format!("{out:?}")
    };
    writeln!(f, "otlp:")?;
    writeln!(f, "  exporter: otlp")?;
    writeln!(f, "  endpoint: {}", crate::model::ShownUrl(&o.endpoint))?;
    writeln!(f, "  protocol: {}", o.protocol)?;
    let mut masked = o.headers.iter().map(|(k, _)| (k.as_str(), "***"));
    writeln!(f, "  headers: {}", list(&mut masked))?;
    writeln!(f, "  compression: {}", if o.gzip { "gzip" } else { "none" })?;
    writeln!(f, "  timeout: {}", format_duration(o.timeout))?;
    for (name, path) in [
        ("certificate", &o.certificate),
        ("client_key", &o.client_key),
        ("client_certificate", &o.client_certificate),
    ] {
        if let Some(path) = path {
            writeln!(f, "  {name}: {:?}", path.display().to_string())?;
        }
    }
    writeln!(f, "  interval: {}", format_duration(o.interval))?;
    writeln!(f, "  temporality: {}", o.temporality)?;
    let (service, rest) = o
        .resource
        .split_first()
        .expect("service.name is always set");
    writeln!(f, "  service_name: {:?}", service.1)?;
    let mut attrs = rest.iter().map(|(k, v)| (k.as_str(), v.as_str()));
    writeln!(f, "  resource_attributes: {}", list(&mut attrs))?;
    if let Some(n) = o.max_request_bytes {
        writeln!(f, "  max_request_bytes: {}", format_bytes(n))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
