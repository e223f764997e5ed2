//! Fetching upstreams: each distinct URL once per scrape, all concurrently, single-flight.
//!
//! A fetch runs in a task of its own and is shared by every request that arrives while it is in
//! flight, so a burst of scrapers costs the engine one request. The task also parses the body for
//! each upstream on that URL (each with its own `keep` prefixes), so the parse is shared too.
//! Requests wait for the shared result with their own deadline, derived from Prometheus'
//! `X-Prometheus-Scrape-Timeout-Seconds`, so sysport answers before its scraper gives up.
//!
//! With `min_interval` above zero a completed fetch is also reused: a request within
//! `min_interval` of it gets it as it is, and one a little later gets it at once while a
//! refresh starts behind it (see `flight::Reuse`). The engine then sees at most one request per
//! `min_interval` however many readers there are, and readers rarely wait for it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::config::{Config, UpstreamConfig};
use crate::expfmt::{AddedLabel, PairHasher, Selection};
use crate::model::{Read, Recorder, UpstreamRecord};
use crate::relabel::RuleSet;

mod blocks;
pub(crate) mod config;
pub(crate) mod deadline;
mod decode;
mod error;
mod flight;
mod http;
mod parse;
mod record;
#[cfg(test)]
mod record_tests;
mod select;
mod shared;
mod slot;

pub(crate) use error::ScrapeError;
pub(crate) use http::{http_client, send_get};

pub(crate) use shared::UpstreamResult;

use record::record;
use shared::{Inner, next_generation};
use slot::{Slot, Target};

/// One upstream's part of a scrape.
#[derive(Debug, Clone)]
pub struct Scraped {
    /// The generation of the fetch the result came from (a fresh one for a result made here).
    pub generation: u64,
    /// When that fetch finished: the age of the data is measured from here.
    pub at: Instant,
    pub result: UpstreamResult,
}

/// A request's time for the upstreams: `limit` (Prometheus' scrape timeout less a margin),
/// counted from `from`, when the request arrived, so that time it spent waiting for the worker
/// comes out of the wait for the upstreams, not out of the margin left for the answer.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub limit: Duration,
    pub from: Instant,
}

impl Budget {
    /// What is left of it now.
    pub fn left(&self) -> Duration {
        self.limit.saturating_sub(self.from.elapsed())
    }
}

/// Fetches and parses upstreams for one configuration.
pub struct Scraper {
    inner: Arc<Inner>,
    targets: Vec<Arc<Target>>,
    /// Upstream index → (target index, position within the target).
    position: Vec<(usize, usize)>,
    added: Vec<AddedLabel>,
}

impl std::fmt::Debug for Scraper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scraper")
            .field("upstreams", &self.inner.upstreams.len())
            .finish_non_exhaustive()
    }
}

impl Scraper {
    /// A scraper for the upstreams of `config`, which tells `recorders` about every result.
    pub fn new(
        config: &Config,
        client: reqwest::Client,
        recorders: Vec<Arc<dyn Recorder>>,
    ) -> Scraper {
        let mut targets: Vec<Target> = Vec::new();
        let mut position = Vec::with_capacity(config.upstreams.len());
        for (i, u) in config.upstreams.iter().enumerate() {
            match targets.iter_mut().position(|t| t.full.url == u.url) {
                Some(t) => {
                    let target = &mut targets[t];
                    target.timeout = target.timeout.max(u.timeout);
                    target.min_interval = target.min_interval.min(u.min_interval);
                    target.gzip |= u.enable_compression;
                    position.push((t, target.upstreams.len()));
                    target.upstreams.push(i);
                }
                None => {
                    position.push((targets.len(), 0));
                    targets.push(Target {
                        timeout: u.timeout,
                        min_interval: u.min_interval,
                        gzip: u.enable_compression,
                        upstreams: vec![i],
                        full: Slot::new(u.url.clone(), false),
                        name_sets: Mutex::new(Vec::new()),
                    });
                }
            }
        }
        let added: Vec<AddedLabel> = config
            .labels
            .iter()
            .map(|(k, v)| AddedLabel::new(k, v))
            .collect();
        Scraper {
            inner: Arc::new(Inner {
                client,
                recorders,
                upstreams: config.upstreams.clone(),
                keep: config.upstreams.iter().map(|u| u.keep.clone()).collect(),
                records: config.upstreams.iter().map(|_| Mutex::default()).collect(),
                limits: config.limits.clone(),
                added_names: added.iter().map(|a| a.name().to_vec()).collect(),
                hasher: PairHasher::random(),
                rules: config
                    .upstreams
                    .iter()
                    .map(|u| {
                        RuleSet::new(
                            &u.metric_relabel_configs,
                            &config.metric_relabel_configs,
                            &config.labels,
                        )
                    })
                    .collect(),
            }),
            targets: targets.into_iter().map(Arc::new).collect(),
            position,
            added,
        }
    }

