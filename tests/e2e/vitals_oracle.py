"""Oracle for the engine vitals: a real Prometheus and sysport read the same stand-in vLLM (a
loopback server in this process whose counters and histograms grow at known constant rates,
two data-parallel ranks, and a counter that restarts inside the window), and sysport's
`/status` vitals must agree with Prometheus' answers to the same PromQL within 2 %:

    sum(rate(x[1m]))                                         rates
    sum(rate(hits[1m])) / sum(rate(queries[1m]))              prefix-cache hit rate
    histogram_quantile(q, sum by (le) (rate(x_bucket[1m])))   p50, p90, p99
    sum(x), avg(x)                                           running and waiting, KV usage

Run through tests/suites/vitals-prometheus.sh (tests/suites/e2e-prometheus.sh with this driver):

    python tests/e2e/vitals_oracle.py --workdir DIR [--pidfile FILE]
"""

import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import run  # noqa: E402
from run import Failed, Suite, eventually, expect, http_get  # noqa: E402

WINDOW = 60                # vitals.window and the PromQL range, in seconds
RESET_AFTER = 35           # rank 0's request counter restarts this long after the start
BOUNDS = [0.05, 0.1, 0.2, 0.5, 1.0]
SHARES = [0.2, 0.3, 0.3, 0.15, 0.05]
RATES = {  # per second, ranks 0 and 1
    "vllm:request_success_total": (2.0, 1.0),
    "vllm:prompt_tokens_total": (300.0, 100.0),
    "vllm:generation_tokens_total": (40.0, 20.0),
    "vllm:num_preemptions_total": (0.5, 0.0),
    "vllm:prefix_cache_hits_total": (30.0, 0.0),
    "vllm:prefix_cache_queries_total": (100.0, 0.0),
}
HISTOGRAMS = {  # name: bound scale; observations at the request rate
    "vllm:time_to_first_token_seconds": 1.0,
    "vllm:inter_token_latency_seconds": 0.1,
    "vllm:e2e_request_latency_seconds": 10.0,
}


class StandIn:
    """The stand-in engine: its page is computed from the time of each request."""

    def __init__(self):
        self.start = time.time()
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if self.path.startswith("/metrics"):
                    body, code = stand_in.page().encode(), 200
                elif self.path == "/health":
                    body, code = b"ok", 200
                else:
                    body, code = b"not found", 404
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def page(self):
        t = time.time() - self.start
        lines = []
        for name, values in (("vllm:num_requests_running", (3, 1)), ("vllm:num_requests_waiting", (2, 0)),
                             ("vllm:kv_cache_usage_perc", (0.5, 0.25))):
            lines.append(f"# TYPE {name} gauge")
            lines += [f'{name}{{engine="{e}",model_name="m"}} {v}' for e, v in enumerate(values)]
        for name, rates in RATES.items():
            lines.append(f"# TYPE {name} counter")
            for e, r in enumerate(rates):
                if e == 0 and name == "vllm:request_success_total" and t >= RESET_AFTER:
                    v = r * (t - RESET_AFTER)  # the engine restarted: from zero again
                else:
                    v = 10 + r * t
                lines.append(f'{name}{{engine="{e}",model_name="m"}} {v}')
        for name, scale in HISTOGRAMS.items():
            lines.append(f"# TYPE {name} histogram")
            for e, per_s in enumerate(RATES["vllm:request_success_total"]):
                count = per_s * t
                cumulative = 0.0
                for bound, share in zip(BOUNDS, SHARES):
                    cumulative += share * count
                    lines.append(f'{name}_bucket{{engine="{e}",le="{bound * scale}",model_name="m"}} {cumulative}')
                lines.append(f'{name}_bucket{{engine="{e}",le="+Inf",model_name="m"}} {count}')
                lines.append(f'{name}_count{{engine="{e}",model_name="m"}} {count}')
                lines.append(f'{name}_sum{{engine="{e}",model_name="m"}} {count * 0.2 * scale}')
        return "\n".join(lines) + "\n"


