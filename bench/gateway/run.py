"""Gateway-readers benchmark (issue 7); bench/gateway.sh runs it after installing and building
what it needs. Everything listens on 127.0.0.1; every run is bounded by time (the readers stop
issuing requests after the run length, each request times out after 5 s).

Load, in every scenario (target/bench-driver/release/gateway-readers): 20 simulated
inference-gateway endpoint pickers, one GET every 50 ms each (400 reads/s offered), plus one
Prometheus-like full scrape every 5 s. Against:
  (a)  the engine itself (bench/gateway/engine.py: prometheus_client rendering the medium
       fixture registry per request on one thread): readers GET its full /metrics page
  (b)  sysport (min_interval 25ms) in front of that engine: readers GET
       /metrics?name=<the four families the picker reads>; the 5 s scrape GETs /metrics
  (r)  the same sysport, readers GET /metrics/router, the path pickers are configured with
       (issue 15): the engine's four data-parallel ranks combined
  (b') the same sysport, readers GET the full /metrics page (pickers left unchanged)
  (c)  control: as (b), but sysport's upstream is static-serve (bench/load/driver) answering with
       the engine's page bytes: sysport's own latency on this machine without the engine's
       Python thread competing for the CPUs
Per scenario: reads/s served, latency per kind, engine /metrics requests per second and its CPU
(utime+stime from /proc/PID/stat before and after the run), sysport CPU and peak RSS (VmHWM),
failures, skipped ticks, Sysport-Age.

    python run.py OUT_DIR

Environment: SYSPORT_BENCH_QUICK=1 (5 s per scenario), SYSPORT_GATEWAY_SECONDS (run length),
SYSPORT_GATEWAY_MIN_INTERVAL (default 25ms), SYSPORT_GATEWAY_FULL=0 (skip (b')),
SYSPORT_GATEWAY_CONTROL=0 (skip (c)), SYSPORT_GATEWAY_SCENARIOS (the labels to run, comma-separated,
default a,b,r,b',c),
SYSPORT_GATEWAY_PIDFILE (where the pids of started processes are listed, for the caller's trap).
"""
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
# The process helpers of the load test (bench/load/run.py), imported under another name.
sys.path.insert(0, os.path.join(ROOT, "bench/load"))
import run as loadrun  # noqa: E402
from run import free_port, wait_http  # noqa: E402
SYSPORT = os.path.join(ROOT, "target/release/sysport")
READERS_BIN = os.path.join(ROOT, "target/bench-driver/release/gateway-readers")
STATIC_BIN = os.path.join(ROOT, "target/bench-driver/release/static-serve")
PY = os.path.join(ROOT, "bench/.venv/bin/python")
CLK_TCK = os.sysconf("SC_CLK_TCK")

QUICK = os.environ.get("SYSPORT_BENCH_QUICK") == "1"
SECONDS = float(os.environ.get("SYSPORT_GATEWAY_SECONDS", "5" if QUICK else "60"))
MIN_INTERVAL = os.environ.get("SYSPORT_GATEWAY_MIN_INTERVAL", "25ms")
FULL = os.environ.get("SYSPORT_GATEWAY_FULL", "1") != "0"
CONTROL = os.environ.get("SYSPORT_GATEWAY_CONTROL", "1") != "0"
PIDFILE = os.environ.get("SYSPORT_GATEWAY_PIDFILE")
SCENARIOS = set(os.environ.get("SYSPORT_GATEWAY_SCENARIOS", "a,b,r,b',c").split(","))
READERS = 20
PERIOD_MS = 50
SCRAPE_PERIOD_MS = 5000
FAMILIES = ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc", "vllm:lora_requests_info",
            "vllm:cache_config_info"]
SELECTIVE = "/metrics?" + "&".join(f"name={f.replace(':', '%3A')}" for f in FAMILIES)
ROUTER = "/metrics/router"
EXPECT = "vllm:num_requests_waiting"
SETTLE_S = 2.0  # idle pause before each measured window

