"""Endpoint pickers read sysport's /metrics/router as they are built (tests/picker/picker.go:
url.URL{Path}, Go's default transport, prometheus/common's expfmt.TextParser, the latest series
per family) and each gets one right value per family, for six engine set-ups rendered by real
prometheus_client registries:

  vllm-dp2      vLLM with two data-parallel engines (`engine` label)
  vllm-mp       vLLM with three API-server processes (multiprocess mode, a `pid` label)
  vllm-old      an older vLLM that has only vllm:gpu_cache_usage_perc
  sglang-dp2    SGLang --dp 2 --tp 2 --enable-metrics-for-all-schedulers
  trtllm        trtllm-serve (Prometheus text at /prometheus/metrics)
  triton        Triton with the TensorRT-LLM backend (nv_trt_llm_* with request_type, ...)

For the data-parallel and multiprocess cases the same picker pointed at the engine itself reads
a wrong number (one rank's, one process's) or nothing: the check that the set-up matters.

    python run.py PICKER_BINARY          (SYSPORT_BIN names the sysport binary)
    python run.py mp-write DIR N LIVE    (internal: one API-server process of vllm-mp)

Everything listens on 127.0.0.1 on ports the OS picks; every process it starts is stopped when
it ends.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
VLLM_LABELS = ["model_name", "engine"]


def mp_write(directory, n, live):
    """One API-server process of vllm-mp. Older vLLM gauges used prometheus_client's default
    multiprocess mode 'all': one series per process, and only the process that last served the
    engine's stats holds them (vllm #28792)."""
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = directory
    from prometheus_client import CollectorRegistry, Gauge

    reg = CollectorRegistry()
    values = {
        "vllm:num_requests_waiting": ("Number of requests waiting to be processed.", [2, 5]),
        "vllm:num_requests_running": ("Number of requests in model execution batches.", [9, 1]),
        "vllm:kv_cache_usage_perc": ("KV-cache usage. 1 means 100 percent usage.", [0.5, 0.125]),
    }
    for name, (doc, per_engine) in values.items():
        g = Gauge(name, doc, VLLM_LABELS, multiprocess_mode="all", registry=reg)
        for engine, v in enumerate(per_engine):
            g.labels(MODEL, str(engine)).set(v if live else 0.0)
    del n


