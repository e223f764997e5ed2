"""Stand-in vLLM engines for bench/bounds: a page made again every second with its counters
moving, served on 127.0.0.1 by a process of its own, answering `name[]` selections as
prometheus_client does (the families that have one of the names, whole) and `/health` with 200.

- `Ranks(n)`: n data-parallel ranks (`engine="0"` to n - 1), every vitals family of vLLM and
  nothing else, as tests/bounds.rs's `ranks_page` writes them (plus each histogram's `_count`
  and `_sum`, which vLLM's have): three gauges, six counters, three histograms of 20 buckets.
  `Ranks(n, churn=True)`: every series also has a `request_id` label whose value is new every
  second, as tests/bounds.rs's churning engine has.
- `Registry(n)`: the load test's page (bench/load/registry.py: n ranks, LMCache with TP 2, LoRA
  adapters, spec decode, the Python runtime families; 360 ranks render to 15.8 MB), rendered
  once by prometheus_client; then at every second the samples of the vitals families and of
  `vllm:iteration_tokens_total` (stall detection's progress counter) move: each counter by
  its own rate, each histogram's `_count` by its rate, its buckets by an even share of it up
  to `+Inf`, its `_sum` by half of it. The other families stay as rendered.
"""
import math
import multiprocessing
import os
import re
import sys
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GAUGES = [
    ("vllm:num_requests_running", lambda r, t: (r + t) % 7),
    ("vllm:num_requests_waiting", lambda r, t: (r + t) % 3),
    ("vllm:kv_cache_usage_perc", lambda r, t: (r + t) % 10 / 10),
]
# Each counter's increase per second (of every series), as in tests/bounds.rs.
COUNTERS = [
    ("vllm:request_success", 1.0),
    ("vllm:prompt_tokens", 100.0),
    ("vllm:generation_tokens", 50.0),
    ("vllm:num_preemptions", 0.1),
    ("vllm:prefix_cache_queries", 80.0),
    ("vllm:prefix_cache_hits", 20.0),
]
# Each histogram's observations per second (of every series).
HISTOGRAMS = [
    ("vllm:time_to_first_token_seconds", 1.0),
    ("vllm:inter_token_latency_seconds", 50.0),
    ("vllm:e2e_request_latency_seconds", 1.0),
]
PROGRESS = [("vllm:iteration_tokens_total", 10.0)]
SUFFIXES = {
    "gauge": [""],
    "counter": ["_total", "_created"],
    "histogram": ["_bucket", "_count", "_sum", "_created"],
}


def sample_names(name, kind):
    """Every name a `name[]` selection may give for family `name` (declared name) of `kind`."""
    return frozenset([name] + [name + s for s in SUFFIXES.get(kind, [""])])


class Ranks:
    """The page of `n` ranks, every vitals family (tests/bounds.rs's `ranks_page`)."""

    def __init__(self, n, churn=False):
        self.n, self.churn = n, churn
        self.les = [repr(0.01 * k * k) for k in range(1, 20)] + ["+Inf"]
        # The bucket bounds of the three latency histograms: B of docs/vitals.md's formula.
        self.bounds = len(HISTOGRAMS) * len(self.les)

    def families(self, t):
        """[(sample names, text)] of the page `t` seconds in."""
        ranks = range(self.n)
        x = f',request_id="{t}"' if self.churn else ""
        out = []
        for name, value in GAUGES:
            lines = [f"# TYPE {name} gauge\n"]
            lines += [f'{name}{{engine="{r}",model_name="m"{x}}} {value(r, t)}\n' for r in ranks]
            out.append((sample_names(name, "gauge"), "".join(lines)))
        for name, per_s in COUNTERS:
            v = 1000.0 + per_s * t
            lines = [f"# TYPE {name} counter\n"]
            lines += [f'{name}_total{{engine="{r}",model_name="m"{x}}} {v}\n' for r in ranks]
            out.append((sample_names(name, "counter"), "".join(lines)))
        for name, _ in HISTOGRAMS:
            count = 1000 + t
            counts = [math.floor(count * k / 20) for k in range(1, 20)] + [count]
            buckets = list(zip(self.les, counts))
            lines = [f"# TYPE {name} histogram\n"]
            for r in ranks:
                lines += [
                    f'{name}_bucket{{engine="{r}",le="{le}",model_name="m"{x}}} {c}\n'
                    for le, c in buckets
                ]
                lines.append(f'{name}_count{{engine="{r}",model_name="m"{x}}} {count}\n')
                lines.append(f'{name}_sum{{engine="{r}",model_name="m"{x}}} {count * 0.5}\n')
            out.append((sample_names(name, "histogram"), "".join(lines)))
        return [(names, text.encode()) for names, text in out]


