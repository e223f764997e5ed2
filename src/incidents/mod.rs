//! When an engine wedges, the evidence: an incident opens when an upstream's verdict turns bad
//! (stalled, canary failed, down after having been up) or its engine restarted (its
//! `process_start_time_seconds` changed), and closes once the upstream has been back for
//! [`SETTLE_CHECKS`] checks. One per upstream at a time: a flapping engine adds to the open
//! one's timeline. Each incident keeps the verdict timeline, the check loop's readings of the
//! upstream for [`BEFORE`] before the opening and during it, each canary's timing, the engine's
//! page at the last check before the opening and at the opening, sysport's version and its
//! effective configuration as `check-config` prints it.
//!
//! `health` tells it three things, each a plain-data call: a verdict changed
//! ([`Incidents::verdict`]), a check read the upstream ([`Incidents::check`]), a canary ended
//! ([`Incidents::canary`]). It judges nothing itself but the engine's start time, and tells
//! who asks of each restart it sees ([`Incidents::restarts`], [`Incidents::watch_restarts`]:
//! `/metadata` reads the engine again).

mod bundle;
pub(crate) mod config;
mod incident;
mod scan;
mod stacks;
mod store;

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use prometheus::{IntCounterVec, Opts};
use serde_json::Value;

pub(crate) use incident::{CanaryRun, Change, Incident, Kind, Row};
pub(crate) use store::Kept;
use store::Store;

use crate::config::IncidentsConfig;
use crate::model::Reading;
use crate::telemetry::Telemetry;

/// How long before an opening the readings and canaries are kept.
pub(crate) const BEFORE: Duration = Duration::from_secs(600);
/// Checks in a row with a good verdict that close an incident.
pub(crate) const SETTLE_CHECKS: u32 = 3;

/// What one check of an upstream saw, as `health` tells it.
#[derive(Debug, Clone)]
pub(crate) struct Check {
    pub at: SystemTime,
    /// `None` when the check passed, else its error in words.
    pub health_error: Option<String>,
    pub reading: Option<Reading>,
    /// The engine's page as fetched (decoded), when the check read one.
    pub page: Option<Bytes>,
}

impl Check {
    /// What a check left: its result, its reading (or why there is none), its page.
    pub(crate) fn of<E: std::fmt::Display, U>(
        result: &Result<(), E>,
        reading: &Option<Result<Reading, U>>,
        page: &Option<crate::scrape::UpstreamResult>,
    ) -> Check {
        Check {
            at: SystemTime::now(),
            health_error: result.as_ref().err().map(ToString::to_string),
            reading: reading.as_ref().and_then(|r| r.as_ref().ok().copied()),
            page: page
                .as_ref()
                .and_then(|p| p.as_ref().ok())
                .map(|p| p.parsed.body().clone()),
        }
    }
}

/// Every upstream's incidents.
pub(crate) struct Incidents {
    inner: Mutex<Inner>,
    /// With `incidents.dir`: the directory, written outside `inner`'s lock, by [`Writer`].
    store: Arc<Mutex<Option<Store>>>,
    /// The thread that writes to `store`, started when a directory is first configured.
    writer: Mutex<Option<Writer>>,
    /// py-spy and its limits, as configured.
    taker: Mutex<Option<Arc<stacks::Taker>>>,
    /// Itself, for the stacks taken after an opening to find their incident.
    me: Weak<Incidents>,
    opened: IntCounterVec,
    /// Restarts seen, of every upstream together: changed at each one.
    restarted: tokio::sync::watch::Sender<u64>,
}

/// The thread that writes incidents to the directory, in the order asked; it ends when its
/// [`Incidents`] is dropped.
struct Writer {
    /// `None` when no thread could be started: the caller writes.
    jobs: Option<std::sync::mpsc::Sender<Job>>,
}

enum Job {
    Write(Arc<Kept>),
    /// Answered once every job before it is done.
    Flush(tokio::sync::oneshot::Sender<()>),
}

