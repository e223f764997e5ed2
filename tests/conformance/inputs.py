"""The conformance inputs: every exposition fixture, plus exposition rendered now by
prometheus_client from a registry holding vLLM- and LMCache-like metrics (text 0.0.4,
OpenMetrics with the default escaping, and multiprocess mode)."""

import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

TEXT_CT = "text/plain; version=0.0.4; charset=utf-8"
OM_CT = "application/openmetrics-text; version=1.0.0; charset=utf-8"

HERE = Path(__file__).resolve().parent


@dataclass
class Input:
    name: str  # also the upstream path: /NAME
    body: bytes
    fmt: str  # "text" or "om": how the body is written
    content_type: str  # what the upstream server says
    origin: str  # for messages
    # The text 0.0.4 rendering of the same registry, when there is one: the expected samples
    # then come from it (prometheus_client renders the same samples in both formats).
    text_twin: Optional[bytes] = None
    gzip: bool = False  # answer gzip-compressed when the request accepts it
    notes: list = field(default_factory=list)


def fixture_inputs(fixtures_dir: Path) -> list:
    out = []
    for p in sorted(fixtures_dir.iterdir()):
        if not p.is_file() or p.suffix not in (".prom", ".txt"):
            continue  # README.md and the like are not exposition
        om = ".openmetrics" in p.name
        out.append(
            Input(
                name=p.name,
                body=p.read_bytes(),
                fmt="om" if om else "text",
                content_type=OM_CT if om else TEXT_CT,
                origin=f"tests/fixtures/{p.name}",
            )
        )
    return out


# Label values that break naive parsers: quote, backslash, newline, comma, equals, braces,
# hash, tab, non-ASCII, emoji, a trailing backslash, and the empty string.
WEIRD = [
    'say "hi"',
    "back\\slash",
    "new\nline",
    "a,b=c",
    "}{",
    "# not a comment",
    "tab\there",
    "Größe/模型/λ",
    "emoji 🚀🤖",
    "ends with \\",
    "",
    'k="v",x="y"',
]

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def build_registry():
    """A registry with vLLM-like families. Returns (registry, prometheus_client module bits)."""
    from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, Summary
    from prometheus_client.core import (
        GaugeHistogramMetricFamily,
        GaugeMetricFamily,
        UnknownMetricFamily,
    )

    reg = CollectorRegistry()
    lbl = ["model_name", "engine"]

    # Counters declared without `_total` (prometheus_client adds it), one declared with it.
    preempt = Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", lbl, registry=reg)
    prompt = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", lbl, registry=reg)
    offload = Counter("vllm:kv_offload_total_bytes_total", "Bytes offloaded (declared with _total).", lbl, registry=reg)
    by_reason = Counter(
        "vllm:request_success", "Count of successfully processed requests.", lbl + ["finished_reason"], registry=reg
    )
    # Histograms, one of them named like a counter (a vLLM quirk), awkward bucket bounds.
    ttft = Histogram(
        "vllm:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        lbl,
        buckets=[0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.07500000000000001, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 1e6],
        registry=reg,
    )
    iter_tokens = Histogram(
        "vllm:iteration_tokens_total",
        "Histogram of number of tokens per engine_step.",
        lbl,
        buckets=[1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384],
        registry=reg,
    )
    # Gauges, with special values.
    running = Gauge("vllm:num_requests_running", "Number of requests in model execution batches.", lbl, registry=reg)
    usage = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", lbl, registry=reg)
    special = Gauge("vllm:special_values", "Gauges holding NaN, infinities and extremes.", ["which"], registry=reg)
    weird = Gauge(
        "vllm:lora_requests_info",
        'Running stats on LoRA requests; HELP with "quotes", a \\ backslash and a newline\nin it.',
        ["model_name", "running_lora_adapters", "waiting_lora_adapters"],
        registry=reg,
    )
    info = Info("vllm:cache_config", "Information of the LLMEngine CacheConfig", registry=reg)
    summ = Summary("vllm:request_queue_summary_seconds", "Queue time summary.", lbl, registry=reg)
    # LMCache.
    lm_retrieve = Counter(
        "lmcache:num_retrieve_requests", "Total number of retrieve requests sent to lmcache",
        ["model_name", "worker_id"], registry=reg,
    )
    lm_usage = Gauge("lmcache:local_cache_usage", "Local cache usage (bytes) of lmcache", ["model_name", "worker_id"], registry=reg)
    lm_ttr = Histogram(
        "lmcache:time_to_retrieve", "Time to retrieve from cache (seconds)", ["model_name", "worker_id"],
        buckets=[0.001, 0.01, 0.1, 1.0], registry=reg,
    )
    # Families sysport must not keep.
    Counter("http_requests", "HTTP requests (not an engine family).", ["handler"], registry=reg).labels("/metrics").inc(7)
    Gauge("process_open_fds", "Open fds.", registry=reg).set(42)
    Gauge("vllm_num_requests_running", "Underscore, not colon: not kept.", registry=reg).set(5)
    Gauge("dynamo_sysport_uptime_seconds", "An upstream trying to inject sysport's own name.", registry=reg).set(1e9)

    for e in ("0", "1"):
        preempt.labels(MODEL, e).inc(3 + int(e))
        preempt.labels(MODEL, e).inc(1, exemplar={"trace_id": "4bf92f3577b34da6a3ce929d0e0e4736"})
        prompt.labels(MODEL, e).inc(123456789 + int(e))
        offload.labels(MODEL, e).inc(2**53 + 2)
        for reason in ("stop", "length", "abort"):
            by_reason.labels(MODEL, e, reason).inc(len(reason) * (1 + int(e)))
        for v in (0.0004, 0.03, 0.07, 0.07500000000000001, 0.3, 4.0, 99.0, 2e6):
            ttft.labels(MODEL, e).observe(v)
        ttft.labels(MODEL, e).observe(0.2, exemplar={"trace_id": "00f067aa0ba902b7"})
        for v in (1, 7, 300, 9000, 20000):
            iter_tokens.labels(MODEL, e).observe(v)
        running.labels(MODEL, e).set(2 + int(e))
        usage.labels(MODEL, e).set(0.1 + 0.2)  # 0.30000000000000004
        for v in (0.001, 0.02, 5.5):
            summ.labels(MODEL, e).observe(v)
    for name, v in [
        ("nan", float("nan")),
        ("inf", float("inf")),
        ("-inf", float("-inf")),
        ("neg_zero", -0.0),
        ("tiny", 5e-324),
        ("huge", 1.7976931348623157e308),
        ("big_int", 2.0**53 + 2),
        ("third", 1 / 3),
        ("negative", -12.5),
    ]:
        special.labels(name).set(v)
    for i, w in enumerate(WEIRD):
        weird.labels(w, w, f"lora-{i}").set(1.7e9 + i)
        lm_retrieve.labels(w, str(i)).inc(i)
        lm_usage.labels(w, str(i)).set(float("nan") if i % 3 == 0 else i * 1024.5)
        lm_ttr.labels(w, str(i)).observe(0.005 * i)
    info.info({"block_size": "16", "cache_dtype": "auto", "gpu_memory_utilization": "0.9", "note": 'a "b" \\ c'})

    class Custom:
        """Families only a custom collector makes: timestamps, untyped, gauge histogram."""

        def collect(self):
            g = GaugeMetricFamily("vllm:ts_gauge", "A gauge with explicit timestamps.", labels=["engine"])
            g.add_metric(["0"], 1.5, timestamp=1700000000.123)
            g.add_metric(["1"], float("nan"), timestamp=1700000001)
            yield g
            u = UnknownMetricFamily("vllm:custom_untyped", "An untyped family.", labels=["kind"])
            u.add_metric(["a"], 3.0)
            u.add_metric(["b=\"c\""], -1.0)
            yield u
            yield GaugeHistogramMetricFamily(
                "vllm:queue_depth", "A gauge histogram.", buckets=[("1.0", 4.0), ("10.0", 9.0), ("+Inf", 10.0)],
                gsum_value=37.5,
            )

    reg.register(Custom())
    return reg


