//! The simulated workload behind both demo endpoints.
//!
//! Two data-parallel engines serve requests that arrive at a few per second, with a slow
//! sinusoidal swing and the odd burst. Each engine queues, admits requests while sequence slots
//! and KV blocks allow, prefills (partly from its prefix cache or from LMCache), then decodes one
//! token at a time at a batch-dependent inter-token latency, preempting the newest request when
//! KV blocks run out. Every counter and histogram is updated from these events, so the numbers
//! agree with each other the way a real engine's do. Time only moves in [`Sim::advance_to`], in
//! fixed steps, so a given sequence of scrape times always gives the same output.

use std::collections::VecDeque;
use std::f64::consts::TAU;

use super::expo::Hist;
use super::lmcache::LmcWorker;
use super::process::{ApiServer, ProcessStats};
use super::rng::Rng;
use super::served::MODEL;

const BLOCK_SIZE: u32 = 16;
const NUM_GPU_BLOCKS: u32 = 2048;
const MAX_MODEL_LEN: u32 = 8192;
const MAX_NUM_SEQS: usize = 32;
const STEP_SECONDS: f64 = 0.05;
/// A scrape after a long pause simulates at most this much; the rest of the pause is skipped.
const MAX_CATCH_UP_SECONDS: f64 = 600.0;

pub(super) const FINISH_REASONS: [&str; 5] = ["stop", "length", "abort", "error", "repetition"];
const STOP: usize = 0;
const LENGTH: usize = 1;
const ABORT: usize = 2;

const TTFT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
const ITL_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
    40.0, 80.0,
];
const REQUEST_LATENCY_BUCKETS: &[f64] = &[
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
    480.0, 960.0, 1920.0, 7680.0,
];
const ITERATION_TOKEN_BUCKETS: &[f64] = &[
    1.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0, 16384.0,
];
/// `build_1_2_5_buckets(MAX_MODEL_LEN)`.
const TOKEN_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
];
const PARAMS_N_BUCKETS: &[f64] = &[1.0, 2.0, 5.0, 10.0, 20.0];

/// Everything both endpoints report, advanced together.
pub(super) struct Sim {
    rng: Rng,
    /// Simulated seconds since start.
    pub(super) now: f64,
    /// Unix time of the start, the base of every `_created` value.
    pub(super) created_unix: f64,
    pub(super) engines: [Engine; 2],
    /// One LMCache worker per engine (`worker_id` = engine index).
    pub(super) lmcache: [LmcWorker; 2],
    pub(super) api: ApiServer,
    pub(super) api_process: ProcessStats,
    pub(super) lmcache_process: ProcessStats,
    /// Length of the previous render of each page, to size the next buffer in one allocation.
    pub(super) size_hints: [usize; 2],
    hang: Hang,
    /// `/demo/break-generate`: generation hangs, and no request arrives any more (a quiet
    /// engine that broke), so the engines drain and go idle.
    pub(super) broken: bool,
}

/// The engines' state for `sysport demo`'s stall: a hang as a tensor-parallel deadlock leaves
/// vLLM, with requests admitted and no step ever finishing, so every number stands still.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Hang {
    No,
    /// Hangs at the next step that has requests running.
    Requested,
    Hung,
}

impl Sim {
    pub(super) fn new(seed: u64, created_unix: f64) -> Self {
        Sim {
            rng: Rng::new(seed),
            now: 0.0,
            created_unix,
            engines: [Engine::new("0", 3.5, 0.0), Engine::new("1", 2.2, 2.1)],
            lmcache: [LmcWorker::new("0"), LmcWorker::new("1")],
            api: ApiServer::new(),
            api_process: ProcessStats::new(created_unix - 41.7, 0.35, 3.22e9),
            lmcache_process: ProcessStats::new(created_unix - 12.9, 0.08, 9.6e8),
            size_hints: [96 * 1024, 48 * 1024],
            hang: Hang::No,
            broken: false,
        }
    }

    /// Runs the workload up to `t` simulated seconds since start (never backwards).
    pub(super) fn advance_to(&mut self, t: f64) {
        if self.hang == Hang::Hung {
            self.skip(t - self.now);
            return;
        }
        if t - self.now > MAX_CATCH_UP_SECONDS {
            self.skip(t - MAX_CATCH_UP_SECONDS - self.now);
        }
        while self.now + STEP_SECONDS <= t {
            if self.hang == Hang::Requested && self.engines.iter().any(|e| e.num_running() > 0) {
                self.hang = Hang::Hung;
                self.skip(t - self.now);
                return;
            }
            let now = self.now;
            for (engine, lmc) in self.engines.iter_mut().zip(self.lmcache.iter_mut()) {
                lmc.tick(now);
                engine.arriving = !self.broken;
                engine.step(now, STEP_SECONDS, &mut self.rng, lmc, &mut self.api);
            }
            self.api.step(STEP_SECONDS, &mut self.rng);
            self.now += STEP_SECONDS;
        }
    }

