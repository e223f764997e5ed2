"""sysport in front of the real engines: vLLM 0.32 (CPU) and llama.cpp's llama-server, each on
its tiny model from scripts/real-engines.sh, with a real Prometheus beside them. No stand-in.

Run through tests/suites/real-engines.sh (which runs `scripts/real-engines.sh setup`, exports
its `env` and hands this driver to tests/suites/e2e-prometheus.sh for the work directory, the
pid file and the cleanup):

    python tests/real/run.py --workdir DIR [--pidfile FILE]

Environment: SYSPORT_BIN, PROMETHEUS_BIN, and SYSPORT_VLLM, SYSPORT_VLLM_MODEL,
SYSPORT_LLAMA_SERVER, SYSPORT_LLAMA_MODEL (`scripts/real-engines.sh env`), SYSPORT_AIPERF
(`scripts/real-tools.sh env`);
SYSPORT_VLLM_READY_TIMEOUT (seconds vLLM may take to answer /health 200, default 300).

The phases, in order (vLLM is started once: its start takes 30-120 s on two cores):

1. start: a sysport (readiness settings below) runs before both engines start; its /health is
   503 while they start and 200 within one check interval (+ MARGIN) of each engine's own
   /health first answering 200.
2. exactness: a sysport without canaries (nothing moves the engines' counters) serves every
   engine sample of the kept families exactly once with the engine's value, in text 0.0.4 and
   in OpenMetrics (prometheus_client's parsers, promtool), vLLM's `X_created` gauge families as
   gauges in text and as the `_created` samples of their counter or histogram in OpenMetrics.
   Then AIPerf (tests/real/aiperf_phase.py): a short `aiperf profile` against vLLM with
   `--server-metrics` at a sysport without canaries; AIPerf's export has every vllm: family of
   vLLM's endpoint under sysport's, with the same counter totals and histogram estimates.
3. vitals: Prometheus scrapes both engines and sysport every second; a burst of completions
   in the middle of a 60 s window; sysport's /status vitals against the same PromQL over the
   engines' own series at `as_of_unix_seconds`.
4. canaries: one request in the engine's own counters per canary sysport counts, about every
   canary_after while idle, none while the test's requests run.
5. readiness against the real processes: vLLM's worker frozen while idle (canaries fail;
   /health, then /live/engine 503) and while busy (stalled; /metrics/router against the frozen
   gauges), llama-server frozen, and last vLLM's worker killed (not ready, then down once the
   server has exited). Each opens an incident (GET /incidents): canary_failed with each
   canary's timing, closed after SIGCONT with its duration; stalled with the frozen worker's
   Python stacks; down for llama-server, whose stacks say why there are none (no Python in a
   native process); down for the killed worker (or canary_failed turned down, when a canary
   meets the server between the kill and its exit), open while vLLM is gone.

Every wait is bounded; every process started here is stopped before the end (the engines in
process groups of their own, listed in the pid file as `-PGID` so that the wrapper's cleanup
kills a whole group). Prints one line per check, the measured figures, and
`real-engines: N passed, M failed`.
"""

import calendar
import io
import json
import math
import os
import signal
import statistics
import shutil
import subprocess
import tarfile
import sys
import threading
import time
import urllib.error
import urllib.request

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# tests/conformance has a run.py of its own: tests/e2e goes first.
sys.path.insert(0, os.path.join(ROOT, "tests", "conformance"))
sys.path.insert(0, os.path.join(ROOT, "tests", "e2e"))

import expo  # noqa: E402
import run  # noqa: E402
from run import Failed, Fatal, Procs, Prom, Suite, eventually, expect, free_ports, http_get  # noqa: E402
from aiperf_phase import AIPerfPhase  # noqa: E402

# sysport's settings for the readiness, vitals and canary phases (the exactness phase has no
# canaries), and what the bounds below are made of.
INTERVAL = 1.0          # health.interval
CANARY_AFTER = 5.0      # canary_after
CANARY_TIMEOUT = 3.0    # canary.timeout
LIVE_FAILURES = 2       # canary.live_failures
STALL_AFTER = 10.0      # stall_after
UPSTREAM_TIMEOUT = 2.0  # upstreams[].timeout (the default)
# What a 2-core machine shared with builds and benchmarks may add to any of the bounds: the
# debug build's check scheduling, the engines' answers, and this driver's 0.1-0.2 s polling.
MARGIN = 2.5
ENGINE_NICE = 10        # the engines' niceness (GroupProcs)
WINDOW = 60             # vitals.window (the default 1m) and the PromQL range, in seconds
VLLM_BURST = 20.0       # seconds of vLLM completions, then
LLAMA_BURST = 10.0      # seconds of llama-server completions, in the middle of the window
VLLM_READY_TIMEOUT = float(os.environ.get("SYSPORT_VLLM_READY_TIMEOUT") or 300)

VLLM_PREFIXES = ("vllm:", "lmcache:")
LLAMA_PREFIXES = ("llamacpp:",)
OM_ACCEPT = "application/openmetrics-text; version=1.0.0"
TEXT_ACCEPT = "text/plain; version=0.0.4"
# The presets' /metrics/router families (docs/configuration.md, engine presets); vLLM 0.32 has
# kv_cache_usage_perc only, and the view serves it under its old name too.
ROUTER = {
    "vllm": ("vllm:num_requests_waiting", "vllm:num_requests_running", "vllm:kv_cache_usage_perc",
             "vllm:lora_requests_info", "vllm:cache_config_info"),
    "llama": ("llamacpp:requests_deferred", "llamacpp:requests_processing"),
}
RENAMED = {"vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc"}
# Data-parallel ranks (vLLM's `engine` label) combined; the info families pass through.
COMBINED = {"vllm:num_requests_waiting": sum, "vllm:num_requests_running": sum,
            "vllm:kv_cache_usage_perc": statistics.mean}


# ---- small helpers ------------------------------------------------------------------------------

def probe(url, timeout=2.0):
    """(status, body): 0 and the error's text when there is no HTTP answer (refused, timeout)."""
    try:
        status, body, _ = http_get(url, timeout=timeout)
        return status, body
    except (OSError, ValueError) as err:  # URLError, ConnectionRefusedError, socket.timeout
        reason = getattr(err, "reason", err)
        return 0, f"{type(reason).__name__}: {reason}"


def post_json(url, doc, timeout):
    """(status, parsed JSON or text); raises OSError when there is no answer."""
    req = urllib.request.Request(url, data=json.dumps(doc).encode(),
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read().decode("utf-8", "replace")
            status = resp.status
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", "replace")
    try:
        return status, json.loads(body)
    except ValueError:
        return status, body


def read_stat(path):
    """(comm, [the fields after it, state first]) of a /proc stat file, or None when it is gone."""
    try:
        with open(path) as f:
            s = f.read()
    except OSError:
        return None
    return s[s.index("(") + 1:s.rindex(")")], s[s.rindex(")") + 2:].split()


def proc_stat(pid):
    """(comm, state, pgid) of a process, or None when it is gone."""
    st = read_stat(f"/proc/{pid}/stat")
    return st and (st[0], st[1][0], int(st[1][2]))


def group_members(pgid):
    """[(pid, comm, state)] of the live (not zombie) processes in process group pgid."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        st = proc_stat(int(entry))
        if st and st[2] == pgid and st[1] != "Z":
            out.append((int(entry), st[0], st[1]))
    return out


def fmt_members(members):
    return ", ".join(f"{comm} ({pid}, {state})" for pid, comm, state in members) or "none"


def py_spy():
    """py-spy for the incidents' stacks: $SYSPORT_PY_SPY, else on PATH, else the tools' venv
    (python3 -m venv ~/.cache/sysport/tools/py-spy-venv; its pip install py-spy==0.4.3)."""
    return (os.environ.get("SYSPORT_PY_SPY") or shutil.which("py-spy")
            or os.path.expanduser("~/.cache/sysport/tools/py-spy-venv/bin/py-spy"))


def tar_names(base, iid):
    """The file names in incident `iid`'s bundle."""
    with urllib.request.urlopen(f"{base}/incidents/{iid}.tar.gz", timeout=10) as resp:
        with tarfile.open(fileobj=io.BytesIO(resp.read()), mode="r:gz") as tar:
            return tar.getnames()


def within(took, bound):
    return f"{took:.2f} s (bound {bound:.1f} s)"


def _session_preexec(nice):
    """Runs in the child after its setsid(): the child dies with this driver and, at `nice` > 0,
    runs below the rest. With autogroup scheduling (kernel.sched_autogroup_enabled, on in this
    machine's kernel), each session is a group the scheduler shares the CPUs between, and a
    process's own niceness weighs only against the other processes of its session: the
    session's (/proc/self/autogroup) is the one that weighs against the others. Both are set,
    for kernels without autogroups."""
    def preexec():
        run._die_with_parent()
        if nice:
            os.nice(nice)
            try:
                with open("/proc/self/autogroup", "w") as f:
                    f.write(str(nice))
            except OSError:
                pass  # a kernel without autogroups: os.nice is the one that counts
    return preexec


class GroupProcs(Procs):
    """Procs each in a session of its own, as each container of a pod has a cgroup of its own
    (the scheduler shares the CPUs between sessions, see _session_preexec). The engines run in
    process groups (vLLM is three processes: the API server, VLLM::EngineCore and its
    VLLM::Worker): a group is listed in the pid file as `-PGID` (`kill -KILL -PGID` stops the
    whole group) and stopped as a whole: SIGTERM, SIGCONT (a frozen process takes its SIGTERM
    once it runs), then SIGKILL after the timeout.

    The process groups (the engines, AIPerf) run at nice ENGINE_NICE, their sessions too. At nice
    0, on two cores, a burst of vLLM completions kept both busy (its worker, engine core and API
    server threads together 95% of the CPU time, read from every thread's /proc schedstat) and
    every other thread on the machine waited for a CPU: sysport's worker thread was runnable
    without one for 2.0 s of 2.0 s (31 ms on a CPU), /status answered up to 5 s late, and in one
    CI run sysport's readings had a 15 s hole. Niced by os.nice alone, in a session of their own,
    the engines still weighed as much as the whole session of this driver, Prometheus and
    sysport: a CI run saw sysport's worker thread runnable and on no CPU for 6 s. That is the
    two-core machine, where the engines and everything that watches them share two cores; in a
    pod each container's CPU request is its share (docs/deployment.md). Niced, the engines still
    get every cycle the rest leave, and this checks sysport's readings, not the kernel's division
    of two cores."""

    def __init__(self, workdir, pidfile):
        super().__init__(workdir, pidfile)
        self.groups = {}  # name -> pgid, kept after the stop for the last check

    def _write_pidfile(self):
        if self.pidfile:
            with open(self.pidfile, "w") as f:
                f.writelines(f"-{p.pid}\n" if name in self.groups else f"{p.pid}\n"
                             for name, p in self.running.items())

    def start(self, name, argv, env=None, group=False):
        log = open(os.path.join(self.workdir, f"{name}.log"), "ab")
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                cwd=self.workdir, env=env, start_new_session=True,
                                preexec_fn=_session_preexec(ENGINE_NICE if group else 0))
        log.close()
        self.running[name] = proc
        if group:
            self.groups[name] = proc.pid
        self._write_pidfile()
        return proc

    def stop(self, name, sig=signal.SIGTERM, timeout=10.0):
        if name not in self.groups:
            return super().stop(name, sig, timeout)
        proc = self.running.get(name)
        if proc is None:
            return None
        pg = self.groups[name]
        timeout = max(timeout, 30.0)
        for s in (sig, signal.SIGCONT):
            try:
                os.killpg(pg, s)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while (proc.poll() is None or group_members(pg)) and time.monotonic() < deadline:
            time.sleep(0.2)
        if proc.poll() is None or group_members(pg):
            try:
                os.killpg(pg, signal.SIGKILL)
            except ProcessLookupError:
                pass
            deadline = time.monotonic() + 10
            while (proc.poll() is None or group_members(pg)) and time.monotonic() < deadline:
                time.sleep(0.2)
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass
        del self.running[name]
        self._write_pidfile()
        return proc.returncode

    def stop_all(self):
        for name in list(self.running):
            self.stop(name, signal.SIGTERM, timeout=5.0)


