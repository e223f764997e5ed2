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

/// The format an answer is written in, from the request's `Accept` (q-values honoured; a
/// wildcard alone, no header or nothing sysport writes means text 0.0.4, which every
/// Prometheus-compatible scraper reads; on equal q-values text goes before OpenMetrics).
///
/// The two versions of each format are the same bytes for sysport's pages: what text 1.0.0 and
/// OpenMetrics 1.0.0 add over 0.0.4 and 0.0.1 is quoted UTF-8 names, and every name sysport
/// serves is a legacy one (`[a-zA-Z_:][a-zA-Z0-9_:]*`, label names without `:`). So the answer
/// takes the version asked for, and the escaping scheme asked for (Prometheus 3's
/// `metric_name_escaping_scheme`) is already met: `allow-utf-8`, `underscores` and `values`
/// leave a legacy name as it is. `dots` would not (it doubles every `_`), so that request is
/// answered with `underscores`, which is what the page is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Exposition {
    Text004,
    Text100(Escaping),
    OpenMetrics001,
    /// The escaping is named in the answer only when the request named one (Prometheus 3
    /// does; older scrapers neither send nor expect it).
    OpenMetrics100(Option<Escaping>),
}

/// A metric name escaping scheme an answer can truthfully name (see [`Exposition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Escaping {
    AllowUtf8,
    Underscores,
    Values,
}

impl Escaping {
    /// The scheme a request's `escaping=` parameter asks for, as sysport meets it; `None` for
    /// one it does not know (ignored, as Prometheus' client libraries ignore it).
    fn asked(value: &str) -> Option<Escaping> {
        match value.trim().to_ascii_lowercase().as_str() {
            "allow-utf-8" => Some(Escaping::AllowUtf8),
            "underscores" | "dots" => Some(Escaping::Underscores),
            "values" => Some(Escaping::Values),
            _ => None,
        }
    }
}

impl Exposition {
    /// Whether the body is OpenMetrics (else the text format).
    pub(super) fn is_openmetrics(self) -> bool {
        matches!(
            self,
            Exposition::OpenMetrics001 | Exposition::OpenMetrics100(_)
        )
    }

    pub(super) fn content_type(self) -> HeaderValue {
        use Escaping::*;
        use Exposition::*;
        HeaderValue::from_static(match self {
            Text004 => TEXT_CONTENT_TYPE,
            Text100(AllowUtf8) => "text/plain; version=1.0.0; charset=utf-8; escaping=allow-utf-8",
            Text100(Underscores) => {
                "text/plain; version=1.0.0; charset=utf-8; escaping=underscores"
            }
            Text100(Values) => "text/plain; version=1.0.0; charset=utf-8; escaping=values",
            OpenMetrics001 => "application/openmetrics-text; version=0.0.1; charset=utf-8",
            OpenMetrics100(None) => expfmt::OPENMETRICS_CONTENT_TYPE,
            OpenMetrics100(Some(AllowUtf8)) => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=allow-utf-8"
            }
            OpenMetrics100(Some(Underscores)) => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
            }
            OpenMetrics100(Some(Values)) => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=values"
            }
        })
    }

    /// Which of two formats a request accepting both at the same q-value gets.
    fn tie_rank(self) -> u8 {
        match self {
            Exposition::Text004 => 3,
            Exposition::Text100(_) => 2,
            Exposition::OpenMetrics100(_) => 1,
            Exposition::OpenMetrics001 => 0,
        }
    }
}

