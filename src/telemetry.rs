//! sysport's own metrics, all under `dynamo_sysport_`.
//!
//! They live in one registry of their own, so nothing an upstream sends can reach it, and are
//! rendered after the engine families on every `/metrics`. What an upstream's reads left
//! (`upstream_up`, `_response_bytes`, `_series`, `_last_fetch_age_seconds`) is read from the
//! scraper's records as the page is made (`upstreams`); the registry keeps the events (counters
//! and histograms) and the families other modules define and register.

mod collect;
mod text;
mod upstreams;

pub(crate) use collect::{desc, family, gauge};

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::expfmt::Selection;
use crate::model::{Read, Recorder, ScrapeRecord, UpstreamRecord};

use prometheus::{
    Gauge, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry,
};

/// Namespace of every metric here.
pub(crate) const NAMESPACE: &str = "dynamo_sysport";

/// The `result` values of `canary_requests_total` (the canary module's outcomes).
pub(crate) const CANARY_RESULTS: [&str; 8] = [
    "success",
    "timeout",
    "http_status",
    "bad_answer",
    "connect_error",
    "too_large",
    "unauthorized",
    "cannot_generate",
];

/// The sidecar's own metrics.
#[derive(Clone)]
pub struct Telemetry {
    registry: Registry,
    started: Instant,
    uptime: Gauge,
    /// `upstream_scrape_duration_seconds{upstream}`.
    pub scrape_duration: HistogramVec,
    /// `upstream_scrapes_total{upstream,result}`.
    pub scrapes: IntCounterVec,
    /// `upstream_format_mismatches_total{upstream}`: responses whose Content-Type named the
    /// other exposition format than the body's.
    pub format_mismatches: IntCounterVec,
    /// `http_requests_total{path,code,read}`; `read` is `full` or `selective` on `/metrics`.
    pub http_requests: IntCounterVec,
    /// `metrics_request_duration_seconds{read}`: `/metrics` handling time, upstream wait included.
    pub metrics_duration: HistogramVec,
    /// `metrics_render_seconds{read}`: sysport's own work per `/metrics` read, without the wait.
    pub render_duration: HistogramVec,
    /// `config_reloads_total{result}`.
    pub config_reloads: IntCounterVec,
    /// `openmetrics_dropped_series_total`: series OpenMetrics output could not express.
    pub openmetrics_dropped: IntCounter,
    /// `canary_requests_total{upstream,result}`: canary requests sent to idle engines.
    pub canary_requests: IntCounterVec,
    /// `canary_duration_seconds{upstream}`: how long each canary took.
    pub canary_duration: HistogramVec,
    process: Process,
    /// The upstreams of the configuration in force, each with the `result` values its scrapes
    /// were counted under. Only their series are written, under this lock: a fetch that started
    /// before a reload removed its upstream ends after it, and must not bring it back.
    current: Arc<Mutex<HashMap<String, HashSet<&'static str>>>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

fn opts(name: &str, help: &str) -> Opts {
    Opts::new(name, help).namespace(NAMESPACE)
}

/// `c`, registered in `registry`.
fn registered<C: prometheus::core::Collector + Clone + 'static>(registry: &Registry, c: C) -> C {
    registry
        .register(Box::new(c.clone()))
        .expect("metric names are unique");
    c
}

/// A counter by `labels`, registered.
fn counters(registry: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    registered(
        registry,
        IntCounterVec::new(opts(name, help), labels).expect("valid metric"),
    )
}

/// A histogram by `labels` with `buckets`, registered.
fn histograms(
    registry: &Registry,
    (name, help): (&str, &str),
    buckets: &[f64],
    labels: &[&str],
) -> HistogramVec {
    let opts = HistogramOpts::from(opts(name, help)).buckets(buckets.to_vec());
    registered(
        registry,
        HistogramVec::new(opts, labels).expect("valid metric"),
    )
}

/// Buckets of a fetch: a millisecond to ten seconds.
const FETCH_BUCKETS: [f64; 13] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

/// Sub-millisecond buckets: a selective read costs tens of microseconds.
const FAST_BUCKETS: [f64; 16] = [
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
    2.5, 10.0,
];

/// Buckets of a canary: ten milliseconds to ten seconds.
const CANARY_BUCKETS: [f64; 10] = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0];

