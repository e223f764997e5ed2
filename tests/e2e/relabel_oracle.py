"""Oracle for metric_relabel_configs: one real Prometheus scrapes the same engine page, directly
with a set of rules and through sysport configured with the same rules (none on the Prometheus
side), and must store the same engine series (names, labels, values; `_created` series and the
`job`/`instance` labels aside).

Two rule sets, each with its own sysport and pair of jobs: tests/e2e/relabel_rules.yml (every
action) and the example in docs/relabelling.md (request-size histograms dropped, latency buckets thinned:
the families it does not change go through sysport as parsed). The page is
tests/fixtures/medium.prom (4 data-parallel engines, LMCache, LoRA, speculative decoding),
served as it is by the conformance suite's loopback server, in this process. sysport's output under the rules must
also pass promtool and prometheus_client in both formats.

Run through tests/suites/relabel-oracle.sh (tests/suites/e2e-prometheus.sh with this driver):

    python tests/e2e/relabel_oracle.py --workdir DIR [--pidfile FILE]
"""

import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
# After this directory: the conformance suite has a `run` module of its own.
sys.path.append(os.path.join(os.path.dirname(HERE), "conformance"))

import run  # noqa: E402
from run import ROOT, Suite, expect, eventually, free_ports, http_get  # noqa: E402
import expo  # noqa: E402
import procs  # noqa: E402
from inputs import Input  # noqa: E402

PAGE = os.path.join(ROOT, "tests", "fixtures", "medium.prom")
ALL_RULES = os.path.join(HERE, "relabel_rules.yml")
DOC = os.path.join(ROOT, "docs", "relabelling.md")
DOC_MARK = "<!-- tests/e2e/relabel_oracle.py runs this example"
WORKER_ID = "w-1"
OM_ACCEPT = "application/openmetrics-text;version=1.0.0"


def indented(text, spaces):
    pad = " " * spaces
    return "".join(pad + line if line.strip() else line for line in text.splitlines(True))


def readme_rules():
    """The rule list of the example in docs/relabelling.md, as YAML at indentation 0."""
    with open(DOC, encoding="utf-8") as f:
        lines = f.read().split("\n")
    start = next(i for i, l in enumerate(lines) if l.startswith(DOC_MARK))
    block = []
    for line in lines[start + 2:]:
        if line.startswith("```"):
            break
        block.append(line)
    at = next(i for i, l in enumerate(block) if l.strip() == "metric_relabel_configs:")
    key_indent = len(block[at]) - len(block[at].lstrip())
    rules = []
    for line in block[at + 1:]:
        if line.strip() and len(line) - len(line.lstrip()) <= key_indent:
            break
        rules.append(line)
    depth = min(len(l) - len(l.lstrip()) for l in rules if l.strip())
    return "\n".join(l[depth:] for l in rules) + "\n"


