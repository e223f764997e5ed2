//! The check loop: every `health.interval`, each upstream's health URL (or a scrape of its
//! metrics URL) and one read of its engine's families ([`Families`]), whose [`Reading`] goes to
//! its stall watch and canaries and whose page goes to the vitals; then the canaries that are
//! due.
//!
//! [`Reading`]: crate::model::Reading

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::latch::{Board, Health};
use super::read::Families;
use super::send;
use super::upstream::CheckError;
use crate::scrape::{ScrapeError, Scraper, UpstreamResult};
use crate::stall::Unread;
use crate::vitals::Vitals;

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

/// One page (or none: the upstream did not answer) to sum the vitals of, for upstream `.0`.
type Pages = Vec<(usize, Option<Arc<crate::relabel::Page>>)>;

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

    /// Sums `pages`, read by the check due `at`, and waits until it is done.
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
    for (i, page) in pages {
        match page {
            Some(page) => vitals.record(i, &page.parsed, at),
            None => vitals.age(i, at),
        }
    }
}

impl Checks {
    /// Checks every upstream once, concurrently, and records the results as of `at`, when the
    /// check was due: stall detection, canaries and the vitals measure their windows between
    /// due times, as Prometheus stamps a scrape with its scheduled time, so a fetch that answers
    /// late does not shorten one. Returns the upstreams whose canary is due.
    pub(crate) async fn check_all(&self, at: Instant) -> Vec<usize> {
        let checks = (0..self.board.len()).map(|i| async move {
            let (result, page) = self.check(i).await;
            (i, result, page)
        });
        let mut due = Vec::new();
        let mut pages = Vec::new();
        for (i, result, page) in futures_util::future::join_all(checks).await {
            let families = &self.families[i];
            let reading = families.judged().then(|| match &page {
                Some(Ok(page)) => Ok(families.read(&page.parsed).expect("judged")),
                Some(Err(e)) => Err(Unread::Scrape(e.clone())),
                None => Err(Unread::NoResult),
            });
            // The evidence kept should the verdict turn bad (`crate::incidents`).
            let evidence = crate::incidents::Check::of(&result, &reading, &page);
            let canary_due = self.health.observe(&self.board[i], at, result, reading);
            (self.health.incidents).check(self.board[i].name(), evidence);
            if canary_due {
                due.push(i);
            }
            if self.vitals.reads(i) {
                pages.push((i, page.and_then(Result::ok)));
            }
        }
        // Done before the next check.
        if !pages.is_empty() {
            self.summing.sum(pages, at).await;
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
        let (outcome, model) = send::send(&self.client, config, model).await;
        self.health.finish_canary(upstream, sent, outcome, model);
    }
}

/// A GET of a health URL: any 2xx is healthy.
async fn check_url(
    client: &reqwest::Client,
    url: &crate::model::Url,
    timeout: Duration,
) -> Result<(), CheckError> {
    match client.get(url.clone()).timeout(timeout).send().await {
        Ok(resp) if resp.status().is_success() => Ok(()),
        Ok(resp) => Err(CheckError::Health(ScrapeError::from_status(&resp))),
        Err(e) => Err(CheckError::Health(ScrapeError::from_reqwest(e, timeout))),
    }
}

/// Runs [`Checks::check_all`] every `interval` until `stop` fires; the canaries it finds due run
/// on their own, and finish even when a reload stops the loop (their upstream's health, if the
/// reload keeps it, takes their outcome).
pub(crate) async fn run(
    checks: Arc<Checks>,
    interval: Duration,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    // A check that runs past the next due time skips it: the checks stay on one grid of due
    // times, as Prometheus keeps its scrape phase, so a slow check never shifts the windows of
    // the ones after it.
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let at = tokio::select! {
            at = tick.tick() => at.into_std(),
            _ = stop.changed() => return,
        };
        let due = tokio::select! {
            due = checks.check_all(at) => due,
            _ = stop.changed() => return,
        };
        for i in due {
            tokio::spawn(checks.clone().canary(i));
        }
        if *stop.borrow() {
            return;
        }
    }
}
