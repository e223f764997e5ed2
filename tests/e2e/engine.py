"""Loopback stand-ins for a vLLM engine and an LMCache endpoint, for the end-to-end suite.

    python engine.py vllm --port 8000
    python engine.py lmcache --port 8001

Each serves a prometheus_client registry whose values keep moving (a thread updates it several
times per second), on 127.0.0.1:
  GET /metrics   prometheus_client's own WSGI app (it negotiates the format from Accept)
  GET /health    200 "ok"
  GET /accept    the Accept header of the last /metrics request (what sysport asked for)

Metric names, label sets, HELP texts and buckets follow vLLM's v1 PrometheusStatLogger and
LMCache's PrometheusLogger. The suite kills the process and starts it again on the same port to
simulate an engine restart.
"""

import argparse
import random
import signal
import socketserver
import sys
import threading
import time
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    make_wsgi_app,
)

MODEL = "e2e-model"
ENGINES = ("0", "1")
# vllm:num_requests_waiting{engine="0"} never moves: the suite compares it with Prometheus.
FIXED_WAITING = 7

TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]
ITL_BUCKETS = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
               20.0, 40.0, 80.0]
REQUEST_LATENCY_BUCKETS = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0,
                           60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0]
ITERATION_TOKEN_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384]
# build_1_2_5_buckets(max_model_len=8192)
BUCKETS_1_2_5 = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000]
FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")

LMC_LABELS = ["model_name", "worker_id", "role", "served_model_name"]
LMC_LABEL_VALUES = (MODEL, "0", "worker", "")
LMC_TIME_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                    7.5, 10.0]
LMC_PROFILING_BUCKETS = [0.00001 * 2**i for i in range(20)]
LMC_SPEED_BUCKETS = [1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536]
LMC_LIFESPAN_BUCKETS = [0, 1, 5, 10, 20, 40, 60, 80, 100, 250, 500, 750, 1000, 2500, 5000]


