"""Prometheus 3.16 scrapes sysport: every scrape protocol it asks for, alone and in its default
order, and with `metric_name_escaping_scheme: underscores`; every sample it stores must be the
sample sysport served in that very answer, nothing dropped, no scrape error or warning in its
log, and sysport's Content-Type must say what it served (version, and escaping for 1.0.0).

Prometheus (PROMETHEUS_BIN, built by scripts/real-tools.sh) scrapes one sysport through a
recording pass-through on loopback, one path per job: it forwards Prometheus' request as it is
(Accept, Accept-Encoding, the scrape timeout) and sends sysport's answer back byte for byte,
keeping the Accept header, sysport's Content-Type and the (decompressed) body of each scrape,
so the samples stored at a scrape's timestamp are compared with the answer that scrape got.
sysport's upstreams serve fixed pages (tests/fixtures/medium.prom, and the label values with
quotes, backslashes, newlines and emoji and the NaN and +Inf values of
edge_weird_labels_nan.prom), so the engine families stand still; sysport's own move, and are
compared scrape by scrape like the rest. Prometheus 3's promtool (PROMTOOL3) must accept
both formats (`check metrics`, and its OpenMetrics parser through `tsdb create-blocks-from`).

Run through tests/suites/prometheus3.sh (tests/suites/e2e-prometheus.sh with this driver):

    python tests/e2e/prometheus3.py --workdir DIR [--pidfile FILE]
"""

import gzip
import http.client
import math
import os
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# After this directory: the conformance suite has a `run` module of its own.
sys.path.append(os.path.join(os.path.dirname(HERE), "conformance"))

import run  # noqa: E402
from run import ROOT, Suite, eventually, expect  # noqa: E402
import expo  # noqa: E402
import procs  # noqa: E402
from inputs import Input  # noqa: E402

PAGES = {  # upstream name: (fixture, the prefix sysport keeps from it)
    "engine": ("medium.prom", "vllm:"),
    "weird": ("edge_weird_labels_nan.prom", "lmcache:"),
}
WORKER_ID = "p3-pod"
OM_1 = "application/openmetrics-text; version=1.0.0; charset=utf-8"
TEXT_1 = "text/plain; version=1.0.0; charset=utf-8"
# job: (scrape config lines, the Accept header Prometheus 3.16 sends (scrape/scrape.go
# acceptHeader: q-values count down from 0.7, one above the six protocols it knows), the
# Content-Type sysport must answer with)
JOBS = {
    "default": (
        "",
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.7,"
        "application/openmetrics-text;version=0.0.1;q=0.6,"
        "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.5,"
        "text/plain;version=0.0.4;q=0.4,*/*;q=0.3",
        OM_1 + "; escaping=allow-utf-8",
    ),
    "om_1_0_0": (
        "scrape_protocols: [OpenMetricsText1.0.0]",
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.7,*/*;q=0.6",
        OM_1 + "; escaping=allow-utf-8",
    ),
    "om_0_0_1": (
        "scrape_protocols: [OpenMetricsText0.0.1]",
        "application/openmetrics-text;version=0.0.1;q=0.7,*/*;q=0.6",
        "application/openmetrics-text; version=0.0.1; charset=utf-8",
    ),
    "text_1_0_0": (
        "scrape_protocols: [PrometheusText1.0.0]",
        "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.7,*/*;q=0.6",
        TEXT_1 + "; escaping=allow-utf-8",
    ),
    "text_0_0_4": (
        "scrape_protocols: [PrometheusText0.0.4]",
        "text/plain;version=0.0.4;q=0.7,*/*;q=0.6",
        "text/plain; version=0.0.4; charset=utf-8",
    ),
    "underscores": (
        "metric_name_escaping_scheme: underscores",
        "application/openmetrics-text;version=1.0.0;escaping=underscores;q=0.7,"
        "application/openmetrics-text;version=0.0.1;q=0.6,"
        "text/plain;version=1.0.0;escaping=underscores;q=0.5,"
        "text/plain;version=0.0.4;q=0.4,*/*;q=0.3",
        OM_1 + "; escaping=underscores",
    ),
    "text_1_0_0_underscores": (
        "scrape_protocols: [PrometheusText1.0.0]\n    metric_name_escaping_scheme: underscores",
        "text/plain;version=1.0.0;escaping=underscores;q=0.7,*/*;q=0.6",
        TEXT_1 + "; escaping=underscores",
    ),
}
# Series Prometheus adds to every target itself.
AUTO_SERIES = ("up", "scrape_duration_seconds", "scrape_samples_scraped",
               "scrape_samples_post_metric_relabeling", "scrape_series_added")
