"""Drives a running sysport for the soak: /metrics at a fixed rate from a pool of keep-alive
connections, /live twice a second, and sysport's RSS and open fds once a second. At the end it
prints a summary (Markdown, for bench/RESULTS.md), the checks and a `result: N passed, M failed`
line, and exits 1 if any check failed.

    drive.py --port P --pid PID --duration SECONDS [--rate 50] [--workers 80]
"""

import argparse
import http.client
import os
import queue
import statistics
import sys
import threading
import time
from collections import Counter

# Go's HTTP client retries an idempotent request once when a reused keep-alive connection turns
# out to be closed before any answer; do the same, and count it.
RETRYABLE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.latencies = []
        self.codes = Counter()
        self.bad_bodies = 0
        self.retries = 0
        self.live = 0
        self.live_failures = []
        self.live_max = 0.0
        self.samples = []  # (seconds since start, rss KiB, fds, threads)


def get(conn_box, port, path, timeout):
    """GET on the box's connection; one retry on a stale keep-alive connection."""
    for attempt in (0, 1):
        conn = conn_box[0]
        if conn is None:
            conn = conn_box[0] = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
        try:
            conn.request("GET", path)
            r = conn.getresponse()
            return r.status, r.read(), attempt
        except RETRYABLE:
            conn.close()
            conn_box[0] = None
            if attempt == 1:
                raise
        except Exception:
            conn.close()
            conn_box[0] = None
            raise
    raise AssertionError("unreachable")


def worker(port, jobs, stats):
    box = [None]
    while True:
        job = jobs.get()
        if job is None:
            return
        t0 = time.monotonic()
        try:
            status, body, retried = get(box, port, "/metrics", timeout=10)
            bad = status == 200 and b"dynamo_sysport_build_info" not in body
        except Exception as e:
            status, bad, retried = type(e).__name__, False, 0
        elapsed = time.monotonic() - t0
        with stats.lock:
            stats.latencies.append(elapsed)
            stats.codes[status] += 1
            stats.bad_bodies += bad
            stats.retries += retried


def prober(port, stop, stats):
    box = [None]
    while not stop.wait(0.5):
        t0 = time.monotonic()
        try:
            status, _, _ = get(box, port, "/live", timeout=2)
        except Exception as e:
            status = type(e).__name__
        elapsed = time.monotonic() - t0
        with stats.lock:
            stats.live += 1
            stats.live_max = max(stats.live_max, elapsed)
            if status != 200:
                stats.live_failures.append(status)


def read_proc(pid):
    """RSS in KiB, open fds, threads."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    rss = int(fields["VmRSS"].split()[0])
    threads = int(fields["Threads"])
    return rss, len(os.listdir(f"/proc/{pid}/fd")), threads


def sampler(pid, started, stop, stats):
    while not stop.wait(1.0):
        try:
            rss, fds, threads = read_proc(pid)
        except (OSError, KeyError, ValueError):
            continue
        with stats.lock:
            stats.samples.append((time.monotonic() - started, rss, fds, threads))


def med(values):
    """Median, NaN for no values (a check on it then fails)."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(p / 100 * len(s)))] if s else float("nan")