def vllm_registry(rng):
    """A vLLM-like registry and the function that moves its values."""
    r = CollectorRegistry()
    # A real engine's /metrics also carries prometheus_client's default collectors; sysport must
    # drop them (they do not start with vllm:).
    for c in (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR):
        r.register(c)
    ln = ["model_name", "engine"]
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
                    ln, multiprocess_mode="mostrecent", registry=r)
    waiting = Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
                    ln, multiprocess_mode="mostrecent", registry=r)
    by_reason = Gauge(
        "vllm:num_requests_waiting_by_reason",
        "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling "
        "capacity; 'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked "
        "status). Sum of all reasons equals vllm:num_requests_waiting.",
        ln + ["reason"], multiprocess_mode="mostrecent", registry=r)
    sleep_state = Gauge(
        "vllm:engine_sleep_state",
        "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
        "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2.",
        ln + ["sleep_state"], multiprocess_mode="mostrecent", registry=r)
    kv_usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
                     ln, multiprocess_mode="mostrecent", registry=r)
    prefix_queries = Counter("vllm:prefix_cache_queries",
                             "Prefix cache queries, in terms of number of queried tokens.", ln, registry=r)
    prefix_hits = Counter("vllm:prefix_cache_hits",
                          "Prefix cache hits, in terms of number of cached tokens.", ln, registry=r)
    preemptions = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.",
                          ln, registry=r)
    prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", ln, registry=r)
    by_source = Counter("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.",
                        ln + ["source"], registry=r)
    cached = Counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).",
                     ln, registry=r)
    gen_tokens = Counter("vllm:generation_tokens", "Number of generation tokens processed.", ln, registry=r)
    success = Counter("vllm:request_success", "Count of successfully processed requests.",
                      ln + ["finished_reason"], registry=r)
    req_prompt = Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                           ln, buckets=BUCKETS_1_2_5, registry=r)
    req_gen = Histogram("vllm:request_generation_tokens", "Number of generation tokens processed.",
                        ln, buckets=BUCKETS_1_2_5, registry=r)
    iteration = Histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.",
                          ln, buckets=ITERATION_TOKEN_BUCKETS, registry=r)
    params_n = Histogram("vllm:request_params_n", "Histogram of the n request parameter.",
                         ln, buckets=[1, 2, 5, 10, 20], registry=r)
    ttft = Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                     ln, buckets=TTFT_BUCKETS, registry=r)
    itl = Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                    ln, buckets=ITL_BUCKETS, registry=r)
    tpot = Histogram("vllm:request_time_per_output_token_seconds",
                     "Histogram of time_per_output_token_seconds per request.",
                     ln, buckets=ITL_BUCKETS, registry=r)
    e2e = Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                    ln, buckets=REQUEST_LATENCY_BUCKETS, registry=r)
    queue = Histogram("vllm:request_queue_time_seconds",
                      "Histogram of time spent in WAITING phase for request.",
                      ln, buckets=REQUEST_LATENCY_BUCKETS, registry=r)
    inference = Histogram("vllm:request_inference_time_seconds",
                          "Histogram of time spent in RUNNING phase for request.",
                          ln, buckets=REQUEST_LATENCY_BUCKETS, registry=r)
    prefill = Histogram("vllm:request_prefill_time_seconds",
                        "Histogram of time spent in PREFILL phase for request.",
                        ln, buckets=REQUEST_LATENCY_BUCKETS, registry=r)
    decode = Histogram("vllm:request_decode_time_seconds",
                       "Histogram of time spent in DECODE phase for request.",
                       ln, buckets=REQUEST_LATENCY_BUCKETS, registry=r)
    cache_info = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                       ["block_size", "cache_dtype", "enable_prefix_caching", "gpu_memory_utilization",
                        "num_gpu_blocks", "engine"], multiprocess_mode="mostrecent", registry=r)

    for e in ENGINES:
        for reason in FINISH_REASONS:  # vLLM pre-creates every finish reason at 0
            success.labels(MODEL, e, reason)
        for reason in ("capacity", "deferred"):
            by_reason.labels(MODEL, e, reason)
        for state, value in (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0)):
            sleep_state.labels(MODEL, e, state).set(value)
        cache_info.labels("16", "auto", "True", "0.9", "27000", e).set(1)
    waiting.labels(MODEL, "0").set(FIXED_WAITING)
    by_reason.labels(MODEL, "0", "capacity").set(FIXED_WAITING)

    def step():
        for e in ENGINES:
            for _ in range(rng.randint(1, 3)):
                reason = "stop" if rng.random() < 0.8 else "length"
                success.labels(MODEL, e, reason).inc()
                p = rng.randint(20, 1500)
                g = rng.randint(10, 400)
                prompt_tokens.labels(MODEL, e).inc(p)
                gen_tokens.labels(MODEL, e).inc(g)
                hit = int(p * rng.uniform(0.2, 0.7))
                prefix_queries.labels(MODEL, e).inc(p)
                prefix_hits.labels(MODEL, e).inc(hit)
                cached.labels(MODEL, e).inc(hit)
                by_source.labels(MODEL, e, "local_cache_hit").inc(hit)
                by_source.labels(MODEL, e, "local_compute").inc(p - hit)
                req_prompt.labels(MODEL, e).observe(p)
                req_gen.labels(MODEL, e).observe(g)
                params_n.labels(MODEL, e).observe(1)
                ttft.labels(MODEL, e).observe(rng.uniform(0.02, 0.9))
                for _ in range(3):
                    itl.labels(MODEL, e).observe(rng.uniform(0.01, 0.12))
                tpot.labels(MODEL, e).observe(rng.uniform(0.01, 0.12))
                e2e.labels(MODEL, e).observe(rng.uniform(0.4, 12.0))
                queue.labels(MODEL, e).observe(rng.uniform(0.0, 1.2))
                inference.labels(MODEL, e).observe(rng.uniform(0.3, 10.0))
                prefill.labels(MODEL, e).observe(rng.uniform(0.01, 0.5))
                decode.labels(MODEL, e).observe(rng.uniform(0.3, 9.0))
            iteration.labels(MODEL, e).observe(rng.randint(1, 4000))
            if rng.random() < 0.2:
                preemptions.labels(MODEL, e).inc()
            running.labels(MODEL, e).set(rng.randint(1, 64))
            kv_usage.labels(MODEL, e).set(round(rng.uniform(0.1, 0.9), 4))
        n = rng.randint(0, 30)
        waiting.labels(MODEL, "1").set(n)
        by_reason.labels(MODEL, "1", "capacity").set(n)

    return r, step


