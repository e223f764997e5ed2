"""Peak RSS, throughput and latency of sysport builds side by side, each in front of the same
static server (bench/load/driver's static-serve), under chosen environments. Every variant and
connection count gets a fresh sysport process; variants are interleaved within a repetition so
that load from other work on the machine spreads over all of them.

    python3 bench/load/alloc_compare.py OUT_DIR PAYLOAD [--gzip PAYLOAD.gz] [--conns 1,8]
        [--seconds 6] [--reps 3] [--idle] VARIANT...

VARIANT is LABEL=BINARY[;ENV=VALUE...], e.g. `glibc=/tmp/sysport-a`,
`arena1=/tmp/sysport-a;MALLOC_ARENA_MAX=1`. MALLOC_* variables of this process are never passed
on, so a variant without them runs under the default allocator settings. With --gzip the static
server answers requests that accept gzip with that file (sysport's client always asks for it).
Per run: scrapes, scrapes/s, p50/p99 ms, sysport CPU ms/scrape, minor faults/scrape, VmHWM and
VmRSS (MiB) at the end; then per variant and connection count the median and min-max over the
repetitions. --idle adds each variant's idle VmRSS/VmHWM 3 s after its first /live answer.
"""
import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402


def start_sysport(name, binary, env_extra, upstream_url, out_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(env_extra)
    return run.sysport(name, upstream_url, out_dir, binary=binary, env=env)


def parse_variant(s):
    label, rest = s.split("=", 1)
    parts = rest.split(";")
    env = dict(p.split("=", 1) for p in parts[1:])
    return label, os.path.abspath(parts[0]), env


def spread(xs, fmt):
    if not xs:
        return "-"
    med = statistics.median(xs)
    if len(xs) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(xs))}–{fmt.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("payload")
    ap.add_argument("--gzip")
    ap.add_argument("--conns", default="1,8")
    ap.add_argument("--seconds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--idle", action="store_true")
    ap.add_argument("variants", nargs="+")
    a = ap.parse_args()
    out = os.path.abspath(a.out)
    os.makedirs(out, exist_ok=True)
    variants = [parse_variant(v) for v in a.variants]
    conns = [int(c) for c in a.conns.split(",")]
    port = run.free_port()
    argv = [os.path.join(run.DRIVER_DIR, "static-serve"), f"127.0.0.1:{port}",
            os.path.abspath(a.payload)]
    if a.gzip:
        argv.append(os.path.abspath(a.gzip))
    static = run.Proc("static-compare", argv, out)
    url = f"http://127.0.0.1:{port}/metrics"
    run.wait_http(url)
    rows = []
    results = os.path.join(out, "runs.jsonl")
    try:
        if a.idle:
            for label, binary, env in variants:
                for rep in range(a.reps):
                    sp, _ = start_sysport(f"sysport-{label}-idle", binary, env, url, out)
                    try:
                        time.sleep(3)
                        rows.append(dict(variant=label, conns=0, rep=rep,
                                         idle_rss=run.proc_status_kib(sp.pid, "VmRSS") / 1024,
                                         idle_hwm=run.proc_status_kib(sp.pid, "VmHWM") / 1024,
                                         binary_bytes=os.path.getsize(binary)))
                    finally:
                        sp.stop()
        for rep in range(a.reps):
            for c in conns:
                for label, binary, env in variants:
                    sp, surl = start_sysport(f"sysport-{label}", binary, env, url, out)
                    try:
                        r = run.measure(f"{label} rep{rep}", surl, c, a.seconds, {"sysport": sp})
                        row = dict(variant=label, conns=c, rep=rep, requests=r["requests"],
                                   scrapes_per_s=r["scrapes_per_s"], p50=r["p50_us"] / 1e3,
                                   p99=r["p99_us"] / 1e3, mean=r["mean_us"] / 1e3,
                                   cpu=r["cpu_ms_per_scrape"]["sysport"],
                                   faults=r["faults_per_scrape"]["sysport"],
                                   hwm=r["hwm_mib"]["sysport"],
                                   rss=run.proc_status_kib(sp.pid, "VmRSS") / 1024,
                                   errors=r["errors"] + r["non2xx"], body=r["body_bytes"],
                                   load=r["load"])
                        rows.append(row)
                        with open(results, "a") as f:
                            f.write(json.dumps(row) + "\n")
                    finally:
                        sp.stop()
    finally:
        static.stop()
    if a.idle:
        print("| variant | binary bytes | idle VmRSS MiB | idle VmHWM MiB |")
        print("|---|---:|---:|---:|")
        for label, _, _ in variants:
            rs = [r for r in rows if r["variant"] == label and r["conns"] == 0]
            print(f"| {label} | {rs[0]['binary_bytes']} | {spread([r['idle_rss'] for r in rs], '{:.1f}')} | "
                  f"{spread([r['idle_hwm'] for r in rs], '{:.1f}')} |")
        print()
    print(f"median (min–max) over {a.reps} runs of {a.seconds} s, a fresh sysport per run")
    print()
    print("| variant | conns | peak RSS MiB | RSS at end MiB | scrapes/s | p50 ms | p99 ms | "
          "CPU ms/scrape | minor faults/scrape | errors |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for c in conns:
        for label, _, _ in variants:
            rs = [r for r in rows if r["variant"] == label and r["conns"] == c]
            print(f"| {label} | {c} | {spread([r['hwm'] for r in rs], '{:.1f}')} | "
                  f"{spread([r['rss'] for r in rs], '{:.1f}')} | "
                  f"{spread([r['scrapes_per_s'] for r in rs], '{:.1f}')} | "
                  f"{spread([r['p50'] for r in rs], '{:.2f}')} | "
                  f"{spread([r['p99'] for r in rs], '{:.2f}')} | "
                  f"{spread([r['cpu'] for r in rs], '{:.2f}')} | "
                  f"{spread([r['faults'] for r in rs], '{:.0f}')} | "
                  f"{sum(r['errors'] for r in rs)} |")


if __name__ == "__main__":
    main()
