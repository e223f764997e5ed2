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
//! refresh starts behind it (see [`Reuse`]). The engine then sees at most one request per
//! `min_interval` however many readers there are, and readers rarely wait for it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures_util::FutureExt;
use futures_util::future::{BoxFuture, Shared};

use crate::config::{Config, UpstreamConfig, Url};
use crate::expfmt::{
    self, AddedLabel, Exposition, PairHasher, ParseError, ParseOptions, Selection,
};
use crate::fetch::{Buffers, Fetched, get};
pub use crate::fetch::{ScrapeError, http_client};
use crate::relabel::{self, Page, RuleSet};
use crate::status::history::{LastScrape, Outcome, Point, Recorded};
use crate::telemetry::Telemetry;

/// What one upstream got from one fetch: its page as parsed and as its rules leave it.
pub type UpstreamResult = Result<Arc<Page>, ScrapeError>;

/// One completed fetch of a URL, parsed for every upstream that shares it.
#[derive(Debug)]
pub struct Fetch {
    /// Unique per fetch: equal generations mean the very same results.
    pub generation: u64,
    /// When the fetch finished.
    pub at: Instant,
    /// How long it took.
    pub took: Duration,
    /// Per upstream of the target, in the order of `Target::upstreams`.
    pub results: Vec<UpstreamResult>,
}

type SharedFetch = Shared<BoxFuture<'static, Arc<Fetch>>>;

static GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

fn next_generation() -> u64 {
    GENERATION.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
}

/// One upstream's part of a scrape.
#[derive(Debug, Clone)]
pub struct Scraped {
    /// The generation of the fetch the result came from (a fresh one for a result made here).
    pub generation: u64,
    /// When that fetch finished: the age of the data is measured from here.
    pub at: Instant,
    pub result: UpstreamResult,
}

/// What a request does with its target's last completed fetch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reuse {
    /// Younger than `min_interval`: answered with it.
    Fresh,
    /// Younger than `min_interval` plus the longer of `min_interval` and twice what the fetch
    /// took: answered with it at once, and a refresh starts (unless one is running), so that
    /// later requests get newer data without waiting for the engine, even a slow one.
    Stale,
    /// Older, or `min_interval` is zero: the request waits for a fetch.
    No,
}

impl Reuse {
    fn of(age: Duration, min_interval: Duration, took: Duration) -> Reuse {
        if min_interval.is_zero() {
            Reuse::No
        } else if age < min_interval {
            Reuse::Fresh
        } else if age < min_interval.saturating_add(min_interval.max(took.saturating_mul(2))) {
            Reuse::Stale
        } else {
            Reuse::No
        }
    }
}

#[derive(Default)]
struct SlotState {
    last: Option<Arc<Fetch>>,
    inflight: Option<SharedFetch>,
    /// The last fetch whose body was at most [`PRIOR_MAX_BYTES`], for the next one to parse
    /// after ([`expfmt::parse_after`]).
    prior: Option<Arc<Fetch>>,
}

/// The largest body kept for the next fetch of its URL to parse after: the next parse then
/// reads only the values of the lines whose series are the same (most of a page; a 740 KB
/// vLLM page parses in 0.24 ms on one thread instead of 0.46 ms, or 0.28 ms on two), for the
/// memory of one body more. Above this, memory counts for more than the time.
const PRIOR_MAX_BYTES: usize = 4 << 20;

/// One URL to fetch and its reuse state: a target's full page, or one set of selected families.
struct Slot {
    url: Url,
    /// Whether this fetch asks the engine for selected families only.
    selective: bool,
    buffers: Buffers,
    state: Mutex<SlotState>,
}

impl Slot {
    fn new(url: Url, selective: bool) -> Arc<Slot> {
        Arc::new(Slot {
            url,
            selective,
            buffers: Buffers::default(),
            state: Mutex::new(SlotState::default()),
        })
    }
}

/// At most this many selected name sets per target keep a slot of their own.
const MAX_NAME_SETS: usize = 8;

/// How long a check that the engine's selection (`name[]`) returns what the full page has
/// stays valid.
const SELECTION_CHECK_EVERY: Duration = Duration::from_secs(60);

/// One selected name set of a target (`?name=`), fetched from the engine with
/// prometheus_client's `name[]` parameter so it renders only those families.
struct NameSet {
    selection: Selection,
    slot: Arc<Slot>,
    /// When the engine's selection was last compared with its full page, and whether it held
    /// every family the page has.
    checked: Option<(Instant, bool)>,
}