    /// Moves the clock `by` seconds without simulating them: every number stays as it was.
    fn skip(&mut self, by: f64) {
        if by <= 0.0 {
            return;
        }
        self.now += by;
        self.engines.iter_mut().for_each(|e| e.shift(by));
        self.lmcache.iter_mut().for_each(|l| l.shift(by));
    }

    /// Hangs the engines at the next step with requests running (at once if one has some).
    pub(super) fn hang(&mut self) {
        if self.hang == Hang::No {
            self.hang = Hang::Requested;
        }
    }

    /// Lets hung engines step again, from where they stopped, and heals a broken generation.
    pub(super) fn resume(&mut self) {
        self.hang = Hang::No;
        self.broken = false;
    }

    #[cfg(test)]
    pub(super) fn hang_state(&self) -> Hang {
        self.hang
    }

    /// Requests finished so far, which drives the Python runtime's own counters.
    pub(super) fn finished_requests(&self) -> f64 {
        self.engines
            .iter()
            .map(|e| e.counters.request_success.iter().sum::<f64>())
            .sum()
    }
}

struct Request {
    arrived: f64,
    prompt: u32,
    max_tokens: u32,
    n: u32,
    /// Output tokens this request will produce before it finishes.
    target: u32,
    finish: usize,
    itl_scale: f64,
    scheduled: Option<f64>,
    first_token: Option<f64>,
    last_token: f64,
    next_token: f64,
    generated: u32,
    local_hit: u32,
    external_hit: u32,
    lmcache_hit: u32,
}

impl Request {
    fn new(arrived: f64, rng: &mut Rng) -> Self {
        let prompt = rng
            .lognormal(700.0, 0.8)
            .clamp(8.0, f64::from(MAX_MODEL_LEN - 512)) as u32;
        let max_tokens = rng
            .pick(&[64, 128, 256, 512, 1024, 2048])
            .min(MAX_MODEL_LEN - prompt);
        let natural = rng.lognormal(160.0, 0.9).max(1.0) as u32;
        let (mut target, mut finish) = if natural < max_tokens {
            (natural, STOP)
        } else {
            (max_tokens, LENGTH)
        };
        if rng.chance(0.02) {
            target = 1 + (rng.unit() * f64::from(target)) as u32;
            finish = ABORT;
        }
        let n = if rng.chance(0.95) {
            1
        } else {
            rng.pick(&[2, 2, 2, 4])
        };
        Request {
            arrived,
            prompt,
            max_tokens,
            n,
            target,
            finish,
            itl_scale: rng.lognormal(1.0, 0.12),
            scheduled: None,
            first_token: None,
            last_token: arrived,
            next_token: arrived,
            generated: 0,
            local_hit: 0,
            external_hit: 0,
            lmcache_hit: 0,
        }
    }

    fn blocks(&self) -> u32 {
        (self.prompt + self.generated).div_ceil(BLOCK_SIZE)
    }

    fn shift(&mut self, by: f64) {
        self.arrived += by;
        self.scheduled = self.scheduled.map(|t| t + by);
        self.first_token = self.first_token.map(|t| t + by);
        self.last_token += by;
        self.next_token += by;
    }
}

#[derive(Default)]
pub(super) struct EngineCounters {
    pub(super) prefix_cache_queries: f64,
    pub(super) prefix_cache_hits: f64,
    pub(super) external_prefix_cache_queries: f64,
    pub(super) external_prefix_cache_hits: f64,
    pub(super) num_preemptions: f64,
    pub(super) prompt_tokens: f64,
    /// local_compute, local_cache_hit, external_kv_transfer.
    pub(super) prompt_tokens_by_source: [f64; 3],
    pub(super) prompt_tokens_cached: f64,
    pub(super) generation_tokens: f64,
    /// Indexed like [`FINISH_REASONS`].
    pub(super) request_success: [f64; 5],
}

pub(super) struct EngineHists {
    pub(super) prompt_tokens: Hist,
    pub(super) generation_tokens: Hist,
    pub(super) iteration_tokens: Hist,
    pub(super) max_num_generation_tokens: Hist,
    pub(super) params_n: Hist,
    pub(super) params_max_tokens: Hist,
    pub(super) ttft: Hist,
    pub(super) itl: Hist,
    pub(super) time_per_output_token: Hist,
    pub(super) e2e: Hist,
    pub(super) queue: Hist,
    pub(super) inference: Hist,
    pub(super) prefill: Hist,
    pub(super) decode: Hist,
    pub(super) prefill_kv_computed_tokens: Hist,
}