impl Writer {
    fn start(store: Arc<Mutex<Option<Store>>>) -> Writer {
        let (jobs, queue) = std::sync::mpsc::channel::<Job>();
        let started = std::thread::Builder::new()
            .name("sysport-incidents".into())
            .spawn(move || {
                for job in queue {
                    match job {
                        Job::Write(kept) => {
                            if let Some(store) = store.lock().expect("store lock").as_mut() {
                                store.write(&kept);
                            }
                        }
                        Job::Flush(done) => {
                            let _ = done.send(());
                        }
                    }
                }
            });
        match started {
            Ok(_) => Writer { jobs: Some(jobs) },
            Err(err) => {
                tracing::warn!(error = %err, "no thread for writing incidents: written in line");
                Writer { jobs: None }
            }
        }
    }

    /// Queues `job`; gives it back when there is no thread to do it.
    fn send(&self, job: Job) -> Result<(), Job> {
        match &self.jobs {
            Some(jobs) => jobs.send(job).map_err(|e| e.0),
            None => Err(job),
        }
    }
}

struct Inner {
    tracks: HashMap<String, Track>,
    /// Closed incidents, oldest first, at most `keep`.
    closed: VecDeque<Arc<Kept>>,
    keep: usize,
    seq: u64,
    config: String,
    /// Where each upstream's engine's processes are found: its port, or its configured
    /// command-line pattern.
    targets: HashMap<String, Arc<stacks::Target>>,
}

/// One upstream: what came before, and its open incident.
#[derive(Default)]
struct Track {
    verdict: &'static str,
    bad: bool,
    was_up: bool,
    rows: VecDeque<Row>,
    canaries: VecDeque<CanaryRun>,
    last_page: Option<(SystemTime, Bytes)>,
    start_time: Option<f64>,
    /// Restarts seen (changes of `start_time`).
    restarts: u64,
    open: Option<Incident>,
    good_checks: u32,
    /// The next check's page is the page at the opening.
    wants_page: bool,
}

impl std::fmt::Debug for Incidents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Incidents").finish_non_exhaustive()
    }
}

impl Incidents {
    /// No incident yet, and no stacks taken; `dynamo_sysport_incidents_total` registered with
    /// `telemetry`.
    #[cfg(test)]
    pub(crate) fn new(telemetry: &Telemetry) -> Incidents {
        Incidents::with_self(telemetry, Weak::new())
    }

    /// One that takes the engine's stacks at each opening (see [`Incidents::configure`]).
    pub(crate) fn shared(telemetry: &Telemetry) -> Arc<Incidents> {
        Arc::new_cyclic(|me| Incidents::with_self(telemetry, me.clone()))
    }

    fn with_self(telemetry: &Telemetry, me: Weak<Incidents>) -> Incidents {
        let opened = IntCounterVec::new(
            Opts::new(
                "incidents_total",
                "Incidents opened for the upstream (GET /incidents), by kind: stalled, \
                 canary_failed, down (after having been up), restarted (the engine's process \
                 start time changed).",
            )
            .namespace("dynamo_sysport"),
            &["upstream", "kind"],
        )
        .expect("valid metric");
        telemetry.register(Box::new(opened.clone()));
        Incidents {
            inner: Mutex::new(Inner {
                tracks: HashMap::new(),
                closed: VecDeque::new(),
                keep: IncidentsConfig::default().keep,
                seq: 0,
                config: String::new(),
                targets: HashMap::new(),
            }),
            store: Arc::new(Mutex::new(None)),
            writer: Mutex::new(None),
            taker: Mutex::new(None),
            me,
            opened,
            restarted: tokio::sync::watch::channel(0).0,
        }
    }

    /// How many times `upstream`'s engine was seen to restart (its process start time changed
    /// between two checks).
    pub(crate) fn restarts(&self, upstream: &str) -> u64 {
        self.lock().tracks.get(upstream).map_or(0, |t| t.restarts)
    }

    /// Changes at each restart of any upstream's engine.
    pub(crate) fn watch_restarts(&self) -> tokio::sync::watch::Receiver<u64> {
        self.restarted.subscribe()
    }

