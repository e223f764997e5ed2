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
            if self.health.observe(&self.board[i], at, result, reading) {
                due.push(i);
            }
            if self.vitals.reads(i) {
                pages.push((i, page.and_then(Result::ok)));
            }
        }
        // Summing a page's vitals series takes time in proportion to the page: off the runtime
        // thread, and done before the next check.
        if !pages.is_empty() {
            let vitals = self.vitals.clone();
            let summed = tokio::task::spawn_blocking(move || {
                for (i, page) in pages {
                    match page {
                        Some(page) => vitals.record(i, &page.parsed, at),
                        None => vitals.age(i, at),
                    }
                }
            });
            if let Err(err) = summed.await {
                tracing::error!(error = %err, "the vitals of a check could not be summed");
            }
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
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
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
