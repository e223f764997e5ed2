//! Checks and conversions for single values, shared by the file, the environment and flags.
//! Each fails with the problem, without its location (which the loader adds).

use std::net::IpAddr;
use std::time::Duration;

use super::units::{UnitError, parse_bytes, parse_duration};
use crate::model::routes;
use crate::model::{Engine, Url, hide_password_in};

/// Why a single value was refused; shown after the value's location.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CheckError {
    #[error(transparent)]
    Unit(#[from] UnitError),
    #[error("unknown engine {text:?}: must be one of {known}")]
    UnknownEngine { text: String, known: String },
    #[error("invalid address {0:?}: must be an IP address, like 0.0.0.0 or ::")]
    Address(String),
    #[error("invalid path {0:?}: must start with \"/\"")]
    PathStart(String),
    #[error("invalid path {0:?}: must not contain spaces, \"?\" or \"#\"")]
    PathCharacters(String),
    #[error("invalid path {0:?}: that route serves the metrics")]
    PathOfMetrics(String),
    #[error("invalid path {0:?}: that route serves the engine container's liveness")]
    PathOfEngineLiveness(String),
    #[error("invalid value {0:?}: must be true or false")]
    Bool(String),
    /// The URL parser's own words, as its error type is not one sysport names.
    #[error("invalid URL {shown:?}: {reason}")]
    Url { shown: String, reason: String },
    #[error("invalid URL {shown:?}: scheme must be http or https, not {scheme}")]
    UrlScheme { shown: String, scheme: String },
    #[error("invalid URL {0:?}: no host")]
    UrlHost(String),
    #[error("invalid duration {0:?}: must be greater than 0")]
    ZeroDuration(String),
    #[error("must be greater than 0")]
    Zero,
    #[error("empty prefix would keep every family: name the prefix, like \"vllm:\"")]
    EmptyPrefix,
    #[error(
        "prefix {prefix:?} can never match: names under {reserved:?} are sysport's own, and no \
         upstream's are kept"
    )]
    ReservedPrefix { prefix: String, reserved: String },
    #[error("empty {0} name")]
    EmptyName(&'static str),
    #[error("invalid {what} name {name:?}: use only A-Z, a-z, 0-9, \"_\", \".\" and \"-\"")]
    Name { what: &'static str, name: String },
    #[error("invalid label name {0:?}: must match [a-zA-Z_][a-zA-Z0-9_]*")]
    LabelName(String),
    #[error("invalid label name {0:?}: names starting with \"__\" are reserved by Prometheus")]
    ReservedLabelName(String),
    #[error("invalid size {0:?}: must be at least 1MiB")]
    AnswerBytes(String),
    #[error("invalid size {0:?}: must be 1KiB to 1MiB")]
    RequestHeadSize(String),
}

pub(crate) fn parse_engine(text: &str) -> Result<Engine, CheckError> {
    Engine::parse(text).ok_or_else(|| {
        let known: Vec<&str> = crate::model::engine::PRESETS
            .iter()
            .map(|p| p.name)
            .collect();
        CheckError::UnknownEngine {
            text: text.to_owned(),
            known: known.join(", "),
        }
    })
}

pub(crate) fn parse_ip(text: &str) -> Result<IpAddr, CheckError> {
    text.trim()
        .parse()
        .map_err(|_| CheckError::Address(text.to_owned()))
}

pub(crate) fn parse_route(text: &str) -> Result<String, CheckError> {
    if !text.starts_with('/') {
        return Err(CheckError::PathStart(text.to_owned()));
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
    {
        return Err(CheckError::PathCharacters(text.to_owned()));
    }
    if text == routes::METRICS {
        return Err(CheckError::PathOfMetrics(text.to_owned()));
    }
    if text == routes::LIVE_ENGINE {
        return Err(CheckError::PathOfEngineLiveness(text.to_owned()));
    }
    Ok(text.to_owned())
}

pub(crate) fn parse_bool(text: &str) -> Result<bool, CheckError> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(CheckError::Bool(text.to_owned())),
    }
}

/// A URL of the configuration; a problem quotes it with its password hidden.
pub(crate) fn parse_url(text: &str) -> Result<Url, CheckError> {
    let shown = hide_password_in(text).into_owned();
    let url = Url::parse(text.trim()).map_err(|error| CheckError::Url {
        shown: shown.clone(),
        reason: error.to_string(),
    })?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(CheckError::UrlScheme {
            shown,
            scheme: url.scheme().to_owned(),
        });
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(CheckError::UrlHost(shown));
    }
    Ok(url)
}

/// `health_url`: a URL, or `none` (readiness follows scrapes of the metrics URL).
pub(crate) fn parse_health_url(text: &str) -> Result<Option<Url>, CheckError> {
    match text.trim() {
        "none" => Ok(None),
        url => parse_url(url).map(Some),
    }
}

pub(crate) fn positive_duration(text: &str) -> Result<Duration, CheckError> {
    match parse_duration(text)? {
        Duration::ZERO => Err(CheckError::ZeroDuration(text.to_owned())),
        duration => Ok(duration),
    }
}

pub(crate) fn nonzero(n: usize) -> Result<usize, CheckError> {
    match n {
        0 => Err(CheckError::Zero),
        n => Ok(n),
    }
}

/// A `keep` prefix that can match some upstream family.
pub(crate) fn keep_prefix(text: &str) -> Result<String, CheckError> {
    let reserved = crate::expfmt::RESERVED_PREFIX;
    match text {
        "" => Err(CheckError::EmptyPrefix),
        prefix if prefix.as_bytes().starts_with(reserved) => Err(CheckError::ReservedPrefix {
            prefix: prefix.to_owned(),
            reserved: String::from_utf8_lossy(reserved).into_owned(),
        }),
        prefix => Ok(prefix.to_owned()),
    }
}

pub(crate) fn check_upstream_name(name: &str) -> Result<String, CheckError> {
    check_name(name, "upstream")
}

/// A name made of `A-Z a-z 0-9 _ . -` (an upstream's label value, a view's path); `what` names
/// it in the problem.
pub(crate) fn check_name(name: &str, what: &'static str) -> Result<String, CheckError> {
    if name.is_empty() {
        return Err(CheckError::EmptyName(what));
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return Err(CheckError::Name {
            what,
            name: name.to_owned(),
        });
    }
    Ok(name.to_owned())
}

pub(crate) fn check_label_name(name: &str) -> Result<(), CheckError> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(CheckError::LabelName(name.to_owned()));
    }
    if name.starts_with("__") {
        return Err(CheckError::ReservedLabelName(name.to_owned()));
    }
    Ok(())
}

/// `listen.max_answer_bytes_held`: at least 1 MiB, or nothing but tiny answers could go out.
pub(crate) fn answer_bytes(text: &str) -> Result<usize, CheckError> {
    let n = parse_bytes(text)?;
    if n < 1 << 20 {
        return Err(CheckError::AnswerBytes(text.to_owned()));
    }
    Ok(n)
}

/// A request-head cap: 1KiB to 1MiB (scrapers send a few hundred bytes; a selective read of
/// many names a few KiB).
pub(crate) fn request_head_size(text: &str) -> Result<usize, CheckError> {
    let n = parse_bytes(text)?;
    if !(1 << 10..=1 << 20).contains(&n) {
        return Err(CheckError::RequestHeadSize(text.to_owned()));
    }
    Ok(n)
}