def build_enum_registry():
    """An Enum (a stateset in OpenMetrics) named like an engine family."""
    from prometheus_client import CollectorRegistry, Enum

    reg = CollectorRegistry()
    e = Enum("vllm:engine_state", "Engine state.", ["engine"], states=["idle", "running", "sleeping"], registry=reg)
    e.labels("0").state("running")
    e.labels("1").state("sleeping")
    return reg


def generated_inputs(tmp: Path) -> list:
    from prometheus_client.exposition import generate_latest as text_latest
    from prometheus_client.openmetrics.exposition import generate_latest as om_latest

    out = []
    reg = build_registry()
    text = text_latest(reg)
    om = om_latest(reg)
    out.append(Input("gen_registry.prom", text, "text", TEXT_CT, "generated registry, text 0.0.4"))
    out.append(Input("gen_registry_gzip.prom", text, "text", TEXT_CT, "generated registry, text 0.0.4, gzip-encoded",
                     gzip=True))
    out.append(
        Input("gen_registry.openmetrics.txt", om, "om", OM_CT, "generated registry, OpenMetrics (default escaping)",
              text_twin=text)
    )
    out.append(
        Input("gen_registry_om_as_text.txt", om, "om", TEXT_CT,
              "generated registry, OpenMetrics served as text/plain", text_twin=text)
    )
    ereg = build_enum_registry()
    etext = text_latest(ereg)
    out.append(Input("gen_enum.prom", etext, "text", TEXT_CT, "generated Enum, text 0.0.4"))
    out.append(
        Input("gen_enum.openmetrics.txt", om_latest(ereg), "om", OM_CT, "generated Enum, OpenMetrics (default escaping)",
              text_twin=etext)
    )
    out.append(Input("gen_multiproc.prom", multiprocess_text(tmp), "text", TEXT_CT,
                     "generated, multiprocess mode (MultiProcessCollector), text 0.0.4"))
    return out


def multiprocess_text(tmp: Path) -> bytes:
    """Two worker processes write metrics into a multiprocess directory, a third collects."""
    mpdir = tmp / "multiproc"
    mpdir.mkdir()
    env = dict(os.environ, PROMETHEUS_MULTIPROC_DIR=str(mpdir))
    child = str(HERE / "mp_child.py")
    for worker in ("0", "1"):
        subprocess.run([sys.executable, child, "write", worker], env=env, check=True, timeout=60)
    r = subprocess.run([sys.executable, child, "collect"], env=env, check=True, timeout=60, capture_output=True)
    return r.stdout


def all_inputs(fixtures_dir: Path, tmp: Path) -> list:
    return fixture_inputs(fixtures_dir) + generated_inputs(tmp)


if __name__ == "__main__":  # print one generated input, for debugging: inputs.py NAME
    with tempfile.TemporaryDirectory() as d:
        for i in generated_inputs(Path(d)):
            if i.name == sys.argv[1]:
                sys.stdout.buffer.write(i.body)
