"""/metrics side by side with a raw passthrough; bench/passthrough.sh runs it after installing and
building what it needs. Everything listens on 127.0.0.1; every run is bounded by wrk's -d.

Targets, each fetching one page per request from one nginx serving the page files:
  nginx             the page straight from nginx (the floor: a file sent from the page cache)
  exporter_exporter exporter_exporter 0.5.0's http module with `verify: false` in front of nginx:
                    Go's httputil.ReverseProxy, the bytes passed through untouched
  sysport           sysport in front of nginx (`engine: vllm`, its defaults: the vLLM families
                    kept, vitals on; canaries off, since nginx is no engine)
  Go, streamed      with SYSPORT_PT_STOREFORWARD=BIN: bench/passthrough/storeforward, copying each
                    page as it arrives (a raw passthrough in ~60 lines of Go's standard library)
  Go, read whole    the same program reading each page whole before it answers: the least any
                    proxy does that must see the whole page first, as sysport must
For each page, ROUNDS rounds; in each round every target in turn (interleaved, so the machine's
load falls on all alike): one connection for SECONDS s (wrk --latency: p50, p99, scrapes/s), then
8 connections for SECONDS s (scrapes/s). CPU a scrape is the target's own utime + stime over the
one-connection run (from /proc/PID/stat; nginx's worker for nginx, not the nginx behind the two
proxies) divided by the requests wrk completed; context switches the same way, summed over the
target's threads. Peak RSS is the target's VmHWM after its last round (sysport's for the page it
was started for; nginx's worker and exporter_exporter serve every page, so theirs accumulate).

    python run.py OUT_DIR SYSPORT_BIN EXPORTER_EXPORTER_BIN PAGE_FILE...
    env: SYSPORT_PT_ROUNDS (3), SYSPORT_PT_SECONDS (5), SYSPORT_PT_SYSPORTS (more sysport binaries
         to measure beside the first, colon-separated: the before and after of a change),
         SYSPORT_PT_STOREFORWARD (the storeforward binary: its two modes measured too),
         SYSPORT_PT_DELAY_MS (the one-connection run waits this long after each answer before
         its next request, as a gateway reading every 50 ms does; 0, back to back, by default)
"""
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")
ROUNDS = int(os.environ.get("SYSPORT_PT_ROUNDS", "3"))
SECONDS = int(os.environ.get("SYSPORT_PT_SECONDS", "5"))
DELAY_MS = int(os.environ.get("SYSPORT_PT_DELAY_MS", "0"))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def context_switches(pid):
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/status") as f:
                for line in f:
                    if line.startswith(("voluntary_ctxt_switches:", "nonvoluntary_ctxt_switches:")):
                        total += int(line.split()[1])
        except FileNotFoundError:
            pass
    return total


def peak_rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def wait_ok(url, what, proc, seconds=30):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{what} exited with {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url, timeout=2) as r:
                if r.status == 200:
                    return r.read()
        except OSError:
            pass
        time.sleep(0.1)
    raise SystemExit(f"{what} did not answer {url} with 200 in {seconds} s")


def start_nginx(out, pages):
    port = free_port()
    conf = os.path.join(out, "nginx.conf")
    with open(conf, "w") as f:
        f.write(f"""daemon off;
master_process on;
worker_processes 1;
pid {out}/nginx.pid;
error_log {out}/nginx-error.log warn;
events {{ worker_connections 1024; }}
http {{
  access_log off;
  client_body_temp_path {out}/nginx-tmp;
  sendfile on;
  tcp_nopush on;
  keepalive_requests 1000000;
  default_type "text/plain; version=0.0.4; charset=utf-8";
  server {{
    listen 127.0.0.1:{port};
    root {out}/pages;
    location = /health {{ return 200 "ok"; }}
  }}
}}
""")
    os.makedirs(os.path.join(out, "pages"), exist_ok=True)
    for name, path in pages:
        dst = os.path.join(out, "pages", name)
        with open(path, "rb") as src, open(dst, "wb") as d:
            d.write(src.read())
        os.chmod(dst, 0o644)
    os.chmod(os.path.join(out, "pages"), 0o755)
    proc = subprocess.Popen(["nginx", "-c", conf, "-p", out + "/", "-e", f"{out}/nginx-error.log"],
                            stderr=open(os.path.join(out, "nginx.log"), "w"))
    wait_ok(f"http://127.0.0.1:{port}/health", "nginx", proc)
    children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True)
    workers = [int(p) for p in children.stdout.split()]
    if len(workers) != 1:
        raise SystemExit(f"nginx: expected one worker, found {workers}")
    return proc, port, workers[0]