impl Telemetry {
    /// Registers every metric defined here (the event counters and histograms, uptime, build
    /// and process); other modules register their own.
    pub fn new() -> Telemetry {
        let r = Registry::new();
        let uptime = Gauge::with_opts(opts("uptime_seconds", "Seconds since sysport started."))
            .expect("valid metric");
        let build_info = IntGaugeVec::new(
            opts("build_info", "sysport build information."),
            &["version"],
        )
        .expect("valid metric");
        build_info
            .with_label_values(&[env!("CARGO_PKG_VERSION")])
            .set(1);
        registered(&r, build_info);
        let openmetrics_dropped = IntCounter::with_opts(opts(
            "openmetrics_dropped_series_total",
            "Series left out of OpenMetrics responses because OpenMetrics cannot express their family.",
        ))
        .expect("valid metric");
        Telemetry {
            uptime: registered(&r, uptime),
            scrape_duration: histograms(
                &r,
                (
                    "upstream_scrape_duration_seconds",
                    "Time to fetch an upstream's metrics.",
                ),
                &FETCH_BUCKETS,
                &["upstream"],
            ),
            scrapes: counters(
                &r,
                "upstream_scrapes_total",
                "Upstream scrapes by result (success or the reason it failed).",
                &["upstream", "result"],
            ),
            format_mismatches: counters(
                &r,
                "upstream_format_mismatches_total",
                "Upstream responses whose Content-Type named one exposition format while the body \
                 was in the other; each is read as its body is (a body without the final EOF line \
                 of OpenMetrics as text 0.0.4, one with it as OpenMetrics).",
                &["upstream"],
            ),
            http_requests: counters(
                &r,
                "http_requests_total",
                "HTTP requests served by sysport, by route and status code; on /metrics, read is \
                 full (the whole page) or selective (?name=).",
                &["path", "code", "read"],
            ),
            metrics_duration: histograms(
                &r,
                (
                    "metrics_request_duration_seconds",
                    "Time to answer /metrics (before compression), waiting for upstreams included.",
                ),
                &FAST_BUCKETS,
                &["read"],
            ),
            render_duration: histograms(
                &r,
                (
                    "metrics_render_seconds",
                    "sysport's own work per /metrics read (merge, write, own metrics), without the \
                     wait for upstreams or compression.",
                ),
                &FAST_BUCKETS,
                &["read"],
            ),
            config_reloads: counters(
                &r,
                "config_reloads_total",
                "Configuration reloads (SIGHUP) by result.",
                &["result"],
            ),
            openmetrics_dropped: registered(&r, openmetrics_dropped),
            canary_requests: counters(
                &r,
                "canary_requests_total",
                "Canary requests sysport sent to the upstream's idle engine (canary_after), by \
                 result: success, timeout, http_status, bad_answer, connect_error. Each is also \
                 one request in the engine's own counters.",
                &["upstream", "result"],
            ),
            canary_duration: histograms(
                &r,
                (
                    "canary_duration_seconds",
                    "Time each canary request took, until its answer was judged or it timed out.",
                ),
                &CANARY_BUCKETS,
                &["upstream"],
            ),
            process: Process::register(&r),
            registry: r,
            started: Instant::now(),
            current: Arc::default(),
        }
    }

    /// Runs `write` (which sets series of upstream `name`) when `name` is an upstream of the
    /// configuration in force, holding the set of them so that a reload cannot remove it
    /// meanwhile; returns whether it ran.
    pub fn for_current(&self, name: &str, write: impl FnOnce(&Telemetry)) -> bool {
        let current = self.current.lock().expect("current upstreams lock");
        if !current.contains_key(name) {
            return false;
        }
        write(self);
        true
    }

    /// Registers a metric that another module owns (the listener's connection accounting).
    pub(crate) fn register(&self, collector: Box<dyn prometheus::core::Collector>) {
        self.registry
            .register(collector)
            .expect("metric names are unique");
    }

