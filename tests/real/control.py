"""sysport's control routes in front of the real engines: vLLM 0.32 (CPU) in its development
mode with runtime LoRA updating, and llama.cpp's llama-server with a slot save path
(docs/control.md). Runs alone, without the rest of the real-engine suite:

    bash tests/suites/real-control.sh

(through tests/suites/e2e-prometheus.sh, which owns the work directory, the pid file and the
cleanup; Prometheus itself is not used). Environment as tests/real/run.py's.

The checks, in order (vLLM is started once):
1. /metadata for each engine equals what the engine's own routes say: vLLM's /version,
   /v1/models (id, max_model_len, parent) and the labels of vllm:cache_config_info on its page;
   llama-server's /props build_info and /v1/models (id, meta.n_ctx).
2. /engine/reset_prefix_cache (vLLM): a repeated prompt hits the prefix cache
   (vllm:prefix_cache_hits_total moves); after sysport's reset it does not, as after the
   engine's own /reset_prefix_cache.
3. /engine/erase_slot/0 (llama-server): a completion on slot 0 leaves tokens in it; the erase
   through sysport answers llama's own {"id_slot": 0, "n_erased": N > 0}, a second erases 0.
4. /v1/loras on vLLM: a tiny random adapter for the tiny model, written here (safetensors and
   adapter_config.json, with the vLLM venv's torch), loaded with POST /v1/loras, listed by GET
   (base model tiny), used by a completion naming it, seen in vllm:lora_requests_info, unloaded
   by DELETE, after which a completion naming it fails.
"""

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

import run  # noqa: E402  (tests/e2e/run.py: the suite machinery)
from run import Failed, Suite, eventually, expect, free_ports, http_get  # noqa: E402

_spec = importlib.util.spec_from_file_location("real_engines", os.path.join(HERE, "run.py"))
real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(real)

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

VLLM_READY_TIMEOUT = real.VLLM_READY_TIMEOUT
ADAPTER = "tiny-ad"
PROMPT = " ".join(f"w{i}" for i in range(60))

MAKE_ADAPTER = r"""
import json, sys, torch
from safetensors.torch import save_file
out, base = sys.argv[1], sys.argv[2]
cfg = json.load(open(base + "/config.json"))
hidden, layers = cfg["hidden_size"], cfg["num_hidden_layers"]
head = cfg.get("head_dim") or hidden // cfg["num_attention_heads"]
outs = {"q_proj": cfg["num_attention_heads"] * head, "v_proj": cfg["num_key_value_heads"] * head}
r = 8
g = torch.Generator().manual_seed(7)
t = {}
for i in range(layers):
    for m, o in outs.items():
        p = f"base_model.model.model.layers.{i}.self_attn.{m}"
        t[p + ".lora_A.weight"] = (torch.randn(r, hidden, generator=g) * 0.02).to(torch.bfloat16)
        t[p + ".lora_B.weight"] = (torch.randn(o, r, generator=g) * 0.02).to(torch.bfloat16)
save_file(t, out + "/adapter_model.safetensors")
json.dump({"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": r, "lora_alpha": 16,
           "lora_dropout": 0.0, "target_modules": list(outs), "bias": "none",
           "fan_in_fan_out": False, "base_model_name_or_path": base, "modules_to_save": None,
           "use_rslora": False, "use_dora": False}, open(out + "/adapter_config.json", "w"))
"""


def call(method, url, doc=None, timeout=60.0):
    """(status, parsed JSON or text); raises OSError when there is no answer."""
    data = json.dumps(doc).encode() if doc is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            status, body = resp.status, resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as err:
        status, body = err.code, err.read().decode("utf-8", "replace")
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def page_samples(url, name):
    """[(labels, value)] of family `name` on the page at `url`."""
    status, body, _ = http_get(url, timeout=10.0, headers={"Accept": "text/plain; version=0.0.4"})
    expect(status == 200, f"{url}: HTTP {status}")
    for fam in text_string_to_metric_families(body):
        if fam.name == name or fam.name + "_total" == name:
            return [(s.labels, s.value) for s in fam.samples if s.name == name or s.name == fam.name]
    return []