/// A distinct URL and the upstreams that read it.
struct Target {
    timeout: Duration,
    min_interval: Duration,
    /// Indexes into `Scraper::upstreams`.
    upstreams: Vec<usize>,
    full: Arc<Slot>,
    /// Most recently used last.
    name_sets: Mutex<Vec<NameSet>>,
}

/// Per upstream state, for logging state changes once and for the status page.
#[derive(Debug, Default)]
struct UpstreamState {
    up: Option<bool>,
    last_error: Option<String>,
    last_success: Option<Instant>,
    recorded: Recorded,
}

/// The state of an upstream as the last fetch left it.
#[derive(Debug, Clone, Default)]
pub struct UpstreamStatus {
    /// `None` before the first fetch finished.
    pub up: Option<bool>,
    /// The error of the last failed fetch, kept after the upstream recovers.
    pub last_error: Option<String>,
    /// When the last failed fetch finished.
    pub last_error_at: Option<SystemTime>,
    /// Since when the fetches have succeeded, or failed, as the last one did.
    pub state_since: Option<SystemTime>,
    /// When the upstream last answered successfully.
    pub last_success: Option<Instant>,
    /// The last fetch.
    pub last: Option<LastScrape>,
    /// The decoded size of the last full page that arrived.
    pub response_bytes: Option<u64>,
    /// The seconds of the last few minutes that saw fetches, oldest first.
    pub history: Vec<Point>,
}

