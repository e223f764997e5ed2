//! The single-flight core: one fetch of a URL at a time, shared by every request that arrives
//! while it runs, and reused within `min_interval` ([`Reuse`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::FutureExt;

use super::Budget;
use super::deadline;
use super::error::ScrapeError;
use super::http::get;
use super::parse::{contained, parse_for};
use super::record::{mislabelled, record};
use super::shared::{Fetch, Inner, UpstreamResult, next_generation};
use super::slot::{PRIOR_MAX_BYTES, Reuse, SharedFetch, Slot, Target};
use crate::model::Read;

/// Reuses, joins or starts the fetch of `slot`; `None` when `budget` ran out first.
pub(super) async fn fetch(
    inner: &Arc<Inner>,
    target: &Arc<Target>,
    slot: &Arc<Slot>,
    budget: Option<Budget>,
) -> Option<Arc<Fetch>> {
    let shared = {
        let mut state = slot.state.lock().expect("slot state lock");
        let reuse = state.last.as_ref().map_or(Reuse::No, |last| {
            Reuse::of(last.at.elapsed(), target.min_interval, last.took)
        });
        match (reuse, &state.last) {
            (Reuse::Fresh, Some(last)) => return Some(last.clone()),
            (Reuse::Stale, Some(last)) => {
                let last = last.clone();
                if state.inflight.is_none() {
                    state.inflight = Some(start(inner, target, slot));
                }
                return Some(last);
            }
            _ => state
                .inflight
                .get_or_insert_with(|| start(inner, target, slot))
                .clone(),
        }
    };
    match deadline::within(wait_for(budget.map(|b| b.left()), target.timeout), shared).await {
        Some(fetch) if fetch.results.len() == target.upstreams.len() => Some(fetch),
        _ => None,
    }
}

/// How long a request with `budget` left waits for a fetch whose own timeout is `fetch`: its
/// budget to the end when that is the shorter (its scraper gives up soon after: the margin left
/// for the answer is the budget's, not shared with a grace), else a little past the fetch's
/// timeout, so that what it gets is the fetch's own result, timed out or not.
fn wait_for(budget: Option<Duration>, fetch: Duration) -> Duration {
    match budget {
        Some(budget) if budget < fetch => budget,
        _ => fetch + Duration::from_millis(50),
    }
}

/// Starts fetching `slot` in a task of its own, bounded by the upstream's own timeout whoever
/// asked (each reader waits with its own deadline); the task records the result in the slot
/// when it ends, whether or not anyone still waits for it.
fn start(inner: &Arc<Inner>, target: &Arc<Target>, slot: &Arc<Slot>) -> SharedFetch {
    let task = tokio::spawn(run_fetch(inner.clone(), target.clone(), slot.clone()));
    let slot = slot.clone();
    async move {
        task.await.unwrap_or_else(|err| {
            tracing::error!(error = %err, "upstream fetch task failed");
            // The task did not get to clear its slot: clear it, so the next request retries.
            slot.state.lock().expect("slot state lock").inflight = None;
            Arc::new(Fetch {
                generation: next_generation(),
                at: Instant::now(),
                took: Duration::ZERO,
                results: Vec::new(),
            })
        })
    }
    .boxed()
    .shared()
}