if not 0.5 <= SECONDS <= 600:
    sys.exit("SYSPORT_GATEWAY_SECONDS must be between 0.5 and 600")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def machine_cpu_seconds():
    """(user+nice+system, irq+softirq+steal) CPU seconds of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:9]]
    # user nice system idle iowait irq softirq steal
    return (v[0] + v[1] + v[2]) / CLK_TCK, (v[5] + v[6] + v[7]) / CLK_TCK


def note_pid(pid):
    if PIDFILE:
        with open(PIDFILE, "a") as f:
            f.write(f"{pid}\n")


def get(url, timeout=30.0, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return r.status, r.read()


def engine_stats(port):
    return json.loads(get(f"http://127.0.0.1:{port}/stats")[1])


HIST = "dynamo_sysport_metrics_request_duration_seconds"


def sysport_hist(port):
    """sysport's own /metrics time histogram: {read: {le: cumulative count}}."""
    body = get(f"http://127.0.0.1:{port}/metrics?name={HIST}")[1].decode()
    out = {}
    for line in body.splitlines():
        if not line.startswith(HIST + "_bucket{"):
            continue
        labels, value = line[len(HIST) + 8:].rsplit("} ", 1)
        kv = dict(part.split("=", 1) for part in labels.split(","))
        read, le = kv.get("read", '""').strip('"'), kv["le"].strip('"')
        out.setdefault(read, {})[le] = float(value)
    return out


