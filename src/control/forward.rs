//! One call to an engine's own route: the body passed through, the answer read to at most
//! [`MAX_ANSWER_BYTES`] within the timeout, at most [`MAX_IN_FLIGHT`] calls at once.

use std::time::Duration;

use axum::http::StatusCode;
use bytes::{Bytes, BytesMut};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::model::Url;
use crate::model::control::Method;

/// The longest engine answer passed back: an engine's control answers are a few bytes, its
/// model list a few KiB.
pub const MAX_ANSWER_BYTES: usize = 4 << 20;
/// Calls to engines at once through `/engine/*` and `/v1/loras`; more answer 503.
pub const MAX_IN_FLIGHT: usize = 4;

/// Why an engine's answer could not be passed back.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("{MAX_IN_FLIGHT} calls to engines are in flight already, the most sysport makes")]
    Busy,
    #[error("the engine did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the engine's answer is longer than {0} bytes, the most sysport reads of it")]
    TooLarge(usize),
    #[error("cannot reach the engine: {0}")]
    Connect(#[source] reqwest::Error),
    #[error("the engine's answer was cut off: {0}")]
    Cut(#[source] reqwest::Error),
}

impl CallError {
    /// The status sysport answers with: 503 when busy, 504 on a timeout, else 502.
    pub fn status(&self) -> StatusCode {
        match self {
            CallError::Busy => StatusCode::SERVICE_UNAVAILABLE,
            CallError::Timeout(_) => StatusCode::GATEWAY_TIMEOUT,
            _ => StatusCode::BAD_GATEWAY,
        }
    }
}

/// An engine's answer, as it gave it.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub content_type: Option<String>,
    pub body: Bytes,
}

impl Answer {
    /// The body as JSON, when it is.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_slice(&self.body).ok()
    }
}

/// The calls in flight.
#[derive(Debug)]
pub struct Gate(std::sync::Arc<Semaphore>);

impl Default for Gate {
    fn default() -> Self {
        Gate(std::sync::Arc::new(Semaphore::new(MAX_IN_FLIGHT)))
    }
}

impl Gate {
    /// A place for one call, or [`CallError::Busy`].
    pub fn enter(&self) -> Result<OwnedSemaphorePermit, CallError> {
        self.0
            .clone()
            .try_acquire_owned()
            .map_err(|_| CallError::Busy)
    }
}

/// Sends one request and reads at most `max` bytes of its answer; `body` is sent as JSON when
/// given.
pub async fn call(
    client: &reqwest::Client,
    method: Method,
    url: Url,
    body: Option<Bytes>,
    timeout: Duration,
    max: usize,
) -> Result<Answer, CallError> {
    tokio::time::timeout(timeout, attempt(client, method, url, body, max))
        .await
        .unwrap_or(Err(CallError::Timeout(timeout)))
}

async fn attempt(
    client: &reqwest::Client,
    method: Method,
    url: Url,
    body: Option<Bytes>,
    max: usize,
) -> Result<Answer, CallError> {
    let request = match method {
        Method::Get => client.get(url),
        Method::Post => client.post(url),
    };
    let request = match body {
        Some(body) => request
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body),
        None => request,
    };
    // A GET is sent again when its kept-alive connection closed before any answer; a POST
    // (a generation, a LoRA load) never: the engine may have acted on it.
    let sent = match method {
        Method::Get => crate::scrape::send_get(request).await,
        Method::Post => request.send().await,
    };
    let mut resp = sent.map_err(|e| CallError::Connect(e.without_url()))?;
    if resp.content_length().is_some_and(|n| n > max as u64) {
        return Err(CallError::TooLarge(max));
    }
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = BytesMut::new();
    while let Some(chunk) = resp
        .chunk()
        .await
        .map_err(|e| CallError::Cut(e.without_url()))?
    {
        if body.len() + chunk.len() > max {
            return Err(CallError::TooLarge(max));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Answer {
        status,
        content_type,
        body: body.freeze(),
    })
}