class Info(float):
    """The value of an info family, whose series all pass through."""


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(registry, path):
    """prometheus_client's own WSGI app for `registry` at `path` (it honours name[])."""
    from prometheus_client import make_wsgi_app

    app = make_wsgi_app(registry)

    def routed(environ, start_response):
        if environ.get("PATH_INFO") != path:
            start_response("404 Not Found", [("Content-Type", "text/plain")])
            return [b"not found\n"]
        return app(environ, start_response)

    server = make_server("127.0.0.1", 0, routed, WSGIServer, handler_class=Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def gauges(registry, name, doc, labelnames, rows):
    from prometheus_client import Gauge

    g = Gauge(name, doc, labelnames, registry=registry)
    for labels, value in rows:
        g.labels(*labels).set(value)


def vllm_dp2(reg):
    gauges(reg, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
           VLLM_LABELS, [((MODEL, "0"), 3), ((MODEL, "1"), 4)])
    gauges(reg, "vllm:num_requests_running", "Number of requests in model execution batches.",
           VLLM_LABELS, [((MODEL, "0"), 5), ((MODEL, "1"), 6)])
    gauges(reg, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.",
           VLLM_LABELS, [((MODEL, "0"), 0.25), ((MODEL, "1"), 0.5)])
    gauges(reg, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
           ["block_size", "num_gpu_blocks", "engine"], [(("16", "24188", "0"), 1), (("16", "24188", "1"), 1)])
    return {"vllm:num_requests_waiting": 7, "vllm:num_requests_running": 11,
            "vllm:kv_cache_usage_perc": 0.375, "vllm:gpu_cache_usage_perc": 0.375,
            # An info family passes through: one series per engine, its labels are the data.
            "vllm:cache_config_info": Info(1)}


def vllm_old(reg):
    gauges(reg, "vllm:num_requests_waiting", "Number of requests waiting to be processed.",
           VLLM_LABELS, [((MODEL, "0"), 1), ((MODEL, "1"), 2)])
    gauges(reg, "vllm:num_requests_running", "Number of requests in model execution batches.",
           VLLM_LABELS, [((MODEL, "0"), 3), ((MODEL, "1"), 3)])
    gauges(reg, "vllm:gpu_cache_usage_perc", "GPU KV-cache usage. 1 means 100 percent usage.",
           VLLM_LABELS, [((MODEL, "0"), 0.2), ((MODEL, "1"), 0.4)])
    return {"vllm:num_requests_waiting": 3, "vllm:num_requests_running": 6,
            "vllm:kv_cache_usage_perc": (0.2 + 0.4) / 2, "vllm:gpu_cache_usage_perc": (0.2 + 0.4) / 2}


def sglang_dp2(reg):
    labels = ["model_name", "engine_type", "tp_rank", "pp_rank", "dp_rank"]
    rows = lambda per_dp: [(("Qwen/Qwen3-8B", "unified", str(tp), "0", str(dp)), v)  # noqa: E731
                           for dp, v in enumerate(per_dp) for tp in (0, 1)]
    gauges(reg, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels, rows([3, 4]))
    gauges(reg, "sglang:num_running_reqs", "The number of running requests.", labels, rows([10, 20]))
    gauges(reg, "sglang:token_usage", "The token usage.", labels, rows([0.5, 0.25]))
    return {"sglang:num_queue_reqs": 7, "sglang:num_running_reqs": 30, "sglang:token_usage": 0.375}


def trtllm(reg):
    labels = ["model_name", "engine_type"]
    gauges(reg, "trtllm_num_requests_waiting", "Number of queued requests", labels, [(("t", "pytorch"), 4)])
    gauges(reg, "trtllm_num_requests_running", "Number of active requests", labels, [(("t", "pytorch"), 7)])
    gauges(reg, "trtllm_kv_cache_utilization", "KV cache utilization", labels, [(("t", "pytorch"), 0.125)])
    return {"trtllm_num_requests_waiting": 4, "trtllm_num_requests_running": 7, "trtllm_kv_cache_utilization": 0.125}


def triton(reg):
    labels = ["model", "request_type", "version"]
    gauges(reg, "nv_trt_llm_request_metrics", "TRT LLM request metrics", labels,
           [(("tensorrt_llm", t, "1"), v) for t, v in
            [("context", 1), ("scheduled", 6), ("max", 512), ("active", 6), ("waiting", 2)]])
    gauges(reg, "nv_trt_llm_kv_cache_block_metrics", "TRT LLM KV cache block metrics",
           ["kv_cache_block_type", "model", "version"],
           [((t, "tensorrt_llm", "1"), v) for t, v in
            [("tokens_per", 64), ("used", 1), ("free", 6239), ("max", 6240), ("fraction", 0.25)]])
    return {"nv_trt_llm_request_metrics{request_type=waiting}": 2,
            "nv_trt_llm_request_metrics{request_type=scheduled}": 6,
            "nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}": 0.25}


class Run:
    def __init__(self, picker, sysport, work):
        self.picker, self.sysport, self.work = picker, sysport, work
        self.procs, self.passed, self.failed = [], 0, 0

    def check(self, what, problem):
        if problem:
            self.failed += 1
            print(f"FAIL {what}: {problem}", flush=True)
        else:
            self.passed += 1
            print(f"ok   {what}", flush=True)

    def start_sysport(self, name, engine, url):
        port = free_port()
        path = os.path.join(self.work, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(f"listen: {{ host: 127.0.0.1, port: {port} }}\n"
                    f"upstreams:\n  - name: {name}\n    engine: {engine}\n    url: {url}\n"
                    f"    min_interval: 25ms\n")
        proc = subprocess.Popen([self.sysport, "--config", path], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(self.work, f"{name}.log"), "w"))
        self.procs.append(proc)
        deadline = time.time() + 15
        while time.time() < deadline:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/live", timeout=1):
                    return f"127.0.0.1:{port}"
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"sysport for {name} did not start")

    def read(self, host, path, specs):
        out = subprocess.run([self.picker, "-host", host, "-path", path, *specs],
                             capture_output=True, text=True, timeout=30)
        if out.returncode != 0:
            return None, out.stderr.strip()
        return {r["spec"]: r for r in map(json.loads, out.stdout.splitlines())}, None

    def case(self, name, engine, build, path="/metrics", mp_dir=None):
        from prometheus_client import CollectorRegistry
        from prometheus_client.multiprocess import MultiProcessCollector

        reg = CollectorRegistry()
        if mp_dir:
            MultiProcessCollector(reg, path=mp_dir)
            want = build
        else:
            want = build(reg)
        server = serve(reg, path)
        engine_host = f"127.0.0.1:{server.server_address[1]}"
        host = self.start_sysport(name, engine, f"http://{engine_host}{path}")
        got, err = self.read(host, "/metrics/router", list(want))
        if err:
            self.check(f"{name}: picker reads /metrics/router", err)
            return
        for spec, value in want.items():
            r = got[spec]
            problem = None
            if "error" in r:
                problem = r["error"]
            elif r["type"] != "GAUGE":
                problem = f"type {r['type']}"
            elif r["matching"] != 1 and not isinstance(value, Info):
                problem = f"{r['matching']} series, not one"
            elif float(r["value"]) != value:
                problem = f"read {r['value']}, want {value!r}"
            self.check(f"{name}: {spec} = {value!r}", problem)
        direct, err = self.read(engine_host, path, list(want))
        wrong = [s for s, v in want.items() if not isinstance(v, Info) and (
            err or "error" in direct[s] or float(direct[s]["value"]) != v or direct[s]["matching"] != 1)]
        return wrong

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()