    /// Puts `config` in force, and `rendered` (the effective configuration as `check-config`
    /// prints it) for the next incidents to keep. A directory new to it is read back.
    /// `ports` are the upstreams' ports, by name, where their engines' processes are found but
    /// for those `incidents.processes` names.
    pub(crate) fn configure(
        &self,
        config: &IncidentsConfig,
        rendered: String,
        ports: HashMap<String, u16>,
    ) {
        *self.taker.lock().expect("taker lock") = Some(Arc::new(stacks::Taker::new(
            config.py_spy.clone(),
            config.stacks_timeout,
        )));
        let mut store = self.store.lock().expect("store lock");
        let read = match (&mut *store, &config.dir) {
            (Some(s), Some(dir)) if s.dir == *dir => {
                s.keep = config.keep;
                s.max_bytes = config.max_bytes;
                Vec::new()
            }
            (_, Some(dir)) => {
                (self.writer.lock().expect("writer lock"))
                    .get_or_insert_with(|| Writer::start(self.store.clone()));
                let s = store.insert(Store::new(dir.clone(), config.keep, config.max_bytes));
                s.read_back()
            }
            (_, None) => {
                *store = None;
                Vec::new()
            }
        };
        let mut inner = self.lock();
        inner.config = rendered;
        inner.keep = config.keep;
        inner.targets = ports
            .into_iter()
            .map(|(name, port)| (name, Arc::new(stacks::Target::Port(port))))
            .collect();
        for (name, pattern) in &config.processes {
            let pattern = regex::Regex::new(pattern).expect("checked by the configuration");
            let target = Arc::new(stacks::Target::Command(pattern));
            inner.targets.insert(name.clone(), target);
        }
        for kept in read {
            if inner.closed.iter().all(|k| k.id != kept.id) {
                let seq = kept.id.rsplit('-').next().and_then(|s| s.parse().ok());
                inner.seq = inner.seq.max(seq.unwrap_or(0));
                inner.closed.push_back(Arc::new(kept));
            }
        }
        inner.trim();
    }

    /// Has `kept` written to the directory, if there is one, by the writer thread: each write
    /// is synced to disk, which a slow volume can take seconds over, and the checks and
    /// `/status` run on the runtime thread that calls this.
    fn persist(&self, kept: Option<Arc<Kept>>) {
        let Some(kept) = kept else { return };
        // Started when a directory was first configured: without one there is nothing to do.
        let sent = {
            let writer = self.writer.lock().expect("writer lock");
            let Some(writer) = writer.as_ref() else {
                return;
            };
            writer.send(Job::Write(kept))
        };
        // No thread: written here (the writer's lock let go first, as `configure` takes the
        // store's before it).
        if let Err(Job::Write(kept)) = sent
            && let Some(store) = self.store.lock().expect("store lock").as_mut()
        {
            store.write(&kept);
        }
    }