def start_expexp(out, binary, nginx_port, pages):
    port = free_port()
    conf = os.path.join(out, "expexp.yaml")
    with open(conf, "w") as f:
        f.write("modules:\n")
        for name, _ in pages:
            f.write(f"  {name}:\n    method: http\n    http:\n      verify: false\n"
                    f"      address: 127.0.0.1\n      port: {nginx_port}\n      path: /{name}\n")
    proc = subprocess.Popen([binary, "-config.file", conf, "-web.listen-address", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, "expexp.log"), "w"))
    wait_ok(f"http://127.0.0.1:{port}/proxy?module={pages[0][0]}", "exporter_exporter", proc)
    return proc, port


def start_storeforward(out, binary, nginx_port, stream):
    port = free_port()
    mode = "stream" if stream else "whole"
    proc = subprocess.Popen([binary, "-listen", f"127.0.0.1:{port}", "-upstream", f"http://127.0.0.1:{nginx_port}"]
                            + (["-stream"] if stream else []),
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, f"storeforward-{mode}.log"), "w"))
    return proc, port


def start_sysport(out, tag, binary, nginx_port, page):
    port = free_port()
    conf = os.path.join(out, f"sysport-{tag}-{page}.yaml")
    with open(conf, "w") as f:
        f.write(f"""listen: {{ host: 127.0.0.1, port: {port} }}
upstreams:
  - name: vllm
    engine: vllm
    url: http://127.0.0.1:{nginx_port}/{page}
    health_url: http://127.0.0.1:{nginx_port}/health
    canary_after: 0s
shutdown: {{ drain_delay: 0s }}
""")
    proc = subprocess.Popen([binary, "--config", conf], env={**os.environ, "SYSPORT_LOG": "warn"},
                            stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(out, f"sysport-{tag}-{page}.log"), "w"))
    wait_ok(f"http://127.0.0.1:{port}/health", f"sysport ({binary})", proc)
    return proc, port


def wrk(url, connections, threads, delay_ms=0):
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{SECONDS}s", "--timeout", "10s",
           "--latency", url]
    if delay_ms:
        # wrk's delay(): the milliseconds a connection waits before its next request.
        script = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"wrk-delay-{delay_ms}.lua")
        with open(script, "w") as f:
            f.write(f"function delay()\n  return {delay_ms}\nend\n")
        cmd[1:1] = ["-s", script]
    text = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout

    def ms(label):
        m = re.search(rf"^\s+{label}\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
        if not m:
            raise SystemExit(f"wrk: no {label} in:\n{text}")
        return float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]

    requests = int(re.search(r"(\d+) requests in", text).group(1))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)|Socket errors: .*", text)
    if errors:
        raise SystemExit(f"wrk reported errors against {url}:\n{text}")
    return {"p50_ms": ms("50%"), "p99_ms": ms("99%"), "requests": requests,
            "per_s": float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))}


def measure(url, pid):
    cpu0, cs0 = cpu_seconds(pid), context_switches(pid)
    one = wrk(url, 1, 1, DELAY_MS)
    cpu1, cs1 = cpu_seconds(pid), context_switches(pid)
    eight = wrk(url, 8, 2)
    return {**one, "cpu_ms": (cpu1 - cpu0) * 1e3 / one["requests"],
            "switches": (cs1 - cs0) / one["requests"], "per_s_8": eight["per_s"]}


