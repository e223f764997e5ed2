//! The checks: every `health.interval`, on a task of its own, each upstream's health URL (or a
//! scrape of its metrics URL) and one read of its engine's families ([`Families`]), whose
//! [`Reading`] goes to its stall watch and canaries and whose page goes to the vitals; then its
//! canary when one is due.
//!
//! [`Reading`]: crate::model::Reading

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::latch::Health;
use super::read::Families;
use super::send;
use super::upstream::{Board, CheckError};
use crate::scrape::{ScrapeError, Scraper, UpstreamResult};
use crate::stall::Unread;
use crate::vitals::{Canaries, Vitals};

/// What the checks of one configuration use.
pub(crate) struct Checks {
    pub scraper: Arc<Scraper>,
    pub health: Arc<Health>,
    /// This configuration's upstreams, in its order.
    pub board: Arc<Board>,
    /// What each upstream's checks read, in the same order.
    pub families: Vec<Families>,
    pub vitals: Arc<Vitals>,
    pub client: reqwest::Client,
    /// Where each check's pages go to have their vitals summed.
    pub summing: Summing,
}

/// One page (or none: the upstream did not answer) to sum the vitals of, for upstream `.0`,
/// with the canaries its engine had answered when the check began.
type Pages = Vec<(usize, Option<Arc<crate::relabel::Page>>, Canaries)>;

/// The thread that sums each check's vitals, in proportion to the pages, off the runtime
/// thread: one thread for the life of a configuration, so that its memory (one allocator
/// arena) serves every check instead of a new one growing on whichever thread of a pool.
pub(crate) struct Summing {
    vitals: Arc<Vitals>,
    /// `None` when no thread could be started: then the runtime thread sums.
    jobs: Option<std::sync::mpsc::Sender<(Pages, Instant, tokio::sync::oneshot::Sender<()>)>>,
}

impl Summing {
    /// Starts the thread for `vitals`; it ends when the last holder of this is gone.
    pub(crate) fn start(vitals: Arc<Vitals>) -> Summing {
        let (jobs, queue) =
            std::sync::mpsc::channel::<(Pages, Instant, tokio::sync::oneshot::Sender<()>)>();
        let summer = vitals.clone();
        let started = std::thread::Builder::new()
            .name("sysport-vitals".into())
            .spawn(move || {
                for (pages, at, done) in queue {
                    sum(&summer, pages, at);
                    let _ = done.send(());
                }
            });
        let jobs = match started {
            Ok(_) => Some(jobs),
            Err(err) => {
                tracing::warn!(error = %err, "no thread for the vitals: the runtime thread sums them");
                None
            }
        };
        Summing { vitals, jobs }
    }

    /// Sums `pages`, read by a check due `at`, and waits until it is done.
    async fn sum(&self, pages: Pages, at: Instant) {
        let Some(jobs) = &self.jobs else {
            return sum(&self.vitals, pages, at);
        };
        let (done, finished) = tokio::sync::oneshot::channel();
        if jobs.send((pages, at, done)).is_ok() {
            let _ = finished.await;
        }
    }
}

/// Records each page's vitals, or ages the figures of an upstream that gave none.
fn sum(vitals: &Vitals, pages: Pages, at: Instant) {
    for (i, page, canaries) in pages {
        match page {
            Some(page) => vitals.record(i, &page.parsed, at, canaries),
            None => vitals.age(i, at),
        }
    }
}

impl Checks {
    /// Checks upstream `i` once and records the result as of `at`, when the check was due:
    /// stall detection, canaries and the vitals measure their windows between due times, as
    /// Prometheus stamps a scrape with its scheduled time, so a fetch that answers late does
    /// not shorten one. Returns whether its canary is due.
    pub(crate) async fn check_one(&self, i: usize, at: Instant) -> bool {
        // Before the read: a canary the engine answers meanwhile is in its counters already.
        let canaries = self.vitals.canaries(i);
        let (result, page) = self.check(i).await;
        let at = crate::stall::CheckedAt {
            due: at,
            answered: Instant::now(),
        };
        let families = &self.families[i];
        let reading = families.judged().then(|| match &page {
            Some(Ok(page)) => Ok(families.read(&page.parsed).expect("judged")),
            Some(Err(e)) => Err(Unread::Scrape(e.clone())),
            None => Err(Unread::NoResult),
        });
        // The evidence kept should the verdict turn bad (`crate::incidents`).
        let evidence = crate::incidents::Check::of(&result, &reading, &page);
        let due = self.health.observe(&self.board[i], at, result, reading);
        (self.health.incidents).check(self.board[i].name(), evidence);
        if self.vitals.reads(i) {
            // Done before the next check.
            self.summing
                .sum(vec![(i, page.and_then(Result::ok), canaries)], at.due)
                .await;
        }
        due
    }