def start_sysport(name, upstream_port, out_dir, health=True):
    port = free_port()
    config = os.path.join(out_dir, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(
            f"listen: {{ host: 127.0.0.1, port: {port} }}\n"
            "health: { starting_status: ready }\n"
            "upstreams:\n"
            "  - name: vllm\n"
            f"    url: http://127.0.0.1:{upstream_port}/metrics\n"
            '    keep: ["vllm:", "lmcache:"]\n'
            + (f"    health_url: http://127.0.0.1:{upstream_port}/health\n" if health else "")
            + "    timeout: 2s\n"
            f"    min_interval: {MIN_INTERVAL}\n"
            "shutdown: { drain_delay: 0s }\n"
        )
    env = dict(os.environ, SYSPORT_LOG="warn")
    p = loadrun.Proc(name, [SYSPORT, "--config", config], out_dir, env=env, on_start=note_pid)
    wait_http(f"http://127.0.0.1:{port}/live")
    return p, port


def scenario(label, title, reader_url, scrape_url, procs, out_dir, engine_port=None,
             sysport_port=None):
    """One bounded run of the readers; CPU of each process in `procs` ({role: Proc}) over
    exactly that run, the engine's request count when `engine_port` is given, sysport's own
    /metrics time histogram when `sysport_port` is."""
    # Warm: the readers' first request then finds sysport's fetch and connections in place.
    get(scrape_url)
    get(reader_url)
    time.sleep(SETTLE_S)
    load = os.getloadavg()
    with open("/proc/loadavg") as f:
        log(f"({label}) {title}: /proc/loadavg {f.read().strip()}")
    h0 = sysport_hist(sysport_port) if sysport_port else None
    e0 = engine_stats(engine_port) if engine_port else None
    c0 = {role: loadrun.proc_stat(p.pid)[0] for role, p in procs.items()}
    m0 = machine_cpu_seconds()
    started_at = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    t0 = time.monotonic()
    argv = [READERS_BIN, "--reader-url", reader_url, "--scrape-url", scrape_url,
            "--readers", str(READERS), "--period-ms", str(PERIOD_MS),
            "--scrape-period-ms", str(SCRAPE_PERIOD_MS), "--duration-s", str(SECONDS),
            "--timeout-s", "5", "--expect", EXPECT]
    with open(os.path.join(out_dir, f"readers-{label}.log"), "wb") as err:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err)
        note_pid(p.pid)
        try:
            out, _ = p.communicate(timeout=SECONDS + 60)
        except subprocess.TimeoutExpired:
            raise SystemExit(f"({label}) gateway-readers did not finish in {SECONDS + 60} s")
        finally:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.monotonic() - t0
    c1 = {role: loadrun.proc_stat(p.pid)[0] for role, p in procs.items()}
    m1 = machine_cpu_seconds()
    e1 = engine_stats(engine_port) if engine_port else None
    if p.returncode != 0:
        raise SystemExit(f"({label}) gateway-readers failed ({p.returncode}); see readers-{label}.log")
    r = json.loads(out)
    cpu = {k: c1[k] - c0[k] for k in c0}
    res = {
        "label": label,
        "title": title,
        "reader_url": reader_url,
        "scrape_url": scrape_url,
        "started_at": started_at,
        "window_s": wall,
        "load_before": load,
        "load_after": os.getloadavg(),
        "driver": r,
        "driver_cpu_s": (r["cpu_ticks"] or 0) / CLK_TCK,
        "cpu_s": cpu,
        "cpu_pct": {k: v / wall * 100 for k, v in cpu.items()},
        "machine_task_s": m1[0] - m0[0],
        "machine_irq_s": m1[1] - m0[1],
    }
    # What else ran meanwhile: other processes on the machine (user+system time not ours), and
    # interrupt work (loopback networking's softirqs among it), which no process is charged for.
    res["other_cpu_s"] = res["machine_task_s"] - sum(cpu.values()) - res["driver_cpu_s"]
    if e0 is not None:
        res.update(
            engine_requests=e1["metrics_requests"] - e0["metrics_requests"],
            engine_gzip_requests=e1["metrics_gzip"] - e0["metrics_gzip"],
            engine_bytes_out=e1["bytes_out"] - e0["bytes_out"],
            engine_busy_s=e1["busy_seconds"] - e0["busy_seconds"],
        )
        res["engine_requests_per_s"] = res["engine_requests"] / wall
    if sysport_port:
        h1 = sysport_hist(sysport_port)
        # sysport's own view of the same reads: how many took over 1 ms inside it.
        res["sysport_server_time"] = {
            read: {"n": b["+Inf"] - h0.get(read, {}).get("+Inf", 0),
                   "over_1ms": (b["+Inf"] - b["0.001"])
                   - (h0.get(read, {}).get("+Inf", 0) - h0.get(read, {}).get("0.001", 0))}
            for read, b in h1.items() if "0.001" in b and "+Inf" in b}
    if "sysport" in procs:
        res["sysport_hwm_mib"] = loadrun.proc_status_kib(procs["sysport"].pid, "VmHWM") / 1024
        res["sysport_rss_mib"] = loadrun.proc_status_kib(procs["sysport"].pid, "VmRSS") / 1024
    rd, sc = r["reads"], r["scrapes"]
    log(f"({label}) reads {rd['ok']}/{rd['requests']} ok ({r['served_reads_per_s']:.1f}/s of "
        f"{r['offered_reads_per_s']:.0f}/s offered), p50 {rd['latency_ms']['p50']} ms, "
        f"p99 {rd['latency_ms']['p99']} ms, skipped ticks {rd['skipped']}; scrapes "
        f"{sc['ok']}/{sc['requests']}"
        + (f"; engine {res['engine_requests_per_s']:.1f} req/s" if e0 is not None else "")
        + "".join(f"; {k} CPU {v:.2f} s ({res['cpu_pct'][k]:.0f}%)" for k, v in cpu.items())
        + (f", VmHWM {res['sysport_hwm_mib']:.1f} MiB" if "sysport" in procs else ""))
    return res


