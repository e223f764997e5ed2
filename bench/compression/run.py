"""What asking an engine for a gzip-compressed page costs it, beside the page as it is.

The engine is prometheus_client's ASGI app (`make_asgi_app`, as SGLang serves `/metrics`) under
uvicorn, over the load test's vLLM-like registry (bench/load/registry.py: 1 engine, ~270 KB, and
36 data-parallel engines, ~1.8 MB); it gzips at level 9 when a request accepts gzip, on its
event loop. It also answers `/ping` on that loop, as it would stream a token. In front of it,
sysport with `enable_compression: true` (gzip asked for) or `false` (the default on loopback),
its health checks, stall detection and canaries off, so that `/metrics` reads are the engine's
only fetches. Per run: a reader of sysport's `/metrics` every 50 ms (an inference gateway's
pace) and a reader of the engine's `/ping` every 10 ms, for SECONDS; the engine's CPU time per
fetch (from /proc), sysport's `/metrics` latency and the engine's `/ping` latency. ROUNDS
rounds, each running both settings on both pages, in alternating order. Loopback only; every
loop is bounded by time.

    python run.py SYSPORT_BIN OUT_DIR [SECONDS] [ROUNDS]        (default 10 s, 3 rounds)
    python run.py --engine ENGINES PORT                          (the engine alone)
"""
import http.client
import os
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "../load"))
import run as loadrun  # noqa: E402  (bench/load/run.py: its process helpers)

PAGES = [("270KB", 1), ("1.8MB", 36)]
SETTINGS = ["false", "true"]


def engine(engines, port):
    import uvicorn
    from prometheus_client import make_asgi_app
    from starlette.applications import Starlette
    from starlette.responses import PlainTextResponse
    from starlette.routing import Mount, Route

    import registry

    async def ping(_request):
        return PlainTextResponse("ok")

    metrics = Mount("/metrics", make_asgi_app(registry=registry.build(engines)))
    # SGLang's own workaround (python/sglang/srt/utils/common.py, add_prometheus_middleware):
    # without it `/metrics` is a 307 to `/metrics/`.
    metrics.path_regex = re.compile("^/metrics(?P<path>.*)$")
    app = Starlette(routes=[Route("/ping", ping), metrics])
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    print(f"ready {port}", flush=True)
    server.run()


def paced(host, port, path, every, seconds, out):
    """GETs `path` every `every` seconds on one kept-alive connection; appends (latency, bytes)."""
    conn = http.client.HTTPConnection(host, port, timeout=10)
    end = time.monotonic() + seconds
    nxt = time.monotonic()
    while time.monotonic() < end:
        t = time.perf_counter()
        conn.request("GET", path)
        r = conn.getresponse()
        body = r.read()
        out.append((time.perf_counter() - t, len(body), r.status))
        nxt += every
        time.sleep(max(0.0, nxt - time.monotonic()))
    conn.close()


def page_sizes(port):
    """The engine's page on the wire, as it is and gzip-compressed, in bytes."""
    out = []
    for encoding in ("identity", "gzip"):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/metrics", headers={"Accept-Encoding": encoding})
        out.append(len(conn.getresponse().read()))
        conn.close()
    return tuple(out)


def sysport_config(port, engine_port, compress):
    return (f"listen: {{ host: 127.0.0.1, port: {port} }}\n"
            "upstreams:\n"
            "  - name: engine\n"
            "    engine: vllm\n"
            f"    url: http://127.0.0.1:{engine_port}/metrics\n"
            "    health_url: none\n"
            "    stall_after: 0s\n"
            "    canary_after: 0s\n"
            f"    enable_compression: {compress}\n"
            "shutdown: { drain_delay: 0s }\n")


