"""Bounded vitals and probes on their own thread: sysport's resident memory over long runs of
health checks with the engine vitals on (`vitals: { window: 1m }`, the default) and off
(`vitals: { window: 0s }`), what `GET /status` takes at the end, and how long `/live` takes
while four clients read `/status` and `/` without pause.

Three stand-in vLLM engines (bench/bounds/engine.py, each a process of its own on 127.0.0.1,
its page made again every second with its counters moving):

    16MB       the load test's 16 MB page (360 ranks), checked every 5 s (the default)
    ranks1000  1,000 data-parallel ranks, every vitals family, checked every second
    ranks2000  2,000 ranks, the same
    churn100   100 ranks whose every series has a label with a new value every second (tests/
               bounds.rs's churning engine), checked every second; no probe test

For each engine two sysport processes check it at the same time, one with the vitals on and
one off, with a `health_url` and `canary_after: 0s`. Every 10 s the script reads each one's
VmRSS (and VmHWM, the peak) from /proc/PID/status with the 1-minute load average. A process
whose RSS passes --cap-mib (1 GiB) is stopped there: its run ends at that sample. At the end
of each process's run: 20 GETs of `/status` one after another (their mean and max; fewer if
they take more than --status-budget seconds, 300, when a GET still unanswered is given up) and, for
the vitals-on process of a rank engine, the probe test: four clients (two on `/status`, two on
`/`, each a process of its own) read without pause while `/live` is probed on a fresh
connection every 100 ms for --live-seconds (60), each probe on its own thread, as a kubelet
probes, timed to the end of its answer. What `/status` says of the vitals (`kept_bytes`,
readings, ranks shown, sparkline points) is kept, and `kept_bytes` is shown beside what
docs/vitals.md's formula gives for them.

    python run.py SYSPORT_BIN OUT_DIR [MINUTES] [--only=16MB,ranks1000,ranks2000,churn100]
                  [--cap-mib=1024] [--live-seconds=60] [--status-budget=300] [--tables]

Writes OUT_DIR/SCENARIO.json (every sample) and prints the tables; with --tables, measures
nothing and prints the tables of the SCENARIO.json files already in OUT_DIR.
"""
import json
import os
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from multiprocessing import Event, Process, Value

import engine  # bench/bounds/engine.py, beside this file

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "../load"))
import run as loadrun  # noqa: E402  (bench/load/run.py: its process helpers)
from run import free_port, rss_mib  # noqa: E402

ARGS = [a for a in sys.argv[1:] if not a.startswith("--")]
OPTS = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
SYSPORT, OUT = ARGS[0], ARGS[1]
MINUTES = float(ARGS[2]) if len(ARGS) > 2 else 10.0
CAP_MIB = float(OPTS.get("cap-mib", 1024))
LIVE_SECONDS = float(OPTS.get("live-seconds", 60))
STATUS_BUDGET = float(OPTS.get("status-budget", 300))
EVERY = 10.0
# Where the RSS table reads the timeline, in seconds.
MARKS = [60, 120, 300, 600]

SCENARIOS = {
    "16MB": (lambda: engine.Registry(360, os.path.join(OUT, "page-16MB.prom")), "5s", 5, False),
    "ranks1000": (lambda: engine.Ranks(1000), "1s", 1, True),
    "ranks2000": (lambda: engine.Ranks(2000), "1s", 1, True),
    "churn100": (lambda: engine.Ranks(100, churn=True), "1s", 1, False),
}


def load():
    """The 1-minute load average."""
    return os.getloadavg()[0]


def start(name, url, interval, window):
    """A sysport process checking the engine at `url`, answering on a port of its own."""
    port = free_port()
    config = os.path.join(OUT, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(f"listen: {{ host: 127.0.0.1, port: {port} }}\n")
        f.write(f"health: {{ interval: {interval} }}\nshutdown: {{ drain_delay: 0s }}\n")
        f.write(f"vitals: {{ window: {window} }}\n")
        f.write(f"upstreams:\n  - name: vllm\n    engine: vllm\n    url: {url}/metrics\n")
        f.write(f"    health_url: {url}/health\n    canary_after: 0s\n")
    log = open(os.path.join(OUT, f"{name}.log"), "wb")
    proc = subprocess.Popen([SYSPORT, "--config", config], stdout=log, stderr=log)
    proc.port = port
    for _ in range(100):
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/live", timeout=1):
                return proc
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"{name}: sysport did not answer /live (see {log.name})")


def reader(url, stop, reads):
    """A client reading `url` again and again without pause, until `stop`."""
    while not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=300) as r:
                r.read()
            with reads.get_lock():
                reads.value += 1
        except OSError:
            time.sleep(0.1)


def probe(port, path, results):
    """One probe on a fresh connection: (seconds to the end of the answer, status code)."""
    t0 = time.perf_counter()
    code, error = 0, None
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
        code = int(answer.split(b" ", 2)[1])
    except (OSError, ValueError, IndexError) as e:
        error = type(e).__name__
    results.append((time.perf_counter() - t0, code, error))