/// The format the request's `Accept` header prefers among those sysport writes.
pub(super) fn exposition(headers: &HeaderMap) -> Exposition {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return Exposition::Text004;
    };
    let mut best: Option<(f32, Exposition)> = None;
    for range in accept.split(',') {
        let mut parts = range.split(';').map(str::trim);
        let media = parts.next().unwrap_or("").to_ascii_lowercase();
        let mut q = 1.0f32;
        let mut version = None;
        let mut escaping = None;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "q" => q = v.trim().parse().unwrap_or(0.0),
                    "version" => version = Some(v.trim().to_string()),
                    "escaping" => escaping = Escaping::asked(v),
                    _ => {}
                }
            }
        }
        let format = match (media.as_str(), version.as_deref()) {
            ("application/openmetrics-text", None | Some("1.0.0")) => {
                Exposition::OpenMetrics100(escaping)
            }
            ("application/openmetrics-text", Some("0.0.1")) => Exposition::OpenMetrics001,
            ("text/plain", None | Some("0.0.4")) => Exposition::Text004,
            ("text/plain", Some("1.0.0")) => {
                Exposition::Text100(escaping.unwrap_or(Escaping::Underscores))
            }
            _ => continue,
        };
        if q.is_nan() || q <= 0.0 {
            continue;
        }
        let better = match best {
            None => true,
            Some((bq, bf)) => q > bq || (q == bq && format.tie_rank() > bf.tie_rank()),
        };
        if better {
            best = Some((q, format));
        }
    }
    best.map_or(Exposition::Text004, |(_, f)| f)
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
            exposition(&h).is_openmetrics()
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
        assert_eq!(exposition(&HeaderMap::new()), Exposition::Text004);
    }

    fn format_for(accept: &'static str) -> Exposition {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_static(accept));
        exposition(&h)
    }

    #[test]
    fn prometheus_3_gets_the_version_and_escaping_it_asked_for() {
        use Escaping::*;
        use Exposition::*;
        // Prometheus 3.16's Accept headers (scrape/scrape.go acceptHeader): the default
        // scrape_protocols, then each protocol alone, with the escaping scheme of the job.
        let default = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(format_for(default), OpenMetrics100(Some(AllowUtf8)));
        assert_eq!(
            format_for("application/openmetrics-text;version=0.0.1;q=0.6,*/*;q=0.5"),
            OpenMetrics001
        );
        assert_eq!(
            format_for("text/plain;version=1.0.0;escaping=underscores;q=0.6,*/*;q=0.5"),
            Text100(Underscores)
        );
        assert_eq!(
            format_for("text/plain;version=1.0.0;escaping=allow-utf-8;q=0.6,*/*;q=0.5"),
            Text100(AllowUtf8)
        );
        assert_eq!(
            format_for("text/plain;version=0.0.4;q=0.6,*/*;q=0.5"),
            Text004
        );
        assert_eq!(
            format_for("text/plain;version=1.0.0;escaping=values"),
            Text100(Values)
        );
        // `dots` would double every underscore of a legacy name: the page is `underscores`.
        assert_eq!(
            format_for("text/plain;version=1.0.0;escaping=dots"),
            Text100(Underscores)
        );
        assert_eq!(format_for("text/plain;version=1.0.0"), Text100(Underscores));
        assert_eq!(
            format_for("text/plain;version=1.0.0;escaping=bogus"),
            Text100(Underscores)
        );
        // Prometheus 2.x: no escaping asked, none named.
        assert_eq!(
            format_for(
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
            ),
            OpenMetrics100(None)
        );
        assert_eq!(format_for("text/plain;version=2.0.0"), Text004);
    }

    #[test]
    fn content_types_name_the_version_and_escaping_served() {
        use Escaping::*;
        use Exposition::*;
        let ct = |f: Exposition| f.content_type().to_str().expect("ascii").to_owned();
        assert_eq!(ct(Text004), "text/plain; version=0.0.4; charset=utf-8");
        assert_eq!(
            ct(Text100(Underscores)),
            "text/plain; version=1.0.0; charset=utf-8; escaping=underscores"
        );
        assert_eq!(
            ct(Text100(AllowUtf8)),
            "text/plain; version=1.0.0; charset=utf-8; escaping=allow-utf-8"
        );
        assert_eq!(
            ct(OpenMetrics001),
            "application/openmetrics-text; version=0.0.1; charset=utf-8"
        );
        assert_eq!(
            ct(OpenMetrics100(None)),
            "application/openmetrics-text; version=1.0.0; charset=utf-8"
        );
        assert_eq!(
            ct(OpenMetrics100(Some(Values))),
            "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=values"
        );
        assert!(OpenMetrics001.is_openmetrics() && !Text100(Values).is_openmetrics());
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
