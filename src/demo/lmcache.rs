//! One simulated LMCache worker per engine: a local CPU backend (no remote backend) that is
//! looked up when a request is scheduled, retrieved from when it holds more of the prompt than
//! vLLM's own prefix cache, stored to after prefill, and evicts its oldest chunks when full.
//! Counter and histogram names, HELP texts and buckets are those of `lmcache/observability.py`.

use std::collections::VecDeque;

use super::expo::Hist;
use super::rng::Rng;
use super::served::MODEL;

pub(super) const CHUNK_TOKENS: u32 = 256;
/// KV bytes per token of an 8B Llama-style model in fp16.
pub(super) const BYTES_PER_TOKEN: f64 = 131_072.0;
/// `max_local_cpu_size` of 20 GiB, in chunks.
const CAPACITY_CHUNKS: u32 = 640;
/// LMCache recomputes its hit-rate gauges once per log interval.
const LOG_INTERVAL_SECONDS: f64 = 10.0;

pub(super) const COUNTERS: [(&str, &str); 23] = [
    (
        "lmcache:num_retrieve_requests",
        "Total number of retrieve requests sent to lmcache",
    ),
    (
        "lmcache:num_store_requests",
        "Total number of store requests sent to lmcache",
    ),
    (
        "lmcache:num_lookup_requests",
        "Total number of lookup requests sent to lmcache",
    ),
    (
        "lmcache:num_requested_tokens",
        "Total number of tokens requested from lmcache",
    ),
    (
        "lmcache:num_hit_tokens",
        "Total number of tokens hit in lmcache",
    ),
    (
        "lmcache:num_stored_tokens",
        "Total number of tokens stored in lmcache including evicted ones",
    ),
    (
        "lmcache:num_lookup_tokens",
        "Total number of tokens requested in lookup from lmcache",
    ),
    (
        "lmcache:num_lookup_hits",
        "Total number of tokens hit in lookup from lmcache",
    ),
    (
        "lmcache:num_vllm_hit_tokens",
        "Number of hit tokens in vllm",
    ),
    (
        "lmcache:num_prompt_tokens",
        "Number of prompt tokens in lmcache",
    ),
    (
        "lmcache:num_remote_read_requests",
        "Total number of requests read from remote backends in lmcache",
    ),
    (
        "lmcache:num_remote_read_bytes",
        "Total number of bytes read from remote backends in lmcache",
    ),
    (
        "lmcache:num_remote_write_requests",
        "Total number of requests write to remote backends in lmcache",
    ),
    (
        "lmcache:num_remote_write_bytes",
        "Total number of bytes write to remote backends in lmcache",
    ),
    (
        "lmcache:local_cpu_evict_count",
        "Total number of evict in local cpu backend",
    ),
    (
        "lmcache:local_cpu_evict_keys_count",
        "Total number of evict keys in local cpu backend",
    ),
    (
        "lmcache:local_cpu_evict_failed_count",
        "Total number of failed eviction in local cpu backend",
    ),
    (
        "lmcache:forced_unpin_count",
        "Total number of forced unpin due to timeout",
    ),
    (
        "lmcache:lookup_0_hit_requests",
        "Total number of 0 hit lookup requests",
    ),
    (
        "lmcache:num_slow_retrieval_by_time",
        "Total number of slow retrievals by time threshold",
    ),
    (
        "lmcache:num_slow_retrieval_by_speed",
        "Total number of slow retrievals by speed threshold",
    ),
    (
        "lmcache:remote_ping_errors",
        "Number of ping errors to remote backends",
    ),
    (
        "lmcache:remote_ping_successes",
        "Number of ping successes to remote backends",
    ),
];
pub(super) const RETRIEVE_REQUESTS: usize = 0;
pub(super) const STORE_REQUESTS: usize = 1;
pub(super) const LOOKUP_REQUESTS: usize = 2;
const REQUESTED_TOKENS: usize = 3;
const HIT_TOKENS: usize = 4;
const STORED_TOKENS: usize = 5;
const LOOKUP_TOKENS: usize = 6;
const LOOKUP_HITS: usize = 7;
const VLLM_HIT_TOKENS: usize = 8;
const PROMPT_TOKENS: usize = 9;
const EVICT_COUNT: usize = 14;
const EVICT_KEYS_COUNT: usize = 15;
pub(super) const LOOKUP_0_HIT_REQUESTS: usize = 18;
const SLOW_RETRIEVAL_BY_TIME: usize = 19;
const SLOW_RETRIEVAL_BY_SPEED: usize = 20;

const TIME_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
];
/// `[0.00001 * 2**i for i in range(20)]`, as Python computes them.
const PROFILING_BUCKETS: &[f64] = &[
    1e-05, 2e-05, 4e-05, 8e-05, 0.00016, 0.00032, 0.00064, 0.00128, 0.00256, 0.00512, 0.01024,
    0.02048, 0.04096, 0.08192, 0.16384, 0.32768, 0.65536, 1.31072, 2.62144, 5.24288,
];
const SPEED_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
    32768.0, 65536.0,
];
const HIT_RATE_BUCKETS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0];
const LIFESPAN_BUCKETS: &[f64] = &[
    0.0, 1.0, 5.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0,
];

