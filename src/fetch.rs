//! One GET of an upstream: the request sysport makes, what makes an answer unusable
//! ([`ScrapeError`], whose `reason()` is the `result` label), and the body, read and decoded
//! within the body limit into a reused block, with the format it is in.
//!
//! The scrape target is exactly the configured URL: a redirect is an error, not followed.
//! Bodies are decoded here ([`crate::decode`]), not by the HTTP client.

use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::{Bytes, BytesMut};

use crate::config::Url;
use crate::decode::{self, DecodeError, Decoder};
use crate::expfmt::Format;

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
    #[error("response over the {limit} limit")]
    TooLarge { limit: &'static str },
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
            ScrapeError::TooLarge { .. } => "too_large",
            ScrapeError::Body(_) => "body_error",
            ScrapeError::NotExposition { .. } => "not_exposition",
            ScrapeError::Request(_) => "request_error",
        }
    }

    /// Classifies a client error.
    pub fn from_reqwest(err: reqwest::Error, timeout: Duration) -> ScrapeError {
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

    fn from_decode(err: DecodeError) -> ScrapeError {
        match err {
            DecodeError::OverLimit => ScrapeError::TooLarge { limit: "body size" },
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

/// The HTTP client sysport uses for upstreams and health checks.
pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .user_agent(concat!("sysport/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
        .pool_idle_timeout(Duration::from_secs(60))
        // A redirect would make sysport scrape a target the configuration does not name and
        // serve its series under the configured one: it is an error instead (`from_status`).
        .redirect(reqwest::redirect::Policy::none())
        // Bodies are decoded by sysport (`decode`): the client's own decoding looks at the
        // first Content-Encoding value only.
        .no_gzip()
        .build()
        .expect("the HTTP client builds with static settings")
}

/// The blocks of one URL's last bodies, newest first, for the next body to take one that
/// nothing points into any more (the responses that served it have been sent, and it is not
/// the prior): a fresh 16 MB block costs four thousand page faults on every fetch.
#[derive(Debug, Default)]
pub(crate) struct Buffers {
    /// Decoded length of the last body of unknown length (a compressed one), 0 before it.
    last_len: AtomicUsize,
    spare: Mutex<Vec<BytesMut>>,
}

/// Blocks kept in [`Buffers`]: the prior's, and the one before it, free again.
const SPARE_BLOCKS: usize = 2;

impl Buffers {
    /// A buffer for a body of `expected` bytes (at most `max_body`), or of unknown length.
    fn take(&self, expected: Option<usize>, max_body: usize) -> BytesMut {
        // A compressed body's decoded length is not known before it has been read: start from
        // the last body of the same URL, with room to grow, so that a 16 MB page is not built
        // by doubling a 64 KiB buffer eight times, each step a new block and a copy.
        let last = self.last_len.load(Ordering::Relaxed);
        let guess = (last > 0).then(|| last + last / 64);
        let want = expected.or(guess).unwrap_or(64 << 10).min(max_body);
        let mut buf = {
            let mut spare = self.spare.lock().expect("spare buffer lock");
            match spare.iter_mut().position(|b| b.try_reclaim(want)) {
                Some(i) => spare.swap_remove(i),
                None => BytesMut::new(),
            }
        };
        if buf.capacity() > 4 * want.max(64 << 10) {
            // The page shrank a lot: do not hold on to the old block.
            buf = BytesMut::new();
        }
        // Reuses the block when the last body is gone, else allocates a new one.
        buf.reserve(want);
        buf
    }

    /// The body read into `buf`; the block is kept for a later body.
    fn keep(&self, mut buf: BytesMut, unknown_length: bool) -> Bytes {
        if unknown_length {
            self.last_len.store(buf.len(), Ordering::Relaxed);
        }
        let body = buf.split().freeze();
        let mut spare = self.spare.lock().expect("spare buffer lock");
        spare.insert(0, buf);
        spare.truncate(SPARE_BLOCKS);
        body
    }
}

/// An upstream's body and what its response said of it.
pub(crate) struct Fetched {
    pub(crate) body: Bytes,
    /// As the body reads ([`Format::detect`]).
    pub(crate) format: Format,
    pub(crate) content_type: Option<String>,
    /// The Content-Type names the other exposition format than the body's.
    pub(crate) mislabelled: bool,
}

/// One GET of an upstream's metrics, body read and decoded up to `max_body` decoded bytes.
pub(crate) async fn get(
    client: &reqwest::Client,
    url: &Url,
    buffers: &Buffers,
    timeout: Duration,
    max_body: usize,
) -> Result<Fetched, ScrapeError> {
    let mut resp = client
        .get(url.clone())
        // Never forward the scraper's Accept: prometheus_client mis-renders names with `:` as
        // OpenMetrics (client_python#1177), so ask for the text format.
        .header(
            reqwest::header::ACCEPT,
            "text/plain;version=0.0.4;q=1,*/*;q=0.1",
        )
        .header(reqwest::header::ACCEPT_ENCODING, "gzip")
        .timeout(timeout)
        .send()
        .await
        .map_err(|e| ScrapeError::from_reqwest(e, timeout))?;
    if !resp.status().is_success() {
        return Err(ScrapeError::from_status(&resp));
    }
    let headers = resp.headers();
    let codings = decode::codings(
        headers
            .get_all(reqwest::header::CONTENT_ENCODING)
            .iter()
            .map(|v| v.as_bytes()),
    )
    .map_err(ScrapeError::from_decode)?;
    let content_type = headers
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // The length a response declares is the encoded one.
    let expected = resp
        .content_length()
        .filter(|_| codings.is_empty())
        .map(|n| n as usize);
    if expected.is_some_and(|n| n > max_body) {
        return Err(ScrapeError::TooLarge { limit: "body size" });
    }
    let mut buf = buffers.take(expected, max_body);
    let chunk_error = |e| ScrapeError::from_reqwest(e, timeout);
    if codings.is_empty() {
        while let Some(chunk) = resp.chunk().await.map_err(chunk_error)? {
            if buf.len() + chunk.len() > max_body {
                return Err(ScrapeError::TooLarge { limit: "body size" });
            }
            buf.extend_from_slice(&chunk);
        }
    } else {
        let mut decoder = Decoder::new(&codings, &mut buf, max_body);
        while let Some(chunk) = resp.chunk().await.map_err(chunk_error)? {
            decoder.write(&chunk).map_err(ScrapeError::from_decode)?;
        }
        decoder.finish().map_err(ScrapeError::from_decode)?;
    }
    let body = buffers.keep(buf, expected.is_none());
    let format = Format::detect(&body);
    let mislabelled = content_type
        .as_deref()
        .and_then(Format::declared)
        .is_some_and(|declared| declared != format);
    Ok(Fetched {
        body,
        format,
        content_type,
        mislabelled,
    })
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
    }

    #[tokio::test]
    async fn a_closed_port_is_connection_refused() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind loopback");
            l.local_addr().expect("addr").port()
        };
        let url = Url::parse(&format!("http://127.0.0.1:{port}/metrics")).expect("url");
        let err = get(
            &http_client(),
            &url,
            &Buffers::default(),
            Duration::from_secs(2),
            1 << 20,
        )
        .await
        .err()
        .expect("nothing listens there");
        assert!(matches!(err, ScrapeError::Refused), "{err:?}");
        assert_eq!(err.to_string(), "connection refused");
    }
}
