"""Scrape latency and sysport's CPU per scrape on the 740 KB vLLM-style page: plain HTTP against
HTTPS, and HTTPS with basic auth, as Prometheus scrapes (gzip, one kept-alive connection) and with
a new connection (a full TLS handshake) per scrape.

    python bench/tls/run.py OUT_DIR        (bench/tls.sh sets it up; see bench/RESULTS.md §12)

Everything listens on 127.0.0.1; every run is a fixed number of scrapes.
"""
import base64
import http.client
import http.server
import os
import socketserver
import ssl
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "../.."))
SYSPORT = os.path.join(ROOT, "target/release/sysport")
CLK_TCK = os.sysconf("SC_CLK_TCK")
KEPT, FRESH, ROUNDS = 400, 100, 3
PASSWORD = "bench-password"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def serve_page(path):
    body = open(path, "rb").read()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
        daemon_threads = True

    server = Server(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(out, name, engine_port, web):
    port = free_port()
    cfg = os.path.join(out, f"{name}.yaml")
    with open(cfg, "w") as f:
        f.write(f"listen: {{host: 127.0.0.1, port: {port}}}\nhealth: {{interval: 1h}}\n"
                f"shutdown: {{drain_delay: 0s}}\nupstreams:\n"
                f"  - {{name: vllm, url: \"http://127.0.0.1:{engine_port}/metrics\", keep: [\"vllm:\"]}}\n")
    args = [SYSPORT, "--config", cfg]
    if web:
        args += ["--web.config.file", web]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(os.path.join(out, f"{name}.log"), "w"))
    return proc, port


def connect(port, tls):
    if not tls:
        return http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    ctx = ssl.create_default_context(cafile=tls)
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ctx)


def scrape(conn, auth):
    headers = {"Accept-Encoding": "gzip",
               "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1"}
    if auth:
        headers["Authorization"] = "Basic " + base64.b64encode(f"prometheus:{auth}".encode()).decode()
    conn.request("GET", "/metrics", headers=headers)
    r = conn.getresponse()
    body = r.read()
    assert r.status == 200, (r.status, body[:200])
    return len(body)


def run(pid, port, tls, auth, fresh):
    n = FRESH if fresh else KEPT
    conn = None if fresh else connect(port, tls)
    if conn:
        for _ in range(20):
            scrape(conn, auth)  # warm the connection, caches, the auth check
    times = []
    cpu0 = cpu_seconds(pid)
    for _ in range(n):
        t = time.perf_counter()
        c = connect(port, tls) if fresh else conn
        scrape(c, auth)
        if fresh:
            c.close()
        times.append(time.perf_counter() - t)
    cpu = cpu_seconds(pid) - cpu0
    if conn:
        conn.close()
    q = statistics.quantiles(times, n=100)
    return {"p50": q[49] * 1e3, "p90": q[89] * 1e3, "p99": q[98] * 1e3, "cpu": cpu / n * 1e3}


def main():
    out = sys.argv[1]
    payload = os.path.join(out, "payload-740KB.prom")
    engine_port = serve_page(payload)
    import bcrypt
    hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(10)).decode()
    cert, key, ca = (os.path.join(out, f) for f in ("server.crt", "server.key", "ca.crt"))
    tls_web = os.path.join(out, "web-tls.yml")
    with open(tls_web, "w") as f:
        f.write(f"tls_server_config: {{cert_file: {cert}, key_file: {key}}}\n")
    auth_web = os.path.join(out, "web-auth.yml")
    with open(auth_web, "w") as f:
        f.write(f"tls_server_config: {{cert_file: {cert}, key_file: {key}}}\n"
                f"basic_auth_users:\n  prometheus: '{hashed}'\n")
    setups = [("plain HTTP", None, None, None), ("HTTPS", tls_web, ca, None),
              ("HTTPS + basic auth", auth_web, ca, PASSWORD)]
    results = {}
    for round_ in range(ROUNDS):
        for name, web, tls, auth in setups:
            proc, port = start(out, name.replace(" ", "_").replace("+", ""), engine_port, web)
            try:
                for _ in range(100):
                    try:
                        c = connect(port, tls)
                        c.request("GET", "/live")
                        c.getresponse().read()
                        break
                    except OSError:
                        time.sleep(0.05)
                for fresh in (False, True):
                    r = run(proc.pid, port, tls, auth, fresh)
                    results.setdefault((name, fresh), []).append(r)
            finally:
                proc.terminate()
                proc.wait(10)
    print(f"740 KB page ({os.path.getsize(payload)} bytes), gzip; {KEPT} scrapes on one kept-alive "
          f"connection, {FRESH} with a new connection each; best of {ROUNDS} rounds per figure\n")
    print("| setup | connection | p50 ms | p90 ms | p99 ms | sysport CPU ms/scrape |")
    print("|---|---|---:|---:|---:|---:|")
    for name, _, _, _ in setups:
        for fresh in (False, True):
            rs = results[(name, fresh)]
            best = {k: min(r[k] for r in rs) for k in rs[0]}
            kind = "new per scrape" if fresh else "kept alive"
            print(f"| {name} | {kind} | {best['p50']:.2f} | {best['p90']:.2f} | {best['p99']:.2f} | {best['cpu']:.2f} |")


if __name__ == "__main__":
    main()
