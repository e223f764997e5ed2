//! What a request asks for: its time budget (Prometheus' scrape timeout), the families it names
//! (`?name=`), and the format it prefers (`Accept`).

use std::time::Duration;

use axum::http::{HeaderMap, HeaderValue, header};

use crate::expfmt::{self, TEXT_CONTENT_TYPE};

/// The time an upstream may take for this request: Prometheus' scrape timeout minus a margin
/// for merging and sending, so the answer arrives before the scraper gives up.
pub(super) fn budget(headers: &HeaderMap) -> Option<Duration> {
    let secs: f64 = headers
        .get("x-prometheus-scrape-timeout-seconds")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()?;
    if !secs.is_finite() || secs <= 0.0 {
        return None;
    }
    let margin = (secs * 0.1).clamp(0.05, 0.5);
    // A value no Duration holds (from about 1.8e19 s) gives no budget, as a malformed one does:
    // the upstreams' own timeouts still bound the scrape.
    Duration::try_from_secs_f64((secs - margin).max(0.01)).ok()
}

/// At most this many `name` parameters in one read.
const MAX_NAMES: usize = 256;

/// `?name=a&name=b` → the requested family names (percent-decoded); `None` for the whole page,
/// which a query without any parameter (`?`, `?&`) asks for too. `name[]` (prometheus_client's
/// spelling) is accepted as well. Anything else is refused with a message, rather than silently
/// answered with the whole page.
pub(super) fn requested_names(query: Option<&str>) -> Result<Option<Vec<String>>, NamesError> {
    let Some(query) = query.filter(|q| !q.is_empty()) else {
        return Ok(None);
    };
    let url = reqwest::Url::parse(&format!("http://q/?{query}")).map_err(|err| {
        NamesError::Unreadable {
            query: query.to_owned(),
            reason: err.to_string(),
        }
    })?;
    let mut names = Vec::new();
    for (key, value) in url.query_pairs() {
        if key != "name" && key != "name[]" {
            return Err(NamesError::UnknownParameter(key.into_owned()));
        }
        if !expfmt::is_metric_name(value.as_bytes()) {
            return Err(NamesError::NotAName(value.into_owned()));
        }
        if names.len() == MAX_NAMES {
            return Err(NamesError::TooMany);
        }
        names.push(value.into_owned());
    }
    Ok((!names.is_empty()).then_some(names))
}

/// Why a `?name=` query is refused (400). What the client sent is shown escaped (newlines,
/// control characters, quotes), never as it was decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum NamesError {
    #[error("unreadable query `{}`: {reason}", .query.escape_debug())]
    Unreadable { query: String, reason: String },
    #[error(
        "unknown query parameter `{}`: /metrics takes only `name` (repeatable), e.g. \
         /metrics?name=vllm:num_requests_waiting&name=vllm:kv_cache_usage_perc",
        .0.escape_debug()
    )]
    UnknownParameter(String),
    #[error(
        "`name={}` is not a metric family name ([a-zA-Z_:][a-zA-Z0-9_:]*)",
        .0.escape_debug()
    )]
    NotAName(String),
    #[error("more than {MAX_NAMES} `name` parameters")]
    TooMany,
}

/// Whether the Accept header prefers OpenMetrics to the text format (q-values honoured; a
/// wildcard alone means text, which every Prometheus-compatible scraper reads).
pub(super) fn wants_openmetrics(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let (mut q_om, mut q_text) = (0.0f32, 0.0f32);
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        let mut version = None;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => q = v.trim().parse().unwrap_or(0.0),
                    "version" => version = Some(v.trim().to_string()),
                    _ => {}
                }
            }
        }
        match media.as_str() {
            "application/openmetrics-text"
                if matches!(version.as_deref(), None | Some("1.0.0") | Some("0.0.1")) =>
            {
                q_om = q_om.max(q)
            }
            "text/plain" => q_text = q_text.max(q),
            _ => {}
        }
    }
    q_om > 0.0 && q_om > q_text
}