def lmcache_registry(rng):
    """An LMCache-like registry (labels model_name, worker_id, role, served_model_name)."""
    r = CollectorRegistry()
    for c in (GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR):
        r.register(c)

    def counter(name, doc):
        return Counter(name, doc, LMC_LABELS, registry=r).labels(*LMC_LABEL_VALUES)

    def gauge(name, doc, mode="livemostrecent"):
        return Gauge(name, doc, LMC_LABELS, multiprocess_mode=mode, registry=r).labels(*LMC_LABEL_VALUES)

    def histogram(name, doc, buckets):
        return Histogram(name, doc, LMC_LABELS, buckets=buckets, registry=r).labels(*LMC_LABEL_VALUES)

    retrieve_requests = counter("lmcache:num_retrieve_requests", "Total number of retrieve requests sent to lmcache")
    store_requests = counter("lmcache:num_store_requests", "Total number of store requests sent to lmcache")
    lookup_requests = counter("lmcache:num_lookup_requests", "Total number of lookup requests sent to lmcache")
    requested = counter("lmcache:num_requested_tokens", "Total number of tokens requested from lmcache")
    hit = counter("lmcache:num_hit_tokens", "Total number of tokens hit in lmcache")
    stored = counter("lmcache:num_stored_tokens", "Total number of tokens stored in lmcache including evicted ones")
    lookup_tokens = counter("lmcache:num_lookup_tokens", "Total number of tokens requested in lookup from lmcache")
    lookup_hits = counter("lmcache:num_lookup_hits", "Total number of tokens hit in lookup from lmcache")
    vllm_hit = counter("lmcache:num_vllm_hit_tokens", "Number of hit tokens in vllm")
    prompt = counter("lmcache:num_prompt_tokens", "Number of prompt tokens in lmcache")
    zero_hit = counter("lmcache:lookup_0_hit_requests", "Total number of 0 hit lookup requests")
    retrieve_rate = gauge("lmcache:retrieve_hit_rate", "Hit rate of lmcache retrieve requests since last log")
    lookup_rate = gauge("lmcache:lookup_hit_rate", "Hit rate of lmcache lookup requests since last log")
    local_usage = gauge("lmcache:local_cache_usage", "Local cache usage (bytes) of lmcache", "sum")
    active_objs = gauge("lmcache:active_memory_objs_count", "The number of active memory objects", "sum")
    gauge("lmcache:lmcache_is_healthy", "The health status of LMCache (1=healthy, 0=unhealthy)").set(1)
    # Gauges whose names end in _total: a parser that takes _total for a counter gets them wrong.
    gauge("lmcache:periodic_threads_critical_total", "Total number of critical level periodic threads").set(2)
    gauge("lmcache:periodic_threads_low_total", "Total number of low level periodic threads").set(3)
    t_retrieve = histogram("lmcache:time_to_retrieve", "Time to retrieve from lmcache (seconds)", LMC_TIME_BUCKETS)
    t_store = histogram("lmcache:time_to_store", "Time to store to lmcache (seconds)", LMC_TIME_BUCKETS)
    t_lookup = histogram("lmcache:time_to_lookup", "Time to lookup in lmcache (seconds)", LMC_PROFILING_BUCKETS)
    retrieve_speed = histogram("lmcache:retrieve_speed", "Retrieve speed of lmcache (tokens per second)",
                               LMC_SPEED_BUCKETS)
    request_hit_rate = histogram("lmcache:request_cache_hit_rate", "Request cache hit rate",
                                 [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0])
    lifespan = histogram("lmcache:request_cache_lifespan", "Request cache lifespan in minutes",
                         LMC_LIFESPAN_BUCKETS)

    def step():
        for _ in range(rng.randint(1, 3)):
            tokens = rng.randint(64, 2048)
            hits = int(tokens * rng.uniform(0.1, 0.8))
            retrieve_requests.inc()
            store_requests.inc()
            lookup_requests.inc()
            requested.inc(tokens)
            hit.inc(hits)
            stored.inc(tokens - hits)
            lookup_tokens.inc(tokens)
            lookup_hits.inc(hits)
            vllm_hit.inc(int(hits / 2))
            prompt.inc(tokens)
            if hits == 0:
                zero_hit.inc()
            t_retrieve.observe(rng.uniform(0.001, 0.3))
            t_store.observe(rng.uniform(0.001, 0.3))
            t_lookup.observe(rng.uniform(0.00001, 0.01))
            retrieve_speed.observe(rng.uniform(100, 60000))
            request_hit_rate.observe(hits / tokens)
            lifespan.observe(rng.uniform(0, 120))
        retrieve_rate.set(round(rng.uniform(0, 1), 4))
        lookup_rate.set(round(rng.uniform(0, 1), 4))
        local_usage.set(rng.randint(1 << 20, 1 << 30))
        active_objs.set(rng.randint(0, 500))

    return r, step


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("kind", choices=["vllm", "lmcache"])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hz", type=float, default=5.0)
    args = ap.parse_args()

    rng = random.Random(args.seed)
    registry, step = (vllm_registry if args.kind == "vllm" else lmcache_registry)(rng)
    step()
    metrics_app = make_wsgi_app(registry)
    last_accept = {"value": ""}

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            last_accept["value"] = environ.get("HTTP_ACCEPT", "")
            return metrics_app(environ, start_response)
        if path == "/health":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok"]
        if path == "/accept":
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [last_accept["value"].encode()]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found"]

    stop = threading.Event()

    def mover():
        while not stop.wait(1.0 / args.hz):
            step()

    threading.Thread(target=mover, daemon=True).start()
    server = make_server("127.0.0.1", args.port, app, server_class=_Server, handler_class=_QuietHandler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(f"{args.kind} engine on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        stop.set()
        server.server_close()


if __name__ == "__main__":
    main()