class Oracle(Suite):
    def __init__(self, workdir, pidfile):
        super().__init__(workdir, pidfile)
        (readme_port,) = free_ports(1)
        self.sets = {
            "all": {"rules": open(ALL_RULES, encoding="utf-8").read(), "port": self.sysport_port},
            "readme": {"rules": readme_rules(), "port": readme_port},
        }
        self.engine = None  # the loopback server of the page, once started
        self.page = None

    def write_sysport(self, name, rules, port):
        path = os.path.join(self.workdir, f"sysport-{name}.yaml")
        with open(path, "w") as f:
            f.write(f"""\
listen: {{ host: 127.0.0.1, port: {port} }}
labels: {{ worker_id: "{WORKER_ID}" }}
shutdown: {{ drain_delay: 0s }}
upstreams:
  - name: engine
    url: "{self.engine.url(self.page)}"
    keep: ["vllm:", "lmcache:"]
    metric_relabel_configs:
{indented(rules, 6)}""")
        return path

    def write_prometheus(self):
        jobs = []
        for name, s in self.sets.items():
            # honor_labels: the engine's own `worker_id` wins over the target label, as sysport
            # adds its configured labels only to series that lack them.
            jobs.append(f"""\
  - job_name: direct_{name}
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{self.engine.port}"]
        labels: {{ worker_id: "{WORKER_ID}" }}
    metrics_path: "/{self.page.name}"
    metric_relabel_configs:
      # What sysport's `keep` does.
      - source_labels: [__name__]
        regex: "(vllm|lmcache):.*"
        action: keep
{indented(s["rules"], 6)}
  - job_name: sysport_{name}
    honor_labels: true
    static_configs:
      - targets: ["127.0.0.1:{s["port"]}"]
""")
        path = os.path.join(self.workdir, "prometheus.yml")
        with open(path, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n" + "".join(jobs))
        return path

    def stored(self, job):
        """{(name, sorted labels): value} of the engine series Prometheus holds for `job`."""
        out = {}
        for r in self.prom.query(f'{{job="{job}"}}'):
            labels = dict(r["metric"])
            name = labels.pop("__name__")
            if name == "up" or name.startswith(("scrape_", "dynamo_sysport_")) or name.endswith("_created"):
                continue
            labels.pop("job", None)
            labels.pop("instance", None)
            out[(name, tuple(sorted(labels.items())))] = r["value"][1]
        return out

    name = "relabel-oracle"
    fatal_logs = failure_logs = ("sysport-all", "sysport-readme", "prometheus")

    def steps(self):
        self.setup()
        for name in self.sets:
            self.compare(name)
        self.effects()
        self.valid_output()

    def stop_all(self):
        super().stop_all()
        procs.stop_all()

    def setup(self):
        def start():
            with open(PAGE, "rb") as f:
                self.page = Input(name="metrics", body=f.read(), fmt="text",
                                  content_type="text/plain; version=0.0.4; charset=utf-8", origin=PAGE)
            self.engine = procs.Upstreams([self.page])
            for name, s in self.sets.items():
                self.start_sysport(self.write_sysport(name, s["rules"], s["port"]), f"sysport-{name}", s["port"])
            self.start_prometheus(self.write_prometheus())
            return f"engine :{self.engine.port}, Prometheus :{self.prom_port}"

        self.check("the engine page, two sysports with the rules and Prometheus start", start, fatal=True)

        def scraped():
            def all_up():
                targets = self.prom.api("targets", state="active")["activeTargets"]
                expect(len(targets) == 4, f"{len(targets)} active targets")
                for t in targets:
                    expect(t["health"] == "up" and not t.get("lastError"),
                           f"{t['labels']['job']}: {t['health']} {t.get('lastError')!r}")
                for name in self.sets:
                    for job in (f"direct_{name}", f"sysport_{name}"):
                        expect(self.stored(job), f"nothing stored for {job} yet")

            eventually(all_up, 30, 0.5)
            # One more scrape interval, so both jobs of a set hold a whole scrape.
            time.sleep(1.5)

        self.check("Prometheus scrapes the engine and both sysports", scraped, fatal=True)

    def compare(self, name):
        def same():
            direct, via = self.stored(f"direct_{name}"), self.stored(f"sysport_{name}")
            missing = sorted(k for k in direct if k not in via)
            extra = sorted(k for k in via if k not in direct)
            differ = sorted(k for k in direct if k in via and direct[k] != via[k])
            problems = []
            for what, keys in (("only direct", missing), ("only through sysport", extra), ("values differ", differ)):
                if keys:
                    shown = "; ".join(f"{n}{dict(l)}" + (f" {direct[(n, l)]} vs {via[(n, l)]}" if what == "values differ" else "")
                                      for n, l in keys[:5])
                    problems.append(f"{len(keys)} {what}: {shown}")
            expect(not problems, " | ".join(problems))
            return f"{len(direct)} series"

        self.check(f"rules '{name}': Prometheus stores the same engine series directly and through sysport", same)

    def effects(self):
        def rules_acted():
            series = self.stored("sysport_all")
            names = {n for n, _ in series}
            labels = {k for _, l in series for k, _ in l}
            expect("vllm:request_prompt_tokens_bucket" not in names, "request-size histogram still there")
            expect("vllm:scheduler_running" in names, "renamed family missing")
            expect("model_name" not in labels, "labeldrop did not act")
            for label in ("model", "model_lower", "shard", "worker_num", "dp_engine", "dp_role"):
                expect(label in labels, f"no series carries {label}")
            readme = self.stored("sysport_readme")
            les = {dict(l).get("le") for n, l in readme if n == "vllm:e2e_request_latency_seconds_bucket"}
            expect(les == {"0.5", "1.0", "2.5", "5.0", "10.0", "20.0", "40.0", "+Inf"}, f"e2e buckets {sorted(les)}")
            dropped = self.prom.query('dynamo_sysport_upstream_series{job="sysport_all",outcome="relabel_dropped"}')
            expect(dropped and float(dropped[0]["value"][1]) > 0, f"relabel_dropped {dropped}")
            return f"{len(series)} and {len(readme)} series"

        self.check("the rules acted (dropped, thinned, renamed, new labels) and sysport counted the drops", rules_acted)

    def valid_output(self):
        for name, s in self.sets.items():
            base = f"http://127.0.0.1:{s['port']}/metrics"

            def text_ok():
                status, body, _ = http_get(base, timeout=10.0)
                expect(status == 200, f"HTTP {status}")
                problem = expo.promtool_check(body.encode())
                expect(problem is None, f"promtool: {problem}")
                expo.parse(body, "text")
                repeated_meta, repeated_series, _, _ = expo.scan(body)
                expect(not repeated_meta and not repeated_series, f"{repeated_meta[:3]} {repeated_series[:3]}")

            def om_ok():
                status, body, _ = http_get(base, timeout=10.0, headers={"Accept": OM_ACCEPT})
                expect(status == 200, f"HTTP {status}")
                problem = expo.prometheus_om_check(body.encode(), self.workdir)
                expect(problem is None, f"Prometheus' OpenMetrics parser: {problem}")
                expo.parse(body, "om")

            self.check(f"rules '{name}': text output passes promtool and prometheus_client", text_ok)
            self.check(f"rules '{name}': OpenMetrics output passes Prometheus' parser and prometheus_client", om_ok)


if __name__ == "__main__":
    sys.exit(run.main(Oracle, __doc__))
