"""The engine endpoint of the gateway-readers benchmark (bench/gateway.sh): a vLLM-like process
serving its Prometheus registry.

The registry is a real prometheus_client CollectorRegistry equal to the medium fixture
(`gen_vllm_like.py --engines 4 --lmcache --tp 2 --lora-adapters 4 --spec-decode 2`, as
/work/shared/fixtures/make_samples.sh makes gen/medium.prom; built by bench/load/registry.py).
It is served the way vLLM serves it: prometheus_client's ASGI app (`make_asgi_app`, which vLLM
mounts at /metrics) called on one asyncio event-loop thread, so every request renders
`generate_latest(registry)` (or the OpenMetrics variant, per Accept) on that thread, and gzips it
when the client accepts gzip. The HTTP/1.1 layer is a small keep-alive server on asyncio streams
(uvicorn's role in vLLM).

    python engine.py PORT [ENGINES]     # prints "ready PORT BYTES" once it listens

GET /metrics      the registry (counted)
GET /health       200, empty (vLLM's readiness endpoint; not counted)
GET /stats        JSON: {"metrics_requests", "metrics_gzip", "bytes_out", "busy_seconds"}
                  (not counted): what the benchmark reads before and after each scenario
"""
import asyncio
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "load"))

import registry  # noqa: E402  (bench/load/registry.py)
from prometheus_client import generate_latest, make_asgi_app  # noqa: E402

MEDIUM_ENGINES = 4
STATS = {"metrics_requests": 0, "metrics_gzip": 0, "bytes_out": 0, "busy_seconds": 0.0}
MAX_HEAD = 64 << 10


async def call_asgi(app, method, path, query, headers):
    """One request through the ASGI app; returns (status, [(name, value)], body)."""
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query,
        "root_path": "", "headers": headers, "client": None, "server": None,
    }
    out = {"status": 500, "headers": [], "body": []}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"] = message["status"]
            out["headers"] = message.get("headers", [])
        elif message["type"] == "http.response.body":
            out["body"].append(message.get("body", b""))

    await app(scope, receive, send)
    return out["status"], out["headers"], b"".join(out["body"])


def response(status, headers, body, close):
    reason = {200: "OK", 404: "Not Found", 405: "Method Not Allowed", 400: "Bad Request"}
    head = [f"HTTP/1.1 {status} {reason.get(status, 'OK')}".encode()]
    for name, value in headers:
        head.append(name + b": " + value)
    head.append(b"content-length: " + str(len(body)).encode())
    if close:
        head.append(b"connection: close")
    return b"\r\n".join(head) + b"\r\n\r\n" + body


def make_handler(app):
    async def handle(reader, writer):
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                    return
                lines = head.decode("latin-1").split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3:
                    writer.write(response(400, [], b"", True))
                    await writer.drain()
                    return
                method, target, version = parts
                headers = []
                close = version == "HTTP/1.0"
                length = 0
                for line in lines[1:]:
                    if not line:
                        continue
                    name, _, value = line.partition(":")
                    name, value = name.strip().lower(), value.strip()
                    headers.append((name.encode("latin-1"), value.encode("latin-1")))
                    if name == "connection":
                        close = "close" in value.lower() or (
                            version == "HTTP/1.0" and "keep-alive" not in value.lower())
                    elif name == "content-length":
                        length = int(value or 0)
                if length:
                    await reader.readexactly(length)
                path, _, query = target.partition("?")
                if method not in ("GET", "HEAD"):
                    out = response(405, [], b"", close)
                elif path == "/metrics":
                    t0 = time.perf_counter()
                    status, hdrs, body = await call_asgi(app, method, path, query.encode(),
                                                         headers)
                    STATS["busy_seconds"] += time.perf_counter() - t0
                    STATS["metrics_requests"] += 1
                    if any(n.lower() == b"content-encoding" for n, _ in hdrs):
                        STATS["metrics_gzip"] += 1
                    STATS["bytes_out"] += len(body)
                    out = response(status, hdrs, b"" if method == "HEAD" else body, close)
                elif path == "/health":
                    out = response(200, [], b"", close)
                elif path == "/stats":
                    out = response(200, [(b"content-type", b"application/json")],
                                   json.dumps(STATS).encode(), close)
                else:
                    out = response(404, [], b"", close)
                writer.write(out)
                await writer.drain()
                if close:
                    return
        except ConnectionError:
            return
        finally:
            writer.close()

    return handle


async def main(port, engines):
    reg = registry.build(engines)
    size = len(generate_latest(reg))
    app = make_asgi_app(registry=reg)
    server = await asyncio.start_server(make_handler(app), "127.0.0.1", port, limit=MAX_HEAD,
                                        backlog=256)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"ready {port} {size}", flush=True)
    async with server:
        await stop.wait()


if __name__ == "__main__":
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    asyncio.run(main(int(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) == 3 else MEDIUM_ENGINES))