pub(super) fn content_type(openmetrics: bool) -> HeaderValue {
    HeaderValue::from_static(if openmetrics {
        expfmt::OPENMETRICS_CONTENT_TYPE
    } else {
        TEXT_CONTENT_TYPE
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn budget_leaves_a_margin_below_prometheus_timeout() {
        let mut h = HeaderMap::new();
        assert_eq!(budget(&h), None);
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("10"),
        );
        assert_eq!(budget(&h), Some(Duration::from_secs_f64(9.5)));
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("1"),
        );
        assert_eq!(budget(&h), Some(Duration::from_secs_f64(0.9)));
        h.insert(
            "x-prometheus-scrape-timeout-seconds",
            HeaderValue::from_static("junk"),
        );
        assert_eq!(budget(&h), None);
    }

    #[test]
    fn accept_negotiation_follows_q_values() {
        let accept = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(header::ACCEPT, HeaderValue::from_static(v));
            wants_openmetrics(&h)
        };
        assert!(accept(
            "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2"
        ));
        assert!(accept("application/openmetrics-text"));
        assert!(!accept(
            "text/plain;version=0.0.4;q=0.9,application/openmetrics-text;q=0.5"
        ));
        assert!(!accept("*/*"));
        assert!(!accept("application/openmetrics-text;q=0"));
        assert!(!accept("application/openmetrics-text;version=2.0.0"));
        assert!(!wants_openmetrics(&HeaderMap::new()));
    }

    #[test]
    fn names_are_percent_decoded_and_repeatable() {
        assert_eq!(
            requested_names(Some(
                "name=vllm%3Anum_requests_running&name[]=vllm:kv_cache_usage_perc"
            )),
            Ok(Some(vec![
                "vllm:num_requests_running".to_string(),
                "vllm:kv_cache_usage_perc".to_string()
            ]))
        );
        assert_eq!(requested_names(None), Ok(None));
        assert_eq!(requested_names(Some("")), Ok(None));
    }

    #[test]
    fn bad_query_parameters_are_refused_with_the_reason() {
        let err = |q: &str| requested_names(Some(q)).expect_err(q).to_string();
        assert!(err("x=1").contains("unknown query parameter `x`"));
        assert!(err("name=vllm:a&match[]=up").contains("unknown query parameter `match[]`"));
        assert!(err("name=").contains("`name=` is not a metric family name"));
        assert!(err("name=vllm:a&name=1abc").contains("`name=1abc`"));
        assert!(err("name=vllm%20a").contains("`name=vllm a`"));
        assert!(err("name").contains("`name=`"));
        let many = vec!["name=a"; MAX_NAMES + 1].join("&");
        assert!(err(&many).contains("more than 256"));
        assert!(requested_names(Some(&vec!["name=a"; MAX_NAMES].join("&"))).is_ok());
    }

    #[test]
    fn a_refused_name_is_echoed_escaped() {
        // A newline and an escape sequence, percent-encoded: the answer must not carry them raw
        // (a terminal or a log reading the 400 would take them as its own).
        let err = requested_names(Some("name=x%0Aforged%1B%5B31m%22"))
            .expect_err("not a name")
            .to_string();
        assert_eq!(
            err,
            "`name=x\\nforged\\u{1b}[31m\\\"` is not a metric family name ([a-zA-Z_:][a-zA-Z0-9_:]*)"
        );
        assert!(!err.contains(['\n', '\u{1b}']));
        let err = requested_names(Some("x%E2%80%A8y=1"))
            .expect_err("unknown")
            .to_string();
        assert!(
            err.starts_with("unknown query parameter `x\\u{2028}y`"),
            "{err}"
        );
    }

    #[test]
    fn a_timeout_header_no_duration_holds_gives_no_budget() {
        let budget_of = |v: &'static str| {
            let mut h = HeaderMap::new();
            h.insert(
                "x-prometheus-scrape-timeout-seconds",
                HeaderValue::from_static(v),
            );
            budget(&h)
        };
        for v in [
            "1e20", "1.85e19", "1e308", "inf", "-inf", "NaN", "-1", "0", "-0", "1e-400",
        ] {
            assert_eq!(budget_of(v), None, "{v}");
        }
        assert_eq!(budget_of("1e9"), Some(Duration::from_secs_f64(1e9 - 0.5)));
        assert_eq!(budget_of(" 15 "), Some(Duration::from_secs_f64(14.5)));
    }
}
