//! Canary requests: proving an idle engine can still generate.
//!
//! An engine's `/health` can stay 200 while it cannot generate (vllm-project/vllm#39863,
//! #24207), and stall detection only judges a busy engine. With `canary_after`, every health
//! check's [`crate::model::Reading`] of the engine's busy gauges and progress counters goes to
//! a [`Tracker`] per upstream, which decides, as Dynamo's canary health checks do from inside
//! the runtime (ai-dynamo/dynamo `lib/runtime/src/health_check.rs`: a canary after
//! `canary_wait_time` without traffic, a first answer without error within `request_timeout`
//! keeps the endpoint ready, anything else makes it not ready; traffic resets the timer and
//! counts as proof, `lib/runtime/src/system_health.rs`). Both halves are pure judges: the
//! tracker of readings and outcomes, [`answer`] of the bytes a canary got back; `health`
//! reads the page, sends the request and shows the verdict.
//!
//! - **Idle** is nothing running or waiting and the progress counters unchanged at every
//!   check for `canary_after`; then one canary (the engine preset's one-token request, see
//!   [`crate::model::engine::CANARIES`]) is sent, never two at once, and the next only after
//!   another `canary_after` of idleness.
//! - **Progress** resets the clock and counts as a passed canary. The progress a canary itself
//!   causes does not: the first reading after it is a new baseline, so that a canary that made
//!   the engine step but answered wrongly cannot heal its own failure.
//! - **Down, not yet healthy, or asleep** (vLLM's `engine_sleep_state{sleep_state="awake"}` at 0)
//!   sends none.
//! - **A failed canary** (timeout, non-2xx, an answer without the expected content or longer
//!   than [`answer::MAX_ANSWER_BYTES`], a connection error) makes the upstream not ready until
//!   a canary passes or progress is seen; `live_failures` of them in a row make `/live/engine`
//!   503.
//! - **A canary that cannot be asked** (credentials refused, 401 or 403; no generation on its
//!   route, 404 or 400: a pooling or embedding model) pauses the canaries of that upstream and
//!   leaves its readiness to the health check: for `canary_after`, then twice as long after each
//!   refusal (at most [`tracker::MAX_PAUSE`]), until the engine takes one again; at once when the
//!   engine is seen down and up again or a reload changes the canary.

pub(crate) mod answer;
pub(crate) mod config;
mod tracker;

pub(crate) use tracker::{CanaryStatus, Kind, Next, Outcome, Seen, Tracker};