/// Fetches a target once, parses it for each of its upstreams, records the outcome.
async fn run_fetch(inner: Arc<Inner>, target: Arc<Target>, slot: Arc<Slot>) -> Arc<Fetch> {
    let timeout = target.timeout;
    let started = Instant::now();
    let max_body = inner.limits.max_body_bytes;
    let fetched = deadline::within(
        timeout,
        get(
            &inner.client,
            &slot.url,
            &slot.blocks,
            target.gzip,
            timeout,
            max_body,
        ),
    )
    .await
    .unwrap_or_else(|| Err(ScrapeError::Timeout(timeout)));
    let elapsed = started.elapsed();
    let prior = slot.state.lock().expect("slot state lock").prior.clone();
    let body_len = fetched.as_ref().ok().map(|f| f.body.len());
    let results: Vec<UpstreamResult> = match fetched {
        Ok(fetched) => {
            if fetched.mislabelled {
                for &u in &target.upstreams {
                    let name = &inner.upstreams[u].name;
                    mislabelled(&inner.recorders, u, name);
                    tracing::debug!(
                        upstream = %name,
                        content_type = fetched.content_type.as_deref().unwrap_or(""),
                        format = ?fetched.format,
                        "the Content-Type names the other exposition format: read as the body is"
                    );
                }
            }
            // Parsed here, on the runtime thread, whatever the size: a large body's parse takes
            // a second thread of its own (`expfmt::parse`), and handing the parse to the
            // blocking pool cost a 740 KB scrape 0.2 ms and a 16 MB one 2.6 ms of wake-ups
            // and threads sharing a core (bench/RESULTS.md). A 16 MB body holds the thread for
            // about 6 ms.
            target
                .upstreams
                .iter()
                .enumerate()
                .map(|(i, &u)| {
                    let prior = prior
                        .as_ref()
                        .and_then(|p| Some(&p.results.get(i)?.as_ref().ok()?.parsed));
                    contained(|| parse_for(&inner, u, &fetched, prior))
                })
                .collect()
        }
        Err(e) => target.upstreams.iter().map(|_| Err(e.clone())).collect(),
    };
    let kind = if slot.selective {
        Read::Selective
    } else {
        Read::Full
    };
    for (&u, result) in target.upstreams.iter().zip(&results) {
        record(&inner, u, result, elapsed, kind, body_len);
    }
    let fetch = Arc::new(Fetch {
        generation: next_generation(),
        at: Instant::now(),
        took: started.elapsed(),
        results,
    });
    let mut state = slot.state.lock().expect("slot state lock");
    // Kept only where it can be reused: a 16 MiB body should not stay resident between scrapes.
    if !target.min_interval.is_zero() {
        state.last = Some(fetch.clone());
    }
    state.inflight = None;
    match body_len {
        Some(len) if len <= PRIOR_MAX_BYTES => state.prior = Some(fetch.clone()),
        Some(_) => state.prior = None,
        // No body: the one before stays the best guess of the next.
        None => {}
    }
    fetch
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_waits_for_its_budget_exactly_or_past_the_fetchs_own_timeout() {
        let ms = Duration::from_millis;
        // Prometheus' 1 s (a 0.9 s budget) on an upstream with 2 s: 0.9 s, leaving the 0.1 s
        // for the answer.
        assert_eq!(wait_for(Some(ms(900)), ms(2000)), ms(900));
        assert_eq!(wait_for(Some(ms(0)), ms(2000)), ms(0));
        // No budget, or one past the upstream's timeout: the fetch ends first, with its error.
        assert_eq!(wait_for(None, ms(2000)), ms(2050));
        assert_eq!(wait_for(Some(ms(2000)), ms(2000)), ms(2050));
        assert_eq!(wait_for(Some(ms(9500)), ms(2000)), ms(2050));
    }

    #[test]
    fn a_fetch_is_reused_fresh_then_stale_then_not_at_all() {
        let ms = Duration::from_millis;
        let interval = ms(25);
        let quick = ms(1);
        assert_eq!(Reuse::of(ms(0), interval, quick), Reuse::Fresh);
        assert_eq!(Reuse::of(ms(24), interval, quick), Reuse::Fresh);
        assert_eq!(Reuse::of(ms(25), interval, quick), Reuse::Stale);
        assert_eq!(Reuse::of(ms(49), interval, quick), Reuse::Stale);
        assert_eq!(Reuse::of(ms(50), interval, quick), Reuse::No);
        assert_eq!(
            Reuse::of(Duration::from_secs(3600), interval, quick),
            Reuse::No
        );
        // An engine slower than min_interval: its refresh has time to land before readers wait.
        assert_eq!(Reuse::of(ms(70), interval, ms(24)), Reuse::Stale);
        assert_eq!(Reuse::of(ms(73), interval, ms(24)), Reuse::No);
        // min_interval 0: every scrape fetches.
        assert_eq!(Reuse::of(ms(0), Duration::ZERO, quick), Reuse::No);
        assert_eq!(Reuse::of(Duration::ZERO, Duration::ZERO, quick), Reuse::No);
        // No overflow at the top of the range.
        assert_eq!(Reuse::of(ms(1), Duration::MAX, Duration::MAX), Reuse::Fresh);
    }
}