# Prometheus 3 writes `le` and `quantile` values as floats ("1" is stored as "1.0").
FLOAT_LABELS = ("le", "quantile")
LOG_LEVEL_RE = re.compile(r"\blevel=(WARN|ERROR)\b")


class Recorder:
    """The recording pass-through: GET /JOB/metrics is sysport's /metrics, as Prometheus asked."""

    def __init__(self, target_port):
        self.scrapes = []  # (unix time at arrival, job, Accept, Content-Type, status, body)
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                arrived = time.time()
                job = self.path.strip("/").split("/")[0]
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection", "keep-alive")}
                conn = http.client.HTTPConnection("127.0.0.1", target_port, timeout=10)
                try:
                    conn.request("GET", "/metrics", headers=headers)
                    resp = conn.getresponse()
                    raw = resp.read()
                    status, answer = resp.status, resp.getheaders()
                finally:
                    conn.close()
                ctype = resp.getheader("Content-Type", "")
                body = gzip.decompress(raw) if resp.getheader("Content-Encoding") == "gzip" else raw
                with outer.lock:
                    outer.scrapes.append((arrived, job, self.headers.get("Accept", ""), ctype,
                                          status, body.decode("utf-8")))
                self.send_response(status)
                for k, v in answer:
                    if k.lower() not in ("connection", "keep-alive", "transfer-encoding", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def of(self, job):
        with self.lock:
            return [s for s in self.scrapes if s[1] == job]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def norm_labels(labels):
    """Labels as Prometheus stores them: one with an empty value is no label at all, and `le`
    and `quantile` values are written as floats."""
    out = []
    for k, v in labels.items():
        if v == "":
            continue
        if k in FLOAT_LABELS:
            v = repr(float(v))
        out.append((k, v))
    return tuple(sorted(out))


def served_samples(body, ctype):
    """{(name, labels): value} of one answer, read with prometheus_client's parser for the
    format its Content-Type names."""
    fmt = "om" if ctype.startswith("application/openmetrics-text") else "text"
    out = {}
    for fam in expo.parse(body, fmt):
        for s in fam.samples:
            key = (s.name, norm_labels(s.labels))
            expect(key not in out, f"sample {key} twice in one answer")
            out[key] = float(s.value)
    return out


def same(a, b):
    return (math.isnan(a) and math.isnan(b)) or a == b


class Prometheus3(Suite):
    name = "prometheus3"
    fatal_logs = failure_logs = ("sysport", "prometheus")

    def __init__(self, workdir, pidfile):
        super().__init__(workdir, pidfile)
        self.promtool = os.environ.get("PROMTOOL3") or "promtool"
        self.recorder = None
        self.engine = None

    def stop_all(self):
        super().stop_all()
        procs.stop_all()
        if self.recorder:
            self.recorder.stop()

    def write_sysport(self):
        ups = "".join(f"""\
  - {{ name: {name}, url: "{self.engine.url(self.inputs[name])}", keep: ["{prefix}"] }}
""" for name, (_, prefix) in PAGES.items())
        path = os.path.join(self.workdir, "sysport.yaml")
        with open(path, "w") as f:
            f.write(f"""\
listen: {{ host: 127.0.0.1, port: {self.sysport_port} }}
labels: {{ worker_id: "{WORKER_ID}" }}
shutdown: {{ drain_delay: 0s }}
upstreams:
{ups}""")
        return path

    def write_prometheus(self):
        jobs = "".join(f"""\
  - job_name: {job}
    honor_labels: true
    metrics_path: /{job}/metrics
    static_configs:
      - targets: ["127.0.0.1:{self.recorder.port}"]
""" + (f"    {extra}\n" if extra else "") for job, (extra, _, _) in JOBS.items())
        path = os.path.join(self.workdir, "prometheus.yml")
        with open(path, "w") as f:
            # Seven jobs reading a 4,700-sample page on a busy two-core machine: 3 s apart.
            f.write("global:\n  scrape_interval: 3s\n  scrape_timeout: 3s\nscrape_configs:\n" + jobs)
        return path

    def steps(self):
        self.setup()
        for job in JOBS:
            self.compare(job)
        self.clean_log()
        self.promtool_reads()

    def setup(self):
        def start():
            self.inputs = {}
            for name, (fixture, _) in PAGES.items():
                path = os.path.join(ROOT, "tests", "fixtures", fixture)
                with open(path, "rb") as f:
                    self.inputs[name] = Input(name=name, body=f.read(), fmt="text",
                                              content_type="text/plain; version=0.0.4; charset=utf-8",
                                              origin=path)
            self.engine = procs.Upstreams(list(self.inputs.values()))
            self.start_sysport(self.write_sysport())
            self.recorder = Recorder(self.sysport_port)
            self.start_prometheus(self.write_prometheus())
            version = self.prom.api("status/buildinfo")["version"]
            expect(version.startswith("3."), f"PROMETHEUS_BIN is Prometheus {version}, not 3.x")
            return f"Prometheus {version}, {len(JOBS)} jobs"

        self.check("stand-in engine pages, sysport, the recorder and Prometheus 3 start", start, fatal=True)

        def scraped():
            def all_up():
                targets = self.prom.api("targets", state="active")["activeTargets"]
                expect(len(targets) == len(JOBS), f"{len(targets)} active targets")
                for t in targets:
                    expect(t["health"] == "up" and not t.get("lastError"),
                           f"{t['labels']['job']}: {t['health']} {t.get('lastError')!r}")
                for job in JOBS:
                    expect(len(self.recorder.of(job)) >= 4, f"{job}: fewer than 4 scrapes yet")

            eventually(all_up, 90, 0.5)

        self.check("Prometheus 3 scrapes sysport in every job, every target up, no scrape error", scraped,
                   fatal=True)

    def stored_at(self, job):
        """{timestamp: {(name, labels): value}} of every sample Prometheus stored for `job` in the
        last minute, its own series aside."""
        data = self.prom.api("query", query=f'{{job="{job}"}}[1m]')
        expect(data["resultType"] == "matrix", f"result type {data['resultType']}")
        out = {}
        for series in data["result"]:
            labels = dict(series["metric"])
            name = labels.pop("__name__")
            labels.pop("job", None)
            labels.pop("instance", None)
            for t, v in series.get("values", []):
                out.setdefault(float(t), {})[(name, norm_labels(labels))] = float(v)
        return out

    def compare(self, job):
        _, accept, ctype = JOBS[job]

        def negotiated():
            scrapes = self.recorder.of(job)
            for _, _, got_accept, got_ctype, status, _ in scrapes:
                expect(status == 200, f"sysport answered {status}")
                expect(got_accept == accept, f"Prometheus asked {got_accept!r}, expected {accept!r}")
                expect(got_ctype == ctype, f"asked {got_accept!r}, sysport answered {got_ctype!r}, "
                                           f"expected {ctype!r}")
            return ctype

        self.check(f"{job}: sysport's Content-Type says what it served", negotiated)

        def stored_equals_served():
            stored = self.stored_at(job)
            scrapes = self.recorder.of(job)
            # Every scrape in the window succeeded; the newest whole one (not the one being
            # appended right now) is compared.
            times = sorted(stored)
            expect(len(times) >= 3, f"only {len(times)} scrapes stored")
            ups = [stored[t].get(("up", ())) for t in times]
            expect(all(u == 1.0 for u in ups), f"up was {ups}")
            slowest = max(stored[t][("scrape_duration_seconds", ())] for t in times)
            t = times[-2]
            got = {k: v for k, v in stored[t].items() if k[0] not in AUTO_SERIES}
            auto = {k[0]: v for k, v in stored[t].items() if k[0] in AUTO_SERIES}
            # The scrape Prometheus timestamps at t arrived at the recorder right after t.
            arrived, _, _, got_ctype, _, body = min(scrapes, key=lambda s: abs(s[0] - t))
            expect(abs(arrived - t) < 0.5, f"no recorded scrape within 0.5 s of {t} (nearest {arrived})")
            served = served_samples(body, got_ctype)
            expect(served, "sysport served no sample")
            missing = sorted(k for k in served if k not in got)
            extra = sorted(k for k in got if k not in served)
            differ = sorted(k for k in served if k in got and not same(served[k], got[k]))
            problems = []
            for what, keys in (("served, not stored", missing), ("stored, not served", extra),
                               ("values differ", differ)):
                if keys:
                    shown = "; ".join(f"{n}{dict(l)}" + (f" {served[(n, l)]!r} vs {got[(n, l)]!r}"
                                                         if what == "values differ" else "")
                                      for n, l in keys[:4])
                    problems.append(f"{len(keys)} {what}: {shown}")
            expect(not problems, f"at {t} ({len(got)} stored, {len(times)} scrapes): " + " | ".join(problems))
            expect(auto.get("up") == 1.0, f"up {auto.get('up')}")
            for k in ("scrape_samples_scraped", "scrape_samples_post_metric_relabeling"):
                expect(auto.get(k) == len(served), f"{k} {auto.get(k)}, sysport served {len(served)}")
            families = {n for n, _ in served}
            for prefix in ("vllm:", "lmcache:", "dynamo_sysport_"):
                expect(any(n.startswith(prefix) for n in families), f"no {prefix} sample")
            nan = sum(1 for v in served.values() if math.isnan(v))
            return f"{len(served)} samples, {nan} NaN; {len(times)} scrapes, the slowest {slowest:.2f} s"

        self.check(f"{job}: every sample Prometheus 3 stored equals the one sysport served, none dropped",
                   stored_equals_served)

    def clean_log(self):
        def no_warning():
            with open(os.path.join(self.workdir, "prometheus.log"), encoding="utf-8", errors="replace") as f:
                lines = f.read().splitlines()
            bad = [l for l in lines if LOG_LEVEL_RE.search(l)]
            expect(not bad, f"{len(bad)} lines: " + " | ".join(bad[:3]))
            return f"{len(lines)} log lines"

        self.check("Prometheus 3's log has no scrape error or warning", no_warning)

    def promtool_reads(self):
        for job in ("text_0_0_4", "text_1_0_0", "om_1_0_0"):
            def accepted(job=job):
                _, _, _, ctype, _, body = self.recorder.of(job)[-1]
                problem = expo.promtool_check(body.encode(), self.promtool)
                expect(problem is None, f"promtool check metrics: {problem}")
                if ctype.startswith("application/openmetrics-text"):
                    problem = expo.prometheus_om_check(body.encode(), self.workdir, self.promtool)
                    expect(problem is None, f"promtool tsdb create-blocks-from openmetrics: {problem}")
                return ctype

            self.check(f"Prometheus 3's promtool reads sysport's answer to {job}", accepted)


if __name__ == "__main__":
    sys.exit(run.main(Prometheus3, __doc__))
