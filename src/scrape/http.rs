//! One GET of an upstream: the request sysport makes, and the body, read and decoded within the
//! body limit into a reused block ([`BodyBlocks`]), with the format it is in.
//!
//! The scrape target is exactly the configured URL: a redirect is an error, not followed.
//! Bodies are decoded here ([`super::decode`]), not by the HTTP client.

use std::time::Duration;

use bytes::Bytes;

use super::blocks::BodyBlocks;
use super::decode::{self, Decoder};
use super::error::ScrapeError;
use crate::expfmt::Format;
use crate::model::Url;

/// How long an idle connection to an upstream is kept for the next request: less than the 5 s
/// after which the engines' servers close one.
const IDLE_CONNECTION: Duration = Duration::from_secs(4);

/// The HTTP client sysport uses for upstreams and health checks.
pub(crate) fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .user_agent(concat!("sysport/", env!("CARGO_PKG_VERSION")))
        .no_proxy()
        .tcp_nodelay(true)
        .connect_timeout(Duration::from_secs(2))
        // Engines close a keep-alive connection idle 5 s (uvicorn under vLLM and SGLang,
        // cpp-httplib under llama-server): one kept longer would take the next request just
        // as the engine closes it, and with checks every 5 s (the default) each check would
        // race that close and now and then fail ("connection reset or closed mid-response").
        // Idle 4 s, it is dropped and the request goes out on a new connection instead.
        .pool_idle_timeout(IDLE_CONNECTION)
        .pool_max_idle_per_host(IDLE_PER_UPSTREAM)
        // A redirect would make sysport scrape a target the configuration does not name and
        // serve its series under the configured one: it is an error instead (`from_status`).
        .redirect(reqwest::redirect::Policy::none())
        // Bodies are decoded by sysport (`decode`): the client's own decoding looks at the
        // first Content-Encoding value only.
        .no_gzip()
        .build()
        .expect("the HTTP client builds with static settings")
}

/// How many idle connections to one upstream (scheme, host and port) are kept: a check, a
/// scrape, a canary and a forwarded request can be in flight at once.
const IDLE_PER_UPSTREAM: usize = 4;

/// How many times a GET goes out again after its connection closed before any answer: after
/// every idle connection the pool holds, a new one.
const RESENDS: usize = IDLE_PER_UPSTREAM;

/// Sends `request`, a GET, and again on another connection when the one it went out on closed
/// before any answer: at most [`RESENDS`] times, as many as the idle connections kept, so that
/// the last goes out on a new one unless another request gave one back meanwhile.
///
/// A kept-alive connection can close as a request goes out on it: the engine's idle timer fires
/// (uvicorn's and cpp-httplib's 5 s) while the request is on its way, or sysport was off the CPU
/// between taking the connection from the pool and writing on it, and the engine closed it
/// meanwhile. The engine did not answer that request, and a GET is idempotent: it is sent again,
/// as Go's `net/http` does on a reused connection, instead of counting the engine down. A
/// connection that cannot be made, and a timeout, are not sent again.
pub(crate) async fn send_get(
    mut request: reqwest::RequestBuilder,
) -> reqwest::Result<reqwest::Response> {
    for _ in 0..RESENDS {
        let Some(again) = request.try_clone() else {
            break;
        };
        match request.send().await {
            Err(err) if ScrapeError::closed_before_answer(&err) => {
                tracing::debug!(
                    error = %err.without_url(),
                    "connection closed before an answer; sending the GET again"
                );
                request = again;
            }
            sent => return sent,
        }
    }
    request.send().await
}

/// An upstream's body and what its response said of it.
pub(super) struct Fetched {
    pub(super) body: Bytes,
    /// As the body reads ([`Format::detect`]).
    pub(super) format: Format,
    pub(super) content_type: Option<String>,
    /// The Content-Type names the other exposition format than the body's.
    pub(super) mislabelled: bool,
}

/// One GET of an upstream's metrics, asking for it gzip-compressed when `gzip`, body read and
/// decoded up to `max_body` decoded bytes (compressed or not, whatever was asked); the caller
/// bounds it in time (`timeout` names the bound in its errors).
pub(super) async fn get(
    client: &reqwest::Client,
    url: &Url,
    blocks: &BodyBlocks,
    gzip: bool,
    timeout: Duration,
    max_body: usize,
) -> Result<Fetched, ScrapeError> {
    let mut resp = send_get(
        client
            .get(url.clone())
            // Never forward the scraper's Accept: prometheus_client mis-renders names with `:` as
            // OpenMetrics (client_python#1177), so ask for the text format.
            .header(
                reqwest::header::ACCEPT,
                "text/plain;version=0.0.4;q=1,*/*;q=0.1",
            )
            .header(
                reqwest::header::ACCEPT_ENCODING,
                if gzip { "gzip" } else { "identity" },
            ),
    )
    // No timeout of the client's own: the caller's (`deadline::within`) bounds the whole fetch,
    // body included, and does not count sysport's own lateness against the engine.
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
    .map_err(|e| ScrapeError::from_decode(e, max_body))?;
    let content_type = headers
        .get(reqwest::header::CONTENT_TYPE)
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned());
    // The length a response declares is the encoded one.
    let expected = resp
        .content_length()
        .filter(|_| codings.is_empty())
        .map(|n| n as usize);
    if expected.is_some_and(|n| n > max_body) {
        return Err(ScrapeError::BodyTooLarge(max_body));
    }
    let mut buf = blocks.take(expected, max_body);
    let chunk_error = |e| ScrapeError::from_reqwest(e, timeout);
    if codings.is_empty() {
        while let Some(chunk) = resp.chunk().await.map_err(chunk_error)? {
            if buf.len() + chunk.len() > max_body {
                return Err(ScrapeError::BodyTooLarge(max_body));
            }
            buf.extend_from_slice(&chunk);
        }
    } else {
        let mut decoder = Decoder::new(&codings, &mut buf, max_body);
        while let Some(chunk) = resp.chunk().await.map_err(chunk_error)? {
            decoder
                .write(&chunk)
                .map_err(|e| ScrapeError::from_decode(e, max_body))?;
        }
        decoder
            .finish()
            .map_err(|e| ScrapeError::from_decode(e, max_body))?;
    }
    let body = blocks.give_back(buf, expected.is_none());
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
            &BodyBlocks::default(),
            false,
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