    /// Seconds since start.
    pub fn uptime_seconds(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Makes the upstream's counters exist from the start (at 0), so dashboards see every
    /// configured upstream before its first scrape.
    pub fn register_upstream(&self, name: &str) {
        let mut current = self.current.lock().expect("current upstreams lock");
        current.entry(name.to_owned()).or_default();
        self.format_mismatches.with_label_values(&[name]);
    }

    /// Forgets an upstream that a reload removed.
    pub fn forget_upstream(&self, name: &str) {
        let mut current = self.current.lock().expect("current upstreams lock");
        for result in current.remove(name).unwrap_or_default() {
            let _ = self.scrapes.remove_label_values(&[name, result]);
        }
        let _ = self.format_mismatches.remove_label_values(&[name]);
        let _ = self.scrape_duration.remove_label_values(&[name]);
        let _ = self.canary_duration.remove_label_values(&[name]);
        for result in CANARY_RESULTS {
            let _ = self.canary_requests.remove_label_values(&[name, result]);
        }
    }

    /// Renders every metric as text 0.0.4, or only the selected families, with the upstreams'
    /// families read from `records` (each upstream's name and record) at `now`.
    pub fn render_text(
        &self,
        names: Option<&Selection>,
        records: &[(&str, UpstreamRecord)],
        now: Instant,
        out: &mut Vec<u8>,
    ) {
        self.uptime.set(self.uptime_seconds());
        self.process.update();
        let mut families = self.registry.gather();
        for f in upstreams::families(records, now) {
            // Both sorted by name, as the registry writes them.
            let at = families.partition_point(|g| g.name() < f.name());
            families.insert(at, f);
        }
        if let Some(names) = names {
            families.retain(|f| names.selects(f.name().as_bytes()));
        }
        text::encode(&families, out);
    }
}

/// Scrape results as sysport's own events: `upstream_scrapes_total` for every result, the
/// duration of a full page's fetch, `format_mismatches_total` for a body the `Content-Type`
/// misnamed.
impl Recorder for Telemetry {
    fn scraped(&self, r: &ScrapeRecord<'_>) {
        let mut current = self.current.lock().expect("current upstreams lock");
        // An upstream a reload removed while this fetch ran: its series are gone for good.
        let Some(results) = current.get_mut(r.name) else {
            return;
        };
        results.insert(r.result);
        let name = r.name;
        self.scrapes.with_label_values(&[name, r.result]).inc();
        if r.read == Read::Full {
            self.scrape_duration
                .with_label_values(&[name])
                .observe(r.took.as_secs_f64());
        }
    }

    fn mislabelled(&self, _upstream: usize, name: &str) {
        self.for_current(name, |t| {
            t.format_mismatches.with_label_values(&[name]).inc();
        });
    }
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new()
    }
}

/// `process_*` metrics read from `/proc/self`. CPU time is kept to the clock tick (the
/// `prometheus` crate's own process collector rounds it down to whole seconds, which makes a
/// sidecar's `rate()` read 0).
///
/// They are read at most every [`PROCESS_SAMPLE_EVERY`]: reading `/proc` costs some 50 µs of
/// kernel path walks, more than the rest of sysport's own metrics, and readers many times a
/// second (endpoint pickers) would pay it on every read.
#[derive(Clone)]
struct Process {
    cpu: prometheus::Counter,
    resident: IntGauge,
    virtual_bytes: IntGauge,
    open_fds: IntGauge,
    max_fds: IntGauge,
    threads: IntGauge,
    sampled: std::sync::Arc<std::sync::Mutex<Sampled>>,
    ticks_per_second: f64,
    page_size: i64,
}

