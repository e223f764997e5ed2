//! The families a Python engine serves besides its own: prometheus_client's default gc and process
//! collectors, and the HTTP metrics of prometheus-fastapi-instrumentator. The sidecar must filter
//! all of these out, so the demo serves them with their real names, types and HELP texts.

use super::expo::{Hist, Labels, Writer};
use super::rng::Rng;

const HIGHR_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    7.5, 10.0, 30.0, 60.0,
];
const DURATION_BUCKETS: &[f64] = &[0.1, 0.5, 1.0];

/// `(handler, method)` pairs the API server has seen.
const HANDLERS: [(&str, &str); 3] = [
    ("/v1/chat/completions", "POST"),
    ("/v1/completions", "POST"),
    ("/v1/models", "GET"),
];
/// `http_requests_total` children: index into [`HANDLERS`] and status class.
const ROUTES: [(usize, &str); 4] = [(0, "2xx"), (1, "2xx"), (2, "2xx"), (0, "4xx")];

/// The Python process behind one endpoint.
pub(super) struct ProcessStats {
    start_unix: f64,
    cpu_per_second: f64,
    rss_base: f64,
}

impl ProcessStats {
    pub(super) fn new(start_unix: f64, cpu_per_second: f64, rss_base: f64) -> Self {
        ProcessStats {
            start_unix,
            cpu_per_second,
            rss_base,
        }
    }

    /// gc, `python_info` and `process_*` families; `activity` (requests served) drives gc.
    pub(super) fn render(&self, w: &mut Writer<'_>, now: f64, activity: f64) {
        let per_gen = |base: [f64; 3], time: [f64; 3], work: [f64; 3]| {
            [0, 1, 2].map(|g| (base[g] + time[g] * now + work[g] * activity).floor())
        };
        let collected = per_gen([3120.0, 954.0, 2688.0], [41.0, 9.3, 2.1], [35.0, 8.0, 4.0]);
        let collections = per_gen([611.0, 55.0, 5.0], [6.2, 0.56, 0.05], [3.0, 0.27, 0.02]);
        const GENERATIONS: [&str; 3] = ["0", "1", "2"];
        w.collector_counter(
            "python_gc_objects_collected_total",
            "Objects collected during gc",
            |emit| {
                (0..3).for_each(|g| emit(&[("generation", GENERATIONS[g])], collected[g]));
            },
        );
        w.collector_counter(
            "python_gc_objects_uncollectable_total",
            "Uncollectable objects found during GC",
            |emit| {
                GENERATIONS
                    .iter()
                    .for_each(|g| emit(&[("generation", g)], 0.0))
            },
        );
        w.collector_counter(
            "python_gc_collections_total",
            "Number of times this generation was collected",
            |emit| (0..3).for_each(|g| emit(&[("generation", GENERATIONS[g])], collections[g])),
        );
        w.gauge("python_info", "Python platform information", |emit| {
            let labels = [
                ("implementation", "CPython"),
                ("major", "3"),
                ("minor", "12"),
                ("patchlevel", "9"),
                ("version", "3.12.9"),
            ];
            emit(&labels, 1.0);
        });
        let vms = self.rss_base * 6.33;
        w.gauge(
            "process_virtual_memory_bytes",
            "Virtual memory size in bytes.",
            |emit| emit(&[], vms.floor()),
        );
        let rss = ((self.rss_base + 6.0e7 * (now / 45.0).sin()) / 4096.0).floor() * 4096.0;
        w.gauge(
            "process_resident_memory_bytes",
            "Resident memory size in bytes.",
            |emit| emit(&[], rss),
        );
        let start = (self.start_unix * 100.0).round() / 100.0;
        w.gauge(
            "process_start_time_seconds",
            "Start time of the process since unix epoch in seconds.",
            |emit| emit(&[], start),
        );
        let cpu = ((12.5 + self.cpu_per_second * now + 0.002 * activity) * 100.0).floor() / 100.0;
        w.collector_counter(
            "process_cpu_seconds_total",
            "Total user and system CPU time spent in seconds.",
            |emit| emit(&[], cpu),
        );
        let fds = 58.0 + (activity % 7.0).floor();
        w.gauge(
            "process_open_fds",
            "Number of open file descriptors.",
            |emit| emit(&[], fds),
        );
        w.gauge(
            "process_max_fds",
            "Maximum number of open file descriptors.",
            |emit| emit(&[], 1_048_576.0),
        );
    }
}