# /status key -> PromQL over the stand-in's series, as docs/vitals.md defines each figure.
def promql():
    r = f"[{WINDOW}s]"
    q = {
        "running": "sum(vllm:num_requests_running)",
        "waiting": "sum(vllm:num_requests_waiting)",
        "kv_cache_usage": "avg(vllm:kv_cache_usage_perc)",
        "requests_per_second": f"sum(rate(vllm:request_success_total{r}))",
        "prompt_tokens_per_second": f"sum(rate(vllm:prompt_tokens_total{r}))",
        "generation_tokens_per_second": f"sum(rate(vllm:generation_tokens_total{r}))",
        "preemptions_per_second": f"sum(rate(vllm:num_preemptions_total{r}))",
        "prefix_cache_hit_rate": f"sum(rate(vllm:prefix_cache_hits_total{r})) / sum(rate(vllm:prefix_cache_queries_total{r}))",
    }
    for name, key in (("vllm:time_to_first_token_seconds", "time_to_first_token_seconds"),
                      ("vllm:inter_token_latency_seconds", "inter_token_latency_seconds"),
                      ("vllm:e2e_request_latency_seconds", "e2e_request_latency_seconds")):
        for p, quantile in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            q[f"{key}.{p}"] = f"histogram_quantile({quantile}, sum by (le) (rate({name}_bucket{r})))"
    # One rank, as /status breaks it down.
    q["ranks.0.requests_per_second"] = f'sum(rate(vllm:request_success_total{{engine="0"}}{r}))'
    q["ranks.1.time_to_first_token_seconds.p99"] = (
        f'histogram_quantile(0.99, sum by (le) (rate(vllm:time_to_first_token_seconds_bucket{{engine="1"}}{r})))')
    return q


def lookup(doc, key):
    for part in key.split("."):
        doc = doc[int(part)] if isinstance(doc, list) else doc[part]
    return doc


class VitalsOracle(Suite):
    name = "vitals-prometheus"
    fatal_logs = failure_logs = ("sysport", "prometheus")

    def steps(self):
        self.setup()
        self.compare()

    def setup(self):
        def start():
            self.engine = StandIn()
            path = os.path.join(self.workdir, "sysport.yaml")
            with open(path, "w") as f:
                f.write(f"""\
listen: {{ host: 127.0.0.1, port: {self.sysport_port} }}
health: {{ interval: 1s }}
vitals: {{ window: {WINDOW}s }}
shutdown: {{ drain_delay: 0s }}
upstreams:
  - name: vllm
    url: "http://127.0.0.1:{self.engine.port}/metrics"
    health_url: "http://127.0.0.1:{self.engine.port}/health"
    keep: ["vllm:"]
""")
            self.start_sysport(path)
            prom = os.path.join(self.workdir, "prometheus.yml")
            with open(prom, "w") as f:
                f.write(f"""\
global: {{ scrape_interval: 1s, scrape_timeout: 1s }}
scrape_configs:
  - job_name: engine
    static_configs:
      - targets: ["127.0.0.1:{self.engine.port}"]
""")
            self.start_prometheus(prom)
            return f"stand-in :{self.engine.port}, sysport :{self.sysport_port}, Prometheus :{self.prom_port}"

        self.check("the stand-in engine, sysport and Prometheus start", start, fatal=True)

    def status_vitals(self):
        status, body, _ = http_get(f"{self.sysport}/status", timeout=5.0)
        expect(status == 200, f"/status: HTTP {status}")
        return json.loads(body)["upstreams"][0]["vitals"]

    def compare(self):
        def window_full():
            # A full window of readings from both, and the restart inside it.
            left = WINDOW + 5 - (time.time() - self.engine.start)
            if left > 0:
                time.sleep(left)
            eventually(lambda: expect(self.status_vitals()["readings"] >= WINDOW - 2, "readings"), 20)
            return f"{self.status_vitals()['readings']} readings in the window"

        self.check(f"a {WINDOW} s window of readings, rank 0's counter restarted inside it", window_full, fatal=True)

        # sysport's figures and Prometheus' answers at the same moment.
        at = time.time()
        vitals = self.status_vitals()
        for key, expr in promql().items():
            def agree(key=key, expr=expr):
                ours = lookup(vitals, key)
                res = self.prom.query(expr, at=at)
                expect(len(res) == 1, f"{expr}: {res}")
                theirs = float(res[0]["value"][1])
                expect(ours is not None, f"/status {key} is null; Prometheus says {theirs}")
                expect(abs(ours - theirs) <= 0.02 * abs(theirs), f"/status {key} = {ours}, Prometheus {theirs}")
                return f"{ours:.6g} vs {theirs:.6g}"

            self.check(f"{key} agrees with {expr}", agree)


if __name__ == "__main__":
    sys.exit(run.main(VitalsOracle, __doc__))
