"""End-to-end suite: loopback vLLM and LMCache engines -> sysport -> a real Prometheus.

Run through tests/suites/e2e-prometheus.sh, which creates the work directory and removes it:

    python tests/e2e/run.py --workdir DIR [--pidfile FILE]

Environment: SYSPORT_BIN (the sysport binary), PROMETHEUS_BIN (default /usr/bin/prometheus).
Everything listens on 127.0.0.1. Prints one line per check and a final
`e2e-prometheus: N passed, M failed`; exits 1 when a check failed.
"""

import argparse
import ctypes
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
DASHBOARD = os.path.join(ROOT, "deploy", "grafana", "sysport-dashboard.json")
RULES = os.path.join(ROOT, "deploy", "prometheus", "sysport.rules.yml")

WORKER_ID = "e2e-pod"      # sysport's added label
POD = "e2e-pod-0"          # Prometheus target label, as the shipped scrape configs set it
MODEL = "e2e-model"
FIXED_WAITING = 7.0        # engine.py holds vllm:num_requests_waiting{engine="0"} here
RATE_WINDOW = "10s"        # stands in for $__rate_interval (4 x the 1 s scrape interval, and more)
OWN_METRICS = [
    "dynamo_sysport_upstream_up",
    "dynamo_sysport_upstream_scrapes_total",
    "dynamo_sysport_upstream_scrape_duration_seconds_bucket",
    "dynamo_sysport_upstream_scrape_duration_seconds_sum",
    "dynamo_sysport_upstream_scrape_duration_seconds_count",
    "dynamo_sysport_upstream_series",
    "dynamo_sysport_health_ready",
    "dynamo_sysport_http_requests_total",
    "dynamo_sysport_build_info",
    "dynamo_sysport_uptime_seconds",
    "dynamo_sysport_process_resident_memory_bytes",
    "dynamo_sysport_process_cpu_seconds_total",
]


class Failed(Exception):
    """A check's assertion failed; the message says why."""


class Fatal(Exception):
    """Setup failed: the remaining checks cannot run."""


def expect(cond, msg):
    if not cond:
        raise Failed(msg)


def eventually(fn, timeout, interval=0.5):
    """Calls fn until it returns without raising Failed/OSError, or re-raises after timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return fn()
        except (Failed, OSError, ValueError) as err:
            if time.monotonic() >= deadline:
                if isinstance(err, Failed):
                    raise
                raise Failed(f"{type(err).__name__}: {err}") from err
            time.sleep(interval)


def free_ports(n):
    """n distinct ports that were free a moment ago (all held open together while picking)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            socks.append(s)
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def http_get(url, timeout=3.0, headers=None):
    """(status, body text, headers); HTTP errors are returned, not raised."""
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode("utf-8", "replace"), resp.headers
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace"), err.headers


# ---- processes ----------------------------------------------------------------------------------

_libc = ctypes.CDLL(None, use_errno=True)


def _die_with_parent():
    # PR_SET_PDEATHSIG: the child is killed if this driver dies without cleaning up.
    _libc.prctl(1, signal.SIGKILL, 0, 0, 0)


