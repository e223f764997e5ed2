"""What the health checks' family reads (stall detection, the engine vitals) cost the engine and
sysport: sysport checking a vLLM-like engine every second, with and without stall_after, the
vitals on (the default) or off (`vitals.window: 0s`), with and without a health_url. The engine
is prometheus_client's own WSGI app over the load test's 740 KB registry
(bench/load/registry.py), wrapped to count each /metrics request, its bytes and its render
time; sysport's CPU time and resident memory are read from /proc for its whole run, and at
its end `/status` (which computes the vitals' figures and five minutes of sparklines) is asked
for 20 times and timed.

    python run.py SYSPORT_BIN OUT_DIR [SECONDS] [--only=I,J,...]   (scenarios by row, from 0)
"""
import os
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../load"))
import registry  # noqa: E402
import run as loadrun  # noqa: E402  (bench/load/run.py: its process helpers)
from prometheus_client import make_wsgi_app  # noqa: E402

ARGS = [a for a in sys.argv[1:] if not a.startswith("--only")]
ONLY = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")), None)
SYSPORT, OUT = ARGS[0], ARGS[1]
SECONDS = float(ARGS[2]) if len(ARGS) > 2 else 20.0


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


class Threaded(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class Counting:
    """Records (selective, bytes, seconds) for every /metrics request."""

    def __init__(self, app):
        self.app, self.log, self.health, self.lock = app, [], 0, threading.Lock()

    def __call__(self, environ, start_response):
        if environ["PATH_INFO"] == "/health":
            with self.lock:
                self.health += 1
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b""]
        t0 = time.perf_counter()
        body = b"".join(self.app(environ, start_response))
        took = time.perf_counter() - t0
        with self.lock:
            selective = "name%5B%5D" in environ.get("QUERY_STRING", "")
            self.log.append((selective, len(body), took))
        return [body]


def status_ms(port, times=20):
    """Mean milliseconds of a GET /status."""
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
            r.read()
        took.append(time.perf_counter() - t0)
    return statistics.mean(took) * 1e3


def run(scenario, url, health, stall, port, vitals=True):
    config = os.path.join(OUT, f"{scenario}.yaml")
    with open(config, "w") as f:
        f.write(f"listen: {{ host: 127.0.0.1, port: {port} }}\n")
        f.write("health: { interval: 1s }\nshutdown: { drain_delay: 0s }\n")
        if not vitals:
            f.write("vitals: { window: 0s }\n")
        f.write("upstreams:\n  - name: vllm\n")
        f.write(f"    url: {url}/metrics\n    keep: [\"vllm:\"]\n")
        if health:
            f.write(f"    health_url: {url}/health\n")
        if stall:
            f.write("    stall_after: 60s\n")
    with app.lock:
        app.log.clear()
        app.health = 0
    proc = subprocess.Popen([SYSPORT, "--config", config], stderr=subprocess.DEVNULL)
    time.sleep(SECONDS)
    cpu = loadrun.proc_stat(proc.pid)[0]
    status = status_ms(port)
    rss, peak = loadrun.rss_mib(proc.pid)
    proc.terminate()
    proc.wait(timeout=30)
    with app.lock:
        log, health_gets = list(app.log), app.health
    full = [r for r in log if not r[0]]
    sel = [r for r in log if r[0]]
    # A check is a GET of the health URL, or else the scrape that checks readiness.
    checks = health_gets if health else len(full)

    def mean(rows, i, scale=1.0):
        return f"{statistics.mean(r[i] for r in rows) * scale:,.1f}" if rows else "-"

    return [
        scenario,
        str(checks),
        f"{len(full) / checks:.2f}",
        f"{len(sel) / checks:.2f}",
        mean(full, 1),
        mean(sel, 1),
        mean(full, 2, 1e3),
        mean(sel, 2, 1e3),
        f"{sum(r[1] for r in log) / checks / 1024:,.1f}",
        f"{cpu / checks * 1e3:,.2f}",
        f"{status:,.2f}",
        f"{rss:,.1f} / {peak:,.1f}",
    ]


reg = registry.build(12)
app = Counting(make_wsgi_app(reg))
server = make_server("127.0.0.1", 0, app, server_class=Threaded, handler_class=Quiet)
threading.Thread(target=server.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{server.server_port}"
SCENARIOS = [
    ("health_url, vitals off, no stall_after", url, True, False, 18181, False),
    ("health_url, vitals off, stall_after", url, True, True, 18182, False),
    ("health_url, vitals on", url, True, False, 18185, True),
    ("health_url, vitals on, stall_after", url, True, True, 18186, True),
    ("no health_url, vitals off", url, False, False, 18183, False),
    ("no health_url, vitals on, stall_after", url, False, True, 18184, True),
]
picked = [int(i) for i in ONLY.split(",")] if ONLY else range(len(SCENARIOS))
rows = [run(*SCENARIOS[i][:5], vitals=SCENARIOS[i][5]) for i in picked]
server.shutdown()
print(f"{SECONDS:.0f} s per scenario, health.interval 1s, the 740 KB page (registry.build(12))\n")
print(
    "| scenario | checks | full pages / check | selective reads / check | full page bytes (gzip) "
    "| selective bytes (gzip) | full page render ms | selective render ms | engine KiB / check "
    "| sysport CPU ms / check | /status ms | sysport RSS / peak MiB |"
)
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for r in rows:
    print("| " + " | ".join(r) + " |")
