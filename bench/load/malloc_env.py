"""sysport's peak RSS (VmHWM) and latency with a 16 MB upstream under glibc malloc settings that
need no code change: the default, a fixed mmap threshold, and a single arena. Each setting gets
a fresh sysport in front of the static server, 6 s at 1 then at 8 scrapers.

    bench/.venv/bin/python bench/load/malloc_env.py OUT_DIR PAYLOAD   (bash bench/load.sh makes
    bench/out/payload-16MB.prom)
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # noqa: E402

SETTINGS = [
    ("default glibc", {}),
    ("MALLOC_MMAP_THRESHOLD_=1048576", {"MALLOC_MMAP_THRESHOLD_": "1048576"}),
    ("MALLOC_ARENA_MAX=1", {"MALLOC_ARENA_MAX": "1"}),
]


def main(out, payload):
    os.makedirs(out, exist_ok=True)
    port = run.free_port()
    static = run.Proc("static-malloc", [os.path.join(run.DRIVER_DIR, "static-serve"),
                                        f"127.0.0.1:{port}", payload], out)
    url = f"http://127.0.0.1:{port}/metrics"
    run.wait_http(url)
    print("| setting | conns | p50 ms | scrapes/s | CPU ms/scrape | minor faults/scrape | peak RSS MiB |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    try:
        for label, env in SETTINGS:
            saved = dict(os.environ)
            os.environ.update(env)
            try:
                sp, sysport_url = run.sysport("sysport-malloc", url, out)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            try:
                for c in (1, 8):
                    r = run.measure(f"b {label}", sysport_url, c, 6, {"sysport": sp})
                    print(f"| {label} | {c} | {r['p50_us'] / 1e3:.1f} | {r['scrapes_per_s']:.1f} | "
                          f"{r['cpu_ms_per_scrape']['sysport']:.1f} | "
                          f"{r['faults_per_scrape']['sysport']:.0f} | {r['hwm_mib']['sysport']:.1f} |",
                          flush=True)
            finally:
                sp.stop()
    finally:
        static.stop()


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]))