def probe_test(port):
    """`/live` every 100 ms while four clients read `/status` and `/` without pause."""
    stop = Event()
    reads = [Value("q", 0) for _ in range(4)]
    paths = ["/status", "/", "/status", "/"]
    clients = [
        Process(target=reader, args=(f"http://127.0.0.1:{port}{p}", stop, n), daemon=True)
        for p, n in zip(paths, reads)
    ]
    for c in clients:
        c.start()
    time.sleep(1)
    la = load()
    results, threads = [], []
    started = time.monotonic()
    for i in range(int(LIVE_SECONDS * 10)):
        time.sleep(max(0.0, started + i * 0.1 - time.monotonic()))
        th = threading.Thread(target=probe, args=(port, "/live", results), daemon=True)
        th.start()
        threads.append(th)
    for th in threads:
        th.join(timeout=40)
    stop.set()
    for c in clients:
        c.join(timeout=5)
        if c.is_alive():
            c.kill()
    took = sorted(r[0] for r in results)
    return {
        "load": la,
        "probes": len(results),
        "not_200": sum(1 for r in results if r[1] != 200),
        "errors": sorted({r[2] for r in results if r[2]}),
        "p50_ms": took[len(took) // 2] * 1e3,
        "p99_ms": took[min(len(took) - 1, int(len(took) * 0.99))] * 1e3,
        "max_ms": took[-1] * 1e3,
        "over_100ms": sum(1 for t in took if t > 0.1),
        "over_4s": sum(1 for t in took if t > 4),
        "status_reads": reads[0].value + reads[2].value,
        "page_reads": reads[1].value + reads[3].value,
    }


def timed_status(port):
    """20 GETs of /status one after another, or as many as STATUS_BUDGET allows (a GET still
    unanswered then is given up): their seconds, the last answer, and how long a GET given up
    had waited."""
    took, body, given_up = [], None, None
    deadline = time.monotonic() + STATUS_BUDGET
    while len(took) < 20 and time.monotonic() < deadline:
        t0 = time.perf_counter()
        try:
            url = f"http://127.0.0.1:{port}/status"
            with urllib.request.urlopen(url, timeout=max(1.0, deadline - time.monotonic())) as r:
                body = r.read()
        except (TimeoutError, urllib.error.URLError):
            given_up = time.perf_counter() - t0
            break
        took.append(time.perf_counter() - t0)
    return took, body, given_up


def watchdog(proc, run, done):
    """Stops `proc` if its RSS passes twice the cap while its end is measured."""
    while not done.wait(1):
        try:
            rss = rss_mib(proc.pid)[0]
        except OSError:
            return
        if rss > 2 * CAP_MIB:
            run["killed_at_mib"] = rss
            proc.kill()
            return


def finish(proc, run, live):
    """The end of one process's run: /status timed, the probe test, then the process stopped."""
    run["ended_s"] = run["samples"][-1][0] if run["samples"] else 0
    done = threading.Event()
    threading.Thread(target=watchdog, args=(proc, run, done), daemon=True).start()
    run["cpu_s"] = loadrun.proc_stat(proc.pid)[0]
    run["status_load"] = load()
    try:
        took, body, given_up = timed_status(proc.port)
        run["status_ms"] = {"n": len(took), "given_up_s": given_up}
        if took:
            run["status_ms"].update(mean=statistics.mean(took) * 1e3, max=max(took) * 1e3)
            run["status_ms"]["all"] = [t * 1e3 for t in took]
        vitals = json.loads(body)["upstreams"][0].get("vitals") if body else None
        if vitals:
            run["vitals"] = {
                k: vitals.get(k) for k in ("kept_bytes", "readings", "readings_total", "left_out")
            }
            run["vitals"]["ranks_shown"] = len(vitals.get("ranks") or [])
            run["vitals"]["pids_shown"] = len(vitals.get("pids") or [])
            run["vitals"]["sparks"] = len((vitals.get("history") or {}).get("running") or [])
        run["rss_after_status"] = rss_mib(proc.pid)
        if live:
            run["live"] = probe_test(proc.port)
            run["rss_after_live"] = rss_mib(proc.pid)
    except (OSError, ValueError) as e:
        run["error"] = repr(e)
    done.set()
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def scenario(name):
    make, interval, interval_s, probes = SCENARIOS[name]
    eng = engine.Engine(make)
    result = {
        "scenario": name,
        "interval": interval,
        "page_bytes": eng.page_bytes,
        "vitals_bytes": eng.vitals_bytes,
        "bucket_bounds": eng.bounds,
        "load_start": load(),
    }
    procs = {
        "on": start(f"{name}-on", eng.url, interval, "1m"),
        "off": start(f"{name}-off", eng.url, interval, "0s"),
    }
    runs = {w: {"samples": []} for w in procs}
    result["runs"] = runs
    t0 = time.monotonic()
    live = dict(procs)
    enders = []
    for k in range(1, int(MINUTES * 60 / EVERY) + 1):
        time.sleep(max(0.0, t0 + k * EVERY - time.monotonic()))
        for which, proc in list(live.items()):
            rss, peak = rss_mib(proc.pid)
            runs[which]["samples"].append((round(time.monotonic() - t0), rss, peak, load()))
            if rss > CAP_MIB:
                runs[which]["capped"] = True
                del live[which]
                # Its /status and probes are taken now, while the other one goes on.
                th = threading.Thread(
                    target=finish, args=(proc, runs[which], probes and which == "on")
                )
                th.start()
                enders.append(th)
        if not live:
            break
    for th in enders:
        th.join()
    for which in ("off", "on"):
        if which in live:
            finish(live[which], runs[which], probes and which == "on")
    result["engine_requests"] = {"full": eng.counts[0], "selected": eng.counts[1], "health": eng.counts[2]}
    eng.stop()
    with open(os.path.join(OUT, f"{name}.json"), "w") as f:
        json.dump(result, f, indent=1)
    return result


def at(samples, second):
    """The sample at `second` (the last before it, if the run ended sooner: None)."""
    for s in samples:
        if s[0] >= second - EVERY / 2:
            return s
    return None


# What one sparkline point keeps (docs/vitals.md's formula).
SPARK_BYTES = 96


def formula(vitals, bounds):
    """docs/vitals.md's kept_bytes for what `/status` says is kept: P × G × (9 + B) × 8 + S × 96."""
    groups = 1 + vitals["ranks_shown"] + vitals["pids_shown"]
    return vitals["readings"] * groups * (9 + bounds) * 8 + vitals["sparks"] * SPARK_BYTES


def tables(results):
    print(f"{SYSPORT}, {MINUTES:g} min per run, RSS every {EVERY:g} s, cap {CAP_MIB:g} MiB\n")
    print("RSS MiB (1-minute load average when read)\n")
    print("| scenario | vitals | " + " | ".join(f"{m // 60} min" for m in MARKS) + " | peak (VmHWM) | run |")
    print("|---|---|" + "---:|" * len(MARKS) + "---:|---|")
    for r in results:
        for which, run in r["runs"].items():
            cells = []
            for m in MARKS:
                s = at(run["samples"], m)
                cells.append(f"{s[1]:,.1f} ({s[3]:.2f})" if s else "-")
            peak = max((s[2] for s in run["samples"]), default=0)
            how = f"stopped at {run['ended_s']} s over {CAP_MIB:g} MiB" if run.get("capped") else f"{run['ended_s']} s"
            print(f"| {r['scenario']} | {which} | " + " | ".join(cells) + f" | {peak:,.1f} | {how} |")
    print("\n`GET /status` at the end of each run (20 one after another)\n")
    print("| scenario | vitals | GETs | mean ms | max ms | load | kept_bytes | the formula's | readings | ranks shown | sparkline points |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        for which, run in r["runs"].items():
            st = run.get("status_ms") or {}
            if st.get("given_up_s"):
                st["n"] = f"{st['n']} (+1 given up after {st['given_up_s']:.0f} s)"
            v = run.get("vitals") or {}
            want = formula(v, r["bucket_bounds"]) if v.get("kept_bytes") is not None else "-"
            print(
                f"| {r['scenario']} | {which} | {st.get('n', 0)} | {st.get('mean', float('nan')):,.2f} | {st.get('max', float('nan')):,.2f} "
                f"| {run.get('status_load', 0):.2f} | {v.get('kept_bytes', '-')} | {want} | {v.get('readings', '-')} "
                f"| {v.get('ranks_shown', '-')} | {v.get('sparks', '-')} |"
            )
    print("\n`/live` every 100 ms while four clients read `/status` and `/` without pause\n")
    print("| scenario | probes | p50 ms | p99 ms | max ms | over 100 ms | over 4 s | not 200 | reads of /status, / | load |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        lv = r["runs"]["on"].get("live")
        if lv:
            print(
                f"| {r['scenario']} | {lv['probes']} | {lv['p50_ms']:,.1f} | {lv['p99_ms']:,.1f} | {lv['max_ms']:,.1f} "
                f"| {lv['over_100ms']} | {lv['over_4s']} | {lv['not_200']} | {lv['status_reads']}, {lv['page_reads']} | {lv['load']:.2f} |"
            )
    for r in results:
        errors = {w: run["error"] for w, run in r["runs"].items() if "error" in run}
        if errors:
            print(f"\n{r['scenario']}: {errors}")


if __name__ == "__main__":
    os.makedirs(OUT, exist_ok=True)
    picked = OPTS["only"].split(",") if "only" in OPTS else list(SCENARIOS)
    if "--tables" in sys.argv:
        results = []
        for name in picked:
            with open(os.path.join(OUT, f"{name}.json")) as f:
                results.append(json.load(f))
        tables(results)
        sys.exit(0)
    results = []
    for name in picked:
        print(f"{name}: started, load {load():.2f}", file=sys.stderr, flush=True)
        results.append(scenario(name))
    tables(results)
