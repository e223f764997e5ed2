"""sysport's resident memory over time while an engine's page churns a label at every read: the
page tests/bounds.rs serves (100 data-parallel ranks, 6,900 series, each with a `request_id`
that changes at every request), sysport checking it every second with vitals over 1 minute.
RSS is printed every 30 s. Loopback only; bounded by MINUTES.

    python3 bench/load/churn_rss.py SYSPORT_BIN [MINUTES]   (default 8)
"""
import http.server
import os
import subprocess
import sys
import tempfile
import threading
import time


def page(ranks, t):
    extra = f',request_id="{t}"'
    out = []
    for name, value in [("vllm:num_requests_running", lambda r: r % 7),
                        ("vllm:num_requests_waiting", lambda r: r % 3),
                        ("vllm:kv_cache_usage_perc", lambda r: (r % 10) / 10)]:
        out.append(f"# TYPE {name} gauge")
        out += [f'{name}{{engine="{r}",model_name="m"{extra}}} {float(value(r))}' for r in range(ranks)]
    for name, per_s in [("vllm:request_success", 1.0), ("vllm:prompt_tokens", 100.0),
                        ("vllm:generation_tokens", 50.0), ("vllm:num_preemptions", 0.1),
                        ("vllm:prefix_cache_queries", 80.0), ("vllm:prefix_cache_hits", 20.0)]:
        out.append(f"# TYPE {name} counter")
        out += [f'{name}_total{{engine="{r}",model_name="m"{extra}}} {1000.0 + per_s * t}' for r in range(ranks)]
    for name in ["vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds"]:
        out.append(f"# TYPE {name} histogram")
        for r in range(ranks):
            count = 1000.0 + t
            for k in range(1, 20):
                out.append(f'{name}_bucket{{engine="{r}",le="{0.01 * k * k}",model_name="m"{extra}}} '
                           f'{float((count * k / 20) // 1)}')
            out.append(f'{name}_bucket{{engine="{r}",le="+Inf",model_name="m"{extra}}} {count}')
    return ("\n".join(out) + "\n").encode()


def main():
    binary = sys.argv[1]
    minutes = float(sys.argv[2]) if len(sys.argv) > 2 else 8
    reads = [0]
    lock = threading.Lock()

    class Engine(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b""
            if not self.path.startswith("/health"):
                with lock:
                    reads[0] += 1
                    t = reads[0]
                body = page(100, t)
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    engine = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Engine)
    threading.Thread(target=engine.serve_forever, daemon=True).start()
    port = engine.server_address[1]
    with tempfile.TemporaryDirectory() as tmp:
        conf = os.path.join(tmp, "sysport.yaml")
        with open(conf, "w") as f:
            f.write(f"""listen: {{host: 127.0.0.1, port: 0}}
shutdown: {{drain_delay: 0s}}
health: {{interval: 1s}}
vitals: {{window: 1m}}
upstreams:
  - name: vllm
    url: http://127.0.0.1:{port}/metrics
    health_url: http://127.0.0.1:{port}/health
    timeout: 5s
    canary_after: 0s
""")
        proc = subprocess.Popen([binary, "--config", conf], stdout=subprocess.DEVNULL,
                                stderr=open(os.path.join(tmp, "sysport.log"), "w"))
        try:
            started = time.monotonic()
            while time.monotonic() - started < minutes * 60:
                time.sleep(30)
                with open(f"/proc/{proc.pid}/status") as f:
                    rss = next(line.split()[1] for line in f if line.startswith("VmRSS:"))
                print(f"{time.monotonic() - started:5.0f} s: RSS {int(rss) / 1024:.1f} MiB, "
                      f"{reads[0]} pages read", flush=True)
        finally:
            proc.terminate()
            proc.wait()
            engine.shutdown()


if __name__ == "__main__":
    main()
