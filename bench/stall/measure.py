"""What the benchmarks read of a sysport process: its CPU time and resident memory from /proc,
and how long its `/status` takes (bench/stall, bench/bounds)."""
import os
import statistics
import time
import urllib.request


def cpu_seconds(pid):
    """User plus system CPU time of a process, from /proc/PID/stat."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_mib(pid):
    """Resident set size and its peak (VmRSS, VmHWM) of a process, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    return tuple(int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM"))


def status_ms(port, times=20):
    """Mean milliseconds of a GET /status, `times` of them one after another."""
    took = []
    for _ in range(times):
        t0 = time.perf_counter()
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=10) as r:
            r.read()
        took.append(time.perf_counter() - t0)
    return statistics.mean(took) * 1e3
