//! Checks and conversions for single values, shared by the file, the environment and flags.
//! Each returns the message for a problem, without its location.

use std::net::IpAddr;
use std::time::Duration;

use super::units::{parse_bytes, parse_duration};
use crate::model::routes;
use crate::model::{Engine, Url, hide_password_in};

pub(crate) fn parse_engine(text: &str) -> Result<Engine, String> {
    Engine::parse(text).ok_or_else(|| {
        let known: Vec<&str> = crate::model::engine::PRESETS
            .iter()
            .map(|p| p.name)
            .collect();
        format!(
            "unknown engine {text:?}: must be one of {}",
            known.join(", ")
        )
    })
}

pub(crate) fn parse_ip(text: &str) -> Result<IpAddr, String> {
    text.trim()
        .parse()
        .map_err(|_| format!("invalid address {text:?}: must be an IP address, like 0.0.0.0 or ::"))
}

pub(crate) fn parse_route(text: &str) -> Result<String, String> {
    if !text.starts_with('/') {
        return Err(format!("invalid path {text:?}: must start with \"/\""));
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '?' || c == '#')
    {
        return Err(format!(
            "invalid path {text:?}: must not contain spaces, \"?\" or \"#\""
        ));
    }
    if text == routes::METRICS {
        return Err(format!(
            "invalid path {text:?}: that route serves the metrics"
        ));
    }
    if text == routes::LIVE_ENGINE {
        return Err(format!(
            "invalid path {text:?}: that route serves the engine container's liveness"
        ));
    }
    Ok(text.to_owned())
}

pub(crate) fn parse_bool(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(format!("invalid value {text:?}: must be true or false")),
    }
}

/// A URL of the configuration; a problem quotes it with its password hidden.
pub(crate) fn parse_url(text: &str) -> Result<Url, String> {
    let shown = hide_password_in(text);
    let url = Url::parse(text.trim()).map_err(|err| format!("invalid URL {shown:?}: {err}"))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "invalid URL {shown:?}: scheme must be http or https, not {}",
            url.scheme()
        ));
    }
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("invalid URL {shown:?}: no host"));
    }
    Ok(url)
}

/// `health_url`: a URL, or `none` (readiness follows scrapes of the metrics URL).
pub(crate) fn parse_health_url(text: &str) -> Result<Option<Url>, String> {
    match text.trim() {
        "none" => Ok(None),
        url => parse_url(url).map(Some),
    }
}

pub(crate) fn positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        Duration::ZERO => Err(format!("invalid duration {text:?}: must be greater than 0")),
        duration => Ok(duration),
    }
}

pub(crate) fn nonzero(n: usize) -> Result<usize, String> {
    match n {
        0 => Err("must be greater than 0".to_owned()),
        n => Ok(n),
    }
}

/// A `keep` prefix that can match some upstream family.
pub(crate) fn keep_prefix(text: &str) -> Result<String, String> {
    let reserved = crate::expfmt::RESERVED_PREFIX;
    match text {
        "" => {
            Err("empty prefix would keep every family: name the prefix, like \"vllm:\"".to_owned())
        }
        prefix if prefix.as_bytes().starts_with(reserved) => Err(format!(
            "prefix {prefix:?} can never match: names under {:?} are sysport's own, and no \
             upstream's are kept",
            String::from_utf8_lossy(reserved)
        )),
        prefix => Ok(prefix.to_owned()),
    }
}

pub(crate) fn check_upstream_name(name: &str) -> Result<String, String> {
    if name.is_empty() {
        return Err("empty upstream name".to_owned());
    }
    if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        return Err(format!(
            "invalid upstream name {name:?}: use only A-Z, a-z, 0-9, \"_\", \".\" and \"-\""
        ));
    }
    Ok(name.to_owned())
}

pub(crate) fn check_label_name(name: &str) -> Result<(), String> {
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!(
            "invalid label name {name:?}: must match [a-zA-Z_][a-zA-Z0-9_]*"
        ));
    }
    if name.starts_with("__") {
        return Err(format!(
            "invalid label name {name:?}: names starting with \"__\" are reserved by Prometheus"
        ));
    }
    Ok(())
}

/// A request-head cap: 1KiB to 1MiB (scrapers send a few hundred bytes; a selective read of
/// many names a few KiB).
/// `listen.max_answer_bytes_held`: at least 1 MiB, or nothing but tiny answers could go out.
pub(crate) fn answer_bytes(text: &str) -> Result<usize, String> {
    let n = parse_bytes(text)?;
    if n < 1 << 20 {
        return Err(format!("invalid size {text:?}: must be at least 1MiB"));
    }
    Ok(n)
}

pub(crate) fn request_head_size(text: &str) -> Result<usize, String> {
    let n = parse_bytes(text)?;
    if !(1 << 10..=1 << 20).contains(&n) {
        return Err(format!("invalid size {text:?}: must be 1KiB to 1MiB"));
    }
    Ok(n)
}