def engine_page(port, prefixes):
    """(kept families, sample map, body, Content-Type) of an engine's /metrics, read as sysport
    reads it (text 0.0.4 asked for)."""
    status, body, headers = http_get(f"http://127.0.0.1:{port}/metrics", timeout=10.0,
                                     headers={"Accept": TEXT_ACCEPT})
    expect(status == 200, f"engine :{port} /metrics: HTTP {status}")
    fams = expo.kept(expo.parse(body, "text"), prefixes)
    smap, dups = expo.sample_map(fams, "text")
    expect(not dups, f"the engine's own page repeats series: {dups[:3]}")
    return fams, smap, body, headers.get("Content-Type", "")


def engine_total(port, name):
    """The sum of every sample called `name` on the engine's page (text 0.0.4)."""
    status, body, _ = http_get(f"http://127.0.0.1:{port}/metrics", timeout=10.0,
                               headers={"Accept": TEXT_ACCEPT})
    expect(status == 200, f"engine :{port} /metrics: HTTP {status}")
    total, seen = 0.0, False
    for line in body.split("\n"):
        if line.startswith(name) and line[len(name):len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    expect(seen, f"engine :{port} has no sample {name}")
    return total


def sample_lines(body, prefixes):
    """The sample lines of a text page that belong to the kept families."""
    return [l for l in body.split("\n") if l and not l.startswith("#") and l.startswith(prefixes)]


def bucket_bounds(families, name):
    """The finite `le` bounds of histogram `name`'s buckets, sorted."""
    out = set()
    for f in families:
        for s in f.samples:
            if s.name == name + "_bucket" and s.labels.get("le") not in (None, "+Inf"):
                out.add(float(s.labels["le"]))
    return sorted(out)


def bucket_index(v, bounds):
    for i, b in enumerate(bounds):
        if v <= b:
            return i
    return len(bounds)


def bucket_text(i, bounds):
    lo = bounds[i - 1] if i > 0 else 0.0
    hi = bounds[i] if i < len(bounds) else math.inf
    return f"({lo:g}, {hi:g}]"


# ---- a late worker runtime, seen from outside ----------------------------------------------------

def thread_states(pid):
    """{tid: (name, state, wchan, ns on a CPU, ns runnable but waiting for one, CPU ticks)} of a
    process's threads (/proc/PID/task: stat, wchan, schedstat). schedstat moves only at a context
    switch, so a thread that stays on a CPU (or off one) shows no change there; its CPU ticks
    (utime + stime, counted at every timer tick) tell the two apart."""
    out = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        st = read_stat(f"{base}/stat")
        try:
            with open(f"{base}/schedstat") as f:
                ran, waited = (int(x) for x in f.read().split()[:2])
        except (OSError, ValueError):
            continue
        if st is None:
            continue
        try:
            with open(f"{base}/wchan") as f:
                wchan = f.read().strip() or "-"
        except OSError:
            wchan = "?"
        comm, fields = st
        out[int(tid)] = (comm, fields[0], wchan, ran, waited, int(fields[11]) + int(fields[12]))
    return out


def pressure():
    """The machine's CPU, memory and I/O pressure (PSI, some avg10), where the kernel has it."""
    out = []
    for what in ("cpu", "memory", "io"):
        try:
            with open(f"/proc/pressure/{what}") as f:
                out.append(f"{what} {f.readline().split()[1].split('=')[1]}%")
        except (OSError, IndexError):
            pass
    try:
        with open("/proc/loadavg") as f:
            out.append("load " + f.read().split()[0])
    except OSError:
        pass
    return ", ".join(out)


class Lateness:
    """Watches sysport's worker runtime from outside while a phase runs: a GET of `path` (a
    route answered on the worker runtime) every `every` s. While one is unanswered past `late`
    s, what each of sysport's threads is doing is noted every second (state, kernel wait channel,
    time on a CPU and time runnable without one since the request was sent) with the machine's
    pressure, so that a hole in sysport's readings says whether its thread was blocked (and on
    what), starved of a CPU, or the machine stalled. Bounded: `stop()` ends it; each request has
    a timeout, and it ends by itself after `most` s."""

    def __init__(self, base, pid, path="/status", every=1.0, late=1.0, most=300.0):
        self.base, self.pid, self.path, self.every, self.late = base, pid, path, every, late
        self.until = time.monotonic() + most
        self.events = []  # (sent, took or None, [notes])
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.done.is_set() and time.monotonic() < self.until:
            answered = threading.Event()
            sent = time.time()
            before = thread_states(self.pid)

            def get(answered=answered):
                probe(f"{self.base}{self.path}", timeout=30.0)
                answered.set()

            threading.Thread(target=get, daemon=True).start()
            notes = []
            if not answered.wait(self.late):
                while not answered.wait(1.0 if notes else 0.0) and len(notes) < 40:
                    now = thread_states(self.pid)
                    threads = "; ".join(
                        f"{name}[{tid}] {state} {wchan} cpu +{(ran - before.get(tid, (0,) * 6)[3]) / 1e6:.0f} ms "
                        f"runnable +{(waited - before.get(tid, (0,) * 6)[4]) / 1e6:.0f} ms "
                        f"ticks +{ticks - before.get(tid, (0,) * 6)[5]}"
                        for tid, (name, state, wchan, ran, waited, ticks) in sorted(now.items()))
                    notes.append(f"+{time.time() - sent:.1f} s: {threads} ({pressure()})")
                answered.wait(30.0)
                self.events.append((sent, time.time() - sent, notes))
            self.done.wait(max(0.0, self.every - (time.time() - sent)))

    def stop(self):
        self.done.set()
        self.thread.join(35.0)

    def seen(self, t0, t1):
        """The late answers sent in [t0, t1], each with what was noted while it was awaited."""
        late = [e for e in self.events if t0 <= e[0] <= t1]
        return " | ".join(f"{self.path} sent at {time.strftime('%H:%M:%S', time.localtime(sent))}"
                          f".{int(sent % 1 * 10)} answered after {took:.1f} s: " + " / ".join(notes[:4])
                          for sent, took, notes in late) or "none"


# ---- load -----------------------------------------------------------------------------------

class Load:
    """Clients that send requests in a loop until `until` (time.time()); every request has a
    timeout, so the whole load is bounded by `until` plus one timeout. Each prompt starts with
    the request's number, so that no engine answers it from its prompt cache alone."""

    def __init__(self):
        self.lock = threading.Lock()
        self.ok = {}
        self.errors = {}
        self.threads = []
        self.sent = 0

    def client(self, kind, url, doc, until, timeout=30.0, pause=0.0):
        def loop():
            while time.time() < until:
                with self.lock:
                    self.sent += 1
                    one = dict(doc, prompt=f"{self.sent} {doc['prompt']}")
                try:
                    status, body = post_json(url, one, timeout)
                    good = status == 200 and isinstance(body, dict)
                except OSError as err:
                    good, status, body = False, 0, str(err)
                with self.lock:
                    if good:
                        self.ok[kind] = self.ok.get(kind, 0) + 1
                    else:
                        self.errors.setdefault(kind, []).append(f"{status} {str(body)[:120]}")
                if pause:
                    time.sleep(pause)

        t = threading.Thread(target=loop, daemon=True)
        t.start()
        self.threads.append(t)

    def join(self, timeout):
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        expect(not any(t.is_alive() for t in self.threads), "load clients still running after the bound")


# ---- the suite ----------------------------------------------------------------------------------

class RealEngines(AIPerfPhase, Suite):
    name = "real-engines"
    fatal_logs = ("sysport", "sysport-start", "sysport-exact", "vllm", "llama", "prometheus")
    failure_logs = ("sysport", "sysport-aiperf", "aiperf", "vllm", "llama")

    def __init__(self, workdir, pidfile):
        super().__init__(workdir, pidfile)
        self.procs = GroupProcs(workdir, pidfile)
        (self.vllm_port, self.llama_port, self.start_port, self.exact_port, self.sysport_port,
         self.prom_port) = free_ports(6)
        self.sysport = f"http://127.0.0.1:{self.sysport_port}"
        self.prom = Prom(f"http://127.0.0.1:{self.prom_port}")
        self.vllm = f"http://127.0.0.1:{self.vllm_port}"
        self.llama = f"http://127.0.0.1:{self.llama_port}"
        self.figures = []
        self.load_at_start = os.getloadavg()
        self.env = {}
        for var in ("SYSPORT_VLLM", "SYSPORT_VLLM_MODEL", "SYSPORT_LLAMA_SERVER", "SYSPORT_LLAMA_MODEL"):
            self.env[var] = os.environ.get(var, "")

    def figure(self, what, value):
        self.figures.append((what, value))

    # -- processes

    def start_vllm(self):
        tmp = os.path.join(self.workdir, "tmp")  # vLLM's rendezvous file goes with the work dir
        os.makedirs(tmp, exist_ok=True)
        env = dict(os.environ, TMPDIR=tmp)
        return self.procs.start("vllm", [self.env["SYSPORT_VLLM"], "--host", "127.0.0.1",
                                         "--port", str(self.vllm_port)], env=env, group=True)

    def start_llama(self):
        return self.procs.start("llama", [self.env["SYSPORT_LLAMA_SERVER"], "-m", self.env["SYSPORT_LLAMA_MODEL"],
                                          "--host", "127.0.0.1", "--port", str(self.llama_port), "--metrics",
                                          "-np", "4", "-c", "4096", "-t", "2"], group=True)

    def vllm_worker(self):
        """The pid of vLLM's VLLM::Worker process (by its process name, in vLLM's group)."""
        workers = [pid for pid, comm, _ in group_members(self.procs.groups["vllm"])
                   if comm.startswith("VLLM::Worker")]
        expect(len(workers) == 1, f"{len(workers)} VLLM::Worker processes in vLLM's group: "
                                  f"{fmt_members(group_members(self.procs.groups['vllm']))}")
        return workers[0]

    def write_sysport_config(self, path_name, port, canaries):
        if canaries:
            extra = (f"    canary_after: {CANARY_AFTER:g}s\n"
                     f"    canary: {{ timeout: {CANARY_TIMEOUT:g}s, live_failures: {LIVE_FAILURES} }}\n"
                     f"    stall_after: {STALL_AFTER:g}s\n")
        else:
            extra = "    canary_after: 0s\n"
        path = os.path.join(self.workdir, path_name)
        with open(path, "w") as f:
            f.write(f"""\
listen: {{ host: 127.0.0.1, port: {port} }}
health: {{ interval: {INTERVAL:g}s }}
shutdown: {{ drain_delay: 0s }}
upstreams:
  - name: vllm
    engine: vllm
    url: "http://127.0.0.1:{self.vllm_port}/metrics"
{extra}  - name: llama
    engine: llamacpp
    url: "http://127.0.0.1:{self.llama_port}/metrics"
{extra}incidents:
  py_spy: "{py_spy()}"
  stacks_timeout: 20s
  # vLLM's processes are found from its port; llama-server's by its command line.
  processes: {{ llama: "llama-server .*--port {self.llama_port}( |$)" }}
""")
        return path

    # -- reading sysport

    def stalled_incident(self, since):
        """The vllm incident that opened at or after `since` (unix seconds) with 'stalled' in its
        timeline, once its stacks are in: its JSON and the bundle's stacks.txt."""
        def opened():
            # A blip before the stall (vLLM's /health slow to answer under load: `down`, then
            # `up`) is an incident of its own: the one wanted has the verdict 'stalled'.
            status, body, _ = http_get(f"{self.sysport}/incidents", timeout=5.0)
            expect(status == 200, f"/incidents: HTTP {status}")
            seen = []
            for i in json.loads(body):
                if i["upstream"] == "vllm" and i["opened_unix_seconds"] >= since - INTERVAL:
                    status, one, _ = http_get(f"{self.sysport}/incidents/{i['id']}", timeout=5.0)
                    expect(status == 200, f"/incidents/{i['id']}: HTTP {status}")
                    verdicts = [c["verdict"] for c in json.loads(one)["timeline"]]
                    if "stalled" in verdicts:
                        return i["id"]
                    seen.append((i["id"], i["kind"], verdicts))
            expect(False, f"no vllm incident with 'stalled' opened since the freeze: {seen}")

        iid = eventually(opened, 10, 0.2)

        def with_stacks():
            status, body, _ = http_get(f"{self.sysport}/incidents/{iid}", timeout=5.0)
            expect(status == 200, f"/incidents/{iid}: HTTP {status}")
            doc = json.loads(body)
            expect(doc["stacks"] is not None, "stacks not taken yet")
            return doc

        doc = eventually(with_stacks, 30, 0.2)
        stacks_in = time.time() - doc["opened_unix_seconds"]
        with urllib.request.urlopen(f"{self.sysport}/incidents/{iid}.tar.gz", timeout=10) as resp:
            bundle = resp.read()
        with tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as tar:
            names = tar.getnames()
            stacks = tar.extractfile("stacks.txt").read().decode() if "stacks.txt" in names else ""
        return {"doc": doc, "names": names, "stacks": stacks, "stacks_in": stacks_in}

    def incident_since(self, upstream, since, timeout=10.0, until=None):
        """The newest incident of `upstream` opened at or after `since` (unix seconds, less one
        interval: its opening is the check's time), in whole, once `until(doc)` holds (bounded)."""
        def get():
            status, body, _ = http_get(f"{self.sysport}/incidents", timeout=5.0)
            expect(status == 200, f"/incidents: HTTP {status}")
            found = [i for i in json.loads(body)
                     if i["upstream"] == upstream and i["opened_unix_seconds"] >= since - INTERVAL]
            expect(found, f"no {upstream} incident opened since {since:.1f}: {body[:300]}")
            status, body, _ = http_get(f"{self.sysport}/incidents/{found[0]['id']}", timeout=5.0)
            expect(status == 200, f"/incidents/{found[0]['id']}: HTTP {status}")
            doc = json.loads(body)
            if until:
                until(doc)
            return doc

        return eventually(get, timeout, 0.2)

    def health(self, base=None):
        status, body = probe(f"{base or self.sysport}/health", timeout=2.0)
        doc = json.loads(body) if status in (200, 503) else {}
        return status, doc

    def status(self):
        status, body, _ = http_get(f"{self.sysport}/status", timeout=5.0)
        expect(status == 200, f"/status: HTTP {status}")
        return {u["name"]: u for u in json.loads(body)["upstreams"]}

    def canary_counts(self):
        """{(upstream, result): value} of dynamo_sysport_canary_requests_total."""
        status, body, _ = http_get(f"{self.sysport}/metrics?name=dynamo_sysport_canary_requests_total",
                                   timeout=5.0, headers={"Accept": TEXT_ACCEPT})
        expect(status == 200, f"/metrics?name=...: HTTP {status}")
        out = {}
        for fam in expo.parse(body, "text"):
            for s in fam.samples:
                if s.name == "dynamo_sysport_canary_requests_total":
                    out[(s.labels["upstream"], s.labels["result"])] = s.value
        expect(out, "no dynamo_sysport_canary_requests_total samples")
        return out

    def router_snapshot(self, tries=5):
        """The engines' pages and sysport's /metrics/router, read one after the other, with the
        engines' router families the same just before and just after sysport's read: only the
        frozen vLLM stands still, and llama-server's requests_processing is 1 while one of its
        canaries runs (up to a few hundred ms on loaded cores). The last try when none agrees."""
        def router_samples(page, engine):
            return expo.sample_map([f for f in page[0] if f.name in ROUTER[engine]], "text")[0]

        for _ in range(tries):
            v = engine_page(self.vllm_port, VLLM_PREFIXES)
            l = engine_page(self.llama_port, LLAMA_PREFIXES)
            status, body, _ = http_get(f"{self.sysport}/metrics/router", timeout=5.0,
                                       headers={"Accept": TEXT_ACCEPT})
            expect(status == 200, f"/metrics/router: HTTP {status}")
            after = (engine_page(self.vllm_port, VLLM_PREFIXES), engine_page(self.llama_port, LLAMA_PREFIXES))
            if (router_samples(v, "vllm") == router_samples(after[0], "vllm")
                    and router_samples(l, "llama") == router_samples(after[1], "llama")):
                break
            time.sleep(0.2)
        return v, l, body

    def wait_ready(self, timeout=30.0, live_engine=False, base=None):
        def ready():
            status, doc = self.health(base)
            expect(status == 200, f"/health {status}: {doc.get('reason')}")
            if live_engine:
                s, body = probe(f"{self.sysport}/live/engine")
                expect(s == 200, f"/live/engine {s}: {body[:200]}")

        eventually(ready, timeout, 0.2)

    def log_between(self, name, t0, t1, most=30):
        """The lines of process `name`'s log stamped in [t0, t1] (Unix seconds), at most `most`."""
        out = []
        try:
            with open(os.path.join(self.workdir, f"{name}.log"), "rb") as f:
                lines = f.read().decode("utf-8", "replace").splitlines()
        except OSError:
            return "unreadable"
        for line in lines:
            try:
                at = calendar.timegm(time.strptime(line[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + line[19:26])
            except ValueError:
                continue
            if t0 <= at <= t1:
                out.append(line)
        cut = f" (and {len(out) - most} more)" if len(out) > most else ""
        return (" | ".join(out[:most]) + cut) or "none"

    def wait_idle(self, timeout=60.0):
        """Both engines have no request running or waiting (their own gauges)."""
        def idle():
            busy = (engine_total(self.vllm_port, "vllm:num_requests_running")
                    + engine_total(self.vllm_port, "vllm:num_requests_waiting")
                    + engine_total(self.llama_port, "llamacpp:requests_processing")
                    + engine_total(self.llama_port, "llamacpp:requests_deferred"))
            expect(busy == 0, f"the engines still have {busy:g} requests running or waiting")

        eventually(idle, timeout, 0.5)

    # -- the run

    def steps(self):
        self.setup()
        self.start_phase()
        self.exactness()
        self.aiperf_reads()
        self.vitals()
        self.canaries()
        self.freeze_idle()
        self.freeze_busy()
        self.freeze_llama()
        self.kill_worker()
        self.finish()

    def setup(self):
        def tools():
            missing = [k for k, v in self.env.items() if not v]
            expect(not missing, f"{', '.join(missing)} not set: run through tests/suites/real-engines.sh "
                                "(eval \"$(scripts/real-engines.sh env)\")")
            for var in ("SYSPORT_VLLM", "SYSPORT_LLAMA_SERVER", "SYSPORT_LLAMA_MODEL"):
                expect(os.path.exists(self.env[var]), f"{var}={self.env[var]} does not exist")
            expect(os.access(self.sysport_bin, os.X_OK), f"SYSPORT_BIN {self.sysport_bin} is not executable")
            load = ", ".join(f"{x:.2f}" for x in self.load_at_start)
            return (f"vLLM :{self.vllm_port}, llama-server :{self.llama_port}, sysport "
                    f":{self.start_port}/:{self.exact_port}/:{self.sysport_port}; load average {load}")

        self.check("the engines' commands are set up (scripts/real-engines.sh env)", tools, fatal=True)

    # ---- 1. start-up --------------------------------------------------------------------------

    def start_phase(self):
        base = f"http://127.0.0.1:{self.start_port}"
        state = {}

        def sysport_first():
            self.start_sysport(self.write_sysport_config("sysport-start.yaml", self.start_port, True),
                               name="sysport-start", port=self.start_port)

            def checked():
                status, doc = self.health(base)
                expect(status == 503, f"/health {status} with no engine running")
                expect(all(doc["upstreams"][n]["checked"] for n in ("vllm", "llama")), "not checked yet")
                return doc["reason"]

            return f"/health 503: {eventually(checked, 10, 0.2)}"

        self.check("sysport started before the engines says 503 (connection refused)", sysport_first, fatal=True)

        def start_both():
            t = {"vllm": time.monotonic()}
            self.start_vllm()
            t["llama"] = time.monotonic()
            self.start_llama()
            engine_code = {"vllm": [], "llama": []}   # answers seen, repeats collapsed
            first_200 = {}
            ready_at = {}
            sysport_while_starting = {"vllm": [], "llama": []}  # (status, upstream state, reason)
            reasons = {"vllm": set(), "llama": set()}
            ready_early = []
            deadline = time.monotonic() + VLLM_READY_TIMEOUT + 10
            while len(ready_at) < 2:
                now = time.monotonic()
                if now > deadline:
                    raise Fatal(f"no sysport ready within {VLLM_READY_TIMEOUT:.0f} s: engine answers "
                                f"{engine_code}, ready {sorted(ready_at)}\n{self.procs.log_tail('vllm')}")
                for name in ("vllm", "llama"):
                    proc = self.procs.running[name]
                    if proc.poll() is not None:
                        raise Fatal(f"{name} exited with {proc.returncode} while starting:\n"
                                    f"{self.procs.log_tail(name)}")
                    if name not in first_200:
                        code, _ = probe(f"http://127.0.0.1:{self.vllm_port if name == 'vllm' else self.llama_port}"
                                        "/health", timeout=1.0)
                        at = time.monotonic()
                        if not engine_code[name] or engine_code[name][-1] != code:
                            engine_code[name].append(code)
                        if code == 200:
                            first_200[name] = at
                status, doc = self.health(base)
                at = time.monotonic()
                for name in ("vllm", "llama"):
                    if name in ready_at:
                        continue
                    up = doc.get("upstreams", {}).get(name, {})
                    if up.get("status") == "ready":
                        if name not in first_200:
                            ready_early.append(name)
                        ready_at[name] = at
                    else:
                        sysport_while_starting[name].append(status)
                        if up.get("last_error"):
                            reasons[name].add(up["last_error"])
                time.sleep(0.05 if "llama" not in ready_at else 0.1)
            state.update(t=t, engine_code=engine_code, first_200=first_200, ready_at=ready_at,
                         while_starting=sysport_while_starting, reasons=reasons, ready_early=ready_early)
            return (f"vLLM /health 200 after {first_200['vllm'] - t['vllm']:.1f} s, "
                    f"llama-server after {first_200['llama'] - t['llama']:.2f} s")

        self.check("both engines start and answer /health 200", start_both, fatal=True)

        def engine_starts(name):
            seen = " -> ".join("refused/none" if c == 0 else str(c) for c in state["engine_code"][name])
            took = state["first_200"][name] - state["t"][name]
            self.figure(f"{name}: start to its own /health 200", f"{took:.2f} s")
            if name == "vllm":
                expect(set(state["engine_code"][name][:-1]) <= {0}, f"vLLM answered {seen} while starting")
                return f"{took:.1f} s; answers: {seen} (connection refused until ready)"
            loading = 503 in state["engine_code"][name]
            self.figure("llama-server: 503 'Loading model' phase seen", "yes" if loading else "no")
            return f"{took:.2f} s; answers: {seen}; 503 'Loading model' phase {'seen' if loading else 'not seen'}"

        self.check("vLLM: refused until its /health answers 200", lambda: engine_starts("vllm"))
        self.check("llama-server: its /health answers 200 (the 'Loading model' 503 phase recorded)",
                   lambda: engine_starts("llama"))

        def sysport_follows(name):
            expect(name not in state["ready_early"], f"sysport said {name} ready before the engine's /health 200")
            statuses = set(state["while_starting"][name])
            expect(statuses <= {503}, f"sysport's /health answered {sorted(statuses)} while {name} started")
            took = state["ready_at"][name] - state["first_200"][name]
            bound = INTERVAL + MARGIN
            self.figure(f"{name}: engine /health 200 to sysport ready", f"{took:.2f} s")
            expect(took <= bound, f"ready {within(took, bound)} after the engine's /health 200")
            reasons = sorted(state["reasons"][name])
            if name == "vllm":
                expect(any("connection refused" in r for r in reasons), f"reasons while starting: {reasons}")
            return f"503 until then ({'; '.join(reasons)[:160]}), ready {within(took, bound)}"

        self.check(f"sysport: vllm 503 while vLLM starts, ready within {INTERVAL:g} s + {MARGIN:g} s of its "
                   "/health 200",
                   lambda: sysport_follows("vllm"))
        self.check(f"sysport: llama 503 while llama-server starts, ready within {INTERVAL:g} s + {MARGIN:g} s",
                   lambda: sysport_follows("llama"))

        def stop_first():
            self.wait_ready(10, base=base)
            rc = self.procs.stop("sysport-start", signal.SIGTERM, timeout=15)
            expect(rc == 0, f"exit {rc}")
            return "/health 200 with both engines up; exit 0 on SIGTERM"

        self.check("sysport (start-up) ready with both engines, exits 0", stop_first)

    # ---- 2. exactness ------------------------------------------------------------------------------

    def exactness(self):
        base = f"http://127.0.0.1:{self.exact_port}"
        snap = {}

        def start():
            self.start_sysport(self.write_sysport_config("sysport-exact.yaml", self.exact_port, False),
                               name="sysport-exact", port=self.exact_port)
            eventually(lambda: expect(self.health(base)[0] == 200, "not ready"), 15, 0.2)
            self.wait_idle()
            return "canary_after: 0s on both upstreams; no request runs"

        self.check("sysport without canaries in front of both idle engines", start, fatal=True)

        def read():
            v1 = engine_page(self.vllm_port, VLLM_PREFIXES)
            l1 = engine_page(self.llama_port, LLAMA_PREFIXES)
            ts, text, th = http_get(f"{base}/metrics", timeout=10.0, headers={"Accept": TEXT_ACCEPT})
            os_, om, oh = http_get(f"{base}/metrics", timeout=10.0, headers={"Accept": OM_ACCEPT})
            v2 = engine_page(self.vllm_port, VLLM_PREFIXES)
            l2 = engine_page(self.llama_port, LLAMA_PREFIXES)
            expect(ts == 200 and os_ == 200, f"sysport /metrics: HTTP {ts}, {os_}")
            # Idle engines: every kept sample the same before and after sysport's reads.
            expect(v1[1] == v2[1], "vLLM's samples moved while read: "
                   + "; ".join(expo.compare(v1[1], v2[1])[:3]))
            expect(l1[1] == l2[1], "llama-server's samples moved while read: "
                   + "; ".join(expo.compare(l1[1], l2[1])[:3]))
            snap.update(vllm=v1, llama=l1, text=text, text_ct=th.get("Content-Type", ""), om=om,
                        om_ct=oh.get("Content-Type", ""))
            return (f"vLLM {len(v1[1])} samples in {len(v1[0])} families ({v1[3]}), llama-server "
                    f"{len(l1[1])} samples in {len(l1[0])} families ({l1[3]})")

        self.check("the engines' pages stand still around sysport's two reads", lambda: eventually(read, 30, 1.0),
                   fatal=True)
        expected = dict(snap["vllm"][1])
        expected.update(snap["llama"][1])
        engine_fams = snap["vllm"][0] + snap["llama"][0]
        created = [f for f in snap["vllm"][0] if f.name.endswith("_created") and f.type == "gauge"]
        created_values = {}
        for f in created:
            for s in f.samples:
                created_values[s.value] = created_values.get(s.value, 0) + 1

        def text_valid():
            ct = snap["text_ct"]
            expect(ct.startswith("text/plain; version=0.0.4"), f"Content-Type {ct!r}")
            problem = expo.promtool_check(snap["text"].encode())
            expect(problem is None, f"promtool check metrics: {problem}")
            expo.parse(snap["text"], "text")
            return f"{ct}; promtool: parses (lint remarks on ':' names only); prometheus_client.parser: parses"

        self.check("text 0.0.4: promtool check metrics and prometheus_client's parser", text_valid)

        def same_as_engines(body, fmt):
            """sysport's page `body` has each engine sample once with the engine's value, and
            the engines' HELP and TYPE."""
            fams = expo.parse(body, fmt)
            got, dups = expo.sample_map(fams, fmt)
            expect(not dups, f"repeated series: {[expo.fmt_key(k) for k in dups[:3]]}")
            problems = expo.compare(expected, got)
            expect(not problems, "; ".join(problems))
            meta = expo.compare_meta(expo.meta_map(engine_fams), expo.meta_map(fams))
            expect(not meta, "; ".join(meta))

        def text_exact():
            same_as_engines(snap["text"], "text")
            # Byte for byte: each engine sample line once, as the engine wrote it.
            lines = {}
            for l in sample_lines(snap["text"], VLLM_PREFIXES + LLAMA_PREFIXES):
                lines[l] = lines.get(l, 0) + 1
            engine_lines = (sample_lines(snap["vllm"][2], VLLM_PREFIXES)
                            + sample_lines(snap["llama"][2], LLAMA_PREFIXES))
            off = [l for l in engine_lines if lines.get(l) != 1]
            expect(not off, f"{len(off)} engine lines not found exactly once, e.g. {off[:2]}")
            expect(len(lines) == len(engine_lines), f"{len(lines)} kept lines, the engines have {len(engine_lines)}")
            return (f"{len(expected)} samples ({len(snap['vllm'][1])} vllm:, {len(snap['llama'][1])} llamacpp:), "
                    "each once with the engine's value, lines byte for byte, HELP and TYPE as the engine's")

        self.check("text 0.0.4: every vllm:/lmcache:/llamacpp: sample exactly once with the engine's value",
                   text_exact)

        def text_created():
            expect(created, "vLLM's page has no _created gauge families")
            fams = {f.name: f for f in expo.parse(snap["text"], "text")}
            for f in created:
                g = fams.get(f.name)
                expect(g is not None and g.type == "gauge", f"{f.name}: {g and g.type} in the text output")
                expect(expo.sample_map([g], "text")[0] == expo.sample_map([f], "text")[0],
                       f"{f.name}: samples differ from the engine's")
            counts = {}
            for f in fams.values():
                for s in f.samples:
                    if s.value in created_values:
                        counts[s.value] = counts.get(s.value, 0) + 1
            off = [v for v, n in created_values.items() if counts.get(v) != n]
            expect(not off, f"{len(off)} _created values not once in the text output, e.g. {off[:2]}")
            return f"{len(created)} X_created gauge families, {len(created_values)} values, each once"

        self.check("text 0.0.4: vLLM's X_created gauge families as gauges with the engine's values", text_created)

        def om_valid():
            ct = snap["om_ct"]
            expect(ct.startswith("application/openmetrics-text; version=1.0.0"), f"Content-Type {ct!r}")
            expect(snap["om"].endswith("# EOF\n"), "no final # EOF")
            problem = expo.prometheus_om_check(snap["om"].encode(), self.workdir)
            expect(problem is None, f"Prometheus' OpenMetrics parser (promtool tsdb create-blocks-from "
                                    f"openmetrics): {problem}")
            expo.parse(snap["om"], "om")
            return f"{ct}; Prometheus' OpenMetrics parser (promtool) and prometheus_client's read it"

        self.check("OpenMetrics: promtool (Prometheus' parser) and prometheus_client's parser", om_valid)

        def om_exact():
            same_as_engines(snap["om"], "om")
            repeated_meta, repeated, _, _ = expo.scan(snap["om"])
            expect(not repeated_meta and not repeated, f"repeated lines: {(repeated_meta + repeated)[:3]}")
            return f"{len(expected)} samples, each once with the engine's value; HELP and TYPE as the engine's"

        self.check("OpenMetrics: every vllm:/lmcache:/llamacpp: sample exactly once with the engine's value",
                   om_exact)

        def om_created():
            fams = {f.name: f for f in expo.parse(snap["om"], "om")}
            kinds = {}
            for f in created:
                base = f.name[:-len("_created")]
                g = fams.get(base)
                expect(g is not None, f"no OpenMetrics family {base} for {f.name}")
                expect(g.type in ("counter", "histogram", "summary"), f"{base} is a {g.type}")
                kinds[g.type] = kinds.get(g.type, 0) + 1
                want = expo.sample_map([f], "text")[0]
                have = {k: v for k, v in expo.sample_map([g], "om")[0].items() if k[0] == f.name}
                expect(have == want, f"{base}'s _created samples {sorted(have.values())[:2]}, the engine's "
                                     f"{sorted(want.values())[:2]}")
                expect(f.name not in fams, f"{f.name} is also a family of its own in OpenMetrics")
            counts = {}
            for f in fams.values():
                for s in f.samples:
                    if s.value in created_values:
                        counts[s.value] = counts.get(s.value, 0) + 1
            off = [v for v, n in created_values.items() if counts.get(v) != n]
            expect(not off, f"{len(off)} _created values not once in the OpenMetrics output, e.g. {off[:2]}")
            return (f"{len(created)} families' _created in their "
                    + ", ".join(f"{n} {k}s" for k, n in sorted(kinds.items())) + ", each value once")

        self.check("OpenMetrics: vLLM's X_created as the _created samples of its counter or histogram", om_created)

        def stop():
            rc = self.procs.stop("sysport-exact", signal.SIGTERM, timeout=15)
            expect(rc == 0, f"exit {rc}")

        self.check("sysport (exactness) exits 0 on SIGTERM", stop)

    # ---- 3. vitals against Prometheus ------------------------------------------------------------

    def vitals(self):
        state = {}

        def start():
            self.start_sysport(self.write_sysport_config("sysport.yaml", self.sysport_port, True))
            prom = os.path.join(self.workdir, "prometheus.yml")
            with open(prom, "w") as f:
                f.write(f"""\
global: {{ scrape_interval: 1s, scrape_timeout: 1s, evaluation_interval: 1s }}
scrape_configs:
  - job_name: vllm-engine
    static_configs: [{{ targets: ["127.0.0.1:{self.vllm_port}"] }}]
  - job_name: llama-engine
    static_configs: [{{ targets: ["127.0.0.1:{self.llama_port}"] }}]
  - job_name: sysport
    static_configs: [{{ targets: ["127.0.0.1:{self.sysport_port}"] }}]
""")
            self.start_prometheus(prom)
            self.wait_ready(20)

            def targets_up():
                res = self.prom.query("up")
                up = {r["metric"]["job"]: float(r["value"][1]) for r in res}
                expect(up == {"vllm-engine": 1, "llama-engine": 1, "sysport": 1}, f"up: {up}")

            eventually(targets_up, 30, 0.5)
            state["ready"] = time.time()
            state["lateness"] = Lateness(self.sysport, self.procs.running["sysport"].pid)
            return (f"sysport :{self.sysport_port} (canaries {CANARY_AFTER:g} s, stall_after {STALL_AFTER:g} s, "
                    f"checks every {INTERVAL:g} s, vitals window {WINDOW} s), Prometheus :{self.prom_port} "
                    "scraping both engines and sysport every 1 s")

        self.check("sysport and Prometheus (scraping the engines directly and sysport) start", start, fatal=True)

        def warm_up():
            # Requests before the window, so that the counters are far from zero where it starts.
            # rate() never extrapolates a counter back past its zero point: with counters near zero
            # there, Prometheus (whose last scrape is up to 1 s before the window's end, and who
            # extrapolates forward from it) and sysport (whose last reading is at the window's end)
            # extrapolate differently, by up to one scrape's worth (1.7 % of 60 s).
            load = Load()
            t0 = time.time()
            for _ in range(4):
                load.client("vllm", f"{self.vllm}/v1/completions",
                            {"model": self.env["SYSPORT_VLLM_MODEL"], "prompt": "The quick brown fox",
                             "max_tokens": 16, "temperature": 0}, t0 + VLLM_BURST / 4)
            load.join(VLLM_BURST / 4 + 35.0)
            t1 = time.time()
            for _ in range(2):
                load.client("llama", f"{self.llama}/completion",
                            {"prompt": "The quick brown fox", "n_predict": 16}, t1 + LLAMA_BURST / 2)
            load.join(LLAMA_BURST / 2 + 35.0)
            expect(load.ok.get("vllm", 0) >= 5 and load.ok.get("llama", 0) >= 2, f"completions: {load.ok}")
            expect(not load.errors, f"failed completions: { {k: v[:2] for k, v in load.errors.items()} }")
            self.wait_idle()
            state["warm"] = time.time()
            return f"{load.ok.get('vllm', 0)} vLLM, {load.ok.get('llama', 0)} llama-server completions"

        self.check("a warm-up before the window (the counters far from their zero point)", warm_up, fatal=True)

        def burst():
            self.wait_idle()
            # vLLM's burst then llama-server's (at once, they starve each other of the two cores),
            # together in the middle of the 60 s window that ends about 15 s after them.
            start_at = max(time.time() + 1.0, state["warm"] + 18.0)
            time.sleep(start_at - time.time())
            load = Load()
            t0 = time.time()
            for _ in range(4):
                load.client("vllm", f"{self.vllm}/v1/completions",
                            {"model": self.env["SYSPORT_VLLM_MODEL"], "prompt": "The quick brown fox",
                             "max_tokens": 16, "temperature": 0}, t0 + VLLM_BURST)
            load.join(VLLM_BURST + 35.0)
            t_mid = time.time()
            for _ in range(2):
                load.client("llama", f"{self.llama}/completion",
                            {"prompt": "The quick brown fox", "n_predict": 16}, t_mid + LLAMA_BURST)
            load.join(LLAMA_BURST + 35.0)
            t1 = time.time()
            state.update(burst=(t0, t1), load=load)
            # llama-server's two threads spin at each step: on a loaded machine a token can take
            # 100 ms instead of 0.3 ms, so only a few completions are asked of it.
            expect(load.ok.get("vllm", 0) >= 20 and load.ok.get("llama", 0) >= 10, f"completions: {load.ok}")
            errors = {k: (len(v), v[:2]) for k, v in load.errors.items()}
            expect(not errors, f"failed completions: {errors}")
            return (f"{t_mid - t0:.1f} s: {load.ok['vllm']} vLLM completions (4 clients, max_tokens 16), then "
                    f"{t1 - t_mid:.1f} s: {load.ok['llama']} llama-server completions (2 clients, n_predict 16)")

        self.check("a burst of completions on vLLM, then on llama-server (bounded: its time + one request timeout)",
                   burst, fatal=True)

        def read_status():
            self.wait_idle()
            t0, t1 = state["burst"]
            time.sleep(max(0.0, t1 + 15.0 - time.time()))
            st = self.status()
            v, l = st["vllm"]["vitals"], st["llama"]["vitals"]
            as_of = v["as_of_unix_seconds"]
            expect(state["warm"] < as_of - WINDOW < t0 - 1.0 and as_of > t1 + 1.0,
                   f"the burst [{t0:.1f}, {t1:.1f}] is not inside the window ({as_of - WINDOW:.1f}, {as_of:.1f}], "
                   f"or the warm-up (until {state['warm']:.1f}) is")
            # Prometheus has scraped past as_of.
            time.sleep(max(0.0, as_of + 2.5 - time.time()))
            # Prometheus scrapes each engine directly at the same interval with a stricter timeout
            # (1 s against sysport's 2 s): its successful scrapes say when the engine's own
            # /metrics answered at all, the reference for sysport's readings below.
            scrapes = {}
            for name, job in (("vllm", "vllm-engine"), ("llama", "llama-engine"), ("sysport", "sysport")):
                data = self.prom.api("query", query=f'up{{job="{job}"}}[{WINDOW}s]', time=f"{as_of:.3f}")
                points = [(float(t), v == "1") for t, v in (data["result"][0]["values"] if data["result"] else [])]
                ok = [t for t, up in points if up]
                widest = max((b - a for a, b in zip(ok, ok[1:])), default=WINDOW)
                scrapes[name] = {"scrapes": len(points), "up": len(ok), "widest_gap": widest}
            state["prom_scrapes"] = scrapes
            state.update(status=st, as_of=as_of)
            state["lateness"].stop()
            # Where sysport's readings are in the window (the history has one point per reading):
            # the first one's distance from the window's start, and the gaps a late check left.
            times = sorted(ago + WINDOW for ago, _ in v["history"]["running"] if ago > -WINDOW)
            state["spans"] = {n: -min(ago for ago, _ in st[n]["vitals"]["history"]["running"] if ago > -WINDOW)
                              for n in ("vllm", "llama")}
            gaps = ", ".join(f"{b - a:.1f} s at {a:.1f} s" for a, b in zip(times, times[1:])
                             if b - a > 1.5 * INTERVAL) or "none"
            return (f"as_of {as_of:.3f}: window starts {t0 - (as_of - WINDOW):.1f} s before the burst, ends "
                    f"{as_of - t1:.1f} s after it; sysport readings vllm {v['readings']}, llama {l['readings']}; "
                    f"Prometheus' scrapes of the engines and of sysport in the window (all, up, widest gap "
                    f"between up) "
                    f"{ {n: (p['scrapes'], p['up'], round(p['widest_gap'], 1)) for n, p in scrapes.items()} }; "
                    f"sysport's first reading {times[0]:.2f} s "
                    f"into the window, gaps: {gaps}; late answers of sysport's worker runtime: "
                    f"{state['lateness'].seen(as_of - WINDOW, as_of)}")

        self.check("/status read once the whole burst is inside the 60 s window", read_status, fatal=True)

        def readings_cover():
            # A check still running at the next one's due time skips it (the grid of due times is
            # kept, as Prometheus keeps its scrape phase). During a burst on two busy cores an
            # engine's own /metrics can take longer than the interval for a run of reads:
            # llama-server answers it from its main loop between decode steps, vLLM's API server
            # shares the cores with the engine core's threads. One CI run had vLLM's readings 8 s
            # apart during its burst. So the bounds below are the absolute ones (3 in 4 due times, no
            # gap over 5 intervals) where Prometheus, scraping the same engine at the same interval,
            # had its scrapes answered, and otherwise what Prometheus itself managed: a stuck check
            # loop leaves a hole where the engine answered Prometheus, a slow engine leaves the
            # same hole in both.
            st = state["status"]
            out = []
            for name in ("vllm", "llama"):
                v = st[name]["vitals"]
                prom = state["prom_scrapes"][name]
                times = sorted(ago + WINDOW for ago, _ in v["history"]["running"] if ago > -WINDOW)
                expect(len(times) >= 2, f"{name}: {len(times)} readings in the window")
                gap = max(b - a for a, b in zip(times, times[1:]))
                least = min(0.75 * WINDOW, prom["up"] - 3)
                expect(v["readings"] >= least,
                       f"{name}: {v['readings']} readings in the {WINDOW} s window (at least {least:g}; "
                       f"Prometheus had {prom['up']} of its {prom['scrapes']} scrapes of the engine answered)")
                widest = max(5 * INTERVAL, prom["widest_gap"] + 2 * INTERVAL)
                if gap > widest:
                    a, b = next((a, b) for a, b in zip(times, times[1:]) if b - a == gap)
                    at = state["as_of"] - WINDOW
                    raise Failed(
                        f"{name}: a {gap:.1f} s gap between readings (at most {widest:.1f} s; Prometheus' widest "
                        f"gap between answered scrapes of the engine {prom['widest_gap']:.1f} s); sysport's "
                        f"log in it: {self.log_between('sysport', at + a, at + b)}; late answers of its worker "
                        f"runtime: {state['lateness'].seen(at + a - 2, at + b)}")
                expect(times[0] <= 5 * INTERVAL and times[-1] >= WINDOW - 5 * INTERVAL,
                       f"{name}: readings from {times[0]:.1f} s to {times[-1]:.1f} s of the window")
                out.append(f"{name} {v['readings']} (widest gap {gap:.1f} s; Prometheus {prom['up']} answered, "
                           f"widest gap {prom['widest_gap']:.1f} s)")
            return ", ".join(out)

        self.check("sysport's readings cover the window (at least 3 in 4 due times, no gap over 5 intervals, "
                   "or what Prometheus' scrapes of the engine managed)",
                   readings_cover)
        st, at = state["status"], state["as_of"]
        r = f"[{WINDOW}s]"

        def rate_check(upstream, key, counter, minimum, per_canary=0):
            job = f"{upstream}-engine"
            expr = f'sum(rate({counter}{{job="{job}"}}{r}))'
            if per_canary:
                # sysport's vitals leave out its own canaries (one generated token each): so does
                # the oracle, with sysport's own count of the canaries the engine answered.
                expr += (f' - {per_canary} * (sum(rate(dynamo_sysport_canary_requests_total'
                         f'{{job="sysport",upstream="{upstream}",result="success"}}{r})) or vector(0))')

            def check():
                ours = st[upstream]["vitals"][key]
                res = self.prom.query(expr, at=at)
                expect(len(res) == 1, f"{expr}: {res}")
                theirs = float(res[0]["value"][1])
                expect(theirs >= minimum, f"Prometheus says {theirs}: the burst did not show")
                expect(ours is not None, f"/status {key} is null; Prometheus {theirs}")
                # With the counter still at both ends of the window, each rate is the increase over
                # the time its own samples span: the two spans alone make this difference.
                raw = self.prom.api("query", query=f'{counter}{{job="{job}"}}{r}', time=f"{at:.3f}")["result"]
                prom_span = sum(float(x["values"][-1][0]) - float(x["values"][0][0]) for x in raw) / max(1, len(raw))
                spans = f"readings span {state['spans'][upstream]:.2f} s in sysport, {prom_span:.2f} s in Prometheus"
                diff = (ours - theirs) / theirs
                expect(abs(diff) <= 0.02, f"/status {key} = {ours:.6g}, Prometheus {theirs:.6g} ({diff:+.2%}; {spans})")
                return (f"{ours:.4g} vs {theirs:.4g} ({diff:+.2%}); {spans}: "
                        f"{prom_span / state['spans'][upstream] - 1:+.2%} from that alone")

            self.check(f"{upstream} {key} within 2 % of {expr}", check)

        rate_check("vllm", "prompt_tokens_per_second", "vllm:prompt_tokens_total", 1)
        rate_check("vllm", "generation_tokens_per_second", "vllm:generation_tokens_total", 1, 1)
        rate_check("vllm", "requests_per_second", "vllm:request_success_total", 0.5, 1)
        rate_check("llama", "prompt_tokens_per_second", "llamacpp:prompt_tokens_total", 0.1)
        rate_check("llama", "generation_tokens_per_second", "llamacpp:tokens_predicted_total", 1, 1)

        vllm_fams = engine_page(self.vllm_port, VLLM_PREFIXES)[0]
        for key, hist in (("time_to_first_token_seconds", "vllm:time_to_first_token_seconds"),
                          ("inter_token_latency_seconds", "vllm:inter_token_latency_seconds"),
                          ("e2e_request_latency_seconds", "vllm:e2e_request_latency_seconds")):
            bounds = bucket_bounds(vllm_fams, hist)
            for p, q in (("p50", 0.5), ("p99", 0.99)):
                expr = f'histogram_quantile({q}, sum by (le) (rate({hist}_bucket{{job="vllm-engine"}}{r})))'

                def quantile(key=key, p=p, expr=expr, bounds=bounds):
                    expect(bounds, "no buckets on the engine's page")
                    ours = st["vllm"]["vitals"][key][p]
                    res = self.prom.query(expr, at=at)
                    expect(len(res) == 1, f"{expr}: {res}")
                    theirs = float(res[0]["value"][1])
                    expect(math.isfinite(theirs), f"Prometheus says {theirs}")
                    expect(ours is not None, f"/status {key}.{p} is null; Prometheus {theirs}")
                    i, j = bucket_index(ours, bounds), bucket_index(theirs, bounds)
                    expect(i == j, f"/status {ours:.6g} in {bucket_text(i, bounds)}, Prometheus {theirs:.6g} "
                                   f"in {bucket_text(j, bounds)}")
                    return f"{ours:.4g} vs {theirs:.4g}, both in {bucket_text(i, bounds)}"

                self.check(f"vllm {key}.{p} in the same bucket as Prometheus' histogram_quantile", quantile)

        def llama_quantiles():
            v = st["llama"]["vitals"]
            got = {f"{k}.{p}": v[k][p] for k in ("time_to_first_token_seconds", "inter_token_latency_seconds",
                                                  "e2e_request_latency_seconds") for p in ("p50", "p90", "p99")}
            expect(all(x is None for x in got.values()),
                   f"not null: { {k: x for k, x in got.items() if x is not None} }")
            return "TTFT, inter-token and e2e p50/p90/p99 all null (llama-server has no histograms)"

        self.check("llama latency quantiles are null in /status, never 0", llama_quantiles)

        def gauges(upstream, pairs):
            def attempt():
                st2 = self.status()
                v = st2[upstream]["vitals"]
                at2 = v["as_of_unix_seconds"]
                time.sleep(max(0.0, at2 + 2.5 - time.time()))
                out = []
                for key, expr in pairs:
                    res = self.prom.query(expr, at=at2)
                    expect(len(res) == 1, f"{expr}: {res}")
                    theirs = float(res[0]["value"][1])
                    expect(v[key] is not None and abs(v[key] - theirs) <= 1e-9,
                           f"/status {key} = {v[key]}, Prometheus {theirs} at {at2:.3f}")
                    out.append(f"{key} {v[key]:g}")
                return ", ".join(out) + f" (as_of {at2:.1f})"

            return eventually(attempt, 20, 0.5)  # a canary may run at the very moment of a reading

        self.check("vllm running, waiting, kv_cache_usage after the burst as Prometheus says", lambda: gauges("vllm", [
            ("running", 'sum(vllm:num_requests_running{job="vllm-engine"})'),
            ("waiting", 'sum(vllm:num_requests_waiting{job="vllm-engine"})'),
            ("kv_cache_usage", 'avg(vllm:kv_cache_usage_perc{job="vllm-engine"})')]))
        self.check("llama running, waiting after the burst as Prometheus says", lambda: gauges("llama", [
            ("running", 'sum(llamacpp:requests_processing{job="llama-engine"})'),
            ("waiting", 'sum(llamacpp:requests_deferred{job="llama-engine"})')]))

    # ---- 4. canaries ------------------------------------------------------------------------------

    def quiet_snapshot(self, seen):
        """Engine counters and sysport's canary counts at a moment with no canary in flight or
        about to start (the counts read between two /status reads that agree); the canaries
        seen in /status meanwhile go into `seen` (as watch_canaries)."""
        def get():
            st = self.status()
            self.note_canaries(st, seen)
            for name in ("vllm", "llama"):
                c = st[name]["health"]["canary"]
                expect(c["none_because"] is None and c["next_in_seconds"] is not None
                       and c["next_in_seconds"] >= 1.5, f"{name}: canary {c['none_because']}, next in "
                                                        f"{c['next_in_seconds']}")
            snap = {
                "vllm": engine_total(self.vllm_port, "vllm:request_success_total"),
                "llama": engine_total(self.llama_port, "llamacpp:tokens_predicted_total"),
                "counts": self.canary_counts(),
            }
            st2 = self.status()
            self.note_canaries(st2, seen)
            for name in ("vllm", "llama"):
                expect(st2[name]["health"]["canary"]["last"] == st[name]["health"]["canary"]["last"],
                       f"{name}: a canary ended while reading")
            snap["at"] = time.time()
            return snap

        return eventually(get, 30, 0.2)

    def watch_canaries(self, until, seen, every=0.3, reads=None):
        """Polls /status until `until`, adding each upstream's canaries to seen[name]
        ({finished unix seconds: (started, duration, result)}). With `reads` (a list), each
        read's time goes there, and a read that had no answer within 5 s is noted as None and
        the polling goes on: a canary's `last` stays in /status until the next one."""
        while time.time() < until:
            t = time.monotonic()
            try:
                st = self.status()
            except TimeoutError:
                if reads is None:
                    raise
                reads.append(None)
                continue
            if reads is not None:
                reads.append(time.monotonic() - t)
            self.note_canaries(st, seen)
            time.sleep(every)

    @staticmethod
    def note_canaries(st, seen):
        for name in ("vllm", "llama"):
            last = st[name]["health"]["canary"]["last"]
            if last:
                seen[name].setdefault(last["unix_seconds"], (last["unix_seconds"] - last["duration_seconds"],
                                                             last["duration_seconds"], last["result"]))

    def canaries(self):
        state = {}
        seen = {"vllm": {}, "llama": {}}

        def idle_window():
            self.wait_idle()
            self.wait_ready(30)
            a = self.quiet_snapshot(seen)
            self.watch_canaries(time.time() + 40.0, seen)
            b = self.quiet_snapshot(seen)
            state.update(a=a, b=b)
            counts = {n: (b["counts"][(n, "success")] - a["counts"][(n, "success")]) for n in ("vllm", "llama")}
            other = {k: b["counts"][k] - a["counts"].get(k, 0) for k in b["counts"] if k[1] != "success"}
            expect(not any(other.values()),
                   f"canaries that did not succeed: { {k: v for k, v in other.items() if v} }")
            state["counts"] = counts
            return (f"{b['at'] - a['at']:.1f} s idle: sysport counted {counts['vllm']:g} vllm, "
                    f"{counts['llama']:g} llama canaries")

        self.check("both engines idle for ~40 s with canaries on (canary_after 5 s)", idle_window, fatal=True)

        def counts(name, counter, what):
            """The engine's own counter rose by exactly one per canary sysport counted."""
            def check():
                a, b, n = state["a"], state["b"], state["counts"][name]
                d = b[name] - a[name]
                expect(n >= 40 / (CANARY_AFTER + INTERVAL + MARGIN) - 1, f"only {n:g} canaries")
                expect(d == n, f"{counter} rose by {d:g}, sysport counted {n:g} canaries")
                return f"+{d:g} {what} = {n:g} canaries"
            return check

        self.check("vLLM: sum(vllm:request_success_total) rises by one per canary sysport counted",
                   counts("vllm", "sum(vllm:request_success_total)", "requests in vLLM's counter"))
        self.check("llama-server: llamacpp:tokens_predicted_total rises by one token per canary",
                   counts("llama", "llamacpp:tokens_predicted_total",
                          "tokens in llama-server's counter (n_predict 1)"))

        def spacing():
            out = []
            for name in ("vllm", "llama"):
                starts = sorted(s for f, (s, _, _) in seen[name].items()
                                if state["a"]["at"] <= f <= state["b"]["at"])
                expect(len(starts) == state["counts"][name], f"{name}: saw {len(starts)} canaries in /status, "
                                                             f"counted {state['counts'][name]:g}")
                gaps = [b - a for a, b in zip(starts, starts[1:])]
                lo, hi = CANARY_AFTER - 0.5, CANARY_AFTER + INTERVAL + MARGIN
                bad = [round(g, 2) for g in gaps if not lo <= g <= hi]
                expect(gaps and not bad, f"{name}: gaps {[round(g, 2) for g in gaps]} outside [{lo:g}, {hi:g}] s")
                out.append(f"{name} {min(gaps):.2f}-{max(gaps):.2f} s (mean {statistics.mean(gaps):.2f})")
                self.figure(f"{name}: spacing of canaries while idle", f"{min(gaps):.2f}-{max(gaps):.2f} s, "
                                                                       f"mean {statistics.mean(gaps):.2f} s")
            return "gaps between canary starts: " + "; ".join(out)

        self.check(f"canaries keep coming every {CANARY_AFTER:g} s to {CANARY_AFTER + INTERVAL + MARGIN:g} s "
                   "(their own progress is not traffic)", spacing)

        def durations():
            out = []
            for name in ("vllm", "llama"):
                ds = [d for _, d, _ in seen[name].values()]
                expect(ds, f"no {name} canary seen")
                p50, mx = statistics.median(ds), max(ds)
                self.figure(f"{name}: canary duration p50 / max ({len(ds)} canaries)",
                            f"{p50 * 1000:.0f} / {mx * 1000:.0f} ms")
                out.append(f"{name} p50 {p50 * 1000:.0f} ms, max {mx * 1000:.0f} ms ({len(ds)})")
            return "; ".join(out)

        self.check("canary durations", durations)

        def none_while_busy():
            load = Load()
            t1 = time.time()
            until = t1 + 12.0
            load.client("vllm", f"{self.vllm}/v1/completions",
                        {"model": self.env["SYSPORT_VLLM_MODEL"], "prompt": "Hello", "max_tokens": 16}, until)
            load.client("llama", f"{self.llama}/completion", {"prompt": "Hello", "n_predict": 16}, until, pause=0.05)
            watch = {"vllm": {}, "llama": {}}
            reads = []
            self.watch_canaries(until, watch, reads=reads)
            load.join(40.0)
            t2 = time.time()
            expect(not load.errors, f"failed requests: { {k: v[:2] for k, v in load.errors.items()} }")
            self.watch_canaries(t2 + CANARY_AFTER + 2 * INTERVAL + MARGIN + 1.0, watch, reads=reads)
            answered = [r for r in reads if r is not None]
            slow = (f"{len(reads)} /status reads, slowest {max(answered, default=float('nan')):.2f} s"
                    + (f", {len(reads) - len(answered)} without an answer within 5 s"
                       if len(answered) < len(reads) else ""))
            self.figure("/status read while both engines run requests, then idle", slow)
            out = []
            for name in ("vllm", "llama"):
                starts = sorted(s for s, _, _ in watch[name].values())
                during = [round(s - t1, 2) for s in starts if t1 + INTERVAL + 0.5 < s < t2]
                expect(not during, f"{name}: canaries started {during} s into the test's requests "
                                   f"({load.ok.get(name, 0)} requests over {t2 - t1:.1f} s)")
                after = [s - t2 for s in starts if s >= t2]
                expect(after, f"{name}: no canary within {CANARY_AFTER + 2 * INTERVAL + MARGIN + 1:g} s "
                              "after the requests")
                expect(after[0] >= CANARY_AFTER - INTERVAL, f"{name}: a canary {after[0]:.2f} s after the requests")
                out.append(f"{name}: {load.ok.get(name, 0)} requests, first canary {after[0]:.1f} s after")
            return f"{t2 - t1:.1f} s of requests, no canary meanwhile; " + "; ".join(out) + f" ({slow})"

        self.check("no canary while the test's requests run; they resume about canary_after later", none_while_busy)

    # ---- 5. readiness against the real processes ---------------------------------------------------

    def freeze_idle(self):
        def measure():
            self.wait_idle()
            self.wait_ready(30, live_engine=True)
            worker = self.vllm_worker()
            engine_codes, sys_codes, live_codes = set(), [], []
            t0 = time.monotonic()
            frozen_at = time.time()
            os.kill(worker, signal.SIGSTOP)
            try:
                t503 = tlive = None
                reason = live_reason = None
                bound503 = CANARY_AFTER + INTERVAL + CANARY_TIMEOUT + MARGIN
                bound_live = LIVE_FAILURES * (CANARY_AFTER + INTERVAL + CANARY_TIMEOUT) + MARGIN
                while tlive is None and time.monotonic() - t0 < bound_live + 5:
                    engine_codes.add(probe(f"{self.vllm}/health")[0])
                    status, doc = self.health()
                    now = time.monotonic() - t0
                    if status != 200 and t503 is None:
                        t503, reason = now, doc.get("reason")
                    ls, lbody = probe(f"{self.sysport}/live/engine")
                    if ls != 200 and tlive is None:
                        tlive, live_reason = time.monotonic() - t0, lbody
                    time.sleep(0.2)
                # vLLM's own /health, a little longer
                for _ in range(5):
                    engine_codes.add(probe(f"{self.vllm}/health")[0])
                    time.sleep(0.2)
            finally:
                t1 = time.monotonic()
                continued_at = time.time()
                os.kill(worker, signal.SIGCONT)
            back = back_live = None
            bound_back = CANARY_AFTER + INTERVAL + MARGIN
            while (back is None or back_live is None) and time.monotonic() - t1 < bound_back + 10:
                if back is None and self.health()[0] == 200:
                    back = time.monotonic() - t1
                if back_live is None and probe(f"{self.sysport}/live/engine")[0] == 200:
                    back_live = time.monotonic() - t1
                time.sleep(0.1)
            return dict(engine=engine_codes, t503=t503, reason=reason, tlive=tlive, live_reason=live_reason,
                        back=back, back_live=back_live, b503=bound503, blive=bound_live, bback=bound_back,
                        frozen_at=frozen_at, continued_at=continued_at)

        r = {}

        def freeze():
            r.update(measure())
            return "VLLM::Worker SIGSTOP while idle, SIGCONT after /live/engine turned 503"

        self.check("vLLM's worker frozen while idle, then continued", freeze, fatal=True)

        def engine_green():
            expect(r["engine"] == {200}, f"vLLM's /health answered {sorted(r['engine'])}")
            return "vLLM's own /health 200 throughout the freeze"

        self.check("frozen while idle: vLLM's own /health stays 200", engine_green)

        def health_503():
            expect(r["t503"] is not None, "sysport's /health never turned 503")
            expect(r["t503"] <= r["b503"], f"503 after {within(r['t503'], r['b503'])}")
            expect(r["reason"] and "vllm: canary failed" in r["reason"], f"reason {r['reason']!r}")
            self.figure("vLLM frozen while idle: freeze to sysport /health 503", f"{r['t503']:.2f} s")
            return f"503 {within(r['t503'], r['b503'])}: {r['reason']}"

        self.check(f"frozen while idle: sysport's /health 503 within canary_after + interval + canary timeout "
                   f"+ {MARGIN:g} s, naming the failed canary", health_503)

        def live_503():
            expect(r["tlive"] is not None, "/live/engine never turned 503")
            expect(r["tlive"] <= r["blive"], f"/live/engine 503 after {within(r['tlive'], r['blive'])}")
            expect(f"{LIVE_FAILURES} canaries failed in a row" in (r["live_reason"] or ""),
                   f"/live/engine said {r['live_reason']!r}")
            self.figure("vLLM frozen while idle: freeze to /live/engine 503", f"{r['tlive']:.2f} s")
            return f"503 {within(r['tlive'], r['blive'])}: {json.loads(r['live_reason'])['reason']}"

        self.check(f"frozen while idle: /live/engine 503 after {LIVE_FAILURES} failed canaries", live_503)

        def recovered():
            expect(r["back"] is not None and r["back_live"] is not None,
                   f"not 200 again within {r['bback'] + 10:.0f} s (/health {r['back']}, /live/engine {r['back_live']})")
            worst = max(r["back"], r["back_live"])
            expect(worst <= r["bback"], f"200 again after {within(worst, r['bback'])}")
            self.figure("vLLM frozen while idle: SIGCONT to /health and /live/engine 200",
                        f"{r['back']:.2f} s / {r['back_live']:.2f} s")
            return (f"/health 200 after {r['back']:.2f} s, /live/engine after {r['back_live']:.2f} s "
                    f"(bound {r['bback']:.1f} s)")

        self.check("SIGCONT: /health and /live/engine 200 within canary_after + interval + margin", recovered)

        def incident():
            # Closed SETTLE_CHECKS (3) good checks after the verdict is back.
            doc = self.incident_since("vllm", r["frozen_at"], timeout=3 * INTERVAL + 10 + MARGIN,
                                      until=lambda d: expect(d["closed_unix_seconds"] is not None,
                                                             f"incident {d['id']} still open"))
            expect(doc["kind"] == "canary_failed", f"kind {doc['kind']!r}, timeline {doc['timeline']}")
            opened, closed = doc["opened_unix_seconds"], doc["closed_unix_seconds"]
            took = opened - r["frozen_at"]
            expect(took <= r["b503"], f"opened {within(took, r['b503'])} after the freeze")
            runs = doc["canaries_before"] + doc["canaries"]
            for c in runs:
                expect({"sent_unix_seconds", "duration_seconds", "result", "error"} <= set(c), f"canary {c}")
            # Those that failed: sent while frozen, or in flight at the freeze.
            failed = [c for c in runs if c["result"] != "success"]
            early = [c for c in failed if not r["frozen_at"] - CANARY_TIMEOUT <= c["sent_unix_seconds"] < r["continued_at"]]
            expect(not early, f"failed canaries sent outside the freeze: {early}")
            expect(len(failed) >= LIVE_FAILURES, f"{len(failed)} failed canaries kept: {runs}")
            bad = [c for c in failed if c["result"] != "timeout"
                   or not CANARY_TIMEOUT - 0.1 <= c["duration_seconds"] <= CANARY_TIMEOUT + MARGIN]
            expect(not bad, f"failed canaries not timed out at {CANARY_TIMEOUT:g} s: {bad}")
            ok_before = [c for c in doc["canaries_before"] if c["result"] == "success"]
            expect(ok_before, f"no passing canary among the {len(doc['canaries_before'])} before the opening")
            expect(closed >= r["continued_at"], f"closed at {closed:.2f}, before the SIGCONT {r['continued_at']:.2f}")
            expect(abs(doc["duration_seconds"] - (closed - opened)) < 0.01,
                   f"duration {doc['duration_seconds']} against {closed - opened:.3f}")
            self.figure("vLLM frozen while idle: freeze to incident 'canary_failed'", f"{took:.2f} s")
            timings = ", ".join(f"{c['duration_seconds']:.2f} s" for c in failed)
            return (f"incident {doc['id']} canary_failed opened {within(took, r['b503'])} after the freeze; "
                    f"{len(failed)} timed-out canaries ({timings}), "
                    f"{len(ok_before)} passing before; closed {closed - r['continued_at']:.2f} s after SIGCONT, "
                    f"duration {doc['duration_seconds']:.2f} s")

        self.check("frozen while idle: an incident 'canary_failed' with each canary's timing, closed after "
                   "SIGCONT with its duration", incident)

    def freeze_busy(self):
        r = {}

        def measure():
            # The freeze must find the requests running: on a quiet machine vLLM ends 20
            # completions of 480 tokens in about 1.3 s, less than a check interval, so each of the
            # 20 clients asks again as soon as it is answered, until the freeze. vLLM's own
            # running gauge, read once frozen, says whether they ran; if not, the engine is
            # continued and the freeze tried again, at most three times.
            tries = []
            for attempt in range(1, 4):
                r.clear()
                freeze_once()
                r["attempts"] = attempt
                if r["running_at_freeze"] >= 10:
                    return
                tries.append(r.get("unseen") or r.get("missed", "?"))
            expect(False, "in 3 tries the 20 completions had ended by the time vLLM's worker froze, or "
                          "vLLM's gauge never said 10 running: " + "; ".join(
                              f"try {i}: {why}" for i, why in enumerate(tries, 1)))

        def freeze_once():
            self.wait_idle()
            self.wait_ready(30, live_engine=True)
            worker = self.vllm_worker()
            results = []
            lock = threading.Lock()
            stop = threading.Event()

            def one():
                # Bounded: each client stops asking at the freeze (or when sysport never saw
                # them), and a request ends within its 240 s timeout.
                while not stop.is_set():
                    try:
                        status, body = post_json(f"{self.vllm}/v1/completions",
                                                 {"model": self.env["SYSPORT_VLLM_MODEL"], "prompt": "Hello there",
                                                  "max_tokens": 480, "ignore_eos": True, "temperature": 0}, 240.0)
                        n = body["usage"]["completion_tokens"] if status == 200 and isinstance(body, dict) else None
                    except OSError as err:
                        status, n = 0, str(err)
                    with lock:
                        results.append((status, n))

            threads = [threading.Thread(target=one, daemon=True) for _ in range(20)]
            started = time.monotonic()
            for t in threads:
                # Staggered, so that the 20 do not all end (and the gauge drop to 0) at once.
                t.start()
                time.sleep(0.05)

            def running():
                # vLLM's own gauge, after sysport has had a few checks of the engine at work (its
                # readings before the freeze must show progress). The gauge is what sysport reads
                # next: once the worker is frozen it stands still, as the requests do.
                expect(time.monotonic() - started >= 3 * INTERVAL, "not yet 3 checks of the load")
                n = engine_total(self.vllm_port, "vllm:num_requests_running")
                expect(n >= 10, f"vLLM's gauge says {n:g} running")
                return n

            try:
                seen = eventually(running, 30, 0.05)
            except Failed as err:
                # On two busy cores the requests can spend most of their time in vLLM's API
                # server, not its scheduler: try again.
                stop.set()
                for t in threads:
                    t.join(250)
                r["running_at_freeze"], r["unseen"] = 0, str(err)
                return
            t0 = time.monotonic()
            frozen_at = time.time()
            os.kill(worker, signal.SIGSTOP)
            stop.set()
            engine_codes, blips = [], []
            try:
                r["running_at_freeze"] = engine_total(self.vllm_port, "vllm:num_requests_running")
                if r["running_at_freeze"] < 10:
                    with lock:
                        done = sorted({(status, str(n)) for status, n in results})
                    r["missed"] = (f"vLLM's gauge said {seen:g} running {t0 - started:.2f} s after the requests "
                                   f"started; at the freeze vLLM's gauge said {r['running_at_freeze']:g}, "
                                   f"{len(results)} answered {done[:3]}")
                    return  # continued at once (finally), the next try waits for it to be ready
                tstall = reason = live = engine_then = None
                bound = STALL_AFTER + INTERVAL + MARGIN
                while tstall is None and time.monotonic() - t0 < bound + 5:
                    engine_codes.append(probe(f"{self.vllm}/health")[0])
                    status, doc = self.health()
                    if status != 200 and "engine stalled" not in (doc.get("reason") or ""):
                        # Another verdict on the way (vLLM's own /health not answered within
                        # the check's timeout on the loaded cores: `down` for one check): noted
                        # when it first shows, and the wait for the stall goes on.
                        if not blips or blips[-1][1:] != (status, doc.get("reason")):
                            blips.append((round(time.monotonic() - t0, 2), status, doc.get("reason")))
                    elif status != 200:
                        tstall, reason = time.monotonic() - t0, doc.get("reason")
                        live = probe(f"{self.sysport}/live/engine")
                        # What vLLM says of itself while sysport says it is stalled.
                        engine_then = probe(f"{self.vllm}/health", timeout=10.0)[0]
                        # The engine's gauges stand still while it is frozen: the router view's
                        # numbers can be compared with them exactly, requests running.
                        r["router"] = self.router_snapshot()
                    time.sleep(0.1)
                if tstall is not None:
                    # Still frozen: the incident, and the worker's stacks taken while it is.
                    r["frozen_at"] = frozen_at
                    try:
                        r["incident"] = self.stalled_incident(frozen_at)
                    except Failed as err:
                        r["incident_error"] = str(err)
                    r["worker"] = worker
            finally:
                os.kill(worker, signal.SIGCONT)
                t1 = time.monotonic()
            for t in threads:
                t.join(max(0.0, 240 - (time.monotonic() - t1)))
            finished = time.monotonic() - t1
            back = None
            try:
                self.wait_ready(30)
                back = time.monotonic() - t1
            except Failed:
                pass
            r.update(seen=seen, engine=engine_codes, engine_then=engine_then, blips=blips, tstall=tstall,
                     reason=reason, live=live, bound=bound,
                     results=results, alive=sum(t.is_alive() for t in threads), finished=finished, back=back)

        self.check("vLLM's worker frozen with 20 clients of long completions (max_tokens 480, each asking again when answered) running, then continued",
                   lambda: measure() or (f"vLLM's gauge {r['seen']:g} running before the freeze, "
                                         f"{r['running_at_freeze']:g} at the freeze (try {r['attempts']} of 3)"),
                   fatal=True)

        def stalled():
            others = "; ".join(f"{t:.2f} s: {status} {why!r}" for t, status, why in r["blips"])
            expect(r["tstall"] is not None,
                   f"no 'engine stalled' on /health within {r['bound'] + 5:.1f} s; other verdicts: {others}")
            expect(r["reason"] and "vllm: engine stalled" in r["reason"], f"reason {r['reason']!r}")
            expect(r["tstall"] <= r["bound"], f"stalled after {within(r['tstall'], r['bound'])}")
            expect(r["tstall"] >= STALL_AFTER - INTERVAL, f"stalled {r['tstall']:.2f} s after the freeze, "
                                                         f"sooner than stall_after")
            expect(r["live"] and r["live"][0] == 503 and "engine stalled" in r["live"][1],
                   f"/live/engine {r['live']}")
            # vLLM's own /health says 200 throughout: the point of the check. On two cores loaded
            # with 20 completions one of its answers can take longer than the 2 s asked (`0`
            # here); any other answer than 200 fails.
            answered = [c for c in r["engine"] if c != 0]
            expect(answered and set(answered) == {200}, f"vLLM's own /health answered {r['engine']}")
            expect(r["engine_then"] == 200, f"vLLM's own /health when sysport said stalled: {r['engine_then']}")
            self.figure("vLLM frozen with requests running: freeze to 'engine stalled'", f"{r['tstall']:.2f} s")
            late = len(r["engine"]) - len(answered)
            return (f"{within(r['tstall'], r['bound'])}: {r['reason']}; /live/engine 503; vLLM's /health 200 "
                    f"({len(answered)} answers, {late} not within 2 s)"
                    + (f"; other verdicts before the stall: {others}" if r["blips"] else ""))

        self.check(f"frozen while busy: sysport says 'engine stalled' within stall_after + interval + {MARGIN:g} s",
                   stalled)

        def incident():
            expect("incident" in r, f"no incident: {r.get('incident_error')}")
            doc, stacks = r["incident"]["doc"], r["incident"]["stacks"]
            expect(doc["kind"] == "stalled", f"kind {doc['kind']!r}, timeline {doc['timeline']}")
            flat = [x["progress"] for x in doc["readings_before"][-3:]]
            expect(len(doc["readings_before"]) >= 5, f"{len(doc['readings_before'])} readings before")
            expect(r["incident"]["names"][:3] == ["incident.json", "page-before.prom.gz", "page-opening.prom.gz"],
                   f"bundle {r['incident']['names']}")
            procs = {p["pid"]: p for p in (doc["stacks"].get("processes") or [])}
            expect(r["worker"] in procs, f"the worker {r['worker']} not among {doc['stacks']}")
            expect(procs[r["worker"]]["result"] == "ok", f"worker's dump: {procs[r['worker']]}")
            part = stacks.split(f"=== pid {r['worker']}:", 1)[-1].split("=== pid ", 1)[0]
            frames = [ln.strip() for ln in part.splitlines() if "vllm/" in ln]
            expect(frames, f"no vLLM frame in the frozen worker's stacks: {part[:600]!r}")
            self.figure("vLLM frozen with requests running: freeze to incident 'stalled'",
                        f"{doc['opened_unix_seconds'] - r['frozen_at']:.2f} s")
            sizes = [p["bytes"] for p in procs.values()]
            times = [p["duration_seconds"] for p in procs.values()]
            self.figure(f"vLLM stacks at the opening ({len(procs)} processes, py-spy dump --nonblocking "
                        "one at a time): opening to stacks in the incident; each dump's time and bytes",
                        f"{r['incident']['stacks_in']:.2f} s (polled every 0.2 s); "
                        + ", ".join(f"{t * 1000:.0f} ms {b:,} B" for t, b in zip(times, sizes))
                        + f" (total {sum(times) * 1000:.0f} ms, {sum(sizes):,} B)")
            return (f"incident {doc['id']} stalled, {len(procs)} processes dumped; the frozen worker's "
                    f"frames include {frames[0]!r}; last progress readings {flat}")

        self.check("frozen while busy: an incident 'stalled' with the frozen worker's Python stacks (vLLM frames)",
                   incident)

        def finished():
            expect(r["alive"] == 0, f"{r['alive']} completions still running {r['finished']:.0f} s after SIGCONT")
            bad = [x for x in r["results"] if x != (200, 480)]
            expect(len(r["results"]) >= 20 and not bad, f"answers: {bad[:3]} ({len(r['results'])} in all)")
            expect(r["back"] is not None, "sysport not ready again within 30 s")
            return (f"all {len(r['results'])} completions of the 20 clients 200 with 480 tokens, the last "
                    f"{r['finished']:.1f} s after SIGCONT; "
                    f"ready again after {r['back']:.1f} s")

        self.check("SIGCONT: the requests finish (bounded) and sysport is ready again", finished)

        def router():
            expect("router" in r, "no /metrics/router read while the engine was frozen")
            v, l, body = r["router"]
            got, dups = expo.sample_map(expo.parse(body, "text"), "text")
            expect(not dups, f"repeated series: {dups[:3]}")
            groups = {}
            for fams, names in ((v[0], ROUTER["vllm"]), (l[0], ROUTER["llama"])):
                samples = expo.sample_map([f for f in fams if f.name in names], "text")[0]
                for (name, labels), (val, _) in samples.items():
                    if name in COMBINED:
                        labels = frozenset((k, x) for k, x in labels if k not in ("engine", "pid"))
                    groups.setdefault((name, labels), []).append(val)
            want = {}
            for (name, labels), vals in groups.items():
                val = COMBINED[name](vals) if name in COMBINED else vals[0]
                expect(name in COMBINED or len(vals) == 1, f"{name}: {len(vals)} series")
                want[(name, labels)] = (val, None)
                if name in RENAMED:
                    want[(RENAMED[name], labels)] = (val, None)
            problems = expo.compare(want, got)
            expect(not problems, "; ".join(problems))
            shown = {k[0]: val[0] for k, val in want.items() if "info" not in k[0]}
            return (f"{len(want)} series, each the engine's: "
                    + ", ".join(f"{n.split(':')[1]} {x:g}" for n, x in sorted(shown.items())))

        self.check("/metrics/router carries the frozen engines' router families, ranks combined, with their "
                   "values (and kv_cache_usage_perc under its old name too)", router)

    def freeze_llama(self):
        r = {}

        def measure():
            self.wait_ready(30)
            pid = self.procs.running["llama"].pid

            # Frozen just after a canary: the check finds it frozen before the next one is due (a
            # canary caught by the freeze fails, and only the next passing one heals that).
            def after_canary():
                c = self.status()["llama"]["health"]["canary"]
                expect(c["none_because"] is None and (c["next_in_seconds"] or 0) >= CANARY_AFTER - 1,
                       f"llama canary: {c['none_because']}, next in {c['next_in_seconds']}")

            eventually(after_canary, 3 * (CANARY_AFTER + INTERVAL), 0.1)
            t0 = time.monotonic()
            r["frozen_at"], r["pid"] = time.time(), pid
            os.kill(pid, signal.SIGSTOP)
            try:
                bound = INTERVAL + UPSTREAM_TIMEOUT + MARGIN
                down = reason = None
                while down is None and time.monotonic() - t0 < bound + 5:
                    status, doc = self.health()
                    if status != 200:
                        down, reason = time.monotonic() - t0, doc.get("reason")
                    time.sleep(0.1)
            finally:
                os.kill(pid, signal.SIGCONT)
                t1 = time.monotonic()
            back = None
            while back is None and time.monotonic() - t1 < CANARY_AFTER + 2 * INTERVAL + MARGIN + 5:
                if self.health()[0] == 200:
                    back = time.monotonic() - t1
                time.sleep(0.1)
            canary = self.status()["llama"]["health"]["canary"]["last"]
            r.update(down=down, reason=reason, back=back, bound=bound,
                     canary_failed=canary["result"] != "success" and canary["unix_seconds"] > time.time() - 30)
            return "llama-server SIGSTOP, SIGCONT once sysport said not ready"

        self.check("llama-server frozen, then continued", measure, fatal=True)

        def not_ready():
            expect(r["down"] is not None, f"/health stayed 200 for {r['bound'] + 5:.1f} s")
            expect(r["down"] <= r["bound"], f"not ready after {within(r['down'], r['bound'])}")
            expect(r["reason"] and r["reason"].startswith("llama: "), f"reason {r['reason']!r}")
            self.figure("llama-server frozen: freeze to sysport /health 503", f"{r['down']:.2f} s")
            return f"503 {within(r['down'], r['bound'])}: {r['reason']}"

        self.check(f"llama-server frozen: not ready within interval + its timeout ({UPSTREAM_TIMEOUT:g} s) "
                   f"+ {MARGIN:g} s", not_ready)

        def ready_again():
            # At the first passing check; or, when a canary was caught by the freeze after all, at
            # the next passing one.
            bound = (CANARY_AFTER + 2 * INTERVAL if r["canary_failed"] else INTERVAL + UPSTREAM_TIMEOUT) + MARGIN
            expect(r["back"] is not None and r["back"] <= bound, f"ready again after {r['back']} s (bound {bound:g} s)")
            self.figure("llama-server frozen: SIGCONT to sysport /health 200", f"{r['back']:.2f} s")
            return (f"200 again {within(r['back'], bound)}"
                    + ("; a canary caught by the freeze failed" if r["canary_failed"] else ""))

        self.check("llama-server continued: ready again", ready_again)

        def no_python():
            # The stacks are taken at the opening (py-spy finds no Python in a native process,
            # stopped or not); the incident closes SETTLE_CHECKS good checks after.
            def done(d):
                expect(d["stacks"] is not None, "stacks not taken yet")
                expect(d["closed_unix_seconds"] is not None, f"incident {d['id']} still open")

            doc = self.incident_since("llama", r["frozen_at"], timeout=30, until=done)
            expect(doc["kind"] == "down", f"kind {doc['kind']!r}, timeline {doc['timeline']}")
            why = doc["stacks"].get("unavailable") or ""
            want = (f"not a Python process: py-spy found no Python interpreter in the engine's processes "
                    f"(pid {r['pid']}): a native engine such as llama-server has no Python stacks")
            expect(why.startswith(want), f"stacks {doc['stacks']}")
            names = tar_names(self.sysport, doc["id"])
            expect("stacks.txt" not in names, f"bundle {names}")
            expect(f"--port {self.llama_port}" in doc["config"], "incidents.processes not in the incident's config")
            return f"incident {doc['id']} down; found by its command line (incidents.processes); stacks: {why}"

        self.check("llama-server frozen: an incident whose stacks say why there are none (a native process, "
                   "found by its command line)", no_python)

    def kill_worker(self):
        r = {}

        def measure():
            self.wait_ready(30)
            worker = self.vllm_worker()
            leader = self.procs.running["vllm"]
            t0 = time.monotonic()
            r["killed_at"] = time.time()
            os.kill(worker, signal.SIGKILL)
            engine_codes = []
            bound = INTERVAL + 1.0 + MARGIN
            t503 = reason = None
            while t503 is None and time.monotonic() - t0 < bound + 10:
                code = probe(f"{self.vllm}/health", timeout=1.0)[0]
                if not engine_codes or engine_codes[-1] != code:
                    engine_codes.append(code)
                status, doc = self.health()
                if status != 200:
                    t503, reason = time.monotonic() - t0, doc.get("reason")
                time.sleep(0.1)
            try:
                leader.wait(90)
            except subprocess.TimeoutExpired:
                pass
            exited = time.monotonic() - t0 if leader.poll() is not None else None
            down = None
            if exited is not None:
                def is_down():
                    u = self.status()["vllm"]
                    reason = u["health"]["reason"] or ""
                    expect(u["state"] == "down" and "connection refused" in reason,
                           f"state {u['state']}, reason {reason!r}")
                    return reason

                try:
                    down_reason = eventually(is_down, INTERVAL + MARGIN, 0.1)
                    down = (time.monotonic() - t0 - exited, down_reason)
                except Failed as err:
                    down = (None, str(err))
            r.update(t503=t503, reason=reason, bound=bound, engine=engine_codes, exited=exited, down=down,
                     left=group_members(self.procs.groups["vllm"]))
            return f"VLLM::Worker SIGKILL; vLLM's /health answered {' -> '.join(map(str, engine_codes))} (0: refused)"

        self.check("vLLM's worker killed", measure, fatal=True)

        def not_ready():
            expect(r["t503"] is not None, f"/health stayed 200 for {r['bound'] + 10:.1f} s")
            expect(r["t503"] <= r["bound"], f"not ready after {within(r['t503'], r['bound'])}")
            self.figure("vLLM worker killed: kill to sysport /health 503", f"{r['t503']:.2f} s")
            return f"503 {within(r['t503'], r['bound'])}: {r['reason']}"

        self.check(f"killed worker: not ready within interval + vLLM's ~1 s + {MARGIN:g} s", not_ready)

        def down():
            expect(r["exited"] is not None, "vLLM's server still running 90 s after its worker was killed")
            took, reason = r["down"]
            expect(took is not None, reason)
            self.figure("vLLM worker killed: kill to vLLM's server exit", f"{r['exited']:.1f} s")
            return (f"vLLM's server exited {r['exited']:.1f} s after the kill; down {max(took, 0):.2f} s later: "
                    f"{reason}")

        self.check("killed worker: once vLLM's server has exited, the verdict is down (connection refused)", down)

        def incident():
            doc = self.incident_since("vllm", r["killed_at"])
            # Its kind is the verdict that opened it. Between the kill and its exit (0.7 s in one
            # run) vLLM's server still answers, with 500 for a completion: a canary due then
            # opens the incident as 'canary_failed', and the check after the exit makes it down.
            verdicts = [t["verdict"] for t in doc["timeline"]]
            expect(doc["kind"] == "down" or (doc["kind"] == "canary_failed" and "down" in verdicts),
                   f"kind {doc['kind']!r}, timeline {doc['timeline']}")
            took = doc["opened_unix_seconds"] - r["killed_at"]
            expect(took <= r["bound"], f"opened {within(took, r['bound'])} after the kill")
            expect(doc["closed_unix_seconds"] is None, f"closed while vLLM is gone: {doc['timeline']}")
            last = doc["readings"][-1]["health"] if doc["readings"] else None
            if r["exited"] is not None:
                expect(last and "connection refused" in last, f"last reading's health {last!r}")
            return (f"incident {doc['id']} {doc['kind']} {within(took, r['bound'])} after the kill, still open: "
                    f"{doc['reason']}; last reading: {last}")

        self.check("killed worker: an incident 'down' (or 'canary_failed' turned down: a canary met the dying "
                   "server), open while vLLM is gone", incident)

    def finish(self):
        def stop():
            rc = self.procs.stop("sysport", signal.SIGTERM, timeout=15)
            expect(rc == 0, f"sysport exited with {rc}")
            names = list(self.procs.running)
            for name in names:
                self.procs.stop(name, signal.SIGTERM, timeout=30)
            left = {n: group_members(pg) for n, pg in self.procs.groups.items()}
            left = {n: fmt_members(m) for n, m in left.items() if m}
            expect(not left, f"processes left: {left}")
            expect(not self.procs.running, f"still running: {list(self.procs.running)}")
            return f"sysport exit 0; stopped {', '.join(names)}; no process left in the engines' groups"

        self.check("everything stops; no process left", stop)

    def stop_all(self):
        super().stop_all()
        load = os.getloadavg()
        print("figures (measured on this run):", flush=True)
        for what, value in self.figures:
            print(f"  {what}: {value}", flush=True)
        print(f"  load average at the start: {', '.join(f'{x:.2f}' for x in self.load_at_start)}; "
              f"at the end: {', '.join(f'{x:.2f}' for x in load)}", flush=True)


if __name__ == "__main__":
    sys.exit(run.main(RealEngines, __doc__))