impl Process {
    fn register(registry: &Registry) -> Process {
        let gauge = |name: &str, help: &str| {
            let g = IntGauge::with_opts(opts(name, help)).expect("valid metric");
            registry
                .register(Box::new(g.clone()))
                .expect("process metrics register once");
            g
        };
        let start = Gauge::with_opts(opts(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
        ))
        .expect("valid metric");
        start.set(
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64()),
        );
        registry
            .register(Box::new(start))
            .expect("process metrics register once");
        let cpu = prometheus::Counter::with_opts(opts(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
        ))
        .expect("valid metric");
        registry
            .register(Box::new(cpu.clone()))
            .expect("process metrics register once");
        let p = Process {
            cpu,
            resident: gauge(
                "process_resident_memory_bytes",
                "Resident memory size in bytes.",
            ),
            virtual_bytes: gauge(
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes.",
            ),
            open_fds: gauge("process_open_fds", "Number of open file descriptors."),
            max_fds: gauge(
                "process_max_fds",
                "Maximum number of open file descriptors.",
            ),
            threads: gauge("process_threads", "Number of OS threads in the process."),
            sampled: Default::default(),
            ticks_per_second: auxv(17).map_or(100.0, |t| t as f64),
            page_size: auxv(6).map_or(4096, |p| p as i64),
        };
        p.read_max_fds();
        p.update();
        p
    }

    /// Reads `/proc/self`, unless it was read less than [`PROCESS_SAMPLE_EVERY`] ago; on systems
    /// without it the metrics stay at 0. It reads two files, not five: `stat` has the CPU time,
    /// memory and threads.
    fn update(&self) {
        self.update_at(Instant::now());
    }

    /// [`Process::update`] at `now`.
    fn update_at(&self, now: Instant) {
        let mut sampled = self.sampled.lock().expect("process sample lock");
        if sampled
            .at
            .is_some_and(|at| now.saturating_duration_since(at) < PROCESS_SAMPLE_EVERY)
        {
            return;
        }
        sampled.at = Some(now);
        if let Ok(stat) = std::fs::read_to_string("/proc/self/stat") {
            let stat = Stat::parse(&stat);
            if let Some(total) = stat.cpu_seconds(self.ticks_per_second)
                && total > sampled.cpu
            {
                self.cpu.inc_by(total - sampled.cpu);
                sampled.cpu = total;
            }
            if let Some(n) = stat.field(20) {
                self.threads.set(n);
            }
            if let Some(v) = stat.field(23) {
                self.virtual_bytes.set(v);
            }
            if let Some(pages) = stat.field(24) {
                self.resident.set(pages * self.page_size);
            }
        }
        if let Ok(dir) = std::fs::read_dir("/proc/self/fd") {
            self.open_fds.set(dir.count() as i64);
        }
    }

    /// The soft limit on open files, read once.
    fn read_max_fds(&self) {
        if let Ok(limits) = std::fs::read_to_string("/proc/self/limits")
            && let Some(line) = limits.lines().find(|l| l.starts_with("Max open files"))
            && let Some(soft) = line
                .split_whitespace()
                .nth(3)
                .and_then(|v| v.parse::<i64>().ok())
        {
            self.max_fds.set(soft);
        }
    }
}

/// `/proc/self/stat`'s fields from the state (field 3) on, after the parenthesised command name
/// (which may hold spaces and parentheses of its own).
struct Stat<'a>(Vec<&'a str>);

