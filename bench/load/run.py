"""Side-by-side load test of sysport and its peers; bench/load.sh runs it after installing and
building what it needs. Everything listens on 127.0.0.1; every run is bounded by time (wrk -d)
and by request count (wrk.lua).

For each payload (the 740 KB vLLM-style registry and a 16 MB one), at 1 and 8 concurrent
scrapers:
  (a)  direct fetch of the payload bytes from a static loopback server (static-serve)
  (b)  sysport in front of that static server
  (c)  Dynamo 1.6.1's system port serving the registry through register_engine_metrics_callback
  (d)  a Python prometheus_client parse-filter-re-expose proxy in front of the static server
  (e0) prometheus_client's own server rendering the registry per request (the engine itself)
  (e)  sysport in front of (e0)
Per run: p50/p90/p99 latency, scrapes/s, CPU seconds per scrape of each process involved (from
/proc/PID/stat), peak RSS (VmHWM). Then sysport's idle RSS, binary size, exec -> first /live 200,
grep over the same payloads, and allocation counts from the driver.

    python run.py OUT_DIR
"""
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
SYSPORT = os.path.join(ROOT, "target/release/sysport")
DRIVER_DIR = os.path.join(ROOT, "target/bench-driver/release")
PY = os.path.join(ROOT, "bench/.venv/bin/python")
CLK_TCK = os.sysconf("SC_CLK_TCK")
DYNAMO = os.environ.get("SYSPORT_BENCH_DYNAMO", "1") == "1"

PAYLOADS = [
    # name, engines, seconds per run for the fast (Rust) and the slow (Python) servers
    ("740KB", 12, 6, 8),
    ("16MB", 360, 6, 20),
]
if os.environ.get("SYSPORT_BENCH_QUICK") == "1":  # a smoke run of the whole procedure
    PAYLOADS = [("740KB", 12, 2, 2)]
CONNECTIONS = [1, 8]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port(below=None):
    """A free loopback port; `below` bounds it (Dynamo reads DYN_SYSTEM_PORT as an i16)."""
    if below is None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]
    for port in range(below - 1, below - 2000, -1):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
    raise SystemExit(f"no free port below {below}")