    /// The labels added to engine series.
    pub fn added_labels(&self) -> &[AddedLabel] {
        &self.added
    }

    /// The key for series hashes of this scraper's expositions.
    pub fn hasher(&self) -> PairHasher {
        self.inner.hasher
    }

    /// The configured upstreams.
    pub fn upstreams(&self) -> &[UpstreamConfig] {
        &self.inner.upstreams
    }

    /// Whether upstream `i` may serve a family that `selection` selects: one of its prefixes
    /// starts one, or its rules may rename series.
    pub fn may_hold(&self, i: usize, selection: &Selection) -> bool {
        self.renames(i)
            || self.inner.keep[i]
                .iter()
                .any(|k| selection.selects_under(k.as_bytes()))
    }

    /// Whether upstream `i`'s rules may move a series to another family.
    fn renames(&self, i: usize) -> bool {
        self.inner.rules[i]
            .as_ref()
            .is_some_and(RuleSet::may_rename)
    }

    /// What the reads of upstream `i` left.
    pub fn record(&self, i: usize) -> UpstreamRecord {
        self.inner.records[i]
            .lock()
            .expect("upstream record lock")
            .record
            .clone()
    }

    /// Every upstream's name and record, in the configuration's order.
    pub fn records(&self) -> Vec<(&str, UpstreamRecord)> {
        (self.inner.upstreams.iter().enumerate())
            .map(|(i, u)| (u.name.as_str(), self.record(i)))
            .collect()
    }

    /// Records what the merge of a full `/metrics` page made of upstream `i`'s series: kept,
    /// in conflict, duplicated (`merge`), and added under renamed families' other names.
    pub fn merged(&self, i: usize, merge: Option<(u64, u64, u64)>, aliased: Option<u64>) {
        record::merged(&self.inner, i, merge, aliased);
    }

    /// Scrapes the given upstreams concurrently (each distinct URL once), each bounded by its own
    /// timeout and by `budget`; results come back in the order asked.
    ///
    /// With `names` (a selective read), each target is asked for those families only, once a
    /// comparison with its full page has shown that it answers `name[]` faithfully.
    pub async fn scrape(
        &self,
        which: &[usize],
        names: Option<&Selection>,
        budget: Option<Budget>,
    ) -> Vec<Scraped> {
        let mut targets: Vec<usize> = which.iter().map(|&u| self.position[u].0).collect();
        targets.sort_unstable();
        targets.dedup();
        let fetches = futures_util::future::join_all(targets.iter().map(|&t| async move {
            match names {
                None => {
                    flight::fetch(&self.inner, &self.targets[t], &self.targets[t].full, budget)
                        .await
                }
                Some(names) => {
                    let target = &self.targets[t];
                    let renames = target.upstreams.iter().any(|&u| self.renames(u));
                    select::fetch_selected(&self.inner, target, names, budget, renames).await
                }
            }
        }))
        .await;
        which
            .iter()
            .map(|&u| {
                let (t, pos) = self.position[u];
                let k = targets
                    .binary_search(&t)
                    .expect("every asked target was fetched");
                match &fetches[k] {
                    Some(fetch) => Scraped {
                        generation: fetch.generation,
                        at: fetch.at,
                        result: fetch.results[pos].clone(),
                    },
                    None => {
                        // This request's deadline came before the shared fetch finished: for
                        // this scrape the upstream timed out (the fetch still counts its own
                        // result when it ends).
                        let timeout = self.inner.upstreams[u].timeout;
                        let limit = budget.map_or(timeout, |b| b.limit.min(timeout));
                        let result = Err(ScrapeError::Timeout(limit));
                        record(&self.inner, u, &result, limit, Read::Deadline, None);
                        Scraped {
                            generation: next_generation(),
                            at: Instant::now(),
                            result,
                        }
                    }
                }
            })
            .collect()
    }
}