def main():
    out_dir = os.path.abspath(sys.argv[1])
    os.makedirs(out_dir, exist_ok=True)
    started = time.monotonic()
    results = {"machine": loadrun.machine(), "code": loadrun.code_state(),
               "seconds_per_scenario": SECONDS,
               "readers": READERS, "period_ms": PERIOD_MS, "scrape_period_ms": SCRAPE_PERIOD_MS,
               "min_interval": MIN_INTERVAL, "families": FAMILIES, "scenarios": []}
    log(f"machine: {results['machine']}")
    procs = []
    try:
        engine_port = free_port()
        engine = loadrun.Proc("engine", [PY, os.path.join(HERE, "engine.py"), str(engine_port)],
                              out_dir, ready="ready", on_start=note_pid)
        procs.append(engine)
        results["engine_page_bytes"] = int(engine.ready_line.split()[2])
        engine_url = f"http://127.0.0.1:{engine_port}/metrics"
        wait_http(engine_url)
        log(f"engine: pid {engine.pid}, {results['engine_page_bytes']} bytes per /metrics page")
        runs = results["scenarios"]
        if "a" in SCENARIOS:
            runs.append(scenario("a", "readers -> engine, full page", engine_url, engine_url,
                                 {"engine": engine}, out_dir, engine_port=engine_port))
        sysport, sp_port = start_sysport("sysport", engine_port, out_dir)
        procs.append(sysport)
        base = f"http://127.0.0.1:{sp_port}"
        both = {"engine": engine, "sysport": sysport}
        if "b" in SCENARIOS:
            runs.append(scenario("b", f"readers -> sysport ?name= (min_interval {MIN_INTERVAL})",
                                 base + SELECTIVE, base + "/metrics", both, out_dir,
                                 engine_port=engine_port, sysport_port=sp_port))
        if "r" in SCENARIOS:
            runs.append(scenario("r", f"readers -> sysport {ROUTER} (min_interval {MIN_INTERVAL})",
                                 base + ROUTER, base + "/metrics", both, out_dir,
                                 engine_port=engine_port, sysport_port=sp_port))
            results["sysport_router_bytes"] = len(get(base + ROUTER)[1])
        # Sizes of what the readers get from sysport, for the report.
        results["sysport_selective_bytes"] = len(get(base + SELECTIVE)[1])
        results["sysport_full_bytes"] = len(get(base + "/metrics")[1])
        if FULL and "b'" in SCENARIOS:
            runs.append(scenario("b'", f"readers -> sysport full page (min_interval {MIN_INTERVAL})",
                                 base + "/metrics", base + "/metrics", both, out_dir,
                                 engine_port=engine_port, sysport_port=sp_port))
        sysport.stop()
        if CONTROL and "c" in SCENARIOS:
            # The engine's page as static bytes: sysport's own latency floor on this machine,
            # without the engine's Python thread competing for the two cores.
            page = os.path.join(out_dir, "engine-page.prom")
            with open(page, "wb") as f:
                f.write(get(engine_url)[1])
            st_port = free_port()
            static = loadrun.Proc("static-serve", [STATIC_BIN, f"127.0.0.1:{st_port}", page],
                                  out_dir, on_start=note_pid)
            procs.append(static)
            wait_http(f"http://127.0.0.1:{st_port}/metrics")
            sp2, sp2_port = start_sysport("sysport-control", st_port, out_dir, health=False)
            procs.append(sp2)
            base2 = f"http://127.0.0.1:{sp2_port}"
            runs.append(scenario("c", f"control: readers -> sysport ?name= (min_interval "
                                      f"{MIN_INTERVAL}) -> static-serve, same bytes",
                                 base2 + SELECTIVE, base2 + "/metrics",
                                 {"sysport": sp2, "static": static}, out_dir,
                                 sysport_port=sp2_port))
    finally:
        for p in reversed(procs):
            p.stop()
    results["machine"]["load_end"] = os.getloadavg()
    results["seconds"] = time.monotonic() - started
    report = render(results)  # also records the target checks in `results`
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(report)
    print(report)


def ms(v):
    return "—" if v is None else f"{v:.3f}" if v < 10 else f"{v:.1f}"