def main():
    picker = sys.argv[1]
    sysport = os.environ.get("SYSPORT_BIN", "target/debug/sysport")
    with tempfile.TemporaryDirectory(prefix="sysport-picker-") as work:
        run = Run(picker, sysport, work)
        try:
            for name, engine, build, path in [
                ("vllm-dp2", "vllm", vllm_dp2, "/metrics"),
                ("vllm-old", "vllm", vllm_old, "/metrics"),
                ("sglang-dp2", "sglang", sglang_dp2, "/metrics"),
                ("trtllm", "trtllm", trtllm, "/prometheus/metrics"),
                ("triton", "triton", triton, "/metrics"),
            ]:
                wrong = run.case(name, engine, build, path)
                if name in ("vllm-dp2", "vllm-old", "sglang-dp2"):
                    run.check(f"{name}: the picker on the engine itself misreads {wrong}",
                              None if wrong else "it read every family right: the case proves nothing")
            mp_dir = os.path.join(work, "mp")
            os.mkdir(mp_dir)
            for n, live in [(0, 0), (1, 0), (2, 1)]:
                subprocess.run([sys.executable, __file__, "mp-write", mp_dir, str(n), str(live)], check=True)
            want = {"vllm:num_requests_waiting": 7, "vllm:num_requests_running": 10,
                    "vllm:kv_cache_usage_perc": (0.5 + 0.125) / 2}
            wrong = run.case("vllm-mp", "vllm", want, mp_dir=mp_dir)
            run.check(f"vllm-mp: the picker on the engine itself misreads {wrong}",
                      None if wrong else "it read every family right: the case proves nothing")
        finally:
            run.stop()
        print(f"picker: {run.passed} passed, {run.failed} failed")
        sys.exit(1 if run.failed else 0)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "mp-write":
        mp_write(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