def own_results(port):
    """`(upstream, result) -> count` from sysport's own scrapes counter."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics?name=dynamo_sysport_upstream_scrapes_total")
    text = conn.getresponse().read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("dynamo_sysport_upstream_scrapes_total{"):
            labels, value = line[line.index("{") + 1 :].rsplit("} ", 1)
            kv = dict(p.split("=", 1) for p in labels.split(","))
            out[(kv["upstream"].strip('"'), kv["result"].strip('"'))] = float(value)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--rate", type=float, default=50.0)
    ap.add_argument("--workers", type=int, default=80)
    ap.add_argument("--samples", help="write the per-second samples to this CSV file")
    ap.add_argument("--expect", action="append", default=[], help="UPSTREAM=RESULT that must be counted")
    args = ap.parse_args()

    stats = Stats()
    jobs = queue.Queue()
    stop = threading.Event()
    started = time.monotonic()
    threads = [threading.Thread(target=worker, args=(args.port, jobs, stats)) for _ in range(args.workers)]
    threads.append(threading.Thread(target=prober, args=(args.port, stop, stats)))
    threads.append(threading.Thread(target=sampler, args=(args.pid, started, stop, stats)))
    for t in threads:
        t.start()
    total = int(args.duration * args.rate)
    for i in range(total):
        delay = started + i / args.rate - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        jobs.put(i)
    for _ in range(args.workers):
        jobs.put(None)
    for t in threads[: args.workers]:
        t.join()
    stop.set()
    for t in threads[args.workers :]:
        t.join()
    wall = time.monotonic() - started
    if not stats.samples:  # sysport was gone before the first sample
        stats.samples.append((0.0, float("nan"), float("nan"), 0))
    try:
        results = own_results(args.port)
        rss_now, fds_now, threads_now = read_proc(args.pid)
    except (OSError, KeyError, ValueError) as e:
        print(f"sysport is gone at the end: {e!r}", file=sys.stderr)
        results = {}
        _, rss_now, fds_now, threads_now = stats.samples[-1]

    # Robust comparison: medians of a window just after warm-up and of the last window.
    # Allocator pools and connection buffers settle over the first minutes of flapping (a 10-min
    # run climbed ~0.6 MiB until 240 s, then stayed flat): compare steady state with steady state.
    warmup = 0.4 * args.duration
    window = min(60.0, (args.duration - warmup) / 3)
    early = [s for s in stats.samples if warmup <= s[0] < warmup + window]
    late = [s for s in stats.samples if s[0] >= args.duration - window]
    rss_early = med(s[1] for s in early)
    rss_late = med(s[1] for s in late)
    fds_early = med(s[2] for s in early)
    fds_late = med(s[2] for s in late)
    growth = rss_late / rss_early - 1
    non_200 = sum(n for code, n in stats.codes.items() if code != 200) + stats.bad_bodies
    lat = stats.latencies
    mib = lambda kib: f"{kib / 1024:.1f}"

    print()
    print(f"| soak, {args.duration:.0f} s at {args.rate:.0f}/s | |")
    print("|---|---|")
    print(f"| /metrics scrapes | {len(lat)} in {wall:.0f} s ({len(lat) / wall:.1f}/s), non-200 or bad body: {non_200}, keep-alive retries: {stats.retries} |")
    print(f"| latency p50 / p90 / p99 / max | {pct(lat, 50) * 1e3:.1f} / {pct(lat, 90) * 1e3:.1f} / {pct(lat, 99) * 1e3:.1f} / {max(lat) * 1e3:.1f} ms |")
    print(f"| /live probes | {stats.live}, failures: {len(stats.live_failures)}, slowest {stats.live_max * 1e3:.1f} ms |")
    print(f"| RSS MiB: first / early median / late median / max / end | {mib(stats.samples[0][1])} / {mib(rss_early)} / {mib(rss_late)} / {mib(max(s[1] for s in stats.samples))} / {mib(rss_now)} (growth {growth * 100:+.1f}%) |")
    print(f"| open fds: first / early median / late median / max / end | {stats.samples[0][2]} / {fds_early:.0f} / {fds_late:.0f} / {max(s[2] for s in stats.samples)} / {fds_now} |")
    counts = [s[3] for s in stats.samples]
    print(f"| threads: first / min / max / end | {counts[0]} / {min(counts)} / {max(counts)} / {threads_now} |")
    by_upstream = {}
    for (u, r), n in sorted(results.items()):
        by_upstream.setdefault(u, []).append(f"{r} {n:.0f}")
    for u, rs in by_upstream.items():
        print(f"| upstream {u} fetches | {', '.join(rs)} |")
    tenths = [med(s[1] for s in stats.samples if k * args.duration / 10 <= s[0] < (k + 1) * args.duration / 10) for k in range(10)]
    print(f"| RSS MiB by tenth of the run (medians) | {' '.join(mib(r) for r in tenths)} |")
    print(f"(windows: early {warmup:.0f}-{warmup + window:.0f} s, late {args.duration - window:.0f}-{args.duration:.0f} s)")
    if args.samples:
        with open(args.samples, "w") as f:
            f.write("seconds,rss_kib,fds,threads\n")
            f.writelines(f"{t:.1f},{r},{n},{th}\n" for t, r, n, th in stats.samples)
    print()

    missing = [e for e in args.expect if results.get(tuple(e.split("=", 1)), 0) < 1]
    checks = [
        ("no /metrics failures", non_200 == 0, f"{non_200} of {len(lat)}: {dict(stats.codes)}, bad bodies {stats.bad_bodies}"),
        ("no /live failures", not stats.live_failures, f"{len(stats.live_failures)} of {stats.live}: {Counter(stats.live_failures)}"),
        ("RSS growth under 5%", growth < 0.05, f"median {mib(rss_early)} -> {mib(rss_late)} MiB ({growth * 100:+.1f}%)"),
        ("fd growth at most 5", fds_late - fds_early <= 5, f"median {fds_early:.0f} -> {fds_late:.0f}"),
        ("faults exercised", not missing, f"missing: {missing}" if missing else ", ".join(args.expect)),
    ]
    failed = 0
    for name, ok, detail in checks:
        failed += not ok
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {detail}")
    print(f"result: {len(checks) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