def one_run(binary, out, page, engines, compress, seconds):
    eport = loadrun.free_port()
    eng = loadrun.Proc(f"engine-{page}", [sys.executable, os.path.abspath(__file__), "--engine", str(engines),
                                          str(eport)], out, ready="ready")
    sp = None
    try:
        loadrun.wait_http(f"http://127.0.0.1:{eport}/ping")
        sizes = page_sizes(eport)
        sport = loadrun.free_port()
        path = os.path.join(out, f"sysport-{page}-{compress}.yaml")
        with open(path, "w") as f:
            f.write(sysport_config(sport, eport, compress))
        sp = loadrun.Proc(f"sysport-{page}-{compress}", [binary, "--config", path], out)
        loadrun.wait_http(f"http://127.0.0.1:{sport}/metrics")
        reads, pings = [], []
        warm = []
        paced("127.0.0.1", sport, "/metrics", 0.05, 1.0, warm)
        cpu0 = loadrun.proc_stat(eng.pid)[0]
        pinger = threading.Thread(target=paced, args=("127.0.0.1", eport, "/ping", 0.01, seconds, pings))
        pinger.start()
        paced("127.0.0.1", sport, "/metrics", 0.05, seconds, reads)
        pinger.join()
        cpu = loadrun.proc_stat(eng.pid)[0] - cpu0
    finally:
        if sp:
            sp.stop()
        eng.stop()
    bad = [s for _, _, s in reads if s != 200]
    if bad:
        raise SystemExit(f"{page} enable_compression={compress}: {len(bad)} reads answered {bad[0]}")
    if min(b for _, b, _ in reads) < 50_000:
        raise SystemExit(f"{page} enable_compression={compress}: answers without the engine's page; "
                         f"see {out}/sysport-{page}-{compress}.log")
    lat = sorted(t for t, _, _ in reads)
    ping = sorted(t for t, _, _ in pings)

    def q(xs, p):
        return xs[min(len(xs) - 1, int(p * len(xs)))] * 1e3

    # Every read is one fetch of the engine's page (min_interval 0, no health reads).
    return {"sizes": sizes, "reads": len(reads), "bytes": statistics.median(b for _, b, _ in reads),
            "engine_cpu_ms": cpu / len(reads) * 1e3, "p50": q(lat, 0.5), "p99": q(lat, 0.99),
            "ping_p50": q(ping, 0.5), "ping_p99": q(ping, 0.99), "ping_max": ping[-1] * 1e3}


def main():
    if len(sys.argv) >= 2 and sys.argv[1] == "--engine":
        return engine(int(sys.argv[2]), int(sys.argv[3]))
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    binary, out = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 10.0
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    os.makedirs(out, exist_ok=True)
    results = {}
    for r in range(rounds):
        for page, engines in PAGES:
            order = SETTINGS if r % 2 == 0 else SETTINGS[::-1]
            for compress in order:
                res = one_run(binary, out, page, engines, compress, seconds)
                results.setdefault((page, compress), []).append(res)
                print(f"round {r + 1} {page} enable_compression={compress}: {res}", file=sys.stderr, flush=True)
    print(f"{rounds} rounds of {seconds:g} s; values per round, in round order\n")
    for page, _ in PAGES:
        plain, packed = results[(page, SETTINGS[0])][0]["sizes"]
        print(f"- {page}: the engine's page is {plain:,} bytes as it is, {packed:,} gzip-compressed")
    print()
    print("| page | enable_compression | engine CPU a fetch (ms) | sysport /metrics p50 (ms) | p99 (ms) "
          "| engine /ping p50 (ms) | p99 (ms) | max (ms) | reads |")
    print("|---|---|---|---|---|---|---|---|---|")
    for page, _ in PAGES:
        for compress in SETTINGS:
            rs = results[(page, compress)]

            def col(key, fmt="{:.2f}"):
                return " / ".join(fmt.format(x[key]) for x in rs)
            print(f"| {page} | {compress} | {col('engine_cpu_ms')} | {col('p50')} | {col('p99')} | "
                  f"{col('ping_p50')} | {col('ping_p99')} | {col('ping_max', '{:.1f}')} | {col('reads', '{:d}')} |")


if __name__ == "__main__":
    main()
