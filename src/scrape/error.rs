//! Why an upstream could not be used for a scrape: [`ScrapeError`], whose `reason()` is the
//! `result` label of `dynamo_sysport_upstream_scrapes_total`.

use std::time::Duration;

use super::decode::DecodeError;
use crate::expfmt::ParseError;

/// Why an upstream could not be used for a scrape. `reason()` is the `result` label.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScrapeError {
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("connection refused")]
    Refused,
    #[error("cannot connect: {0}")]
    Connect(String),
    #[error("connection reset or closed mid-response: {0}")]
    Reset(String),
    #[error("HTTP {}", status_words(*.0))]
    Status(u16),
    #[error(
        "redirect to {location} (HTTP {status}), not followed: the scrape target is the configured URL"
    )]
    Redirect { status: u16, location: String },
    /// The body, decoded, is longer than `limits.max_body_bytes`.
    #[error("response over the max_body_bytes limit of {0} bytes")]
    BodyTooLarge(usize),
    /// The body went over one of the parse's limits: which, and at which line.
    #[error("response over the parse limits, {0}")]
    Parse(#[from] ParseError),
    #[error("reading the response failed: {0}")]
    Body(String),
    #[error(
        "not an exposition ({}): no line reads as a sample or a family, {malformed} lines are \
         unreadable; expected the Prometheus text format 0.0.4 (text/plain; version=0.0.4) or \
         OpenMetrics (application/openmetrics-text)",
        content_type.as_deref().unwrap_or("no Content-Type")
    )]
    NotExposition {
        /// The response's Content-Type, when it had one.
        content_type: Option<String>,
        malformed: u64,
    },
    #[error("request failed: {0}")]
    Request(String),
}

impl ScrapeError {
    /// The `result` label value of `dynamo_sysport_upstream_scrapes_total`.
    pub fn reason(&self) -> &'static str {
        match self {
            ScrapeError::Timeout(_) => "timeout",
            ScrapeError::Refused | ScrapeError::Connect(_) => "connect_error",
            ScrapeError::Reset(_) => "reset",
            ScrapeError::Status(_) => "http_status",
            ScrapeError::Redirect { .. } => "redirect",
            ScrapeError::BodyTooLarge(_) | ScrapeError::Parse(_) => "too_large",
            ScrapeError::Body(_) => "body_error",
            ScrapeError::NotExposition { .. } => "not_exposition",
            ScrapeError::Request(_) => "request_error",
        }
    }

    /// Classifies a client error. Its text never holds the URL: reqwest's would, password
    /// included, and the error is shown in the log, `/health` and the status page.
    pub fn from_reqwest(err: reqwest::Error, timeout: Duration) -> ScrapeError {
        let err = err.without_url();
        if err.is_timeout() {
            ScrapeError::Timeout(timeout)
        } else if err.is_connect() && io_kind(&err) == Some(std::io::ErrorKind::ConnectionRefused) {
            ScrapeError::Refused
        } else if err.is_connect() {
            ScrapeError::Connect(root_cause(&err))
        } else if was_reset(&err) {
            ScrapeError::Reset(root_cause(&err))
        } else if err.is_body() || err.is_decode() {
            ScrapeError::Body(root_cause(&err))
        } else {
            ScrapeError::Request(root_cause(&err))
        }
    }

    /// Whether the connection `err` came on closed (or was reset) before any answer, after it
    /// was made: not a connection that could not be made, nor a timeout.
    pub(super) fn closed_before_answer(err: &reqwest::Error) -> bool {
        !err.is_connect() && !err.is_timeout() && was_reset(err)
    }

    /// A response that is not a success: a redirect, which is never followed (the scrape
    /// target is exactly the configured URL), or another status.
    pub fn from_status(resp: &reqwest::Response) -> ScrapeError {
        let status = resp.status();
        match resp.headers().get(reqwest::header::LOCATION) {
            Some(location) if status.is_redirection() => ScrapeError::Redirect {
                status: status.as_u16(),
                location: String::from_utf8_lossy(location.as_bytes()).into_owned(),
            },
            _ => ScrapeError::Status(status.as_u16()),
        }
    }

    pub(super) fn from_decode(err: DecodeError, max_body: usize) -> ScrapeError {
        match err {
            DecodeError::OverLimit => ScrapeError::BodyTooLarge(max_body),
            err => ScrapeError::Body(err.to_string()),
        }
    }
}

/// `500 Internal Server Error`, or the bare code when it has no standard reason phrase.
fn status_words(code: u16) -> String {
    match reqwest::StatusCode::from_u16(code)
        .ok()
        .and_then(|s| s.canonical_reason())
    {
        Some(reason) => format!("{code} {reason}"),
        None => code.to_string(),
    }
}

/// `err` and its sources, outermost first.
fn chain<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source())
}

/// The kind of the first I/O error in `err`'s chain.
fn io_kind(err: &(dyn std::error::Error + 'static)) -> Option<std::io::ErrorKind> {
    chain(err).find_map(|e| e.downcast_ref::<std::io::Error>().map(std::io::Error::kind))
}

/// Whether the peer reset or closed the connection after it was established.
fn was_reset(err: &(dyn std::error::Error + 'static)) -> bool {
    chain(err).any(|e| {
        e.downcast_ref::<std::io::Error>().is_some_and(|io| {
            matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionReset
                    | std::io::ErrorKind::ConnectionAborted
                    | std::io::ErrorKind::BrokenPipe
                    | std::io::ErrorKind::UnexpectedEof
            )
        }) || e
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_incomplete_message)
    })
}

fn root_cause(err: &(dyn std::error::Error + 'static)) -> String {
    chain(err).last().unwrap_or(err).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_read_as_words_an_operator_knows() {
        let text = |e: ScrapeError| e.to_string();
        assert_eq!(
            text(ScrapeError::Timeout(Duration::from_secs(2))),
            "timed out after 2s"
        );
        assert_eq!(
            text(ScrapeError::Timeout(Duration::from_millis(250))),
            "timed out after 250ms"
        );
        assert_eq!(text(ScrapeError::Refused), "connection refused");
        assert_eq!(
            text(ScrapeError::Status(500)),
            "HTTP 500 Internal Server Error"
        );
        assert_eq!(text(ScrapeError::Status(599)), "HTTP 599");
        assert!(
            text(ScrapeError::Redirect {
                status: 302,
                location: "http://10.0.0.1/login".into()
            })
            .starts_with("redirect to http://10.0.0.1/login (HTTP 302), not followed")
        );
        let json = ScrapeError::NotExposition {
            content_type: Some("application/json".into()),
            malformed: 3,
        };
        assert!(text(json).starts_with("not an exposition (application/json): "));
        let bare = ScrapeError::NotExposition {
            content_type: None,
            malformed: 1,
        };
        assert!(text(bare).starts_with("not an exposition (no Content-Type): "));
        assert_eq!(ScrapeError::Refused.reason(), "connect_error");
        // A limit keeps which it was and where.
        let over = ScrapeError::from(ParseError::TooLarge {
            limit: crate::expfmt::Limit::Series,
            line: 4097,
        });
        assert_eq!(
            text(over.clone()),
            "response over the parse limits, line 4097: more series than the max_series limit"
        );
        assert_eq!(over.reason(), "too_large");
        assert_eq!(
            text(ScrapeError::BodyTooLarge(16 << 20)),
            "response over the max_body_bytes limit of 16777216 bytes"
        );
    }
}