def proc_stat(pid):
    """(CPU seconds, minor page faults) of a process: utime + stime, minflt."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK, int(fields[7])


def proc_status_kib(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def rss_mib(pid):
    """Resident set size and its peak (VmRSS, VmHWM) of a process, in MiB."""
    return tuple(proc_status_kib(pid, key) / 1024 for key in ("VmRSS", "VmHWM"))


class Proc:
    """A child process we started; stopped by its own pid only."""

    def __init__(self, name, argv, out_dir, env=None, ready=None, on_start=None):
        self.name = name
        self.log_path = os.path.join(out_dir, f"{name}.log")
        self.log = open(self.log_path, "wb")
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE if ready else self.log,
                                  stderr=self.log, env=env, cwd=HERE)
        if on_start:
            on_start(self.p.pid)
        self.ready_line = None
        if ready:
            # The Python servers print one line once they listen.
            line = self.p.stdout.readline().decode()
            if not line.startswith(ready):
                self.stop()
                raise SystemExit(f"{name} did not start; see {self.log_path}")
            self.ready_line = line.strip()

    @property
    def pid(self):
        return self.p.pid

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()


def wait_http(url, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                r.read()
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"{url} did not answer 200 within {timeout} s")


def sysport(name, upstream_url, out_dir, binary=SYSPORT, env=None):
    """A sysport in front of `upstream_url` (logging at warn unless `env` says otherwise)."""
    port = free_port()
    config = os.path.join(out_dir, f"{name}.yaml")
    with open(config, "w") as f:
        f.write(
            f"listen: {{ host: 127.0.0.1, port: {port} }}\n"
            "health: { starting_status: ready }\n"
            "upstreams:\n"
            "  - name: vllm\n"
            f"    url: {upstream_url}\n"
            '    keep: ["vllm:", "lmcache:"]\n'
            "    timeout: 60s\n"
            "shutdown: { drain_delay: 0s }\n"
        )
    env = dict(os.environ if env is None else env)
    env.setdefault("SYSPORT_LOG", "warn")
    p = Proc(name, [binary, "--config", config], out_dir, env=env)
    wait_http(f"http://127.0.0.1:{port}/live")
    return p, f"http://127.0.0.1:{port}/metrics"


# wrk always runs for its whole -d (the count cap only stops sending), so the cap sits above
# what any server here reaches in a run; a run that hits it is flagged.
MAX_REQUESTS = 200000


def wrk(url, conns, seconds, headers=(), max_requests=MAX_REQUESTS):
    env = dict(os.environ, WRK_MAX_REQUESTS=str(max_requests))
    argv = ["wrk", "-t1", f"-c{conns}", f"-d{seconds}s", "--timeout", "60s",
            "-s", os.path.join(HERE, "wrk.lua")]
    for h in headers:
        argv += ["-H", h]
    argv.append(url)
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=seconds + 120)
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise SystemExit(f"wrk gave no result: {out.stdout}\n{out.stderr}")


def measure(label, url, conns, seconds, procs, headers=()):
    """One bounded wrk run; CPU and peak RSS of each process in `procs` ({role: Proc})."""
    with urllib.request.urlopen(url, timeout=120) as r:  # warm: upstream connection, first parse
        r.read()
    s0 = {role: proc_stat(p.pid) for role, p in procs.items()}
    r = wrk(url, conns, seconds, headers)
    s1 = {role: proc_stat(p.pid) for role, p in procs.items()}
    n = max(r["requests"], 1)
    r.update(
        label=label,
        conns=conns,
        scrapes_per_s=r["requests"] / (r["duration_us"] / 1e6),
        cpu_ms_per_scrape={role: (s1[role][0] - s0[role][0]) / n * 1e3 for role in procs},
        faults_per_scrape={role: (s1[role][1] - s0[role][1]) / n for role in procs},
        hwm_mib={role: proc_status_kib(p.pid, "VmHWM") / 1024 for role, p in procs.items()},
        body_bytes=r["bytes"] / n,
        seconds=seconds,
        capped=r["requests"] >= MAX_REQUESTS,
        load=os.getloadavg()[0],
    )
    log(f"  {label:<28} c={conns}  n={r['requests']:<6} p50={r['p50_us'] / 1e3:9.2f} ms "
        f"p99={r['p99_us'] / 1e3:9.2f} ms  {r['scrapes_per_s']:8.1f}/s  "
        f"cpu/scrape={ {k: round(v, 2) for k, v in r['cpu_ms_per_scrape'].items()} } ms  "
        f"errors={r['errors'] + r['non2xx']}")
    return r


def run_payload(name, engines, fast_s, slow_s, out_dir):
    payload = os.path.join(out_dir, f"payload-{name}.prom")
    subprocess.run([PY, os.path.join(HERE, "registry.py"), "write", str(engines), payload],
                   check=True)
    size = os.path.getsize(payload)
    log(f"payload {name}: {engines} engines, {size} bytes")
    results = {"payload": name, "engines": engines, "bytes": size, "runs": []}
    runs = results["runs"]

    static_port = free_port()
    static_url = f"http://127.0.0.1:{static_port}/metrics"
    static = Proc(f"static-{name}", [os.path.join(DRIVER_DIR, "static-serve"),
                                     f"127.0.0.1:{static_port}", payload], out_dir)
    wait_http(static_url)
    try:
        for c in CONNECTIONS:
            runs.append(measure("a static direct", static_url, c, fast_s, {"static": static}))
        sp, url = sysport(f"sysport-b-{name}", static_url, out_dir)
        try:
            for c in CONNECTIONS:
                runs.append(measure("b sysport <- static", url, c, fast_s,
                                    {"sysport": sp, "static": static}))
        finally:
            sp.stop()
        port = free_port()
        proxy = Proc(f"pyproxy-{name}", [PY, "pyproxy.py", static_url, str(port)], out_dir,
                     ready="ready")
        try:
            for c in CONNECTIONS:
                runs.append(measure("d python proxy <- static", f"http://127.0.0.1:{port}/metrics",
                                    c, slow_s, {"pyproxy": proxy, "static": static}))
        finally:
            proxy.stop()
    finally:
        static.stop()

    if DYNAMO:
        port = free_port(below=32768)
        env = dict(os.environ, DYN_SYSTEM_HOST="127.0.0.1", DYN_SYSTEM_PORT=str(port),
                   DYN_LOG="warn")
        dyn = Proc(f"dynamo-{name}", [PY, "dynamo_server.py", str(engines)], out_dir, env=env,
                   ready="ready")
        results["registry_render_s"] = json.loads(dyn.ready_line.split(" ", 1)[1])["render_seconds"]
        try:
            for c in CONNECTIONS:
                runs.append(measure("c dynamo 1.6.1", f"http://127.0.0.1:{port}/metrics", c,
                                    slow_s, {"dynamo": dyn}))
        finally:
            dyn.stop()

    port = free_port()
    py = Proc(f"pyserver-{name}", [PY, "pyserver.py", str(engines), str(port)], out_dir,
              ready="ready")
    py_url = f"http://127.0.0.1:{port}/metrics"
    try:
        for c in CONNECTIONS:
            runs.append(measure("e0 prometheus_client direct", py_url, c, slow_s, {"pyserver": py}))
        # What sysport's request costs the engine: reqwest asks for gzip.
        runs.append(measure("e0g prometheus_client gzip", py_url, 1, slow_s, {"pyserver": py},
                            headers=["Accept-Encoding: gzip"]))
        sp, url = sysport(f"sysport-e-{name}", py_url, out_dir)
        try:
            for c in CONNECTIONS:
                runs.append(measure("e sysport <- prometheus_client", url, c, slow_s,
                                    {"sysport": sp, "pyserver": py}))
        finally:
            sp.stop()
    finally:
        py.stop()
    return results, payload


def live_once(port, deadline):
    """Polls GET /live until it answers 200; returns when it did."""
    req = b"GET /live HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    while time.perf_counter() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
                s.sendall(req)
                head = s.recv(64)
                if head.startswith(b"HTTP/1.1 200"):
                    return time.perf_counter()
        except OSError:
            pass
        time.sleep(0.0002)
    return None


def startup_and_idle(out_dir, upstream_payload):
    static_port = free_port()
    static = Proc("static-startup", [os.path.join(DRIVER_DIR, "static-serve"),
                                     f"127.0.0.1:{static_port}", upstream_payload], out_dir)
    wait_http(f"http://127.0.0.1:{static_port}/metrics")
    out = {}
    try:
        times = []
        for i in range(20):
            port = free_port()
            config = os.path.join(out_dir, "sysport-startup.yaml")
            with open(config, "w") as f:
                f.write(f"listen: {{ host: 127.0.0.1, port: {port} }}\n"
                        "upstreams:\n  - name: vllm\n"
                        f"    url: http://127.0.0.1:{static_port}/metrics\n"
                        "shutdown: { drain_delay: 0s }\n")
            env = dict(os.environ, SYSPORT_LOG="warn")
            t0 = time.perf_counter()
            p = subprocess.Popen([SYSPORT, "--config", config], env=env,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            t1 = live_once(port, t0 + 10)
            if i == 0:
                time.sleep(3)  # idle: no scrape has happened, background checks may have
                out["idle_rss_kib"] = proc_status_kib(p.pid, "VmRSS")
                out["idle_hwm_kib"] = proc_status_kib(p.pid, "VmHWM")
            p.kill()
            p.wait()
            if t1 is not None:
                times.append((t1 - t0) * 1e3)
        times.sort()
        out["live_ms"] = times
        out["live_ms_median"] = statistics.median(times)
        out["live_ms_max"] = max(times)
    finally:
        static.stop()
    out["binary_bytes"] = os.path.getsize(SYSPORT)
    return out


def grep_times(payloads, out_dir):
    res = {}
    sink = os.path.join(out_dir, "grep.out")
    for name, path in payloads:
        times = []
        for _ in range(11):
            t = time.perf_counter()
            with open(sink, "wb") as f:
                subprocess.run(["grep", "-E", "^(# (HELP|TYPE) )?(vllm:|lmcache:)", path],
                               stdout=f, check=True, env=dict(os.environ, LC_ALL="C"))
            times.append(time.perf_counter() - t)
        res[name] = {"median_ms": statistics.median(times) * 1e3,
                     "bytes": os.path.getsize(path),
                     "kept_bytes": os.path.getsize(sink)}
        log(f"  grep {name}: {res[name]['median_ms']:.2f} ms")
    return res


def code_state():
    """The commit measured and any uncommitted change to what the binaries are built from."""
    def git(*args):
        out = subprocess.run(["git", "-C", ROOT, *args], capture_output=True, text=True)
        return out.stdout.strip()
    return {"commit": git("rev-parse", "--short", "HEAD"),
            "uncommitted": git("status", "--porcelain", "--", "src", "Cargo.toml",
                               "Cargo.lock").splitlines()}


def machine():
    model = "?"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {"nproc": os.cpu_count(), "cpu": model, "load_start": os.getloadavg()}


def main():
    out_dir = os.path.abspath(sys.argv[1])
    os.makedirs(out_dir, exist_ok=True)
    started = time.monotonic()
    results = {"machine": machine(), "code": code_state(), "payloads": []}
    log(f"machine: {results['machine']}")
    payload_files = []
    for name, engines, fast_s, slow_s in PAYLOADS:
        res, path = run_payload(name, engines, fast_s, slow_s, out_dir)
        results["payloads"].append(res)
        payload_files.append((name, path))
    log("sysport start-up and idle")
    results["startup"] = startup_and_idle(out_dir, payload_files[0][1])
    log(f"  {results['startup']}")
    log("grep over the same payloads")
    results["grep"] = grep_times(payload_files, out_dir)
    log("allocations per parse+merge+write (counting allocator)")
    allocs = subprocess.run(
        [os.path.join(DRIVER_DIR, "expfmt-driver"), "allocs",
         os.path.join(ROOT, "tests/fixtures/small.prom"),
         os.path.join(ROOT, "tests/fixtures/medium.openmetrics.txt"),
         *[p for _, p in payload_files]],
        capture_output=True, text=True, check=True).stdout
    results["allocs_table"] = allocs
    results["machine"]["load_end"] = os.getloadavg()
    results["seconds"] = time.monotonic() - started
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    report = render(results)
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(report)
    print(report)


def fmt_ms(us):
    return f"{us / 1e3:.2f}"


def render(res):
    m = res["machine"]
    lines = [
        f"machine: {m['nproc']} CPUs, {m['cpu']}; load average at start "
        f"{' '.join(f'{x:.2f}' for x in m['load_start'])}, at end "
        f"{' '.join(f'{x:.2f}' for x in m['load_end'])}; run took {res['seconds']:.0f} s",
        f"code: commit {res['code']['commit']}"
        + (f", uncommitted: {'; '.join(res['code']['uncommitted'])}"
           if res["code"]["uncommitted"] else ", no uncommitted change to src/"),
        "",
    ]
    for p in res["payloads"]:
        lines += [
            f"### {p['payload']} payload ({p['bytes']} bytes, {p['engines']} engines)",
            "",
            "| scenario | conns | scrapes | p50 ms | p90 ms | p99 ms | scrapes/s | CPU ms/scrape | minor faults/scrape | peak RSS MiB | body bytes | errors | load |",
            "|---|---:|---:|---:|---:|---:|---:|---|---|---|---:|---:|---:|",
        ]
        for r in p["runs"]:
            if r["requests"] == 0:
                lines.append(f"| {r['label']} | {r['conns']} | 0 | none completed in "
                             f"{r['seconds']} s | | | < {1 / r['seconds']:.2f} | | | | | "
                             f"{r['errors'] + r['non2xx']} | {r['load']:.2f} |")
                continue
            cpu = ", ".join(f"{k} {v:.2f}" for k, v in r["cpu_ms_per_scrape"].items())
            hwm = ", ".join(f"{k} {v:.1f}" for k, v in r["hwm_mib"].items())
            faults = ", ".join(f"{k} {v:.0f}" for k, v in r["faults_per_scrape"].items())
            lines.append(
                f"| {r['label']} | {r['conns']} | {r['requests']} | {fmt_ms(r['p50_us'])} | "
                f"{fmt_ms(r['p90_us'])} | {fmt_ms(r['p99_us'])} | {r['scrapes_per_s']:.1f} | "
                f"{cpu} | {faults} | {hwm} | {r['body_bytes']:.0f} | {r['errors'] + r['non2xx']} | "
                f"{r['load']:.2f} |" + (" (request cap hit: rate is a floor)" if r["capped"] else ""))
        lines.append("")
        by = {(r["label"].split()[0], r["conns"]): r for r in p["runs"] if r["requests"]}
        mb = p["bytes"] / 1e6
        for c in CONNECTIONS:
            a, b, d = by.get(("a", c)), by.get(("b", c)), by.get(("d", c))
            parts = []
            if a and b:
                ov = (b["p50_us"] - a["p50_us"]) / 1e3
                parts.append(f"sysport overhead {ov:.2f} ms ({ov / mb:.2f} ms/MB)")
            if a and d:
                parts.append(f"python proxy overhead {(d['p50_us'] - a['p50_us']) / 1e3:.2f} ms")
            cr = by.get(("c", c))
            if cr and "registry_render_s" in p:
                parts.append(f"dynamo overhead {cr['p50_us'] / 1e3 - p['registry_render_s'] * 1e3:.2f} ms "
                             f"(p50 {fmt_ms(cr['p50_us'])} - generate_latest {p['registry_render_s'] * 1e3:.2f})")
            e, e0 = by.get(("e", c)), by.get(("e0", c))
            if e and e0:
                parts.append(f"sysport over prometheus_client {(e['p50_us'] - e0['p50_us']) / 1e3:.2f} ms")
            c_any = next((r for r in p["runs"] if r["label"].startswith("c ") and r["conns"] == c),
                         None)
            if e and c_any and c_any["requests"]:
                parts.append(f"(e)/(c) scrapes/s {e['scrapes_per_s'] / c_any['scrapes_per_s']:.1f}x")
            elif e and c_any:
                parts.append(f"(e)/(c) scrapes/s > {e['scrapes_per_s'] * c_any['seconds']:.0f}x "
                             f"((c) completed none in {c_any['seconds']} s)")
            lines.append(f"- {c} conn: " + "; ".join(parts))
        lines.append("")
    s = res["startup"]
    lines += [
        f"sysport: binary {s['binary_bytes']} bytes ({s['binary_bytes'] / 2**20:.2f} MiB); idle RSS "
        f"{s['idle_rss_kib'] / 1024:.1f} MiB (VmHWM {s['idle_hwm_kib'] / 1024:.1f} MiB); exec -> first "
        f"/live 200: median {s['live_ms_median']:.1f} ms, max {s['live_ms_max']:.1f} ms over "
        f"{len(s['live_ms'])} runs",
        "",
        "grep -E '^(# (HELP|TYPE) )?(vllm:|lmcache:)' (LC_ALL=C, to a file), median of 11:",
    ]
    for name, g in res["grep"].items():
        lines.append(f"- {name}: {g['median_ms']:.2f} ms ({g['bytes'] / g['median_ms'] / 1e3:.0f} MB/s), "
                     f"{g['kept_bytes']} bytes kept")
    lines += ["", "allocations per parse+filter+merge+write_text (expfmt-driver allocs):", "",
              res["allocs_table"]]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if not shutil.which("wrk"):
        sys.exit("wrk is not installed")
    main()