def main():
    out, sysport, expexp = (os.path.abspath(a) for a in sys.argv[1:4])
    page_files = sys.argv[4:]
    if not page_files:
        raise SystemExit(__doc__)
    sysports = [sysport] + [os.path.abspath(p) for p in os.environ.get("SYSPORT_PT_SYSPORTS", "").split(":") if p]
    os.makedirs(out, exist_ok=True)
    pages = [(os.path.basename(p), p) for p in page_files]
    nginx, nginx_port, nginx_worker = start_nginx(out, pages)
    procs = [nginx]
    try:
        ee, ee_port = start_expexp(out, expexp, nginx_port, pages)
        procs.append(ee)
        go = []
        if os.environ.get("SYSPORT_PT_STOREFORWARD"):
            for label, stream in (("Go, streamed", True), ("Go, read whole", False)):
                proc, port = start_storeforward(out, os.environ["SYSPORT_PT_STOREFORWARD"], nginx_port, stream)
                procs.append(proc)
                wait_ok(f"http://127.0.0.1:{port}/proxy?module={pages[0][0]}", label, proc)
                go.append((label, port, proc.pid))
        fixed = len(procs)
        results = []
        for name, path in pages:
            size = os.path.getsize(path)
            targets = [("nginx", f"http://127.0.0.1:{nginx_port}/{name}", nginx_worker),
                       ("exporter_exporter", f"http://127.0.0.1:{ee_port}/proxy?module={name}", ee.pid)]
            targets += [(label, f"http://127.0.0.1:{port}/proxy?module={name}", pid) for label, port, pid in go]
            for i, binary in enumerate(sysports):
                proc, port = start_sysport(out, str(i), binary, nginx_port, name)
                procs.append(proc)
                label = "sysport" if len(sysports) == 1 else f"sysport {i + 1}"
                targets.append((label, f"http://127.0.0.1:{port}/metrics", proc.pid))
            for label, url, _ in targets:
                body = urllib.request.urlopen(url, timeout=10).read()
                log(f"{name} ({size} bytes): {label} answers {len(body)} bytes")
            runs = {label: [] for label, _, _ in targets}
            for r in range(ROUNDS):
                load = open("/proc/loadavg").read().split()[0]
                for label, url, pid in targets:
                    m = measure(url, pid)
                    runs[label].append(m)
                    log(f"{name} round {r + 1} (load {load}) {label}: p50 {m['p50_ms']:.3f} ms, "
                        f"p99 {m['p99_ms']:.3f} ms, {m['per_s']:.0f}/s, CPU {m['cpu_ms']:.3f} ms, "
                        f"{m['switches']:.1f} switches a scrape; 8 connections {m['per_s_8']:.0f}/s")
            peaks = {label: peak_rss_mib(pid) for label, _, pid in targets}
            results.append({"page": name, "bytes": size, "runs": runs, "peak_rss_mib": peaks})
            for p in procs[fixed:]:
                p.terminate()
                p.wait()
            procs = procs[:fixed]
    finally:
        for p in procs:
            p.terminate()
            p.wait()
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump(results, f, indent=1)
    lines = ["| page | target | p50, 1 conn. (ms) | p99, 1 conn. (ms) | CPU a scrape (ms) "
             "| switches a scrape | scrapes/s, 1 conn. | scrapes/s, 8 conn. | peak RSS (MiB) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        for label, ms in res["runs"].items():
            def col(key, fmt):
                return " / ".join(fmt.format(m[key]) for m in ms)
            lines.append(f"| {res['page']} | {label} | {col('p50_ms', '{:.2f}')} | {col('p99_ms', '{:.2f}')} "
                         f"| {col('cpu_ms', '{:.2f}')} | {col('switches', '{:.1f}')} "
                         f"| {col('per_s', '{:,.0f}')} | {col('per_s_8', '{:,.0f}')} "
                         f"| {res['peak_rss_mib'][label]:.1f} |")
        med = {label: statistics.median(m["p50_ms"] for m in ms) for label, ms in res["runs"].items()}
        log(f"{res['page']}: median p50 " + ", ".join(f"{k} {v:.3f} ms" for k, v in med.items()))
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