def total(url, name):
    return sum(v for _, v in page_samples(url, name))


class RealControl(Suite):
    name = "real-control"
    fatal_logs = ("sysport", "vllm", "llama")
    failure_logs = ("sysport", "vllm", "llama")

    def __init__(self, workdir, pidfile):
        super().__init__(workdir, pidfile)
        self.procs = real.GroupProcs(workdir, pidfile)
        self.vllm_port, self.llama_port, self.sysport_port = free_ports(3)
        self.sysport = f"http://127.0.0.1:{self.sysport_port}"
        self.vllm = f"http://127.0.0.1:{self.vllm_port}"
        self.llama = f"http://127.0.0.1:{self.llama_port}"
        self.env = {v: os.environ.get(v, "") for v in
                    ("SYSPORT_VLLM", "SYSPORT_VLLM_MODEL", "SYSPORT_LLAMA_SERVER", "SYSPORT_LLAMA_MODEL")}

    def steps(self):
        self.check("the engines and sysport start", self.start, fatal=True)
        self.check("/metadata: vLLM as its own /version, /v1/models and cache_config_info say",
                   self.metadata_vllm)
        self.check("/metadata: llama-server as its own /props and /v1/models say", self.metadata_llama)
        self.check("/engine/reset_prefix_cache on vLLM acts as the engine's own route", self.prefix_cache)
        self.check("/engine/erase_slot/0 erases llama-server's slot 0", self.erase_slot)
        self.check("/v1/loras: a tiny adapter loaded, listed, used, unloaded on vLLM", self.loras)
        self.check("every process stopped", self.stop)

    # -- start

    def vllm_base_dir(self):
        with open(self.env["SYSPORT_VLLM"]) as f:
            for line in f:
                if line.startswith("exec "):
                    return line.split("serve ")[1].split()[0].strip("'")
        raise Failed(f"no model path in {self.env['SYSPORT_VLLM']}")

    def start(self):
        missing = [k for k, v in self.env.items() if not v]
        expect(not missing, f"{missing} not set: eval \"$(scripts/real-engines.sh env)\"")
        self.adapter_dir = os.path.join(self.workdir, ADAPTER)
        os.makedirs(self.adapter_dir)
        engines = os.path.dirname(os.path.dirname(self.vllm_base_dir()))
        python = os.path.join(engines, "vllm-venv", "bin", "python")
        made = subprocess.run([python, "-c", MAKE_ADAPTER, self.adapter_dir, self.vllm_base_dir()],
                              capture_output=True, text=True, timeout=300)
        expect(made.returncode == 0, f"making the adapter: {made.stderr[-800:]}")
        tmp = os.path.join(self.workdir, "tmp")
        os.makedirs(tmp, exist_ok=True)
        env = dict(os.environ, TMPDIR=tmp, VLLM_SERVER_DEV_MODE="1", VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
        self.procs.start("vllm", [self.env["SYSPORT_VLLM"], "--host", "127.0.0.1", "--port", str(self.vllm_port),
                                  "--enable-lora", "--max-lora-rank", "8", "--max-loras", "1"],
                         env=env, group=True)
        slots = os.path.join(self.workdir, "slots") + "/"
        os.makedirs(slots)
        self.procs.start("llama", [self.env["SYSPORT_LLAMA_SERVER"], "-m", self.env["SYSPORT_LLAMA_MODEL"],
                                   "--host", "127.0.0.1", "--port", str(self.llama_port), "--metrics",
                                   "--slot-save-path", slots, "-np", "2", "-c", "2048", "-t", "2"], group=True)
        config = os.path.join(self.workdir, "sysport.yaml")
        with open(config, "w") as f:
            f.write(f"""\
listen: {{ host: 127.0.0.1, port: {self.sysport_port} }}
health: {{ interval: 1s }}
shutdown: {{ drain_delay: 0s }}
control: {{ allow_unauthenticated: true, timeout: 60s }}
upstreams:
  - name: vllm
    engine: vllm
    url: "{self.vllm}/metrics"
    canary_after: 0s
  - name: llama
    engine: llamacpp
    url: "{self.llama}/metrics"
    canary_after: 0s
""")
        os.environ["DYN_LORA_ENABLED"] = "true"
        self.start_sysport(config)

        def ready(base, name):
            proc = self.procs.running[name]
            if proc.poll() is not None:
                raise run.Fatal(f"{name} exited with {proc.returncode}:\n{self.procs.log_tail(name)}")
            status, _, _ = http_get(f"{base}/health", timeout=2.0)
            expect(status == 200, f"{name} /health: HTTP {status}")

        t0 = time.monotonic()
        eventually(lambda: ready(self.llama, "llama"), 120, 0.5)
        eventually(lambda: ready(self.vllm, "vllm"), VLLM_READY_TIMEOUT, 1.0)
        return f"vLLM ready after {time.monotonic() - t0:.0f} s"

    # -- 1. metadata

    def metadata(self):
        status, m = call("GET", f"{self.sysport}/metadata")
        expect(status == 200, f"/metadata: HTTP {status}: {m}")
        return m["upstreams"]

    def metadata_vllm(self):
        _, version = call("GET", f"{self.vllm}/version")
        _, models = call("GET", f"{self.vllm}/v1/models")
        info = page_samples(f"{self.vllm}/metrics", "vllm:cache_config_info")
        expect(info, "vLLM's page has no vllm:cache_config_info")
        m = self.metadata()["vllm"]
        expect(m["version"] == version["version"], f"version {m['version']!r}, vLLM says {version}")
        want = [{"id": d["id"], "max_model_len": d.get("max_model_len"), "parent": d.get("parent")}
                for d in models["data"]]
        expect(m["models"] == want, f"models {m['models']}, vLLM says {want}")
        expect(m["cache_config"] == info[0][0], f"cache_config {m['cache_config']}, vLLM's page {info[0][0]}")
        return f"version {m['version']}, {len(want)} model(s), block_size {m['cache_config'].get('block_size')}"

    def metadata_llama(self):
        _, props = call("GET", f"{self.llama}/props")
        _, models = call("GET", f"{self.llama}/v1/models")
        m = self.metadata()["llama"]
        expect(m["version"] == props["build_info"], f"version {m['version']!r}, /props {props['build_info']!r}")
        want = [{"id": d["id"], "max_model_len": d["meta"]["n_ctx"], "parent": None} for d in models["data"]]
        expect(m["models"] == want, f"models {m['models']}, llama-server says {want}")
        expect("not_available" in m["cache_config"], f"cache_config {m['cache_config']}")
        return f"build {m['version']}, {want[0]['id']} n_ctx {want[0]['max_model_len']}"

    # -- 2. prefix cache

    def complete(self, base, model, prompt, max_tokens=2):
        status, body = call("POST", f"{base}/v1/completions",
                            {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0})
        return status, body

    def hits_after(self, reset_url):
        """vllm:prefix_cache_hits_total's rise for the prompt once more after `reset_url`
        (None: no reset)."""
        if reset_url:
            status, body = call("POST", reset_url)
            expect(status == 200 and body == {"success": True}, f"POST {reset_url}: {status} {body}")
        before = total(f"{self.vllm}/metrics", "vllm:prefix_cache_hits_total")
        status, body = self.complete(self.vllm, self.env["SYSPORT_VLLM_MODEL"], PROMPT)
        expect(status == 200, f"completion: {status} {body}")
        return total(f"{self.vllm}/metrics", "vllm:prefix_cache_hits_total") - before

    def prefix_cache(self):
        model = self.env["SYSPORT_VLLM_MODEL"]
        status, body = self.complete(self.vllm, model, PROMPT)
        expect(status == 200, f"first completion: {status} {body}")
        cached = self.hits_after(None)
        expect(cached > 0, f"a repeated prompt hit no cached token ({cached:g}): prefix caching is off")
        through_sysport = self.hits_after(f"{self.sysport}/engine/reset_prefix_cache")
        again = self.hits_after(None)
        own = self.hits_after(f"{self.vllm}/reset_prefix_cache")
        expect(through_sysport == own == 0, f"hits after a reset: through sysport {through_sysport:g}, "
                                            f"the engine's own route {own:g}")
        expect(again > 0, f"the cache did not fill again ({again:g})")
        return f"hits: repeated {cached:g}, after sysport's reset 0, refilled {again:g}, after vLLM's own reset 0"

    # -- 3. slot erase

    def erase_slot(self):
        status, body = call("POST", f"{self.llama}/completion",
                            {"prompt": PROMPT, "n_predict": 4, "id_slot": 0, "cache_prompt": True})
        expect(status == 200, f"completion on slot 0: {status} {str(body)[:200]}")
        status, body = call("POST", f"{self.sysport}/engine/erase_slot/0")
        expect(status == 200 and body.get("id_slot") == 0 and body.get("n_erased", 0) > 0,
               f"erase: {status} {body}")
        status, again = call("POST", f"{self.sysport}/engine/erase_slot/0")
        expect(status == 200 and again.get("n_erased") == 0, f"second erase: {status} {again}")
        return f"n_erased {body['n_erased']}, then 0"

    # -- 4. LoRA

    def loras(self):
        model = self.env["SYSPORT_VLLM_MODEL"]
        status, body = call("POST", f"{self.sysport}/v1/loras",
                            {"lora_name": ADAPTER, "source": {"uri": f"file://{self.adapter_dir}"}},
                            timeout=120)
        expect(status == 200 and body.get("status") == "success", f"load: {status} {body}")
        status, listed = call("GET", f"{self.sysport}/v1/loras")
        expect(status == 200, f"list: {status} {listed}")
        entry = listed["loras"].get(ADAPTER)
        expect(entry and entry["base_model"] == model, f"list: {listed}")
        status, done = self.complete(self.sysport.replace(str(self.sysport_port), str(self.vllm_port)),
                                     ADAPTER, "hello", max_tokens=4)
        expect(status == 200 and done.get("model") == ADAPTER, f"completion naming the adapter: {status} {done}")
        seen = [lab for lab, _ in page_samples(f"{self.vllm}/metrics", "vllm:lora_requests_info")
                if ADAPTER in lab.get("running_lora_adapters", "") + lab.get("waiting_lora_adapters", "")]
        expect(seen, "vllm:lora_requests_info never named the adapter")
        passed = [lab for lab, _ in page_samples(f"{self.sysport}/metrics", "vllm:lora_requests_info")
                  if ADAPTER in lab.get("running_lora_adapters", "")]
        expect(passed, "sysport's /metrics has no vllm:lora_requests_info naming the adapter")
        status, body = call("DELETE", f"{self.sysport}/v1/loras/{ADAPTER}")
        expect(status == 200 and body.get("status") == "success", f"unload: {status} {body}")
        status, listed = call("GET", f"{self.sysport}/v1/loras")
        expect(status == 200 and ADAPTER not in listed["loras"], f"list after unload: {listed}")
        status, gone = self.complete(self.vllm, ADAPTER, "hello")
        expect(status == 404, f"a completion naming the unloaded adapter: {status} {gone}")
        return f"loaded, listed with base {model}, completed, in lora_requests_info, unloaded (then 404)"

    def stop(self):
        rc = self.procs.stop("sysport", signal.SIGTERM, timeout=15)
        expect(rc == 0, f"sysport exited with {rc}")
        for name in list(self.procs.running):
            self.procs.stop(name, signal.SIGTERM, timeout=30)
        left = {n: real.group_members(pg) for n, pg in self.procs.groups.items()}
        left = {n: m for n, m in left.items() if m}
        expect(not left, f"processes left: {left}")
        return "sysport exit 0"


if __name__ == "__main__":
    sys.exit(run.main(RealControl, __doc__))
