//! Sending one canary: the model lookup when the request names a model nobody gave, then the
//! request, each answer read to at most [`MAX_ANSWER_BYTES`], all of it within the canary's
//! timeout (as [`crate::scrape::deadline`] judges it). What the answers mean is the canary
//! module's to judge.

use std::time::{Instant, SystemTime};

use crate::canary::answer::{self, Failure, MAX_ANSWER_BYTES};
use crate::canary::{Kind, Outcome};
use crate::config::CanaryConfig;

/// Sends one canary of `canary`, with `model` when the engine named one before; returns how it
/// ended and the model it used (to keep for the next one).
pub(crate) async fn send(
    client: &reqwest::Client,
    canary: &CanaryConfig,
    model: Option<String>,
) -> (Outcome, Option<String>) {
    let started = Instant::now();
    let result =
        crate::scrape::deadline::within(canary.timeout, attempt(client, canary, model)).await;
    let (kind, detail, model) = match result {
        Some((Ok(()), model)) => (Kind::Success, String::new(), model),
        Some((Err((kind, detail)), model)) => (kind, detail, model),
        None => (
            Kind::Timeout,
            format!("timed out after {:?}", canary.timeout),
            None,
        ),
    };
    let outcome = Outcome {
        kind,
        detail,
        at: SystemTime::now(),
        took: started.elapsed(),
    };
    (outcome, model)
}

/// The model lookup (when needed) and the request, without the overall timeout.
async fn attempt(
    client: &reqwest::Client,
    canary: &CanaryConfig,
    model: Option<String>,
) -> (Result<(), Failure>, Option<String>) {
    let model = match (
        model.or_else(|| canary.model.clone()),
        answer::needs_model(canary),
    ) {
        (Some(model), _) => Some(model),
        (None, false) => None,
        (None, true) => match first_model(client, canary).await {
            Ok(model) => Some(model),
            Err(e) => return (Err(e), None),
        },
    };
    let request = answer::request(canary, model.as_deref());
    let builder = match request.body {
        Some(body) => client
            .post(request.url)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .body(body),
        None => client.get(request.url),
    };
    let result = match get(with_headers(builder, canary), "").await {
        Ok((status, body)) => answer::judge(canary.answer, status, &body),
        Err(e) => Err(e),
    };
    (result, model)
}

/// The first model the engine lists.
async fn first_model(client: &reqwest::Client, canary: &CanaryConfig) -> Result<String, Failure> {
    let request = with_headers(client.get(answer::models_url(canary)), canary);
    let (status, body) = get(request, "/v1/models ").await?;
    answer::first_model(status, &body)
}

fn with_headers(
    mut request: reqwest::RequestBuilder,
    canary: &CanaryConfig,
) -> reqwest::RequestBuilder {
    for (name, value) in &canary.headers {
        request = request.header(name, value);
    }
    request
}

/// Sends `request` and reads its answer's status and at most [`MAX_ANSWER_BYTES`] of its body
/// (after any Content-Encoding is undone); `what` names it in a failure (`/v1/models `).
async fn get(request: reqwest::RequestBuilder, what: &str) -> Result<(u16, Vec<u8>), Failure> {
    let mut resp = request.send().await.map_err(|e| {
        let e = e.without_url();
        (Kind::ConnectError, format!("{what}cannot connect: {e}"))
    })?;
    let status = resp.status().as_u16();
    let too_large = || {
        let limit = MAX_ANSWER_BYTES >> 20;
        (
            Kind::TooLarge,
            format!("{what}answer longer than {limit} MiB, the most a canary reads"),
        )
    };
    if resp
        .content_length()
        .is_some_and(|n| n > MAX_ANSWER_BYTES as u64)
    {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| {
        let e = e.without_url();
        (Kind::ConnectError, format!("{what}answer cut off: {e}"))
    })? {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok((status, body))
}