struct Inner {
    client: reqwest::Client,
    telemetry: Telemetry,
    upstreams: Vec<UpstreamConfig>,
    keep: Vec<Vec<String>>,
    states: Vec<Mutex<UpstreamState>>,
    limits: crate::config::Limits,
    added_names: Vec<Vec<u8>>,
    hasher: PairHasher,
    /// Per upstream: its `metric_relabel_configs` and the top-level ones, if any.
    rules: Vec<Option<RuleSet>>,
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
    /// A scraper for the upstreams of `config`.
    pub fn new(config: &Config, client: reqwest::Client, telemetry: Telemetry) -> Scraper {
        let mut targets: Vec<Target> = Vec::new();
        let mut position = Vec::with_capacity(config.upstreams.len());
        for (i, u) in config.upstreams.iter().enumerate() {
            telemetry.register_upstream(&u.name);
            match targets.iter_mut().position(|t| t.full.url == u.url) {
                Some(t) => {
                    let target = &mut targets[t];
                    target.timeout = target.timeout.max(u.timeout);
                    target.min_interval = target.min_interval.min(u.min_interval);
                    position.push((t, target.upstreams.len()));
                    target.upstreams.push(i);
                }
                None => {
                    position.push((targets.len(), 0));
                    targets.push(Target {
                        timeout: u.timeout,
                        min_interval: u.min_interval,
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
                telemetry,
                upstreams: config.upstreams.clone(),
                keep: config.upstreams.iter().map(|u| u.keep.clone()).collect(),
                states: config
                    .upstreams
                    .iter()
                    .map(|_| Mutex::new(UpstreamState::default()))
                    .collect(),
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

    /// What the last fetches of upstream `i` left.
    pub fn status(&self, i: usize) -> UpstreamStatus {
        let now = Instant::now();
        let s = self.inner.states[i].lock().expect("upstream state lock");
        UpstreamStatus {
            up: s.up,
            last_error: s.last_error.clone(),
            last_error_at: s.recorded.last_error_at(),
            state_since: s.recorded.since(),
            last_success: s.last_success,
            last: s.recorded.last(),
            response_bytes: s.recorded.response_bytes(),
            history: s.recorded.points(now),
        }
    }

    /// When upstream `i` last answered successfully.
    pub fn last_success(&self, i: usize) -> Option<Instant> {
        self.inner.states[i]
            .lock()
            .expect("upstream state lock")
            .last_success
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
        budget: Option<Duration>,
    ) -> Vec<Scraped> {
        let mut targets: Vec<usize> = which.iter().map(|&u| self.position[u].0).collect();
        targets.sort_unstable();
        targets.dedup();
        let fetches = futures_util::future::join_all(targets.iter().map(|&t| async move {
            match names {
                None => {
                    self.fetch(&self.targets[t], &self.targets[t].full, budget)
                        .await
                }
                Some(names) => self.fetch_selected(t, names, budget).await,
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
                        let limit = budget.unwrap_or(self.inner.upstreams[u].timeout);
                        let err = ScrapeError::Timeout(limit);
                        let name = &self.inner.upstreams[u].name;
                        self.inner
                            .telemetry
                            .scrapes
                            .with_label_values(&[name, err.reason()])
                            .inc();
                        self.inner
                            .telemetry
                            .upstream_up
                            .with_label_values(&[name])
                            .set(0);
                        Scraped {
                            generation: next_generation(),
                            at: Instant::now(),
                            result: Err(err),
                        }
                    }
                }
            })
            .collect()
    }

    /// A selective read of target `t`: from the engine's own selection when it has been shown
    /// to agree with the full page, else from the full page (and the comparison is made).
    async fn fetch_selected(
        &self,
        t: usize,
        selection: &Selection,
        budget: Option<Duration>,
    ) -> Option<Arc<Fetch>> {
        let target = &self.targets[t];
        let (slot, checked) = {
            let mut sets = target.name_sets.lock().expect("name sets lock");
            let set = match sets.iter().position(|s| s.selection == *selection) {
                Some(i) => sets.remove(i),
                None => NameSet {
                    slot: Slot::new(selection_url(&target.full.url, selection), true),
                    selection: selection.clone(),
                    checked: None,
                },
            };
            let checked = set
                .checked
                .filter(|(at, _)| at.elapsed() < SELECTION_CHECK_EVERY)
                .map(|(_, agreed)| agreed);
            let slot = set.slot.clone();
            if sets.len() == MAX_NAME_SETS {
                sets.remove(0);
            }
            sets.push(set);
            (slot, checked)
        };
        // Renamed series come from families other than those named: only the page has them.
        let renames = target.upstreams.iter().any(|&u| self.renames(u));
        match checked {
            _ if renames => self.fetch(target, &target.full, budget).await,
            Some(true) => self.fetch(target, &slot, budget).await,
            Some(false) => self.fetch(target, &target.full, budget).await,
            None => {
                let (full, selected) = tokio::join!(
                    self.fetch(target, &target.full, budget),
                    self.fetch(target, &slot, budget)
                );
                if let Some(full) = &full
                    && let Some(agreed) = selection_agrees(full, selected.as_deref(), selection)
                {
                    if !agreed {
                        tracing::warn!(
                            url = %target.full.url,
                            "the upstream's name[] selection fails or lacks families its full \
                             page has: these selective reads use the full page"
                        );
                    }
                    let mut sets = target.name_sets.lock().expect("name sets lock");
                    if let Some(set) = sets.iter_mut().find(|s| Arc::ptr_eq(&s.slot, &slot)) {
                        set.checked = Some((Instant::now(), agreed));
                    }
                }
                full
            }
        }
    }

    /// Reuses, joins or starts the fetch of `slot`; `None` when `budget` ran out first.
    async fn fetch(
        &self,
        target: &Arc<Target>,
        slot: &Arc<Slot>,
        budget: Option<Duration>,
    ) -> Option<Arc<Fetch>> {
        let timeout = budget.map_or(target.timeout, |b| b.min(target.timeout));
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
                        // Nobody waits for this one: it gets the upstream's whole timeout.
                        state.inflight = Some(self.start(target, slot, target.timeout));
                    }
                    return Some(last);
                }
                _ => state
                    .inflight
                    .get_or_insert_with(|| self.start(target, slot, timeout))
                    .clone(),
            }
        };
        match tokio::time::timeout(timeout + Duration::from_millis(50), shared).await {
            Ok(fetch) if fetch.results.len() == target.upstreams.len() => Some(fetch),
            _ => None,
        }
    }

    /// Starts fetching `slot` in a task of its own; the task records the result in the slot
    /// when it ends, whether or not anyone still waits for it.
    fn start(&self, target: &Arc<Target>, slot: &Arc<Slot>, timeout: Duration) -> SharedFetch {
        let task = tokio::spawn(run_fetch(
            self.inner.clone(),
            target.clone(),
            slot.clone(),
            timeout,
        ));
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
}

/// `url` asking for the samples of `selection` only, the way prometheus_client's exposition
/// handlers take it (`name[]` selects sample names).
fn selection_url(url: &Url, selection: &Selection) -> Url {
    let mut url = url.clone();
    {
        let mut query = url.query_pairs_mut();
        for name in selection.sample_names() {
            query.append_pair("name[]", &name);
        }
    }
    url
}

/// Whether a selective fetch holds every family of the full page that `selection` selects, per
/// upstream; `None` when the full fetch failed and nothing can be said.
fn selection_agrees(full: &Fetch, selected: Option<&Fetch>, selection: &Selection) -> Option<bool> {
    if full.results.iter().any(Result::is_err) {
        return None;
    }
    let Some(selected) = selected else {
        return Some(false);
    };
    Some(
        full.results.len() == selected.results.len()
            && full.results.iter().zip(&selected.results).all(|(f, s)| {
                let (Ok(f), Ok(s)) = (f, s) else {
                    return false;
                };
                let has = selected_families(&s.parsed, selection);
                selected_families(&f.parsed, selection)
                    .iter()
                    .all(|n| has.contains(n))
            }),
    )
}

/// The text names of the families in `exp` that `selection` selects and that have samples.
fn selected_families(exp: &Exposition, selection: &Selection) -> Vec<Vec<u8>> {
    exp.families()
        .iter()
        .filter(|f| f.samples.1 > f.samples.0)
        .map(|f| {
            let (name, suffix) = exp.family_name(f);
            [name, suffix].concat()
        })
        .filter(|text| selection.selects(text))
        .collect()
}

/// Fetches a target once, parses it for each of its upstreams, records the outcome.
async fn run_fetch(
    inner: Arc<Inner>,
    target: Arc<Target>,
    slot: Arc<Slot>,
    timeout: Duration,
) -> Arc<Fetch> {
    let started = Instant::now();
    let max_body = inner.limits.max_body_bytes;
    let fetched = match tokio::time::timeout(
        timeout,
        get(&inner.client, &slot.url, &slot.buffers, timeout, max_body),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => Err(ScrapeError::Timeout(timeout)),
    };
    let elapsed = started.elapsed();
    let prior = slot.state.lock().expect("slot state lock").prior.clone();
    let body_len = fetched.as_ref().ok().map(|f| f.body.len());
    let results: Vec<UpstreamResult> = match fetched {
        Ok(fetched) => {
            if fetched.mislabelled {
                for &u in &target.upstreams {
                    let name = &inner.upstreams[u].name;
                    inner
                        .telemetry
                        .format_mismatches
                        .with_label_values(&[name])
                        .inc();
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
    for (&u, result) in target.upstreams.iter().zip(&results) {
        record(&inner, u, result, elapsed, slot.selective, body_len);
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

/// `parse`'s result, or an error if it panicked: a bug in the parser makes that upstream down
/// for this scrape instead of failing the request, and the fetch still ends (the requests
/// waiting on it get their answer, and the next one starts a fetch of its own).
fn contained(parse: impl FnOnce() -> UpstreamResult) -> UpstreamResult {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(parse)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(ScrapeError::Body(format!("parser failed: {what}")))
    })
}

fn parse_for(
    inner: &Inner,
    u: usize,
    fetched: &Fetched,
    prior: Option<&Arc<Exposition>>,
) -> UpstreamResult {
    let added: Vec<&[u8]> = inner.added_names.iter().map(|n| n.as_slice()).collect();
    let opts = ParseOptions {
        keep: &inner.keep[u],
        limits: inner.limits.parse_limits(),
        added_labels: &added,
        hasher: inner.hasher,
        allow_reserved: false,
    };
    let exp = match expfmt::parse_after(fetched.body.clone(), fetched.format, &opts, prior) {
        Ok(exp) => exp,
        Err(err) => return Err(too_large(err)),
    };
    let stats = exp.stats();
    // JSON or an HTML error page: every line malformed, nothing else. An empty body is an
    // empty exposition.
    if stats.kept == 0 && stats.dropped == 0 && stats.malformed > 0 && exp.families().is_empty() {
        return Err(ScrapeError::NotExposition {
            content_type: fetched.content_type.clone(),
            malformed: stats.malformed,
        });
    }
    let exp = Arc::new(exp);
    let page = match &inner.rules[u] {
        None => Ok(Page::unchanged(exp)),
        Some(rules) => relabel::relabel(exp, rules, opts.limits, opts.hasher),
    };
    page.map(Arc::new).map_err(too_large)
}

/// A body over one of the parse's limits.
fn too_large(err: ParseError) -> ScrapeError {
    match err {
        ParseError::TooLarge { limit, line } => {
            let limit = match limit {
                expfmt::Limit::LineBytes => "line length",
                expfmt::Limit::Series => "series",
                expfmt::Limit::Families => "families",
                expfmt::Limit::Labels => "label count",
                expfmt::Limit::LabelValueBytes => "label value length",
            };
            tracing::debug!(line, limit, "upstream body over a limit");
            ScrapeError::TooLarge { limit }
        }
        ParseError::BodyTooLarge => ScrapeError::TooLarge { limit: "body size" },
    }
}

/// Updates metrics and the status page's record, and logs a line when the upstream changes
/// state. A selective fetch counts as a request to the engine, but its duration, size and
/// series are not the full page's. `body_len`: the decoded body's size, when one arrived.
fn record(
    inner: &Inner,
    u: usize,
    result: &UpstreamResult,
    elapsed: Duration,
    selective: bool,
    body_len: Option<usize>,
) {
    let t = &inner.telemetry;
    let name = inner.upstreams[u].name.as_str();
    let up = result.is_ok();
    let reason = result.as_ref().map_or_else(|e| e.reason(), |_| "success");
    // Until a full `/metrics` read merges the page (and takes out conflicts and duplicates),
    // the parse's count less what the rules dropped is the best one the status page can show.
    let kept = result.as_ref().ok().map(|page| {
        page.parsed
            .stats()
            .kept
            .saturating_sub(page.relabel_dropped)
    });
    t.scrapes.with_label_values(&[name, reason]).inc();
    if !selective {
        t.scrape_duration
            .with_label_values(&[name])
            .observe(elapsed.as_secs_f64());
        if let Some(len) = body_len {
            t.response_bytes.with_label_values(&[name]).set(len as i64);
        }
        match result {
            Ok(page) => {
                let s = page.parsed.stats();
                t.set_series(name, "kept", kept.unwrap_or_default());
                t.set_series(name, "dropped", s.dropped);
                t.set_series(name, "malformed", s.malformed);
                t.set_series(name, "relabel_dropped", page.relabel_dropped);
                if s.malformed > 0 {
                    tracing::debug!(
                        upstream = name,
                        malformed = s.malformed,
                        "malformed lines dropped"
                    );
                }
            }
            Err(_) => {
                for outcome in crate::telemetry::SERIES_OUTCOMES {
                    t.set_series(name, outcome, 0);
                }
            }
        }
    }
    t.upstream_up.with_label_values(&[name]).set(up as i64);
    let mut state = inner.states[u].lock().expect("upstream state lock");
    let error = result.as_ref().err().map(|e| e.to_string());
    if state.up != Some(up) {
        match &error {
            None => {
                tracing::info!(upstream = name, url = %inner.upstreams[u].url, "upstream is up")
            }
            Some(err) => {
                tracing::warn!(upstream = name, url = %inner.upstreams[u].url, error = %err, "upstream is down")
            }
        }
    }
    state.up = Some(up);
    if up {
        state.last_success = Some(Instant::now());
    } else {
        state.last_error = error;
    }
    state.recorded.record(Outcome {
        result: reason,
        took: elapsed,
        selective,
        kept,
        body_bytes: body_len.map(|n| n as u64),
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parser_panic_is_that_upstreams_error() {
        let panicked = contained(|| panic!("index out of bounds"));
        match panicked {
            Err(e @ ScrapeError::Body(_)) => {
                assert_eq!(e.reason(), "body_error");
                assert_eq!(
                    e.to_string(),
                    "reading the response failed: parser failed: index out of bounds"
                );
            }
            other => panic!("expected a body error, got {other:?}"),
        }
        let fine = contained(|| Err(ScrapeError::Status(503)));
        assert!(matches!(fine, Err(ScrapeError::Status(503))));
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

    #[test]
    fn a_selection_asks_for_every_sample_name_of_the_families() {
        let url = Url::parse("http://127.0.0.1:8000/metrics?x=1").expect("url");
        let selection = Selection::new(["vllm:h", "vllm:c_total", "vllm:d"]);
        let url = selection_url(&url, &selection);
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        assert_eq!(pairs[0], ("x".to_string(), "1".to_string()));
        assert!(pairs[1..].iter().all(|(k, _)| k == "name[]"));
        let asked: Vec<String> = pairs[1..].iter().map(|(_, v)| v.clone()).collect();
        assert_eq!(asked, selection.sample_names().collect::<Vec<_>>());
        assert!(asked.contains(&"vllm:h_bucket".to_string()));
    }
}