impl<'a> Stat<'a> {
    fn parse(stat: &'a str) -> Stat<'a> {
        Stat(
            stat.rsplit_once(')')
                .map_or("", |(_, r)| r)
                .split_whitespace()
                .collect(),
        )
    }

    /// Field `n` as proc(5) numbers them: utime and stime are 14 and 15, num_threads 20, vsize
    /// 23 (bytes), rss 24 (pages).
    fn field(&self, n: usize) -> Option<i64> {
        self.0.get(n.checked_sub(3)?)?.parse().ok()
    }

    /// User and system CPU time in seconds, to the clock tick.
    fn cpu_seconds(&self, ticks_per_second: f64) -> Option<f64> {
        Some((self.field(14)? + self.field(15)?) as f64 / ticks_per_second)
    }
}

/// How long a reading of the `process_*` metrics serves: well under any scrape interval.
const PROCESS_SAMPLE_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// When the process metrics were last read, and the CPU time they counted up to.
#[derive(Debug, Default)]
struct Sampled {
    at: Option<Instant>,
    cpu: f64,
}

/// A value from the ELF auxiliary vector (`AT_CLKTCK` = 17, `AT_PAGESZ` = 6), read without
/// `unsafe`.
fn auxv(key: u64) -> Option<u64> {
    let bytes = std::fs::read("/proc/self/auxv").ok()?;
    bytes.chunks_exact(16).find_map(|pair| {
        let k = u64::from_ne_bytes(pair[..8].try_into().ok()?);
        let v = u64::from_ne_bytes(pair[8..].try_into().ok()?);
        (k == key).then_some(v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This process's CPU time as `/proc/self/stat` has it now.
    fn cpu_now() -> f64 {
        let stat = std::fs::read_to_string("/proc/self/stat").expect("procfs");
        let ticks = auxv(17).map_or(100.0, |t| t as f64);
        Stat::parse(&stat)
            .cpu_seconds(ticks)
            .expect("utime and stime")
    }

    #[test]
    fn stat_fields_are_read_after_the_command_name_and_cpu_time_to_the_tick() {
        // pid, a command name with spaces and parentheses, then fields 3 (state) to 24.
        let mut fields: Vec<String> = (3..=24).map(|n| n.to_string()).collect();
        fields[0] = "S".to_owned();
        fields[14 - 3] = "123".to_owned();
        fields[15 - 3] = "45".to_owned();
        fields[20 - 3] = "7".to_owned();
        let line = format!("4242 (a) b (c)) {}\n", fields.join(" "));
        let stat = Stat::parse(&line);
        // 168 ticks at 100 a second: 1.68 s, not rounded down to whole seconds.
        assert_eq!(stat.cpu_seconds(100.0), Some(1.68));
        assert_eq!(stat.field(20), Some(7));
        assert_eq!(stat.field(24), Some(24));
        assert_eq!(
            (stat.field(3), stat.field(2), stat.field(25)),
            (None, None, None)
        );
        assert_eq!(Stat::parse("garbage").cpu_seconds(100.0), None);
    }

    #[test]
    fn process_cpu_time_keeps_fractions_of_a_second() {
        // Until this process has used some CPU time that is not a whole number of seconds
        // (bounded by CPU time, not wall time: a loaded machine only makes it take longer).
        let mut x = 0u64;
        for _ in 0..100_000 {
            if cpu_now().fract() > 0.0 {
                break;
            }
            for _ in 0..100_000 {
                x = x.wrapping_mul(31).wrapping_add(7);
            }
        }
        std::hint::black_box(x);
        let before = cpu_now();
        assert!(before.fract() > 0.0, "cpu seconds {before}");
        let t = Telemetry::new();
        let after = cpu_now();
        let mut out = Vec::new();
        t.render_text(
            Some(&Selection::new([
                "dynamo_sysport_process_cpu_seconds_total",
                "dynamo_sysport_process_resident_memory_bytes",
            ])),
            &[],
            Instant::now(),
            &mut out,
        );
        let text = String::from_utf8(out).expect("utf-8");
        let value = |name: &str| -> f64 {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split(' ').nth(1))
                .and_then(|v| v.parse().ok())
                .expect("metric present")
        };
        // Read between the two: rounded down to whole seconds it would be below `before`.
        let cpu = value("dynamo_sysport_process_cpu_seconds_total");
        assert!(
            before <= cpu && cpu <= after,
            "{before} <= {cpu} <= {after}"
        );
        assert!(value("dynamo_sysport_process_resident_memory_bytes") > 1e6);
    }

    #[test]
    fn process_metrics_are_read_at_most_once_per_window() {
        let p = Telemetry::new().process;
        let read_at = p
            .sampled
            .lock()
            .expect("lock")
            .at
            .expect("read when registered");
        // Values no reading gives: a reading overwrites them.
        p.threads.set(-1);
        p.open_fds.set(-1);
        let within = read_at + PROCESS_SAMPLE_EVERY - std::time::Duration::from_nanos(1);
        p.update_at(within);
        assert_eq!((p.threads.get(), p.open_fds.get()), (-1, -1));
        assert_eq!(p.sampled.lock().expect("lock").at, Some(read_at));
        let after = read_at + PROCESS_SAMPLE_EVERY;
        p.update_at(after);
        assert!(p.threads.get() >= 1 && p.open_fds.get() >= 3, "read again");
        assert_eq!(p.sampled.lock().expect("lock").at, Some(after));
    }

    #[test]
    fn the_clock_tick_comes_from_the_aux_vector() {
        assert_eq!(auxv(17), Some(100));
        assert_eq!(auxv(6), Some(4096));
    }

    #[test]
    fn process_memory_threads_and_files_agree_with_proc_status() {
        let p = Telemetry::new().process;
        let status = std::fs::read_to_string("/proc/self/status").expect("procfs");
        let kib = |key: &str| -> i64 {
            status
                .lines()
                .find(|l| l.starts_with(key))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
                .expect("field in /proc/self/status")
        };
        let (rss, vm) = (kib("VmRSS:") * 1024, kib("VmSize:") * 1024);
        let resident = p.resident.get();
        assert!(
            resident > rss / 2 && resident < rss * 2,
            "{resident} vs {rss}"
        );
        let virt = p.virtual_bytes.get();
        assert!(virt > vm / 2 && virt < vm * 2, "{virt} vs {vm}");
        assert!(p.threads.get() >= 1);
        assert!(p.open_fds.get() >= 3);
        assert!(p.max_fds.get() >= p.open_fds.get());
    }
}
