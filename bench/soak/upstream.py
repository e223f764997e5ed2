"""A vLLM-like /metrics endpoint for the soak run, rendered by prometheus_client (as vLLM's is).

    upstream.py --port P [--mode steady|phases] [--phase SECONDS]

steady: always 200. phases: slow (2 s before answering), HTTP 500, normal, each for --phase
seconds, in turn, from the moment the server starts (slow first, so that the peak of requests
waiting on it comes during the soak's warm-up). Values move on every request; in phases
mode the counters restart with each cycle, as after an engine restart, so that the page keeps
about the same size through a long run (ever longer counter values would grow sysport's buffers
and read as a leak).
"""

import argparse
import random
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LATENCY_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


def build_registry():
    reg = CollectorRegistry()
    labels = ["model_name", "engine"]
    m = {
        "running": Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", labels, registry=reg),
        "waiting": Gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", labels, registry=reg),
        "kv": Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", labels, registry=reg),
        "prompt": Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", labels, registry=reg),
        "generation": Counter("vllm:generation_tokens", "Number of generation tokens processed.", labels, registry=reg),
        "success": Counter("vllm:request_success", "Count of successfully processed requests.", labels + ["finished_reason"], registry=reg),
        "e2e": Histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", labels, buckets=LATENCY_BUCKETS, registry=reg),
        "ttft": Histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", labels, buckets=LATENCY_BUCKETS, registry=reg),
        "itl": Histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", labels, buckets=LATENCY_BUCKETS, registry=reg),
        "prompt_len": Histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", labels, buckets=TOKEN_BUCKETS, registry=reg),
        "lmcache_hit": Gauge("lmcache:hit_rate", "LMCache hit rate (dropped by the vllm: prefix).", ["worker_id"], registry=reg),
    }
    return reg, m


def step(m, rng):
    for engine in ("0", "1"):
        lv = (MODEL, engine)
        m["running"].labels(*lv).set(rng.randint(0, 64))
        m["waiting"].labels(*lv).set(rng.randint(0, 16))
        m["kv"].labels(*lv).set(rng.random())
        m["prompt"].labels(*lv).inc(rng.randint(0, 4096))
        m["generation"].labels(*lv).inc(rng.randint(0, 1024))
        for reason in ("stop", "length", "abort"):
            m["success"].labels(*lv, reason).inc(rng.randint(0, 3))
        for name in ("e2e", "ttft", "itl"):
            m[name].labels(*lv).observe(rng.expovariate(2.0))
        m["prompt_len"].labels(*lv).observe(rng.randint(1, 8000))
    m["lmcache_hit"].labels("0").set(rng.random())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--mode", choices=["steady", "phases"], default="steady")
    ap.add_argument("--phase", type=float, default=10.0)
    args = ap.parse_args()
    state = {"cycle": 0, "registry": build_registry()}
    rng = random.Random(args.port)
    started = time.monotonic()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes; without TCP_NODELAY the body waits for the
        # client's delayed ACK (40 ms), which would be measured as sysport's latency.
        disable_nagle_algorithm = True

        def do_GET(self):
            if self.path not in ("/metrics", "/health"):
                self.reply(404, b"not found\n", "text/plain")
                return
            cycle = 0
            if args.mode == "phases":
                cycle, phase = divmod(int((time.monotonic() - started) / args.phase), 3)
                if phase == 0:
                    time.sleep(2.0)
                elif phase == 1:
                    self.reply(500, b"engine error\n", "text/plain")
                    return
            if self.path == "/health":
                self.reply(200, b"", "text/plain")
                return
            with lock:
                if args.mode == "phases" and cycle != state["cycle"]:
                    state["cycle"], state["registry"] = cycle, build_registry()
                reg, m = state["registry"]
                step(m, rng)
                body = generate_latest(reg)
            self.reply(200, body, "text/plain; version=0.0.4; charset=utf-8")

        def reply(self, code, body, content_type):
            try:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # sysport gave up on a slow answer: expected in the slow phase

        def log_message(self, *_):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    print(f"upstream {args.mode} on 127.0.0.1:{args.port}", file=sys.stderr, flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