pub(super) const HISTOGRAMS: [(&str, &str, &[f64]); 13] = [
    (
        "lmcache:time_to_retrieve",
        "Time to retrieve from lmcache (seconds)",
        TIME_BUCKETS,
    ),
    (
        "lmcache:time_to_store",
        "Time to store to lmcache (seconds)",
        TIME_BUCKETS,
    ),
    (
        "lmcache:time_to_lookup",
        "Time to lookup in lmcache (seconds)",
        PROFILING_BUCKETS,
    ),
    (
        "lmcache:retrieve_process_tokens_time",
        "Time to process tokens in retrieve (seconds)",
        PROFILING_BUCKETS,
    ),
    (
        "lmcache:retrieve_broadcast_time",
        "Time to broadcast memory objects in retrieve (seconds)",
        PROFILING_BUCKETS,
    ),
    (
        "lmcache:retrieve_to_gpu_time",
        "Time to move data to GPU in retrieve (seconds)",
        PROFILING_BUCKETS,
    ),
    (
        "lmcache:store_process_tokens_time",
        "Time to process tokens in store (seconds)",
        PROFILING_BUCKETS,
    ),
    (
        "lmcache:store_from_gpu_time",
        "Time to move data from GPU in store (seconds)",
        PROFILING_BUCKETS,
    ),
    (
        "lmcache:store_put_time",
        "Time to put data to storage in store (seconds)",
        PROFILING_BUCKETS,
    ),
    (
        "lmcache:retrieve_speed",
        "Retrieve speed of lmcache (tokens per second)",
        SPEED_BUCKETS,
    ),
    (
        "lmcache:store_speed",
        "Store speed of lmcache (tokens per second)",
        SPEED_BUCKETS,
    ),
    (
        "lmcache:request_cache_hit_rate",
        "Request cache hit rate",
        HIT_RATE_BUCKETS,
    ),
    (
        "lmcache:request_cache_lifespan",
        "Request cache lifespan in minutes",
        LIFESPAN_BUCKETS,
    ),
];
const TIME_TO_RETRIEVE: usize = 0;
const TIME_TO_STORE: usize = 1;
const TIME_TO_LOOKUP: usize = 2;
const RETRIEVE_PROCESS_TOKENS_TIME: usize = 3;
const RETRIEVE_BROADCAST_TIME: usize = 4;
const RETRIEVE_TO_GPU_TIME: usize = 5;
const STORE_PROCESS_TOKENS_TIME: usize = 6;
const STORE_FROM_GPU_TIME: usize = 7;
const STORE_PUT_TIME: usize = 8;
const RETRIEVE_SPEED: usize = 9;
const STORE_SPEED: usize = 10;
const REQUEST_CACHE_HIT_RATE: usize = 11;
const REQUEST_CACHE_LIFESPAN: usize = 12;

pub(super) struct LmcWorker {
    id: &'static str,
    pub(super) counters: [f64; COUNTERS.len()],
    pub(super) hists: [Hist; HISTOGRAMS.len()],
    /// Stored entries, oldest first: (stored at, chunks). Eviction is FIFO.
    entries: VecDeque<(f64, u32)>,
    pub(super) cached_chunks: u32,
    /// Chunks recently retrieved and still pinned; decays each step.
    pub(super) pinned: f64,
    pub(super) retrieve_hit_rate: f64,
    pub(super) lookup_hit_rate: f64,
    /// Time of the last log and the counters then: requested, hit, lookup tokens, lookup hits.
    last_log: (f64, [f64; 4]),
}

impl LmcWorker {
    pub(super) fn new(id: &'static str) -> Self {
        LmcWorker {
            id,
            counters: [0.0; COUNTERS.len()],
            hists: HISTOGRAMS.map(|(_, _, bounds)| Hist::new(bounds)),
            entries: VecDeque::new(),
            cached_chunks: 0,
            pinned: 0.0,
            retrieve_hit_rate: 0.0,
            lookup_hit_rate: 0.0,
            last_log: (0.0, [0.0; 4]),
        }
    }

    /// `model_name`, `role`, `served_model_name`, `worker_id`, sorted as printed.
    pub(super) fn labels(&self) -> [(&'static str, &'static str); 4] {
        [
            ("model_name", MODEL),
            ("role", "worker"),
            ("served_model_name", MODEL),
            ("worker_id", self.id),
        ]
    }

    fn window(&self) -> [f64; 4] {
        let c = &self.counters;
        [
            c[REQUESTED_TOKENS],
            c[HIT_TOKENS],
            c[LOOKUP_TOKENS],
            c[LOOKUP_HITS],
        ]
    }

    pub(super) fn shift(&mut self, by: f64) {
        self.entries.iter_mut().for_each(|(at, _)| *at += by);
        self.last_log.0 += by;
    }

