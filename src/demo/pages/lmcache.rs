//! The page LMCache's standalone API server answers: Python runtime families, then the
//! `lmcache:` counters, gauges and histograms with their real names, types, labels and HELP texts.
//! It uses a normal (not multiprocess) registry, so counters and histograms get `_created`.

use crate::demo::expo::Writer;
use crate::demo::lmcache::*;
use crate::demo::sim::{Engine, Sim};

type GaugeOf = fn(&LmcWorker, &Engine) -> f64;

const CHUNK_BYTES: f64 = CHUNK_TOKENS as f64 * BYTES_PER_TOKEN;

/// Static gauges, then the dynamic ones (`set_function` callbacks in LMCache). Note the
/// `periodic_threads_*_total` gauges: a name ending in `_total` is not always a counter.
const GAUGES: [(&str, &str, GaugeOf); 32] = [
    (
        "lmcache:retrieve_hit_rate",
        "Hit rate of lmcache retrieve requests since last log",
        |l, _| l.retrieve_hit_rate,
    ),
    (
        "lmcache:lookup_hit_rate",
        "Hit rate of lmcache lookup requests since last log",
        |l, _| l.lookup_hit_rate,
    ),
    (
        "lmcache:local_cache_usage",
        "Local cache usage (bytes) of lmcache",
        |l, _| f64::from(l.cached_chunks) * CHUNK_BYTES,
    ),
    (
        "lmcache:remote_cache_usage",
        "Remote cache usage (bytes) of lmcache",
        |_, _| 0.0,
    ),
    (
        "lmcache:local_storage_usage",
        "Local storage usage (bytes) of lmcache",
        |_, _| 0.0,
    ),
    (
        "lmcache:active_memory_objs_count",
        "The number of active memory objects",
        |l, _| f64::from(l.cached_chunks),
    ),
    (
        "lmcache:pinned_memory_objs_count",
        "The number of pinned memory objects",
        |l, _| l.pinned.floor(),
    ),
    (
        "lmcache:remote_ping_latency",
        "Latest ping latency to remote backends (ms)",
        |_, _| 0.0,
    ),
    (
        "lmcache:remote_ping_error_code",
        "Latest ping error code to remote backends",
        |_, _| 0.0,
    ),
    (
        "lmcache:local_cpu_hot_cache_count",
        "The size of the hot_cache",
        |l, _| f64::from(l.cached_chunks),
    ),
    (
        "lmcache:local_cpu_keys_in_request_count",
        "The size of the keys_in_request",
        |l, _| l.pinned.floor(),
    ),
    (
        "lmcache:kv_msg_queue_size",
        "The size of the KV message queue in BatchedMessageSender",
        |_, _| 0.0,
    ),
    (
        "lmcache:lmcache_is_healthy",
        "The health status of LMCache (1=healthy, 0=unhealthy)",
        |_, _| 1.0,
    ),
    (
        "lmcache:storage_events_ongoing_count",
        "The number of ongoing events",
        |_, _| 0.0,
    ),
    (
        "lmcache:storage_events_done_count",
        "The number of done events",
        |l, _| l.counters[STORE_REQUESTS] + l.counters[RETRIEVE_REQUESTS],
    ),
    (
        "lmcache:storage_events_not_found_count",
        "The number of not found events",
        |l, _| l.counters[LOOKUP_0_HIT_REQUESTS],
    ),
    (
        "lmcache:scheduler_unfinished_requests_count",
        "The count of scheduler unfinished requests count",
        |_, e| (e.num_running() + e.num_waiting()) as f64,
    ),
    (
        "lmcache:periodic_threads_total_count",
        "Total number of registered periodic threads",
        |_, _| 6.0,
    ),
    (
        "lmcache:periodic_threads_running_count",
        "Number of running periodic threads",
        |_, _| 6.0,
    ),
    (
        "lmcache:periodic_threads_active_count",
        "Number of active periodic threads (recently executed)",
        |_, _| 6.0,
    ),
    (
        "lmcache:periodic_threads_critical_total",
        "Total number of critical level periodic threads",
        |_, _| 1.0,
    ),
    (
        "lmcache:periodic_threads_critical_running",
        "Number of running critical level periodic threads",
        |_, _| 1.0,
    ),
    (
        "lmcache:periodic_threads_critical_active",
        "Number of active critical level periodic threads",
        |_, _| 1.0,
    ),
    (
        "lmcache:periodic_threads_high_total",
        "Total number of high level periodic threads",
        |_, _| 2.0,
    ),
    (
        "lmcache:periodic_threads_high_running",
        "Number of running high level periodic threads",
        |_, _| 2.0,
    ),
    (
        "lmcache:periodic_threads_high_active",
        "Number of active high level periodic threads",
        |_, _| 2.0,
    ),
    (
        "lmcache:periodic_threads_medium_total",
        "Total number of medium level periodic threads",
        |_, _| 2.0,
    ),
    (
        "lmcache:periodic_threads_medium_running",
        "Number of running medium level periodic threads",
        |_, _| 2.0,
    ),
    (
        "lmcache:periodic_threads_medium_active",
        "Number of active medium level periodic threads",
        |_, _| 2.0,
    ),
    (
        "lmcache:periodic_threads_low_total",
        "Total number of low level periodic threads",
        |_, _| 1.0,
    ),
    (
        "lmcache:periodic_threads_low_running",
        "Number of running low level periodic threads",
        |_, _| 1.0,
    ),
    (
        "lmcache:periodic_threads_low_active",
        "Number of active low level periodic threads",
        |_, _| 1.0,
    ),
];

/// The LMCache API server's `/metrics` page, rendered from the current simulation state.
pub(in crate::demo) fn render(sim: &Sim, out: &mut String) {
    let mut w = Writer::new(out, sim.created_unix + 0.0421);
    let activity = sim
        .lmcache
        .iter()
        .map(|l| l.counters[LOOKUP_REQUESTS])
        .sum();
    sim.lmcache_process.render(&mut w, sim.now, activity);

    // Worker i serves engine i.
    let workers = || sim.lmcache.iter().zip(&sim.engines);
    for (i, (name, help)) in COUNTERS.iter().enumerate() {
        w.counter(name, help, |emit| {
            workers().for_each(|(l, _)| emit(&l.labels(), l.counters[i]))
        });
    }
    for (name, help, value) in GAUGES {
        w.gauge(name, help, |emit| {
            workers().for_each(|(l, e)| emit(&l.labels(), value(l, e)))
        });
    }
    for (i, (name, help, _)) in HISTOGRAMS.iter().enumerate() {
        w.histogram(name, help, |emit| {
            workers().for_each(|(l, _)| emit(&l.labels(), &l.hists[i]))
        });
    }
}
