"""A/B of sysport builds in front of a gzip-answering upstream: what decoding costs a scrape.

    python3 bench/load/gzip_ab.py STATIC_SERVE PAYLOAD NAME=SYSPORT NAME=SYSPORT [ROUNDS] [SECONDS]

STATIC_SERVE is bench/load/driver's static server; PAYLOAD a page with PAYLOAD.gz beside it
(`gzip -k PAYLOAD`), which it sends to requests that accept gzip, as prometheus_client does.
Each round runs every build once, in alternating order, on fresh ports: sysport with
MALLOC_ARENA_MAX=1 in front of the static server, one `wrk -t1 -c1` warm-up second, then
`wrk -t1 -c1 -dSECONDS --latency`; sysport's CPU time per scrape comes from /proc. Every loop
is bounded: ROUNDS (default 6) rounds of SECONDS (default 8s) each.
"""
import os
import re
import socket
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def wait(port):
    for _ in range(250):
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise SystemExit(f"nothing listens on port {port}")


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def run(static_serve, payload, binary, seconds, tmp):
    up, port = free_port(), free_port()
    static = subprocess.Popen([static_serve, f"127.0.0.1:{up}", payload, payload + ".gz"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    config = os.path.join(tmp, f"gzip-ab-{port}.yaml")
    with open(config, "w") as f:
        f.write(f"listen: {{host: 127.0.0.1, port: {port}}}\nhealth: {{interval: 1h}}\n"
                f"upstreams:\n  - name: vllm\n    url: http://127.0.0.1:{up}/metrics\n"
                "    keep: [\"vllm:\", \"lmcache:\"]\n    required: false\n")
    sp = subprocess.Popen([binary, "--config", config], stderr=subprocess.DEVNULL,
                          env=dict(os.environ, MALLOC_ARENA_MAX="1"))
    try:
        wait(up)
        wait(port)
        url = f"http://127.0.0.1:{port}/metrics"
        subprocess.run(["wrk", "-t1", "-c1", "-d1s", url], capture_output=True, check=True)
        before = cpu_seconds(sp.pid)
        out = subprocess.run(["wrk", "-t1", "-c1", f"-d{seconds}", "--latency", url],
                             capture_output=True, text=True, check=True).stdout
        used = cpu_seconds(sp.pid) - before
        n = int(re.search(r"(\d+) requests in", out).group(1))
        return {
            "rps": float(re.search(r"Requests/sec:\s+(\S+)", out).group(1)),
            "p50": re.search(r"^\s+50%\s+(\S+)", out, re.M).group(1),
            "p99": re.search(r"^\s+99%\s+(\S+)", out, re.M).group(1),
            "cpu_ms": used * 1000 / n,
        }
    finally:
        sp.terminate()
        sp.wait()
        static.terminate()
        static.wait()
        os.remove(config)


def main():
    static_serve, payload, *rest = sys.argv[1:]
    builds = [tuple(a.split("=", 1)) for a in rest if "=" in a]
    numbers = [a for a in rest if "=" not in a]
    rounds = int(numbers[0]) if numbers else 6
    seconds = numbers[1] if len(numbers) > 1 else "8s"
    tmp = os.environ.get("TMPDIR", "/tmp")
    results = {name: [] for name, _ in builds}
    print(f"load average before: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    for r in range(rounds):
        for name, binary in builds if r % 2 == 0 else builds[::-1]:
            res = run(static_serve, payload, binary, seconds, tmp)
            results[name].append(res)
            print(f"round {r} {name:>10}: {res['rps']:8.1f} scrapes/s  p50 {res['p50']:>8}  "
                  f"p99 {res['p99']:>8}  CPU {res['cpu_ms']:.3f} ms/scrape", flush=True)
    print(f"load average after: {' '.join(open('/proc/loadavg').read().split()[:3])}")
    for name, runs in results.items():
        cpu = sorted(x["cpu_ms"] for x in runs)
        rps = sorted(x["rps"] for x in runs)
        print(f"{name:>10}: median {cpu[len(cpu) // 2]:.3f} ms CPU per scrape, "
              f"median {rps[len(rps) // 2]:.1f} scrapes/s")


if __name__ == "__main__":
    main()