    pub(super) fn tick(&mut self, now: f64) {
        self.pinned *= 0.8;
        if now - self.last_log.0 >= LOG_INTERVAL_SECONDS {
            let then = self.last_log.1;
            let current = self.window();
            let rate = |hit: f64, total: f64| if total > 0.0 { hit / total } else { 0.0 };
            self.retrieve_hit_rate = rate(current[1] - then[1], current[0] - then[0]);
            self.lookup_hit_rate = rate(current[3] - then[3], current[2] - then[2]);
            self.last_log = (now, current);
        }
    }

    /// Looks a prompt up; returns the prompt tokens LMCache holds (whole chunks).
    pub(super) fn lookup(&mut self, prompt: u32, vllm_hit: u32, rng: &mut Rng) -> u32 {
        let fill = f64::from(self.cached_chunks) / f64::from(CAPACITY_CHUNKS);
        let hit = if self.cached_chunks > 0 && rng.chance(0.15 + 0.6 * fill) {
            let tokens = (f64::from(prompt) * rng.range(0.2, 0.95)) as u32;
            (tokens / CHUNK_TOKENS).min(self.cached_chunks) * CHUNK_TOKENS
        } else {
            0
        };
        let hit = hit.min((prompt - 1) / CHUNK_TOKENS * CHUNK_TOKENS);
        let c = &mut self.counters;
        c[LOOKUP_REQUESTS] += 1.0;
        c[LOOKUP_TOKENS] += f64::from(prompt);
        c[LOOKUP_HITS] += f64::from(hit);
        c[VLLM_HIT_TOKENS] += f64::from(vllm_hit);
        c[PROMPT_TOKENS] += f64::from(prompt);
        if hit == 0 {
            c[LOOKUP_0_HIT_REQUESTS] += 1.0;
        }
        self.hists[TIME_TO_LOOKUP].observe(rng.lognormal(0.0004, 0.7));
        self.hists[REQUEST_CACHE_HIT_RATE].observe(f64::from(hit) / f64::from(prompt));
        hit
    }

    /// Loads `wanted` tokens into the GPU; returns how many arrived (a chunk evicted since the
    /// lookup makes the retrieve come up short).
    pub(super) fn retrieve(&mut self, wanted: u32, rng: &mut Rng) -> u32 {
        let got = if rng.chance(0.04) {
            wanted / 2 / 16 * 16
        } else {
            wanted
        };
        let seconds = 0.002 + f64::from(got) / 250_000.0 * rng.lognormal(1.0, 0.3);
        let speed = f64::from(got) / seconds;
        let c = &mut self.counters;
        c[RETRIEVE_REQUESTS] += 1.0;
        c[REQUESTED_TOKENS] += f64::from(wanted);
        c[HIT_TOKENS] += f64::from(got);
        if seconds > 0.1 {
            c[SLOW_RETRIEVAL_BY_TIME] += 1.0;
        }
        if got > 0 && speed < 20_000.0 {
            c[SLOW_RETRIEVAL_BY_SPEED] += 1.0;
        }
        let h = &mut self.hists;
        h[TIME_TO_RETRIEVE].observe(seconds);
        h[RETRIEVE_SPEED].observe(speed);
        h[RETRIEVE_PROCESS_TOKENS_TIME].observe(seconds * 0.1);
        h[RETRIEVE_BROADCAST_TIME].observe(seconds * 0.05);
        h[RETRIEVE_TO_GPU_TIME].observe(seconds * 0.6);
        self.pinned += f64::from(got.div_ceil(CHUNK_TOKENS));
        got
    }

    /// Saves `tokens` new prompt tokens after prefill, evicting the oldest chunks when full.
    pub(super) fn store(&mut self, now: f64, tokens: u32, rng: &mut Rng) {
        if tokens == 0 {
            return;
        }
        let seconds = 0.003 + f64::from(tokens) / 150_000.0 * rng.lognormal(1.0, 0.3);
        self.counters[STORE_REQUESTS] += 1.0;
        self.counters[STORED_TOKENS] += f64::from(tokens);
        let h = &mut self.hists;
        h[TIME_TO_STORE].observe(seconds);
        h[STORE_SPEED].observe(f64::from(tokens) / seconds);
        h[STORE_PROCESS_TOKENS_TIME].observe(seconds * 0.15);
        h[STORE_FROM_GPU_TIME].observe(seconds * 0.5);
        h[STORE_PUT_TIME].observe(seconds * 0.3);

        let chunks = tokens.div_ceil(CHUNK_TOKENS);
        self.entries.push_back((now, chunks));
        self.cached_chunks += chunks;
        if self.cached_chunks > CAPACITY_CHUNKS {
            self.counters[EVICT_COUNT] += 1.0;
        }
        while self.cached_chunks > CAPACITY_CHUNKS {
            let Some((at, n)) = self.entries.pop_front() else {
                break;
            };
            let evict = n.min(self.cached_chunks - CAPACITY_CHUNKS);
            if evict < n {
                self.entries.push_front((at, n - evict));
            }
            self.cached_chunks -= evict;
            self.counters[EVICT_KEYS_COUNT] += f64::from(evict);
            self.hists[REQUEST_CACHE_LIFESPAN].observe((now - at) / 60.0);
        }
    }
}