pub(super) struct Engine {
    pub(super) id: &'static str,
    /// Mean arrivals per second and the phase of the slow swing around it.
    rate: f64,
    phase: f64,
    /// Whether requests arrive (not while generation is broken).
    arriving: bool,
    waiting: VecDeque<Request>,
    running: Vec<Request>,
    pub(super) counters: EngineCounters,
    pub(super) hists: EngineHists,
}

impl Engine {
    fn new(id: &'static str, rate: f64, phase: f64) -> Self {
        Engine {
            id,
            rate,
            phase,
            arriving: true,
            waiting: VecDeque::new(),
            running: Vec::with_capacity(MAX_NUM_SEQS),
            counters: EngineCounters::default(),
            hists: EngineHists {
                prompt_tokens: Hist::new(TOKEN_BUCKETS),
                generation_tokens: Hist::new(TOKEN_BUCKETS),
                iteration_tokens: Hist::new(ITERATION_TOKEN_BUCKETS),
                max_num_generation_tokens: Hist::new(TOKEN_BUCKETS),
                params_n: Hist::new(PARAMS_N_BUCKETS),
                params_max_tokens: Hist::new(TOKEN_BUCKETS),
                ttft: Hist::new(TTFT_BUCKETS),
                itl: Hist::new(ITL_BUCKETS),
                time_per_output_token: Hist::new(ITL_BUCKETS),
                e2e: Hist::new(REQUEST_LATENCY_BUCKETS),
                queue: Hist::new(REQUEST_LATENCY_BUCKETS),
                inference: Hist::new(REQUEST_LATENCY_BUCKETS),
                prefill: Hist::new(REQUEST_LATENCY_BUCKETS),
                decode: Hist::new(REQUEST_LATENCY_BUCKETS),
                prefill_kv_computed_tokens: Hist::new(TOKEN_BUCKETS),
            },
        }
    }

    /// `engine`, `model_name`: the label set of every per-engine vLLM family.
    pub(super) fn labels(&self) -> [(&'static str, &'static str); 2] {
        [("engine", self.id), ("model_name", MODEL)]
    }

    pub(super) fn num_running(&self) -> usize {
        self.running.len()
    }

    pub(super) fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    fn used_blocks(&self) -> u32 {
        self.running.iter().map(Request::blocks).sum()
    }

    pub(super) fn kv_cache_usage(&self) -> f64 {
        f64::from(self.used_blocks()) / f64::from(NUM_GPU_BLOCKS)
    }

    fn shift(&mut self, by: f64) {
        self.waiting
            .iter_mut()
            .chain(self.running.iter_mut())
            .for_each(|r| r.shift(by));
    }

    fn step(&mut self, t0: f64, dt: f64, rng: &mut Rng, lmc: &mut LmcWorker, api: &mut ApiServer) {
        let t1 = t0 + dt;
        let swing = 1.0 + 0.7 * (TAU * t0 / 180.0 + self.phase).sin();
        let mut arrivals = rng.poisson(self.rate * swing.max(0.05) * dt);
        if rng.chance(0.0005) {
            arrivals += 8 + rng.poisson(8.0);
        }
        if !self.arriving {
            arrivals = 0;
        }
        for _ in 0..arrivals {
            self.waiting
                .push_back(Request::new(t0 + rng.unit() * dt, rng));
        }

        let prefill_tokens = self.schedule(t0, rng, lmc);
        let base_itl = 0.008 + 0.0007 * self.running.len() as f64;
        let mut decode_tokens = 0u64;
        let mut i = 0;
        while i < self.running.len() {
            let req = &mut self.running[i];
            while req.next_token <= t1 && req.generated < req.target {
                let at = req.next_token;
                if req.first_token.is_none() {
                    req.first_token = Some(at);
                    self.hists.ttft.observe(at - req.arrived);
                    lmc.store(at, req.prompt.saturating_sub(req.lmcache_hit), rng);
                } else {
                    self.hists.itl.observe(at - req.last_token);
                }
                req.last_token = at;
                req.generated += 1;
                decode_tokens += 1;
                let jitter = if rng.chance(0.002) {
                    rng.range(3.0, 8.0)
                } else {
                    rng.range(0.85, 1.2)
                };
                req.next_token = at + base_itl * req.itl_scale * jitter;
            }
            if req.generated >= req.target {
                let done = self.running.remove(i);
                self.finish(&done, rng, api);
            } else {
                i += 1;
            }
        }
        self.counters.generation_tokens += decode_tokens as f64;

        // Out of KV blocks: preempt the most recently admitted request (vLLM's recompute mode).
        while self.used_blocks() > NUM_GPU_BLOCKS {
            let Some(victim) = self.running.pop() else {
                break;
            };
            self.counters.num_preemptions += 1.0;
            self.waiting.push_front(victim);
        }

        // One engine step every base ITL: spread this step's tokens over those iterations.
        let total = prefill_tokens + decode_tokens;
        if total > 0 {
            let iterations = ((dt / base_itl).round() as u64).max(1);
            let (per, extra) = (total / iterations, total % iterations);
            self.hists
                .iteration_tokens
                .observe_n(per as f64, iterations - extra);
            self.hists
                .iteration_tokens
                .observe_n((per + 1) as f64, extra);
        }
    }

