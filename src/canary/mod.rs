//! Canary requests: proving an idle engine can still generate.
//!
//! An engine's `/health` can stay 200 while it cannot generate (vllm-project/vllm#39863,
//! #24207), and stall detection only judges a busy engine. With `canary_after`, every health
//! check also reads the engine's busy gauge and progress counters (the stall families), and
//! a [`Tracker`] per upstream decides, as Dynamo's canary health checks do from inside the
//! runtime (ai-dynamo/dynamo `lib/runtime/src/health_check.rs`: a canary after
//! `canary_wait_time` without traffic, a first answer without error within `request_timeout`
//! keeps the endpoint ready, anything else makes it not ready; traffic resets the timer and
//! counts as proof, `lib/runtime/src/system_health.rs`):
//!
//! - **Idle** is nothing running and the progress counters unchanged at every check for
//!   `canary_after`; then one canary (the engine preset's one-token request, see
//!   [`crate::model::engine::CANARIES`]) is sent, never two at once, and the next only after another
//!   `canary_after` of idleness.
//! - **Progress** resets the clock and counts as a passed canary. The progress a canary itself
//!   causes does not: the first reading after it is a new baseline, so that a canary that made
//!   the engine step but answered wrongly cannot heal its own failure.
//! - **Down, not yet healthy, or asleep** (vLLM's `engine_sleep_state{sleep_state="awake"}` at 0)
//!   sends none.
//! - **A failed canary** (timeout, non-2xx, an answer without the expected content, a
//!   connection error) makes the upstream not ready until a canary passes or progress is seen;
//!   `live_failures` of them in a row make `/live/engine` 503.

mod tracker;

use std::time::{Instant, SystemTime};

use serde_json::{Value, json};

pub(crate) use tracker::{CanaryStatus, Kind, Next, Outcome, Seen, Tracker};

use crate::config::{CanaryConfig, UpstreamConfig};
use crate::model::FamilyKey;
use crate::model::engine::CanaryAnswer;
use crate::scrape::UpstreamResult;
use crate::stall::Reading;
use crate::stall::Unread;
use crate::telemetry::Telemetry;

/// What one check read of an engine: the stall families, and whether it sleeps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct EngineReading {
    pub reading: Reading,
    pub asleep: bool,
}

impl EngineReading {
    /// What stall detection sees: a sleeping engine runs nothing, so it is never stalled.
    pub(crate) fn for_stall(self) -> Reading {
        Reading {
            running: if self.asleep {
                Some(0.0)
            } else {
                self.reading.running
            },
            ..self.reading
        }
    }
}

/// The gauge that is 0 while upstream `u`'s engine sleeps.
fn awake_family(u: &UpstreamConfig) -> Option<FamilyKey> {
    u.engine.canary().awake_key()
}

/// The families a check reads for stall detection and canaries (the busy gauge, progress
/// counters and sleep gauge, in every spelling of the engine); empty when the upstream has
/// neither.
pub(crate) fn names(u: &UpstreamConfig) -> Vec<String> {
    let Some(families) = u.stall.as_ref().or(u.canary.as_ref().map(|c| &c.idle)) else {
        return Vec::new();
    };
    let preset = u.engine.preset();
    let mut names = crate::stall::names(families, preset);
    if let Some(awake) = awake_family(u) {
        names.extend(preset.names_of(&awake.name));
    }
    names
}

/// Upstream `u`'s busy gauge, progress counters and sleep gauge (for stall detection and
/// canaries; `None` when it has neither), from what its check read (`None`: nothing came).
pub(crate) fn read(
    u: &UpstreamConfig,
    page: Option<&UpstreamResult>,
) -> Option<Result<EngineReading, Unread>> {
    let families = u.stall.as_ref().or(u.canary.as_ref().map(|c| &c.idle))?;
    let preset = u.engine.preset();
    Some(match page {
        // The engine's page as parsed: whatever `metric_relabel_configs` leave of its families
        // for Prometheus, these are read as the engine wrote them.
        Some(Ok(page)) => Ok(EngineReading {
            reading: crate::stall::read(&page.parsed, families, preset),
            asleep: awake_family(u).is_some_and(|a| {
                crate::numbers::engine_total(&page.parsed, &a, preset, &preset.copy_labels())
                    == Some(0.0)
            }),
        }),
        Some(Err(e)) => Err(Unread::Scrape(e.clone())),
        None => Err(Unread::NoResult),
    })
}