class Procs:
    """Every process the driver started; the pid file lists the ones still running."""

    def __init__(self, workdir, pidfile):
        self.workdir = workdir
        self.pidfile = pidfile
        self.running = {}

    def _write_pidfile(self):
        if self.pidfile:
            with open(self.pidfile, "w") as f:
                f.writelines(f"{p.pid}\n" for p in self.running.values())

    def start(self, name, argv):
        log = open(os.path.join(self.workdir, f"{name}.log"), "ab")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=self.workdir, preexec_fn=_die_with_parent)
        log.close()
        self.running[name] = proc
        self._write_pidfile()
        return proc

    def stop(self, name, sig=signal.SIGTERM, timeout=10.0):
        """Signals the process and reaps it; returns its exit code (None if it was not running)."""
        proc = self.running.pop(name, None)
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._write_pidfile()
        return proc.returncode

    def stop_all(self):
        for name in list(self.running):
            self.stop(name, signal.SIGTERM, timeout=5.0)

    def log_tail(self, name, lines=25):
        try:
            with open(os.path.join(self.workdir, f"{name}.log"), "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


# ---- Prometheus HTTP API ------------------------------------------------------------------------

class Prom:
    def __init__(self, base):
        self.base = base

    def api(self, path, **params):
        url = f"{self.base}/api/v1/{path}"
        if params:
            url += "?" + urllib.parse.urlencode(params, doseq=True)
        status, body, _ = http_get(url, timeout=10.0)
        try:
            doc = json.loads(body)
        except ValueError:
            raise Failed(f"GET {url}: HTTP {status}, not JSON: {body[:200]!r}")
        if doc.get("status") != "success":
            raise Failed(f"GET {url}: {doc.get('errorType')}: {doc.get('error')}")
        return doc["data"]

    def query(self, expr, at=None):
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        data = self.api("query", **params)
        expect(data["resultType"] == "vector", f"{expr}: result type {data['resultType']}")
        return data["result"]

    def query_range(self, expr, start, end, step=1):
        data = self.api("query_range", query=expr, start=f"{start:.3f}", end=f"{end:.3f}", step=str(step))
        return data["result"]

    def scalar(self, expr):
        """The value of a one-element instant vector."""
        res = self.query(expr)
        expect(len(res) == 1, f"{expr}: expected one series, got {len(res)}: {res[:3]}")
        return float(res[0]["value"][1])

    def nonempty(self, expr):
        res = self.query(expr)
        expect(res, f"empty result: {expr}")
        return res


def engine_sample(port, name, labels):
    """The engine's own current value of one sample (read as text 0.0.4, as sysport does)."""
    status, body, _ = http_get(f"http://127.0.0.1:{port}/metrics",
                               headers={"Accept": "text/plain;version=0.0.4"})
    expect(status == 200, f"engine /metrics: HTTP {status}")
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise Failed(f"engine :{port} has no sample {name}{labels}")


def runs(values):
    """Collapses repeats: [1,1,0,0,1] -> [1,0,1]."""
    out = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out


def has_subsequence(seq, pattern):
    it = iter(seq)
    return all(any(x == p for x in it) for p in pattern)


# ---- dashboard and rules ------------------------------------------------------------------------

TEMPLATE_VALUES = {
    "model_name": ".*",
    "pod": ".*",
    "__rate_interval": RATE_WINDOW,
    "__interval": RATE_WINDOW,
    "__range": RATE_WINDOW,
}
VAR_RE = re.compile(r"\$\{(\w+)(?::[^}]*)?\}|\[\[(\w+)(?::[^\]]*)?\]\]|\$(\w+)")


def substitute(expr, values):
    unknown = []

    def repl(m):
        name = m.group(1) or m.group(2) or m.group(3)
        if name not in values:
            unknown.append(name)
            return m.group(0)
        return values[name]

    out = VAR_RE.sub(repl, expr)
    expect(not unknown, f"unknown template variable(s) {sorted(set(unknown))} in {expr}")
    return out


def dashboard_panels(panels):
    for p in panels:
        yield p
        yield from dashboard_panels(p.get("panels") or [])


def rule_names_in_file(path):
    """(record names, alert names) as written in the rules file (a plain scan; no YAML library)."""
    records, alerts = [], []
    with open(path) as f:
        for line in f:
            m = re.match(r"\s*-?\s*(record|alert):\s*['\"]?([^'\"\s#]+)", line)
            if m:
                (records if m.group(1) == "record" else alerts).append(m.group(2))
    return records, alerts


# ---- the suite ----------------------------------------------------------------------------------

class Suite:
    def __init__(self, workdir, pidfile):
        self.workdir = workdir
        self.procs = Procs(workdir, pidfile)
        self.passed = 0
        self.failed = 0
        self.sysport_bin = os.path.abspath(os.environ.get("SYSPORT_BIN") or os.path.join(ROOT, "target", "debug", "sysport"))
        self.prometheus_bin = os.environ.get("PROMETHEUS_BIN") or "/usr/bin/prometheus"
        self.vllm_port, self.lmcache_port, self.sysport_port, self.prom_port = free_ports(4)
        self.sysport = f"http://127.0.0.1:{self.sysport_port}"
        self.prom = Prom(f"http://127.0.0.1:{self.prom_port}")
        self.first_scrape = 0.0

    # -- reporting

    def check(self, name, fn, *, fatal=False):
        t0 = time.monotonic()
        try:
            detail = fn()
        except Fatal as err:
            self.failed += 1
            print(f"FAIL  {name}: {err}", flush=True)
            raise Fatal(name) from err
        except (Failed, OSError, ValueError, KeyError) as err:
            self.failed += 1
            msg = str(err) if isinstance(err, Failed) else f"{type(err).__name__}: {err}"
            print(f"FAIL  {name}: {msg}", flush=True)
            if fatal:
                raise Fatal(name)
            return False
        self.passed += 1
        took = time.monotonic() - t0
        print(f"ok    {name}" + (f" ({detail})" if detail else "") + (f" [{took:.1f} s]" if took >= 1 else ""),
              flush=True)
        return True

    # -- processes

    def start_engine(self, kind, seed=1):
        port = self.vllm_port if kind == "vllm" else self.lmcache_port
        self.procs.start(kind, [sys.executable, os.path.join(HERE, "engine.py"), kind,
                                "--port", str(port), "--seed", str(seed)])

        def ready():
            proc = self.procs.running[kind]
            if proc.poll() is not None:
                raise Fatal(f"{kind} engine exited with {proc.returncode}:\n{self.procs.log_tail(kind)}")
            status, _, _ = http_get(f"http://127.0.0.1:{port}/health", timeout=1.0)
            expect(status == 200, f"{kind} /health: HTTP {status}")

        eventually(ready, 15)
        return port

    def start_sysport(self, config, name="sysport", port=None):
        """Starts sysport (the process `name`, listening on `port` as `config` says) and waits
        for /live."""
        expect(os.access(self.sysport_bin, os.X_OK), f"SYSPORT_BIN {self.sysport_bin} is not executable")
        self.procs.start(name, [self.sysport_bin, "--config", config])
        base = f"http://127.0.0.1:{port or self.sysport_port}"

        def live():
            proc = self.procs.running[name]
            if proc.poll() is not None:
                raise Fatal(f"{name} exited with {proc.returncode}:\n{self.procs.log_tail(name)}")
            status, _, _ = http_get(f"{base}/live", timeout=1.0)
            expect(status == 200, f"/live: HTTP {status}")

        eventually(live, 20, 0.2)

    def start_prometheus(self, config):
        """Starts Prometheus with `config` and a fresh TSDB, and waits until it is ready."""
        tsdb = os.path.join(self.workdir, "tsdb")
        os.mkdir(tsdb)
        self.procs.start("prometheus", [
            self.prometheus_bin,
            f"--config.file={config}",
            f"--storage.tsdb.path={tsdb}",
            f"--web.listen-address=127.0.0.1:{self.prom_port}",
            "--log.level=warn",
        ])

        def ready():
            proc = self.procs.running["prometheus"]
            if proc.poll() is not None:
                raise Fatal(f"prometheus exited with {proc.returncode}:\n{self.procs.log_tail('prometheus')}")
            status, _, _ = http_get(f"{self.prom.base}/-/ready", timeout=1.0)
            expect(status == 200, f"/-/ready: HTTP {status}")

        eventually(ready, 30, 0.3)

    def write_sysport_config(self):
        path = os.path.join(self.workdir, "sysport.yaml")
        v, l = self.vllm_port, self.lmcache_port
        with open(path, "w") as f:
            f.write(f"""\
listen: {{ host: 127.0.0.1, port: {self.sysport_port} }}
health: {{ interval: 1s }}
labels: {{ worker_id: "{WORKER_ID}" }}
shutdown: {{ drain_delay: 1s }}
upstreams:
  - {{ name: vllm, url: "http://127.0.0.1:{v}/metrics", keep: ["vllm:"], health_url: "http://127.0.0.1:{v}/health", required: true, timeout: 2s, stall_after: 2m }}
  - {{ name: lmcache, url: "http://127.0.0.1:{l}/metrics", keep: ["lmcache:"], required: false }}
""")
        return path

    def write_prometheus_config(self):
        path = os.path.join(self.workdir, "prometheus.yml")
        with open(path, "w") as f:
            f.write(f"""\
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - {json.dumps(RULES)}
scrape_configs:
  - job_name: sysport
    static_configs:
      - targets: ["127.0.0.1:{self.sysport_port}"]
        labels:
          pod: {POD}
""")
        return path

    # -- the run

    # What `run` prints its counts under, and the logs it shows when the suite stopped early
    # and when a check failed.
    name = "e2e-prometheus"
    fatal_logs = ("sysport", "prometheus", "vllm", "lmcache")
    failure_logs = ("sysport", "prometheus")

    def steps(self):
        self.setup()
        self.steady_state()
        self.outage()
        self.dashboard()
        self.rules()
        self.shutdown()

    def stop_all(self):
        self.procs.stop_all()

    def run(self):
        t0 = time.monotonic()
        try:
            self.steps()
        except Fatal as err:
            print(f"FAIL  the suite could not continue after: {err}", flush=True)
            logs = self.fatal_logs
        else:
            logs = self.failure_logs if self.failed else ()
        finally:
            self.stop_all()
        if logs:
            for name in logs:
                tail = self.procs.log_tail(name, 15)
                if tail:
                    print(f"---- {name} log (tail) ----\n{tail}", flush=True)
        print(f"took {time.monotonic() - t0:.0f} s", flush=True)
        print(f"{self.name}: {self.passed} passed, {self.failed} failed", flush=True)
        return 1 if self.failed else 0

    def setup(self):
        def engines():
            self.start_engine("vllm", seed=1)
            self.start_engine("lmcache", seed=2)
            for kind, port, prefix in (("vllm", self.vllm_port, "vllm:"),
                                       ("lmcache", self.lmcache_port, "lmcache:")):
                _, body, _ = http_get(f"http://127.0.0.1:{port}/metrics")
                fams = [f for f in text_string_to_metric_families(body) if f.name.startswith(prefix)]
                expect(len(fams) >= 10, f"{kind} engine serves only {len(fams)} {prefix} families")
            return f"vllm :{self.vllm_port}, lmcache :{self.lmcache_port}"

        self.check("loopback vLLM and LMCache engines serve /metrics and /health", engines, fatal=True)

        def sysport_live():
            self.start_sysport(self.write_sysport_config())
            return f":{self.sysport_port}"

        self.check("sysport starts and /live answers 200", sysport_live, fatal=True)

        def sysport_ready():
            def ready():
                status, body, headers = http_get(f"{self.sysport}/health", timeout=1.0)
                expect(status == 200, f"/health: HTTP {status} {body[:200]}")
                doc = json.loads(body)
                expect(doc.get("status") == "ready", f"/health body {body[:200]}")
                expect(headers.get("Content-Type", "").startswith("application/json"),
                       f"/health Content-Type {headers.get('Content-Type')}")
                return doc

            doc = eventually(ready, 15, 0.2)
            return f"endpoints {doc.get('endpoints')}"

        self.check("sysport /health reports ready once the engine is healthy", sysport_ready)

        def prometheus_ready():
            self.start_prometheus(self.write_prometheus_config())
            return f":{self.prom_port}"

        self.check("Prometheus starts with the deploy rules and becomes ready", prometheus_ready, fatal=True)

        def target_up():
            def scraped():
                targets = self.prom.api("targets", state="active")["activeTargets"]
                expect(len(targets) == 1, f"{len(targets)} active targets")
                t = targets[0]
                expect(t["health"] == "up", f"target health {t['health']!r}, lastError {t.get('lastError')!r}")
                expect(not t.get("lastError"), f"lastError {t['lastError']!r}")
                return t

            t = eventually(scraped, 20)
            up = eventually(lambda: self.prom.scalar('up{job="sysport"}'), 10)
            expect(up == 1, f'up{{job="sysport"}} = {up}')
            self.first_scrape = time.time()
            return f"{t['scrapeUrl']} up=1"

        self.check('the sysport target is up (up{job="sysport"} == 1)', target_up, fatal=True)

    def steady_state(self):
        p = self.prom

        def families(regex, minimum):
            def get():
                res = p.nonempty(f'count by (__name__) ({{__name__=~"{regex}", job="sysport"}})')
                expect(len(res) >= minimum, f"only {len(res)} families match {regex}")
                return res

            res = eventually(get, 15)
            return f"{len(res)} metric names, {sum(int(r['value'][1]) for r in res)} series"

        self.check("vllm:* series reach Prometheus", lambda: families("vllm:.+", 20))
        self.check("lmcache:* series reach Prometheus", lambda: families("lmcache:.+", 10))

        def own_metrics():
            def get():
                res = p.query('count by (__name__) ({__name__=~"dynamo_sysport_.+", job="sysport"})')
                names = {r["metric"]["__name__"] for r in res}
                missing = [n for n in OWN_METRICS if n not in names]
                expect(not missing, f"missing {missing}")
                return names

            names = eventually(get, 10)
            return f"{len(names)} dynamo_sysport_* metric names"

        self.check("every dynamo_sysport_* metric is exposed", own_metrics)

        def only_kept_prefixes():
            res = p.query('count by (__name__) ({job="sysport", '
                          '__name__!~"vllm:.+|lmcache:.+|dynamo_sysport_.+|up|scrape_.+"})')
            expect(not res, "unexpected metric names: " + ", ".join(r["metric"]["__name__"] for r in res[:10]))
            # The engines do serve python_*/process_* families; none of them may leak through.
            return "python_*, process_* dropped"

        self.check("only the configured prefixes reach Prometheus", only_kept_prefixes)

        def accept_header():
            out = []
            for kind, port in (("vllm", self.vllm_port), ("lmcache", self.lmcache_port)):
                _, accept, _ = http_get(f"http://127.0.0.1:{port}/accept")
                first = accept.split(",")[0].replace(" ", "")
                expect(first.startswith("text/plain;version=0.0.4"),
                       f"sysport asked {kind} for {accept!r}, not text 0.0.4 first")
                expect("openmetrics" not in accept, f"sysport forwarded an OpenMetrics Accept to {kind}: {accept!r}")
                out.append(accept)
            return out[0]

        self.check("sysport asks the engines for text 0.0.4", accept_header)

        def added_labels():
            res = p.query(f'count({{__name__=~"vllm:.+", job="sysport", worker_id!="{WORKER_ID}"}})')
            expect(not res, f"{res[0]['value'][1] if res else 0} vllm series without worker_id={WORKER_ID}")
            n = p.scalar(f'count({{__name__=~"vllm:.+", job="sysport", worker_id="{WORKER_ID}"}})')
            # LMCache series carry their own worker_id (the TP rank); sysport keeps theirs.
            res = p.query('count({__name__=~"lmcache:.+", job="sysport", worker_id!="0"})')
            expect(not res, "lmcache series lost their own worker_id")
            return f'{int(n)} vllm series with worker_id="{WORKER_ID}"; lmcache keeps worker_id="0"'

        self.check(f'the added label worker_id="{WORKER_ID}" is on every vllm series', added_labels)

        def gauge_value():
            sel = {"model_name": MODEL, "engine": "0"}
            engine = engine_sample(self.vllm_port, "vllm:num_requests_waiting", sel)
            prom = p.scalar(f'vllm:num_requests_waiting{{model_name="{MODEL}", engine="0", '
                            f'worker_id="{WORKER_ID}", pod="{POD}"}}')
            expect(engine == FIXED_WAITING, f"engine serves {engine}, expected {FIXED_WAITING}")
            expect(prom == engine, f"Prometheus has {prom}, engine serves {engine}")
            return f"{prom:g} == {engine:g}"

        self.check('vllm:num_requests_waiting{engine="0"} in Prometheus equals the engine\'s value', gauge_value)

        def counter_value():
            name, sel = "vllm:generation_tokens_total", {"model_name": MODEL, "engine": "0"}
            before = engine_sample(self.vllm_port, name, sel)
            time.sleep(1.5)

            def scraped_since():  # Prometheus has scraped at least once since `before` was read
                v = p.scalar(f'{name}{{model_name="{MODEL}", engine="0"}}')
                expect(v >= before, f"Prometheus {v} < engine {before}")
                return v

            prom = eventually(scraped_since, 10, 0.3)
            after = engine_sample(self.vllm_port, name, sel)
            expect(before <= prom <= after, f"Prometheus {prom} outside engine values [{before}, {after}]")
            expect(before < after, f"counter did not move ({before} -> {after})")
            return f"{before:g} <= {prom:g} <= {after:g}"

        self.check("a moving counter in Prometheus lies between two engine reads around it", counter_value)

        def metadata():
            out = []
            for name, typ, help_ in (
                ("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed."),
                ("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds."),
                ("lmcache:local_cache_usage", "gauge", "Local cache usage (bytes) of lmcache"),
            ):
                md = p.api("metadata", metric=name).get(name)
                expect(md, f"no metadata for {name}")
                expect(any(m["type"] == typ and m["help"] == help_ for m in md), f"{name} metadata {md}")
                out.append(f"{name} {typ}")
            return ", ".join(out)

        self.check("HELP and TYPE arrive unchanged (Prometheus metadata API)", metadata)

        def created_not_total():
            v = p.scalar('max(vllm:prompt_tokens_total{job="sysport"})')
            expect(v < 1e8, f"max vllm:prompt_tokens_total = {v}: looks like a _created timestamp")
            return f"max {v:g}"

        self.check("counter _total values are counts, not _created timestamps", created_not_total)

        def tricky_names():
            # Gauges whose names end in _total, and a histogram whose name ends in _total.
            crit = p.scalar('lmcache:periodic_threads_critical_total{job="sysport"}')
            expect(crit == 2, f"lmcache:periodic_threads_critical_total = {crit}, engine serves 2")
            n = len(p.nonempty('vllm:iteration_tokens_total_count{job="sysport"}'))
            p.nonempty('vllm:iteration_tokens_total_bucket{job="sysport", le="+Inf"}')
            # HELP text with quotes and ';' survives too.
            p.nonempty('vllm:num_requests_waiting_by_reason{job="sysport", reason="capacity"}')
            dropped = p.query('dynamo_sysport_openmetrics_dropped_series_total{job="sysport"}')
            expect(all(float(r["value"][1]) == 0 for r in dropped),
                   f"sysport left series out of its OpenMetrics output: {dropped}")
            return f"gauge *_total = {crit:g}, histogram *_total: {n} series"

        self.check("families named like other types (*_total gauges and histograms) arrive intact", tricky_names)

        def rate_positive():
            def get():
                v = p.scalar(f'sum(rate(vllm:generation_tokens_total{{job="sysport"}}[5s]))')
                expect(v > 0, f"rate = {v}")
                return v

            return f"{eventually(get, 20):.1f} tokens/s"

        self.check("rate(vllm:generation_tokens_total[5s]) is positive", rate_positive)

        def quantile_finite():
            expr = "histogram_quantile(0.9, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5s])))"

            def get():
                v = p.scalar(expr)
                expect(math.isfinite(v), f"{expr} = {v}")
                return v

            return f"p90 TTFT {eventually(get, 20):.3f} s"

        self.check("TTFT p90 via histogram_quantile is a finite number", quantile_finite)

        def no_bad_samples():
            _, body, _ = http_get(f"{self.prom.base}/metrics")
            bad = {}
            for fam in text_string_to_metric_families(body):
                for s in fam.samples:
                    if s.name in ("prometheus_target_scrapes_sample_duplicate_timestamp_total",
                                  "prometheus_target_scrapes_sample_out_of_order_total",
                                  "prometheus_target_scrapes_sample_out_of_bounds_total",
                                  "prometheus_target_scrapes_exceeded_sample_limit_total",
                                  "prometheus_target_scrape_pool_exceeded_label_limits_total"):
                        bad[s.name] = s.value
            expect(bad, "Prometheus' own scrape counters not found")
            expect(all(v == 0 for v in bad.values()), f"non-zero: { {k: v for k, v in bad.items() if v} }")
            return f"{len(bad)} counters at 0"

        self.check("Prometheus rejected no samples (duplicates, out of order)", no_bad_samples)

    def outage(self):
        p = self.prom
        state = {}

        def kill_engine():
            # The window checked below: some healthy history before the kill (Prometheus applies
            # a new target only after a discovery delay, so its data may be younger than 5 s).
            state["start"] = max(time.time() - 5, self.first_scrape + 1)
            self.procs.stop("vllm", signal.SIGKILL)
            state["killed"] = time.time()
            live, health = [], []

            seen = {}

            def down_seen():
                s, _, _ = http_get(f"{self.sysport}/live", timeout=1.0)
                live.append(s)
                h, _, _ = http_get(f"{self.sysport}/health", timeout=1.0)
                health.append(h)
                if h == 503:
                    seen.setdefault("health", time.time() - state["killed"])
                if p.scalar('dynamo_sysport_upstream_up{upstream="vllm"}') == 0:
                    seen.setdefault("prom", time.time() - state["killed"])
                expect("prom" in seen, "Prometheus never saw upstream_up=0")
                expect("health" in seen, f"/health stayed {sorted(set(health))}")

            eventually(down_seen, 15, 0.2)
            # While vllm is down: its series go stale, lmcache's keep flowing.
            time.sleep(1.5)
            state["vllm_series_during"] = p.query('count({__name__=~"vllm:.+", job="sysport"})')
            state["lmcache_series_during"] = p.query('count({__name__=~"lmcache:.+", job="sysport"})')
            while time.time() - state["killed"] < 4.0:
                s, _, _ = http_get(f"{self.sysport}/live", timeout=1.0)
                live.append(s)
                time.sleep(0.3)
            state["live"] = live
            state["health_down"] = health
            return (f"Prometheus saw upstream_up=0 {seen['prom']:.1f} s and /health was 503 "
                    f"{seen['health']:.1f} s after the kill")

        self.check("kill the vLLM engine: sysport reports it down", kill_engine, fatal=True)

        def restart_engine():
            self.start_engine("vllm", seed=3)
            state["restarted"] = time.time()
            health = []

            def recovered():
                h, _, _ = http_get(f"{self.sysport}/health", timeout=1.0)
                health.append(h)
                expect(h == 200, f"/health {h}")
                expect(p.scalar('dynamo_sysport_upstream_up{upstream="vllm"}') == 1, "upstream_up still 0")
                expect(p.scalar("dynamo_sysport_health_ready") == 1, "health_ready still 0")
                p.nonempty('vllm:num_requests_waiting{job="sysport"}')

            eventually(recovered, 20, 0.3)
            took = time.time() - state["restarted"]
            time.sleep(2)
            state["end"] = time.time()
            return f"recovered {took:.1f} s after the restart on :{self.vllm_port}"

        self.check("restart the vLLM engine on the same port: sysport recovers", restart_engine, fatal=True)

        def live_throughout():
            live = state["live"]
            expect(live and all(s == 200 for s in live), f"/live answered {sorted(set(live))}")
            return f"{len(live)} probes, all 200"

        self.check("/live stayed 200 while the engine was down", live_throughout)

        def health_503():
            expect(503 in state["health_down"], f"/health answered {sorted(set(state['health_down']))}")
            return "503 while down, 200 after the restart"

        self.check("/health answered 503 while the engine was down", health_503)

        def stale_during():
            expect(not state["vllm_series_during"],
                   f"vllm series still present during the outage: {state['vllm_series_during']}")
            expect(state["lmcache_series_during"], "lmcache series vanished during the vllm outage")
            return f"vllm: none, lmcache: {state['lmcache_series_during'][0]['value'][1]} series"

        self.check("during the outage vllm series go stale and lmcache series keep flowing", stale_during)

        def values(expr):
            res = p.query_range(expr, state["start"], state["end"], 1)
            expect(len(res) == 1, f"{expr}: {len(res)} series over the window")
            return [float(v) for _, v in res[0]["values"]]

        def up_sequence():
            seq = values('dynamo_sysport_upstream_up{upstream="vllm"}')
            r = runs(seq)
            expect(has_subsequence(r, [1, 0, 1]), f"sequence {r} (raw {seq})")
            return f"{' -> '.join(f'{v:g}' for v in r)} ({seq.count(0)} s at 0)"

        self.check('dynamo_sysport_upstream_up{upstream="vllm"} went 1 -> 0 -> 1', up_sequence)

        def ready_sequence():
            r = runs(values("dynamo_sysport_health_ready"))
            expect(has_subsequence(r, [1, 0, 1]), f"sequence {r}")
            return " -> ".join(f"{v:g}" for v in r)

        self.check("dynamo_sysport_health_ready went 1 -> 0 -> 1", ready_sequence)

        def target_stayed_up():
            seq = values('up{job="sysport"}')
            expected = int(state["end"] - state["start"]) + 1
            expect(all(v == 1 for v in seq), f"up went to 0: {runs(seq)}")
            expect(len(seq) >= expected - 1, f"{len(seq)} points, expected {expected}")
            dur = values('max_over_time(scrape_duration_seconds{job="sysport"}[1m])')
            return f"{len(seq)} points, all 1; slowest scrape {max(dur) * 1000:.0f} ms"

        self.check('up{job="sysport"} stayed 1 throughout (the scrape never failed)', target_stayed_up)

        def lmcache_stayed_up():
            seq = values('dynamo_sysport_upstream_up{upstream="lmcache"}')
            expect(all(v == 1 for v in seq), f"lmcache went down: {runs(seq)}")
            return f"{len(seq)} points, all 1"

        self.check('dynamo_sysport_upstream_up{upstream="lmcache"} stayed 1', lmcache_stayed_up)

        def failures_counted():
            res = p.query('sum by (result) (increase(dynamo_sysport_upstream_scrapes_total'
                          '{upstream="vllm", result!="success"}[1m]))')
            got = {r["metric"].get("result"): float(r["value"][1]) for r in res}
            expect(any(v > 0 for v in got.values()), f"no failed vllm scrape counted: {got}")
            return ", ".join(f"{k}: +{v:.0f}" for k, v in got.items() if v > 0)

        self.check("failed vllm scrapes are counted with a reason", failures_counted)

        def alert_pending():
            res = p.query_range('ALERTS{alertname="SysportUpstreamDown", alertstate="pending", upstream="vllm"}',
                                state["start"], state["end"], 1)
            expect(res, "SysportUpstreamDown never went pending for upstream vllm")
            now = p.query('ALERTS{alertname="SysportUpstreamDown"}')
            expect(not now, f"still active after recovery: {now}")
            return f"pending for {len(res[0]['values'])} s, cleared after recovery"

        self.check("alert SysportUpstreamDown went pending during the outage and cleared", alert_pending)

    def dashboard(self):
        p = self.prom
        with open(DASHBOARD) as f:
            dash = json.load(f)
        defined = {v["name"] for v in dash.get("templating", {}).get("list", [])}
        values = {k: v for k, v in TEMPLATE_VALUES.items() if k.startswith("__") or k in defined}

        def variables():
            out = []
            for var in dash.get("templating", {}).get("list", []):
                if var.get("type") != "query":
                    continue
                q = var.get("query")
                q = q.get("query") if isinstance(q, dict) else q
                m = re.fullmatch(r"\s*label_values\((.+),\s*(\w+)\)\s*", q or "")
                expect(m, f"variable {var['name']}: unsupported query {q!r}")
                selector, label = substitute(m.group(1), values), m.group(2)
                got = p.api(f"label/{label}/values", **{"match[]": selector})
                expect(got, f"variable {var['name']}: label_values({selector}, {label}) is empty")
                out.append(f"${var['name']}={got}")
            return ", ".join(out)

        self.check("dashboard template variables resolve", variables)

        for panel in dashboard_panels(dash.get("panels", [])):
            targets = [t for t in panel.get("targets", []) if t.get("expr")]
            if not targets:
                continue

            def run_panel(targets=targets):
                exprs = [(t.get("refId", "?"), substitute(t["expr"], values)) for t in targets]

                def all_nonempty():
                    empty = [f"{ref}: {e}" for ref, e in exprs if not p.query(e)]
                    expect(not empty, "empty result for " + " ; ".join(empty))

                eventually(all_nonempty, 20, 1.0)
                return ", ".join(ref for ref, _ in exprs)

            self.check(f"dashboard panel {panel.get('id')} \"{panel.get('title')}\" has data", run_panel)

    def rules(self):
        p = self.prom
        records, alerts = rule_names_in_file(RULES)
        loaded = {}

        def all_loaded():
            for group in p.api("rules")["groups"]:
                for rule in group["rules"]:
                    loaded[rule["name"]] = rule
            names = set(loaded)
            missing = sorted(set(records + alerts) - names)
            expect(not missing, f"rules in {os.path.basename(RULES)} not loaded: {missing}")
            bad = {n: r.get("lastError") or r.get("health") for n, r in loaded.items() if r.get("health") != "ok"}
            expect(not bad, f"unhealthy rules: {bad}")
            return f"{len(records)} recording rules, {len(alerts)} alerts, all healthy"

        self.check("every rule of sysport.rules.yml is loaded and evaluates without error",
                   lambda: eventually(all_loaded, 10))

        for record in records:
            def run_rule(record=record):
                rule = loaded.get(record)
                expect(rule, f"{record} not loaded")
                expr = rule["query"]

                def get():
                    res = p.query(expr)
                    expect(res, f"empty result: {expr}")
                    expect(p.query(record), f"recorded series {record} is empty")
                    return res

                res = eventually(get, 20, 1.0)
                return f"{len(res)} series"

            self.check(f"recording rule {record} has data", run_rule)

    def shutdown(self):
        def sigterm():
            t0 = time.monotonic()
            rc = self.procs.stop("sysport", signal.SIGTERM, timeout=15.0)
            expect(rc == 0, f"sysport exited with {rc} after SIGTERM")
            return f"exit 0 after {time.monotonic() - t0:.1f} s"

        self.check("sysport exits 0 on SIGTERM", sigterm)


def main(suite=Suite, doc=__doc__):
    """Runs `suite` (a Suite) with the command line of tests/suites/e2e-prometheus.sh."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True, help="an empty directory for configs, logs and the TSDB")
    ap.add_argument("--pidfile", help="kept listing the pids of the processes still running")
    args = ap.parse_args()
    # SIGTERM/SIGINT unwind through the cleanup in Suite.run.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    return suite(args.workdir, args.pidfile).run()


if __name__ == "__main__":
    sys.exit(main())
