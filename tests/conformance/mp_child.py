"""prometheus_client in multiprocess mode, the way vLLM runs it with several API-server
processes. PROMETHEUS_MULTIPROC_DIR must be set before prometheus_client is imported.

  mp_child.py write N   one worker process records metrics (values depend on N)
  mp_child.py collect   renders the directory with MultiProcessCollector as text 0.0.4
"""

import os
import sys

assert os.environ.get("PROMETHEUS_MULTIPROC_DIR"), "PROMETHEUS_MULTIPROC_DIR must be set"

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary  # noqa: E402
from prometheus_client.exposition import generate_latest  # noqa: E402
from prometheus_client.multiprocess import MultiProcessCollector  # noqa: E402

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LBL = ["model_name", "engine"]


def write(n: int) -> None:
    # Metrics created in a process registry, as vLLM does; values go to the mmap files.
    reg = CollectorRegistry()
    c = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", LBL, registry=reg)
    p = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", LBL, registry=reg)
    h = Histogram(
        "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", LBL,
        buckets=[0.001, 0.01, 0.07500000000000001, 0.1, 1.0, 1e6], registry=reg,
    )
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", LBL,
                    multiprocess_mode="livesum", registry=reg)
    usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", LBL,
                  multiprocess_mode="all", registry=reg)
    recent = Gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", ["block_size", "note"],
                   multiprocess_mode="mostrecent", registry=reg)
    s = Summary("vllm:request_queue_summary_seconds", "Queue time summary.", LBL, registry=reg)
    lm = Counter("lmcache:num_retrieve_requests", "Total number of retrieve requests sent to lmcache",
                 ["model_name", "worker_id"], registry=reg)
    Counter("http_requests", "HTTP requests (not an engine family).", ["handler"], registry=reg).labels("/x").inc()
    for e in ("0", "1"):
        c.labels(MODEL, e).inc(n + 1)
        p.labels(MODEL, e).inc(1000 * (n + 1))
        for v in (0.0005, 0.05, 0.2, 3.0):
            h.labels(MODEL, e).observe(v * (n + 1))
        running.labels(MODEL, e).set(n + 2)
        usage.labels(MODEL, e).set(0.25 * (n + 1))
        s.labels(MODEL, e).observe(0.5 + n)
    recent.labels("16", 'quoted "x" \\ back\nslash').set(1.0)
    lm.labels('model "with" quotes, and = signs', str(n)).inc(5)


def collect() -> None:
    reg = CollectorRegistry()
    MultiProcessCollector(reg)
    sys.stdout.buffer.write(generate_latest(reg))


if __name__ == "__main__":
    if sys.argv[1] == "write":
        write(int(sys.argv[2]))
    else:
        collect()