    /// Admits waiting requests while slots and KV blocks allow; returns the tokens prefilled.
    fn schedule(&mut self, t0: f64, rng: &mut Rng, lmc: &mut LmcWorker) -> u64 {
        let mut prefill_tokens = 0u64;
        let mut free = NUM_GPU_BLOCKS.saturating_sub(self.used_blocks());
        while self.running.len() < MAX_NUM_SEQS {
            let Some(front) = self.waiting.front() else {
                break;
            };
            let need = (front.prompt + front.generated + 1).div_ceil(BLOCK_SIZE);
            if need > free {
                break;
            }
            let Some(mut req) = self.waiting.pop_front() else {
                break;
            };
            free -= need;
            let start = req.arrived.max(t0) + rng.range(0.0005, 0.003);
            let compute = if req.scheduled.is_none() {
                req.scheduled = Some(start);
                self.first_schedule(&mut req, rng, lmc)
            } else {
                // Resumed after preemption: recompute everything so far.
                req.prompt + req.generated
            };
            let batch = 1.0 + self.running.len() as f64 / MAX_NUM_SEQS as f64;
            let prefill = 0.006
                + f64::from(compute) / 16_000.0 * batch
                + f64::from(req.external_hit) / 300_000.0;
            req.next_token = start + prefill;
            prefill_tokens += u64::from(compute);
            self.running.push(req);
        }
        prefill_tokens
    }

    /// Prefix-cache and LMCache lookups when a request is first scheduled; returns the tokens
    /// left to compute.
    fn first_schedule(&mut self, req: &mut Request, rng: &mut Rng, lmc: &mut LmcWorker) -> u32 {
        let at_most = (req.prompt - 1) / BLOCK_SIZE * BLOCK_SIZE; // the last token is always computed
        let shared = if rng.chance(0.55) {
            f64::from(req.prompt) * rng.range(0.05, 0.6)
        } else {
            0.0
        };
        req.local_hit = ((shared as u32) / BLOCK_SIZE * BLOCK_SIZE).min(at_most);
        req.lmcache_hit = lmc.lookup(req.prompt, req.local_hit, rng);
        let wanted = req.lmcache_hit.min(at_most).saturating_sub(req.local_hit);
        req.external_hit = if wanted > 0 {
            lmc.retrieve(wanted, rng)
        } else {
            0
        };

        let c = &mut self.counters;
        let (prompt, local, external) = (
            f64::from(req.prompt),
            f64::from(req.local_hit),
            f64::from(req.external_hit),
        );
        c.prefix_cache_queries += prompt;
        c.prefix_cache_hits += local;
        c.external_prefix_cache_queries += prompt - local;
        c.external_prefix_cache_hits += external;
        c.prompt_tokens += prompt;
        c.prompt_tokens_by_source[0] += prompt - local - external;
        c.prompt_tokens_by_source[1] += local;
        c.prompt_tokens_by_source[2] += external;
        c.prompt_tokens_cached += local + external;
        req.prompt - req.local_hit - req.external_hit
    }

    fn finish(&mut self, req: &Request, rng: &mut Rng, api: &mut ApiServer) {
        let end = req.last_token;
        let scheduled = req.scheduled.unwrap_or(req.arrived);
        let first = req.first_token.unwrap_or(end);
        let h = &mut self.hists;
        h.e2e.observe(end - req.arrived);
        h.queue.observe(scheduled - req.arrived);
        h.inference.observe(end - scheduled);
        h.prefill.observe(first - scheduled);
        h.decode.observe(end - first);
        h.prompt_tokens.observe(f64::from(req.prompt));
        h.generation_tokens.observe(f64::from(req.generated));
        h.max_num_generation_tokens
            .observe(f64::from(req.max_tokens));
        h.params_n.observe(f64::from(req.n));
        h.params_max_tokens.observe(f64::from(req.max_tokens));
        h.prefill_kv_computed_tokens
            .observe(f64::from(req.prompt - req.local_hit - req.external_hit));
        if req.generated > 1 {
            h.time_per_output_token
                .observe((end - first) / f64::from(req.generated - 1));
        }
        self.counters.request_success[req.finish] += 1.0;
        api.completion(end - req.arrived, req.prompt, req.generated, rng);
    }
}