/// Sends one canary of `canary`, with `model` when the engine named one before; returns how it
/// ended and the model it used (to keep for the next one).
pub(crate) async fn send(
    client: &reqwest::Client,
    canary: &CanaryConfig,
    model: Option<String>,
) -> (Outcome, Option<String>) {
    let started = Instant::now();
    let deadline = tokio::time::Instant::now() + canary.timeout;
    let result = tokio::time::timeout_at(deadline, attempt(client, canary, model)).await;
    let (kind, detail, model) = match result {
        Ok((Ok(()), model)) => (Kind::Success, String::new(), model),
        Ok((Err((kind, detail)), model)) => (kind, detail, model),
        Err(_) => (
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

type Failure = (Kind, String);

/// The model lookup (when needed) and the request, without the overall timeout.
async fn attempt(
    client: &reqwest::Client,
    canary: &CanaryConfig,
    model: Option<String>,
) -> (Result<(), Failure>, Option<String>) {
    let needs_model = canary.url.as_str().contains("%7Bmodel%7D")
        || canary
            .body
            .as_deref()
            .is_some_and(|b| b.contains("{model}"));
    let model = match (model.or_else(|| canary.model.clone()), needs_model) {
        (Some(model), _) => Some(model),
        (None, false) => None,
        (None, true) => match first_model(client, canary).await {
            Ok(model) => Some(model),
            Err(e) => return (Err(e), None),
        },
    };
    let name = model.as_deref().unwrap_or_default();
    let url = canary.url.as_str().replace("%7Bmodel%7D", name);
    let mut request = match &canary.body {
        Some(body) => {
            let body = body.replace("{model}", &Value::from(name).to_string());
            client
                .post(url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(body)
        }
        None => client.get(url),
    };
    for (name, value) in &canary.headers {
        request = request.header(name, value);
    }
    let result = match request.send().await {
        Err(e) => Err((Kind::ConnectError, format!("cannot connect: {e}"))),
        Ok(resp) if !resp.status().is_success() => Err((
            Kind::HttpStatus,
            format!("answered HTTP {}", resp.status().as_u16()),
        )),
        Ok(resp) => judge(canary.answer, resp).await,
    };
    (result, model)
}

/// Judges a 2xx answer.
async fn judge(answer: CanaryAnswer, resp: reqwest::Response) -> Result<(), Failure> {
    if answer == CanaryAnswer::Status {
        return Ok(());
    }
    let body = resp
        .bytes()
        .await
        .map_err(|e| (Kind::ConnectError, format!("answer cut off: {e}")))?;
    let json: Value = serde_json::from_slice(&body)
        .map_err(|_| (Kind::BadAnswer, "answer is not JSON".to_owned()))?;
    let ok = match answer {
        CanaryAnswer::Choices => json["choices"].as_array().is_some_and(|c| !c.is_empty()),
        CanaryAnswer::TextOutput => json.get("text_output").is_some(),
        CanaryAnswer::Status => true,
    };
    if ok {
        Ok(())
    } else if answer == CanaryAnswer::Choices {
        Err((Kind::BadAnswer, "answer has no choices".to_owned()))
    } else {
        Err((Kind::BadAnswer, "answer has no text_output".to_owned()))
    }
}

/// The first `id` of vLLM's `GET /v1/models` (`vllm/entrypoints/openai/api_server.py`), on the
/// canary's origin.
async fn first_model(client: &reqwest::Client, canary: &CanaryConfig) -> Result<String, Failure> {
    let mut url = canary.url.clone();
    url.set_path("/v1/models");
    url.set_query(None);
    let mut request = client.get(url);
    for (name, value) in &canary.headers {
        request = request.header(name, value);
    }
    let resp = request
        .send()
        .await
        .map_err(|e| (Kind::ConnectError, format!("cannot list models: {e}")))?;
    if !resp.status().is_success() {
        let status = resp.status().as_u16();
        return Err((
            Kind::HttpStatus,
            format!("/v1/models answered HTTP {status}"),
        ));
    }
    let body = resp
        .bytes()
        .await
        .map_err(|e| (Kind::ConnectError, format!("/v1/models cut off: {e}")))?;
    let json: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    json["data"][0]["id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| (Kind::BadAnswer, "/v1/models names no model".to_owned()))
}

/// Counts a finished canary of `upstream`, unless a reload removed the upstream while it ran.
pub(crate) fn count(telemetry: &Telemetry, upstream: &str, outcome: &Outcome) {
    telemetry.for_current(upstream, |t| {
        t.canary_requests
            .with_label_values(&[upstream, outcome.kind.label()])
            .inc();
        t.canary_duration
            .with_label_values(&[upstream])
            .observe(outcome.took.as_secs_f64());
    });
}

/// Starts the counters of a new configuration: every result at 0 for each upstream with
/// canaries.
pub(crate) fn register_metrics(upstreams: &[UpstreamConfig], telemetry: &Telemetry) {
    for u in upstreams.iter().filter(|u| u.canary.is_some()) {
        for kind in Kind::ALL {
            telemetry
                .canary_requests
                .with_label_values(&[&u.name, kind.label()]);
        }
    }
}

/// The `/live/engine` answer: stall detection's, and not live either while an upstream's
/// canaries failed `live_failures` times in a row.
pub(crate) fn live_engine(
    stalls: &[(String, crate::stall::StallStatus)],
    canaries: &[(String, CanaryStatus)],
) -> (bool, Value) {
    let (live, mut body) = crate::stall::live_engine(stalls);
    let dead: Vec<String> = canaries
        .iter()
        .filter(|(_, c)| c.dead)
        .map(|(name, c)| {
            let why = c.failed.as_deref().unwrap_or_default();
            format!(
                "{name}: {} canaries failed in a row, last: {why}",
                c.failures
            )
        })
        .collect();
    if dead.is_empty() {
        return (live, body);
    }
    let reason = format!("canary failed: {}", dead.join("; "));
    body["reason"] = match body["reason"].as_str() {
        Some(stalled) => Value::from(format!("{stalled}; {reason}")),
        None => Value::from(reason),
    };
    if live {
        body["status"] = Value::from("canary failed");
    }
    (false, body)
}

/// One upstream's canary detail, as `/health` and `/status` show it.
pub(crate) fn status_json(status: &CanaryStatus, now: Instant) -> Value {
    let (next, why) = match status.next {
        Next::At(at) => (Some(at.saturating_duration_since(now).as_secs_f64()), None),
        Next::Busy => (None, Some("busy")),
        Next::Asleep => (None, Some("sleeping")),
        Next::Down => (None, Some("down")),
        Next::InFlight => (None, Some("in flight")),
    };
    let last = status.last.as_ref().map(|o| {
        json!({
            "result": o.kind.label(),
            "error": (!o.detail.is_empty()).then_some(&o.detail),
            "unix_seconds": o.at.duration_since(SystemTime::UNIX_EPOCH).ok().map(|d| d.as_secs_f64()),
            "duration_seconds": o.took.as_secs_f64(),
        })
    });
    json!({
        "canary_after_seconds": status.after.as_secs_f64(),
        "failed": status.failed,
        "failures_in_a_row": status.failures,
        "live_failed": status.dead,
        "last": last,
        "next_in_seconds": next,
        "none_because": why,
    })
}
