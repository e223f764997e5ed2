"""AIPerf reads sysport: a short `aiperf profile` against the real vLLM with `--server-metrics`
at sysport's /metrics, and AIPerf's own server-metrics export compared between the two
endpoints it scraped, vLLM's /metrics (which AIPerf finds itself) and sysport's.

A phase of tests/real/run.py (the mixin below); SYSPORT_AIPERF is `aiperf` from
scripts/real-tools.sh. AIPerf 0.13 looks a tokenizer up as a hub repository id even when given a
directory, so the tiny model's tokenizer files (the directory vLLM serves, `root` in its
/v1/models) are laid out as a hub-cache entry under HF_HOME in the work directory, read with
HF_HUB_OFFLINE=1: nothing is downloaded. Its `builtin` tokenizer would download its encoding.

What must hold in AIPerf's export (`server_metrics_export.json`, keyed by family, each series
with its `endpoint_url`, labels and stats):
- every `vllm:` family AIPerf has under vLLM's endpoint is under sysport's too, series for series;
- counters: the same total (the change over the benchmark) through sysport as from vLLM;
- histograms: the same count, sum and buckets, and percentile estimates under sysport's endpoint
  wherever vLLM's has them, in order (p1 <= ... <= p99). The estimates themselves may differ:
  AIPerf's polynomial estimator (aiperf/server_metrics/histogram_percentiles.py) learns each
  bucket's mean from the scrape intervals whose observations all fell in one bucket, and AIPerf
  scrapes the two endpoints at different instants, so their intervals cut the same requests
  differently;
- sysport's own families (`dynamo_sysport_*`) beside them, under sysport's endpoint only;
- and the benchmark happened: vLLM's own request counter grew by the requests AIPerf sent.
"""

import json
import math
import os
import shutil
import signal
import time

from run import eventually, expect, free_ports, http_get

REQUESTS = 32
CONCURRENCY = 2
INPUT_TOKENS = 16
OUTPUT_TOKENS = 8
AIPERF_TIMEOUT = 300.0  # seconds for the whole run (about 40 s on two busy cores)
HUB_REPO = "sysport/tiny"  # the hub id the tokenizer is laid out under
HUB_REVISION = "0" * 40
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "config.json",
                   "special_tokens_map.json", "chat_template.jinja", "generation_config.json")


def lay_out_hub_cache(model_dir, hf_home):
    """The tokenizer files of `model_dir` as the hub-cache entry of HUB_REPO under `hf_home`."""
    org, name = HUB_REPO.split("/")
    repo = os.path.join(hf_home, "hub", f"models--{org}--{name}")
    snapshot = os.path.join(repo, "snapshots", HUB_REVISION)
    os.makedirs(snapshot, exist_ok=True)
    os.makedirs(os.path.join(repo, "refs"), exist_ok=True)
    copied = []
    for f in TOKENIZER_FILES:
        src = os.path.join(model_dir, f)
        if os.path.exists(src):
            shutil.copyfile(src, os.path.join(snapshot, f))
            copied.append(f)
    expect("tokenizer.json" in copied, f"no tokenizer.json in {model_dir}")
    with open(os.path.join(repo, "refs", "main"), "w") as f:
        f.write(HUB_REVISION)
    return copied


def by_endpoint(family, url):
    """{sorted labels: stats (and buckets)} of one family's series under one endpoint."""
    out = {}
    for s in family.get("series", []):
        if s.get("endpoint_url") == url:
            key = tuple(sorted((s.get("labels") or {}).items()))
            out[key] = dict(s.get("stats") or {}, buckets=s.get("buckets"))
    return out


def same(a, b):
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == b