/// The OpenAI-compatible API server in front of the engines, as the instrumentator sees it.
pub(super) struct ApiServer {
    requests: [f64; ROUTES.len()],
    /// Per handler: (count, sum) of request and response body sizes.
    request_size: [(f64, f64); HANDLERS.len()],
    response_size: [(f64, f64); HANDLERS.len()],
    duration_highr: Hist,
    duration: [Hist; HANDLERS.len()],
}

impl ApiServer {
    pub(super) fn new() -> Self {
        ApiServer {
            requests: [0.0; ROUTES.len()],
            request_size: [(0.0, 0.0); HANDLERS.len()],
            response_size: [(0.0, 0.0); HANDLERS.len()],
            duration_highr: Hist::new(HIGHR_BUCKETS),
            duration: HANDLERS.map(|_| Hist::new(DURATION_BUCKETS)),
        }
    }

    /// A completion request answered after `seconds`.
    pub(super) fn completion(&mut self, seconds: f64, prompt: u32, generated: u32, rng: &mut Rng) {
        let route = if rng.chance(0.85) { 0 } else { 1 };
        let request_bytes = (f64::from(prompt) * 4.2 + 350.0).floor();
        let response_bytes = (f64::from(generated) * 4.6 + 420.0).floor();
        self.record(route, seconds + 0.0015, request_bytes, response_bytes);
    }

    /// Requests that never reach an engine: model listings and the odd bad request.
    pub(super) fn step(&mut self, dt: f64, rng: &mut Rng) {
        if rng.chance(0.02 * dt) {
            self.record(2, 0.0012, 0.0, 612.0);
        }
        if rng.chance(0.005 * dt) {
            self.record(3, 0.004, 800.0, 120.0);
        }
    }

    fn record(&mut self, route: usize, seconds: f64, request_bytes: f64, response_bytes: f64) {
        let handler = ROUTES[route].0;
        self.requests[route] += 1.0;
        let add = |pair: &mut (f64, f64), bytes: f64| *pair = (pair.0 + 1.0, pair.1 + bytes);
        add(&mut self.request_size[handler], request_bytes);
        add(&mut self.response_size[handler], response_bytes);
        self.duration_highr.observe(seconds);
        self.duration[handler].observe(seconds);
    }

    pub(super) fn render(&self, w: &mut Writer<'_>) {
        w.counter(
            "http_requests",
            "Total number of requests by method, status and handler.",
            |emit| {
                for (i, &(handler, status)) in ROUTES.iter().enumerate() {
                    let (path, method) = HANDLERS[handler];
                    emit(
                        &[("handler", path), ("method", method), ("status", status)],
                        self.requests[i],
                    );
                }
            },
        );
        let sizes = |sizes: &[(f64, f64); 3], emit: &mut dyn FnMut(Labels<'_>, (f64, f64))| {
            HANDLERS
                .iter()
                .zip(sizes)
                .for_each(|((path, _), &pair)| emit(&[("handler", path)], pair));
        };
        w.summary(
            "http_request_size_bytes",
            "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
            |emit| sizes(&self.request_size, emit),
        );
        w.summary(
            "http_response_size_bytes",
            "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
            |emit| sizes(&self.response_size, emit),
        );
        w.histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
            |emit| emit(&[], &self.duration_highr),
        );
        w.histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
            |emit| {
                for ((path, method), hist) in HANDLERS.iter().zip(&self.duration) {
                    emit(&[("handler", path), ("method", method)], hist);
                }
            },
        );
    }
}