class Registry:
    """The load test's page of `n` ranks, its vitals and progress families moving."""

    def __init__(self, n, cache):
        if not os.path.exists(cache):
            sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../load"))
            import registry
            from prometheus_client import generate_latest

            with open(cache, "wb") as f:
                f.write(generate_latest(registry.build(n)))
        with open(cache) as f:
            text = f.read()
        rates = dict(COUNTERS + HISTOGRAMS + PROGRESS)
        # B of docs/vitals.md's formula: each latency histogram's bucket bounds (at most 32).
        self.bounds = sum(
            min(32, len(set(re.findall(rf'(?m)^{re.escape(name)}_bucket{{[^}}]*le="([^"]*)"', text))))
            for name, _ in HISTOGRAMS
        )
        # [(sample names, static bytes or [str | (prefix, base, increase per second, floor)])]
        self.parts = []
        for block in re.split(r"(?m)^(?=# HELP )", text):
            if not block:
                continue
            name = block.split(" ", 3)[2]
            kind = re.search(r"(?m)^# TYPE \S+ (\S+)", block).group(1)
            declared = name[: -len("_total")] if kind == "counter" and name.endswith("_total") else name
            names = sample_names(declared, kind)
            if declared in rates and kind in ("counter", "histogram"):
                self.parts.append((names, moving(block, kind, rates[declared])))
            else:
                self.parts.append((names, block.encode()))

    def families(self, t):
        """[(sample names, text)] of the page `t` seconds in."""
        out = []
        for names, part in self.parts:
            if isinstance(part, bytes):
                out.append((names, part))
                continue
            text = "".join(
                p if isinstance(p, str) else f"{p[0]}{p[1] + (math.floor(p[2] * t) if p[3] else p[2] * t)!r}\n"
                for p in part
            )
            out.append((names, text.encode()))
        return out


def moving(block, kind, rate):
    """A counter's or histogram's lines, each sample that moves as (prefix, base, increase per
    second, whether it moves by whole observations)."""
    lines = block.splitlines(keepends=True)
    # The buckets of each histogram series, in page order (ascending `le`).
    buckets = {}
    for i, line in enumerate(lines):
        if "_bucket{" in line:
            buckets.setdefault(re.sub(r'le="[^"]*",?', "", line.rsplit(" ", 1)[0]), []).append(i)
    share = {i: (j + 1) / len(ix) for ix in buckets.values() for j, i in enumerate(ix)}
    parts = []
    for i, line in enumerate(lines):
        if line.startswith("#") or "_created" in line.split("{", 1)[0]:
            parts.append(line)
            continue
        prefix, value = line.rstrip("\n").rsplit(" ", 1)
        sample = prefix.split("{", 1)[0].split(" ", 1)[0]
        if kind == "counter":
            parts.append((prefix + " ", float(value), rate, False))
        elif i in share:
            parts.append((prefix + " ", float(value), rate * share[i], True))
        elif sample.endswith("_count"):
            parts.append((prefix + " ", float(value), rate, True))
        elif sample.endswith("_sum"):
            parts.append((prefix + " ", float(value), rate * 0.5, False))
        else:
            parts.append(line)
    return parts


class Page:
    """The current page: its families and the whole of it, made again every second."""

    def __init__(self, maker):
        self.maker, self.lock, self.started = maker, threading.Lock(), time.monotonic()
        self.set(0)

    def set(self, t):
        families = self.maker.families(t)
        full = b"".join(text for _, text in families)
        with self.lock:
            self.t, self.fams, self.full, self.selected = t, families, full, {}

    def body(self, names):
        """The whole page, or the families that have one of `names`."""
        with self.lock:
            if not names:
                return self.full
            key = frozenset(names)
            if key not in self.selected:
                self.selected[key] = b"".join(text for n, text in self.fams if n & key)
            return self.selected[key]

    def run(self, stop):
        while not stop.is_set():
            t = math.floor(time.monotonic() - self.started) + 1
            stop.wait(max(0.0, self.started + t - time.monotonic()))
            self.set(t)


def serve(make, port, stop, counts):
    """The engine process: `make()` gives the page maker; its port goes into `port`."""
    page = Page(make())

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            url = urllib.parse.urlsplit(self.path)
            if url.path == "/health":
                body, which = b"", 2
            elif url.path == "/metrics":
                names = urllib.parse.parse_qs(url.query).get("name[]", [])
                body, which = page.body(names), 1 if names else 0
            else:
                self.send_error(404)
                return
            with counts.get_lock():
                counts[which] += 1
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=page.run, args=(stop,), daemon=True).start()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port.put((server.server_port, len(page.full), len(page.body(VITALS_NAMES)), page.maker.bounds))
    stop.wait()
    server.shutdown()


# Every sample name of the vitals families: what a selection of them alone gives.
VITALS_NAMES = frozenset().union(
    *[sample_names(n, "gauge") for n, _ in GAUGES],
    *[sample_names(n, "counter") for n, _ in COUNTERS],
    *[sample_names(n, "histogram") for n, _ in HISTOGRAMS],
)


class Engine:
    """An engine process serving the page `make()` makes; `stop()` ends it."""

    def __init__(self, make):
        ports = multiprocessing.Queue()
        self.halt = multiprocessing.Event()
        # /metrics requests, full and selective, and /health requests.
        self.counts = multiprocessing.Array("q", 3)
        self.proc = multiprocessing.Process(
            target=serve, args=(make, ports, self.halt, self.counts), daemon=True
        )
        self.proc.start()
        self.port, self.page_bytes, self.vitals_bytes, self.bounds = ports.get(timeout=600)
        self.url = f"http://127.0.0.1:{self.port}"

    def stop(self):
        self.halt.set()
        self.proc.join(timeout=30)
        if self.proc.is_alive():
            self.proc.kill()