class AIPerfPhase:
    """The AIPerf phase of RealEngines (tests/real/run.py)."""

    def aiperf_reads(self):
        aiperf = os.environ.get("SYSPORT_AIPERF", "")
        (port,) = free_ports(1)
        base = f"http://127.0.0.1:{port}"
        vllm_url, sysport_url = f"{self.vllm}/metrics", f"{base}/metrics"
        art = os.path.join(self.workdir, "aiperf")
        state = {}

        def start():
            expect(aiperf and os.access(aiperf, os.X_OK),
                   f"SYSPORT_AIPERF={aiperf!r} is not an executable: run through tests/suites/real-engines.sh "
                   "(eval \"$(scripts/real-tools.sh env)\")")
            status, body, _ = http_get(f"{self.vllm}/v1/models", timeout=5.0)
            expect(status == 200, f"vLLM /v1/models: HTTP {status}")
            model = json.loads(body)["data"][0]
            copied = lay_out_hub_cache(model["root"], os.path.join(self.workdir, "hf"))
            self.start_sysport(self.write_sysport_config("sysport-aiperf.yaml", port, False),
                               name="sysport-aiperf", port=port)
            eventually(lambda: expect(self.health(base)[0] == 200, "not ready"), 15, 0.2)
            self.wait_idle()
            state["model"] = model["id"]
            return f"{HUB_REPO} from {model['root']} ({', '.join(copied)}); sysport :{port} without canaries"

        if not self.check("AIPerf's tokenizer as a hub-cache entry, sysport without canaries in front of vLLM",
                          start):
            return

        def profile():
            env = dict(os.environ, HF_HOME=os.path.join(self.workdir, "hf"), HF_HUB_OFFLINE="1",
                       TRANSFORMERS_OFFLINE="1", HF_HUB_DISABLE_TELEMETRY="1")
            argv = [aiperf, "profile", "--model", state["model"], "--tokenizer", HUB_REPO,
                    "--url", self.vllm, "--endpoint-type", "completions",
                    "--request-count", str(REQUESTS), "--concurrency", str(CONCURRENCY),
                    "--prompt-input-tokens-mean", str(INPUT_TOKENS), "--prompt-input-tokens-stddev", "0",
                    "--prompt-output-tokens-mean", str(OUTPUT_TOKENS), "--prompt-output-tokens-stddev", "0",
                    "--extra-inputs", "ignore_eos:true",
                    "--server-metrics", sysport_url, "--artifact-dir", art, "--ui-type", "none"]
            t0 = time.monotonic()
            proc = self.procs.start("aiperf", argv, env=env, group=True)
            while proc.poll() is None and time.monotonic() - t0 < AIPERF_TIMEOUT:
                time.sleep(0.5)
            rc = proc.poll()
            self.procs.stop("aiperf", signal.SIGTERM, timeout=10)
            expect(rc == 0, f"aiperf exited {rc} after {time.monotonic() - t0:.0f} s:\n{self.procs.log_tail('aiperf')}")
            path = os.path.join(art, "server_metrics_export.json")
            expect(os.path.exists(path), f"no {path}")
            with open(path, encoding="utf-8") as f:
                state["export"] = json.load(f)
            ok = state["export"]["summary"].get("endpoints_successful") or []
            expect(vllm_url in ok and sysport_url in ok, f"endpoints_successful {ok}")
            took = time.monotonic() - t0
            self.figure("aiperf profile (s)", f"{took:.0f}")
            return f"{REQUESTS} requests at concurrency {CONCURRENCY} in {took:.0f} s; both endpoints scraped"

        if not self.check("aiperf profile against vLLM with --server-metrics at sysport's /metrics", profile):
            self.procs.stop("sysport-aiperf", signal.SIGTERM, timeout=15)
            return

        def same_families():
            metrics = state["export"]["metrics"]
            from_vllm = {n for n, f in metrics.items() if n.startswith("vllm:") and by_endpoint(f, vllm_url)}
            through = {n for n, f in metrics.items() if n.startswith("vllm:") and by_endpoint(f, sysport_url)}
            expect(from_vllm, "no vllm: family under vLLM's endpoint")
            missing = sorted(from_vllm - through)
            expect(not missing, f"{len(missing)} vllm: families only under vLLM's endpoint: {missing[:5]}")
            own = sorted(n for n, f in metrics.items() if n.startswith("dynamo_sysport_") and by_endpoint(f, sysport_url))
            expect("dynamo_sysport_upstream_up" in own, f"sysport's own families: {own[:5]}")
            expect(all(not by_endpoint(metrics[n], vllm_url) for n in own), "a dynamo_sysport_ family under vLLM's")
            for n in sorted(from_vllm):
                v, s = by_endpoint(metrics[n], vllm_url), by_endpoint(metrics[n], sysport_url)
                expect(set(v) <= set(s), f"{n}: series {sorted(set(v) - set(s))[:2]} not through sysport")
            state["families"] = from_vllm
            return f"{len(from_vllm)} vllm: families, {len(own)} of sysport's own; {len(metrics)} in the export"

        self.check("AIPerf's export has every vllm: family of vLLM's endpoint under sysport's, and sysport's own",
                   same_families)

        def same_numbers():
            metrics = state["export"]["metrics"]
            kinds, off = {}, []
            for n in sorted(state.get("families", ())):
                fam = metrics[n]
                v, s = by_endpoint(fam, vllm_url), by_endpoint(fam, sysport_url)
                if fam["type"] == "counter":
                    fields = ("total",)
                elif fam["type"] == "histogram":
                    fields = ("count", "sum", "buckets")
                else:
                    continue
                kinds[fam["type"]] = kinds.get(fam["type"], 0) + 1
                for labels, stats in v.items():
                    for k in fields:
                        if not same(stats.get(k), s[labels].get(k)):
                            off.append(f"{n}{dict(labels)} {k}: {stats.get(k)!r} from vLLM, "
                                       f"{s[labels].get(k)!r} through sysport")
                    asked = sorted((k for k in stats if k.endswith("_estimate") and stats[k] is not None),
                                   key=lambda k: float(k[1:-len("_estimate")]))
                    through = [s[labels].get(k) for k in asked]
                    if any(x is None or not math.isfinite(x) for x in through):
                        off.append(f"{n}{dict(labels)}: estimates {asked} not all through sysport: {through}")
                    elif any(a > b for a, b in zip(through, through[1:])):
                        off.append(f"{n}{dict(labels)}: estimates through sysport out of order: {through}")
            expect(not off, f"{len(off)} differ: " + "; ".join(off[:3]))
            success = metrics.get("vllm:request_success", {})
            done = sum(st.get("total", 0) for st in by_endpoint(success, vllm_url).values())
            expect(done == REQUESTS, f"vllm:request_success grew by {done} in AIPerf's export, not {REQUESTS}")
            return ", ".join(f"{c} {k}s" for k, c in sorted(kinds.items())) + f"; {done:g} requests counted"

        self.check("AIPerf's counter totals and histogram counts, sums and buckets through sysport equal vLLM's own, "
                   "with its percentile estimates", same_numbers)

        def stop():
            rc = self.procs.stop("sysport-aiperf", signal.SIGTERM, timeout=15)
            expect(rc == 0, f"exit {rc}")

        self.check("sysport (AIPerf) exits 0 on SIGTERM", stop)