def render(res):
    m = res["machine"]
    runs = {r["label"]: r for r in res["scenarios"]}
    labels = list(runs)
    a, b = runs.get("a"), runs.get("b")
    lines = [
        f"machine: {m['nproc']} CPUs, {m['cpu']}; load average at start "
        f"{' '.join(f'{x:.2f}' for x in m['load_start'])}, at end "
        f"{' '.join(f'{x:.2f}' for x in m['load_end'])}; run took {res['seconds']:.0f} s",
        f"code: commit {res['code']['commit']}"
        + (f", uncommitted: {'; '.join(res['code']['uncommitted'])}"
           if res["code"]["uncommitted"] else ", no uncommitted change to src/"),
        f"load: {res['readers']} readers x one GET per {res['period_ms']} ms "
        f"({res['readers'] * 1000 / res['period_ms']:.0f} reads/s offered) + one full scrape per "
        f"{res['scrape_period_ms'] / 1000:g} s; {res['seconds_per_scenario']:g} s per scenario; "
        f"engine page {res['engine_page_bytes']} bytes (medium fixture registry); sysport "
        f"min_interval {res['min_interval']}; selective read = {len(res['families'])} families, "
        f"{res.get('sysport_selective_bytes', 0)} bytes; {ROUTER} "
        f"{res.get('sysport_router_bytes', 0)} bytes; sysport full page "
        f"{res.get('sysport_full_bytes', 0)} bytes",
        "",
    ]
    for r in res["scenarios"]:
        lines.append(f"- ({r['label']}) {r['title']}: readers GET `{r['driver']['reads']['url']}`")
    lines += ["", "| | " + " | ".join(f"({l})" for l in labels)
              + (" | (a)/(b) |" if a and b else " |"),
              "|---|" + "---:|" * (len(labels) + (1 if a and b else 0))]

    def row(name, f, ratio=None):
        cells = []
        for l in labels:
            try:
                cells.append(f(runs[l]))
            except (KeyError, TypeError, ZeroDivisionError):
                cells.append("—")
        if a and b:
            try:
                cells.append(ratio(a, b) if ratio else "")
            except (KeyError, TypeError, ZeroDivisionError):
                cells.append("—")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")

    def rd(r):
        return r["driver"]["reads"]

    def sc(r):
        return r["driver"]["scrapes"]

    def lat(kind, q):
        return lambda r: ms(kind(r)["latency_ms"][q])

    row("reads offered / s", lambda r: f"{r['driver']['offered_reads_per_s']:.0f}")
    row("reads served / s (200, body checked)", lambda r: f"{r['driver']['served_reads_per_s']:.1f}",
        lambda a, b: f"{a['driver']['served_reads_per_s'] / b['driver']['served_reads_per_s']:.3f}")
    row("reads ok / sent", lambda r: f"{rd(r)['ok']} / {rd(r)['requests']}")
    row("read latency p50 ms", lat(rd, "p50"),
        lambda a, b: f"{rd(a)['latency_ms']['p50'] / rd(b)['latency_ms']['p50']:.0f}")
    row("read latency p99 ms", lat(rd, "p99"),
        lambda a, b: f"{rd(a)['latency_ms']['p99'] / rd(b)['latency_ms']['p99']:.0f}")
    row("reads over 1 ms", lambda r: f"{rd(r)['latency_ms']['over_1ms']} "
        f"({rd(r)['latency_ms']['over_1ms'] / rd(r)['ok'] * 100:.1f}%)")
    row("of which over 1 ms inside sysport (its histogram)",
        lambda r: ", ".join(f"{k} {v['over_1ms']:.0f} of {v['n']:.0f}"
                            for k, v in sorted(r["sysport_server_time"].items()) if v["n"]))
    row("read latency p99.9 / max ms",
        lambda r: f"{ms(rd(r)['latency_ms']['p999'])} / {ms(rd(r)['latency_ms']['max'])}")
    row("read bytes on the wire (gzip) / decoded",
        lambda r: f"{rd(r)['wire_bytes_per_ok_read']:.0f} / {rd(r)['body_bytes_per_ok_read']:.0f}")
    row("reader ticks skipped / taken late",
        lambda r: f"{rd(r)['skipped']} / {rd(r)['late']}")
    row("full scrapes ok / sent", lambda r: f"{sc(r)['ok']} / {sc(r)['requests']}")
    row("full scrape latency p50 / max ms",
        lambda r: f"{ms(sc(r)['latency_ms']['p50'])} / {ms(sc(r)['latency_ms']['max'])}")
    row("failures (reads + scrapes)",
        lambda r: str(rd(r)["failed"] + sc(r)["failed"])
        + (f" {dict(rd(r)['failures']) | dict(sc(r)['failures'])}"
           if rd(r)["failed"] + sc(r)["failed"] else ""))
    row("engine /metrics requests / s", lambda r: f"{r['engine_requests_per_s']:.1f}",
        lambda a, b: f"{a['engine_requests_per_s'] / b['engine_requests_per_s']:.1f}")
    row("engine CPU s (% of a core)",
        lambda r: f"{r['cpu_s']['engine']:.2f} ({r['cpu_pct']['engine']:.0f}%)",
        lambda a, b: f"{a['cpu_s']['engine'] / b['cpu_s']['engine']:.2f}")
    row("engine CPU ms per read served",
        lambda r: f"{r['cpu_s']['engine'] * 1e3 / rd(r)['ok']:.2f}",
        lambda a, b: f"{(a['cpu_s']['engine'] / rd(a)['ok']) / (b['cpu_s']['engine'] / rd(b)['ok']):.1f}")
    row("engine CPU ms per engine request",
        lambda r: f"{r['cpu_s']['engine'] * 1e3 / r['engine_requests']:.1f}")
    row("engine time in the metrics app s", lambda r: f"{r['engine_busy_s']:.2f}")
    row("sysport CPU s (% of a core)",
        lambda r: f"{r['cpu_s']['sysport']:.2f} ({r['cpu_pct']['sysport']:.0f}%)")
    row("sysport peak RSS (VmHWM) MiB", lambda r: f"{r['sysport_hwm_mib']:.1f}")
    row("Sysport-Age p50 / p99 / max s",
        lambda r: (f"{rd(r)['age_s']['p50']:.3f} / {rd(r)['age_s']['p99']:.3f} / "
                   f"{rd(r)['age_s']['max']:.3f}") if rd(r)["age_s"]["n"] else "(no header)")
    row("reader process CPU s", lambda r: f"{r['driver_cpu_s']:.2f}")
    row("other processes' CPU on the machine meanwhile s",
        lambda r: f"{r['other_cpu_s']:.1f}")
    row("irq + softirq + steal CPU meanwhile s", lambda r: f"{r['machine_irq_s']:.1f}")
    row("measured window s", lambda r: f"{r['window_s']:.1f}")
    row("load average before (1/5/15 min)",
        lambda r: " ".join(f"{x:.2f}" for x in r["load_before"]))
    lines.append("")

    checks = []
    if b:
        v = b["engine_requests_per_s"]
        checks.append((v <= 40, f"(b) engine receives at most 40 requests/s: {v:.1f}/s"))
    if a and b:
        ca, cb = a["cpu_s"]["engine"], b["cpu_s"]["engine"]
        ratio = ca / cb if cb > 0 else float("inf")
        checks.append((ratio >= 10, f"engine CPU (a)/(b) at least 10x: {ca:.2f} s / {cb:.2f} s "
                                    f"= {ratio:.2f}x"))
    if b:
        p99 = rd(b)["latency_ms"]["p99"]
        checks.append((p99 is not None and p99 < 1.0,
                       f"(b) selective read p99 under 1 ms: {ms(p99)} ms"))
    rr = runs.get("r")
    if rr:
        v = rr["engine_requests_per_s"]
        checks.append((v <= 40, f"(r) engine receives at most 40 requests/s: {v:.1f}/s"))
        inside = rr["sysport_server_time"].get("view", {"n": 0, "over_1ms": 0})
        checks.append((inside["n"] > 0 and inside["over_1ms"] <= inside["n"] / 100,
                       f"(r) {ROUTER} p99 inside sysport under 1 ms: {inside['over_1ms']:.0f} of "
                       f"{inside['n']:.0f} reads over 1 ms (its own histogram)"))
        checks.append((rd(rr)["ok"] == rd(rr)["requests"],
                       f"(r) every read succeeds: {rd(rr)['ok']} of {rd(rr)['requests']}"))
    c = runs.get("c")
    fails = {r["label"]: rd(r)["failed"] + sc(r)["failed"] for r in res["scenarios"]}
    checks.append((sum(fails.values()) == 0,
                   "no read fails: " + ", ".join(f"({k}) {v}" for k, v in fails.items())))
    lines.append("Targets (issues 7 and 15):")
    lines.append("")
    for ok, text in checks:
        lines.append(f"    {'PASS' if ok else 'FAIL'}  {text}")
    if c:
        lines += ["", f"Control (c), not a target: selective read p99 "
                      f"{ms(rd(c)['latency_ms']['p99'])} ms with a static upstream."]
    res["checks"] = [{"pass": ok, "check": text} for ok, text in checks]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    # SIGTERM (the caller's trap) unwinds through the finally blocks that stop the children.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    main()