    /// One upstream's check: its health URL, with the read of its families made meanwhile; or,
    /// without a health URL, a scrape of its metrics URL, whose page is the read.
    async fn check(&self, i: usize) -> (Result<(), CheckError>, Option<UpstreamResult>) {
        let u = &self.scraper.upstreams()[i];
        match &u.health_url {
            Some(url) => tokio::join!(check_url(&self.client, url, u.timeout), self.read(i)),
            None => {
                let page = self
                    .scraper
                    .scrape(&[i], None, None)
                    .await
                    .pop()
                    .map(|s| s.result);
                let result = match &page {
                    Some(Ok(_)) => Ok(()),
                    Some(Err(e)) => Err(CheckError::Scrape(e.clone())),
                    None => Err(CheckError::NoResult),
                };
                (result, page)
            }
        }
    }

    /// A read of upstream `i`'s families: the engine's `name[]` selection where it has been
    /// shown faithful, else the full page, shared with `/metrics`. `None` when none is wanted
    /// or the scrape gave no result.
    async fn read(&self, i: usize) -> Option<UpstreamResult> {
        let names = self.families[i].names();
        if names.is_empty() {
            return None;
        }
        let selection = crate::expfmt::Selection::new(names.iter().map(String::as_str));
        self.scraper
            .scrape(&[i], Some(&selection), None)
            .await
            .pop()
            .map(|s| s.result)
    }

    /// Sends upstream `i`'s canary and records how it ended.
    async fn canary(self: Arc<Self>, i: usize) {
        let Some(config) = &self.scraper.upstreams()[i].canary else {
            return;
        };
        let upstream = &self.board[i];
        let sent = Instant::now();
        let model = self.health.canary_model(upstream);
        // Dropped with its request (and its connection) when a reload drops the upstream.
        let (outcome, model) = tokio::select! {
            sent = send::send(&self.client, config, model) => sent,
            () = upstream.retired() => return,
        };
        if outcome.kind == crate::canary::Kind::Success {
            // The engine served it: its request and token counters count it.
            self.vitals.count_canary(i, asked_tokens(config));
        }
        self.health.finish_canary(upstream, sent, outcome, model);
    }
}

/// The tokens a canary asks the engine to generate: its body's `max_tokens` (vLLM, SGLang,
/// Triton), `n_predict` (llama.cpp) or `max_new_tokens`; 1 when it names none (the presets
/// ask for one).
fn asked_tokens(canary: &crate::config::CanaryConfig) -> f64 {
    let body: Option<serde_json::Value> = canary
        .body
        .as_deref()
        .and_then(|b| serde_json::from_str(&b.replace("{model}", "\"\"")).ok());
    body.and_then(|b| {
        ["max_tokens", "n_predict", "max_new_tokens"]
            .iter()
            .find_map(|k| b.get(k)?.as_f64())
    })
    .unwrap_or(1.0)
}

/// A GET of a health URL: any 2xx is healthy; within `timeout`, as [`crate::scrape::deadline`]
/// judges it (sysport's own lateness is not the engine's).
async fn check_url(
    client: &reqwest::Client,
    url: &crate::model::Url,
    timeout: Duration,
) -> Result<(), CheckError> {
    let sent =
        crate::scrape::deadline::within(timeout, crate::scrape::send_get(client.get(url.clone())))
            .await;
    match sent {
        Some(Ok(resp)) if resp.status().is_success() => Ok(()),
        Some(Ok(resp)) => Err(CheckError::Health(ScrapeError::from_status(&resp))),
        Some(Err(e)) => Err(CheckError::Health(ScrapeError::from_reqwest(e, timeout))),
        None => Err(CheckError::Health(ScrapeError::Timeout(timeout))),
    }
}

/// Checks each upstream every `interval` until `stop` fires, each on its own task: a slow or
/// hanging upstream delays only its own checks. The canaries they find due run on their own,
/// and finish even when a reload stops the checks (their upstream's health, if the reload
/// keeps it, takes their outcome; one it does not keep cancels them).
pub(crate) async fn run(
    checks: Arc<Checks>,
    interval: Duration,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    // Every upstream on the same grid of due times, from the same start.
    let start = tokio::time::Instant::now();
    let mut each = tokio::task::JoinSet::new();
    for i in 0..checks.board.len() {
        each.spawn(checks.clone().every(i, start, interval, stop.clone()));
    }
    while each.join_next().await.is_some() {}
}

impl Checks {
    /// Upstream `i`'s checks, due at `start` and every `interval` after it, until `stop` fires.
    async fn every(
        self: Arc<Self>,
        i: usize,
        start: tokio::time::Instant,
        interval: Duration,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        // A check that runs past the next due time skips it: the checks stay on one grid of due
        // times, as Prometheus keeps its scrape phase, so a slow check never shifts the windows
        // of the ones after it.
        let mut tick = tokio::time::interval_at(start, interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        loop {
            let at = tokio::select! {
                at = tick.tick() => at.into_std(),
                _ = stop.changed() => return,
            };
            let due = tokio::select! {
                due = self.check_one(i, at) => due,
                _ = stop.changed() => return,
            };
            if due {
                tokio::spawn(self.clone().canary(i));
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}