    /// Waits until every write asked for so far is done: at shutdown, so that an incident
    /// closed just before it is on disk for the next start.
    pub(crate) async fn flush(&self) {
        let (done, finished) = tokio::sync::oneshot::channel();
        let sent = match self.writer.lock().expect("writer lock").as_ref() {
            Some(writer) => writer.send(Job::Flush(done)).is_ok(),
            None => false,
        };
        if sent {
            let _ = finished.await;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("incidents lock")
    }

    /// `upstream`'s verdict changed to `verdict` (its word), `bad` or not, with `reason`.
    pub(crate) fn verdict(
        &self,
        upstream: &str,
        verdict: &'static str,
        bad: bool,
        reason: Option<String>,
    ) {
        let mut inner = self.lock();
        let change = Change {
            at: SystemTime::now(),
            verdict,
            reason,
        };
        let track = inner.track(upstream);
        track.verdict = verdict;
        track.bad = bad;
        if matches!(verdict, "up" | "asleep") {
            track.was_up = true;
        }
        if let Some(open) = track.open.as_mut() {
            open.push_change(change);
            track.good_checks = 0;
            return;
        }
        let Some(kind) = Kind::of_verdict(verdict).filter(|_| bad) else {
            return;
        };
        if kind == Kind::Down && !track.was_up {
            return;
        }
        self.open(&mut inner, upstream, kind, change);
    }

    /// A check of `upstream` read `check`.
    pub(crate) fn check(&self, upstream: &str, check: Check) {
        let (kept, restarted) = self.check_locked(upstream, check);
        if restarted {
            self.restarted.send_modify(|n| *n += 1);
        }
        self.persist(kept);
    }

    /// [`Incidents::check`] under the lock; what is to be written, and whether the engine
    /// restarted.
    fn check_locked(&self, upstream: &str, check: Check) -> (Option<Arc<Kept>>, bool) {
        let mut inner = self.lock();
        let body = check.page.as_deref().unwrap_or_default();
        let started = scan::value(body, "process_start_time_seconds");
        let row = Row {
            at: check.at,
            health_error: check.health_error,
            reading: check.reading,
            kv_cache: scan::kv_cache(body),
        };
        let track = inner.track(upstream);
        let restarted = match (track.start_time, started) {
            (Some(old), Some(new)) if old != new => Some((old, new)),
            _ => None,
        };
        if started.is_some() {
            track.start_time = started;
        }
        if restarted.is_some() {
            track.restarts += 1;
        }
        if let Some((old, new)) = restarted {
            let change = Change {
                at: check.at,
                verdict: "restarted",
                reason: Some(format!(
                    "engine restarted: process_start_time_seconds {old} → {new}"
                )),
            };
            match track.open.as_mut() {
                Some(open) => open.push_change(change),
                None => self.open(&mut inner, upstream, Kind::Restarted, change),
            }
        }
        let track = inner.track(upstream);
        let page = check.page.map(|p| (check.at, p));
        let mut write = None;
        match track.open.as_mut() {
            Some(open) => {
                if track.wants_page {
                    open.page_opening = page.as_ref().map(|(at, p)| compress(*at, p));
                    track.wants_page = false;
                    // Kept as of its opening, should sysport stop before it closes.
                    write = Some(Arc::new(Kept::of(open)));
                }
                open.push_row(row);
                if track.bad {
                    track.good_checks = 0;
                } else {
                    track.good_checks += 1;
                }
            }
            None => {
                track.rows.push_back(row);
                prune(&mut track.rows, |r| r.at, incident::MAX_READINGS, check.at);
            }
        }
        track.last_page = page;
        if track.open.is_some() && track.good_checks >= SETTLE_CHECKS {
            let mut done = track.open.take().expect("open");
            track.good_checks = 0;
            done.closed = Some(SystemTime::now());
            let took = done.closed.and_then(|c| c.duration_since(done.opened).ok());
            tracing::info!(
                upstream,
                incident = %done.id,
                kind = done.kind.word(),
                duration_seconds = took.unwrap_or_default().as_secs_f64(),
                "incident closed"
            );
            let kept = Arc::new(Kept::of(&done));
            inner.closed.push_back(kept.clone());
            inner.trim();
            write = Some(kept);
        }
        (write, restarted.is_some())
    }

    /// A canary of `upstream` ended.
    pub(crate) fn canary(&self, upstream: &str, run: CanaryRun) {
        let mut inner = self.lock();
        let track = inner.track(upstream);
        match track.open.as_mut() {
            Some(open) => open.push_canary(run),
            None => {
                let at = run.sent;
                track.canaries.push_back(run);
                prune(&mut track.canaries, |c| c.sent, incident::MAX_CANARIES, at);
            }
        }
    }

    /// Opens an incident of `kind` for `upstream`, with what came before.
    fn open(&self, inner: &mut Inner, upstream: &str, kind: Kind, change: Change) {
        inner.seq += 1;
        let secs = change
            .at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let id = format!("{secs}-{}", inner.seq);
        let config = inner.config.clone();
        let track = inner.track(upstream);
        let incident = Incident {
            id: id.clone(),
            upstream: upstream.to_owned(),
            kind,
            opened: change.at,
            closed: None,
            timeline: vec![change],
            timeline_dropped: 0,
            before: track.rows.drain(..).collect(),
            during: VecDeque::new(),
            during_dropped: 0,
            canaries_before: track.canaries.drain(..).collect(),
            canaries: VecDeque::new(),
            canaries_dropped: 0,
            page_before: track.last_page.as_ref().map(|(at, p)| compress(*at, p)),
            page_opening: None,
            stacks: None,
            version: env!("CARGO_PKG_VERSION"),
            config,
        };
        let reason = incident.timeline[0].reason.clone().unwrap_or_default();
        tracing::warn!(upstream, incident = %id, kind = kind.word(), %reason, "incident opened");
        self.opened
            .with_label_values(&[upstream, kind.word()])
            .inc();
        track.open = Some(incident);
        track.wants_page = true;
        track.good_checks = 0;
        let target = inner.targets.get(upstream).cloned();
        self.take_stacks(upstream, &id, target);
    }

    /// Takes the engine's stacks on the runtime, and adds them to incident `id` when done.
    fn take_stacks(&self, upstream: &str, id: &str, target: Option<Arc<stacks::Target>>) {
        let (Some(me), Ok(runtime)) = (self.me.upgrade(), tokio::runtime::Handle::try_current())
        else {
            return;
        };
        let taker = self.taker.lock().expect("taker lock").clone();
        let (Some(taker), Some(target)) = (taker, target) else {
            return;
        };
        let (upstream, id) = (upstream.to_owned(), id.to_owned());
        runtime.spawn(async move {
            let taken = taker.take(&target).await;
            let kept = {
                let mut inner = me.lock();
                let track = inner.track(&upstream);
                track
                    .open
                    .as_mut()
                    .filter(|open| open.id == id)
                    .map(|open| {
                        open.stacks = Some(taken);
                        Arc::new(Kept::of(open))
                    })
            };
            me.persist(kept);
        });
    }

    /// Every incident, open and closed, newest first, in short.
    pub(crate) fn list(&self) -> Value {
        let inner = self.lock();
        let open = inner.tracks.values().filter_map(|t| t.open.as_ref());
        let mut all: Vec<(f64, &str, Value)> = open
            .map(|i| (unix(i.opened), i.id.as_str(), i.summary()))
            .chain((inner.closed.iter()).map(|k| (k.opened, k.id.as_str(), k.summary.clone())))
            .collect();
        all.sort_by(|a, b| {
            b.0.total_cmp(&a.0)
                .then_with(|| order(b.1).cmp(&order(a.1)))
        });
        all.into_iter().map(|(_, _, v)| v).collect()
    }

    /// Incident `id` as served: its JSON text and its bundle (a gzip-compressed tar of the
    /// JSON and the pages). An open one is made now; a closed one is as it was first served.
    pub(crate) fn get(&self, id: &str) -> Option<Arc<Kept>> {
        let inner = self.lock();
        let open = inner.tracks.values().filter_map(|t| t.open.as_ref());
        if let Some(open) = open.into_iter().find(|i| i.id == id) {
            return Some(Arc::new(Kept::of(open)));
        }
        inner.closed.iter().find(|k| k.id == id).cloned()
    }
}

/// An id's sequence number, which orders incidents opened in the same second.
fn order(id: &str) -> u64 {
    id.rsplit('-')
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

impl Inner {
    /// Drops the oldest closed incidents beyond `keep`.
    fn trim(&mut self) {
        while self.closed.len() > self.keep {
            self.closed.pop_front();
        }
    }

    fn track(&mut self, upstream: &str) -> &mut Track {
        if !self.tracks.contains_key(upstream) {
            self.tracks.insert(upstream.to_owned(), Track::default());
        }
        self.tracks.get_mut(upstream).expect("inserted")
    }
}

/// Drops what is older than [`BEFORE`] as of `now`, and the oldest beyond `max`.
fn prune<T>(ring: &mut VecDeque<T>, at: impl Fn(&T) -> SystemTime, max: usize, now: SystemTime) {
    while ring.len() > max
        || ring
            .front()
            .is_some_and(|r| now.duration_since(at(r)).is_ok_and(|age| age > BEFORE))
    {
        ring.pop_front();
    }
}

/// `page` gzip-compressed, cut at [`incident::MAX_PAGE_BYTES`].
fn compress(at: SystemTime, page: &Bytes) -> incident::Page {
    use std::io::Write;
    let cut = page.len() > incident::MAX_PAGE_BYTES;
    let kept = &page[..page.len().min(incident::MAX_PAGE_BYTES)];
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(kept).expect("writing to memory");
    incident::Page {
        at,
        gzip: gz.finish().expect("writing to memory"),
        bytes: page.len(),
        cut,
    }
}

#[cfg(test)]
mod tests;
