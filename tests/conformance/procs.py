"""Processes and servers of the conformance suite: the loopback upstream server and sysport
instances. Everything started here is tracked and stopped by `stop_all`, also on failure."""

import gzip
import http.client
import os
import shutil
import socket
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

_LOCK = threading.Lock()
_PROCS = []
_SERVERS = []
_STOPPING = threading.Event()


class Stopping(Exception):
    """The runner is shutting down: no new process may start."""


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Upstreams:
    """One threaded HTTP server on 127.0.0.1:<os-chosen port> serving every input at /NAME."""

    def __init__(self, inputs):
        self.routes = {f"/{i.name}": i for i in inputs}
        self.requests = []  # (path, headers) of every request
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):  # noqa: N802
                with _LOCK:
                    outer.requests.append((self.path, {k.lower(): v for k, v in self.headers.items()}))
                inp = outer.routes.get(self.path)
                if inp is None:
                    body = b"not found\n"
                    self.send_response(404)
                    self.send_header("Content-Type", "text/plain")
                else:
                    body = inp.body
                    self.send_response(200)
                    self.send_header("Content-Type", inp.content_type)
                    if inp.gzip and "gzip" in self.headers.get("Accept-Encoding", ""):
                        body = gzip.compress(body)
                        self.send_header("Content-Encoding", "gzip")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # a sysport that was stopped mid-connection

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        with _LOCK:
            _SERVERS.append(self.server)

    def url(self, inp) -> str:
        return f"http://127.0.0.1:{self.port}/{inp.name}"


def _yaml_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


class Sysport:
    """One sysport process with the given upstreams [(name, url)], listening on loopback; those
    named in `compressed` ask for gzip (`enable_compression: true`; off by default on loopback)."""

    def __init__(self, binary: str, upstreams, workdir: str, tag: str, compressed=frozenset()):
        self.binary, self.upstreams, self.workdir, self.tag = binary, upstreams, workdir, tag
        self.compressed = compressed
        self.proc = None
        self.port = None
        self.log_path = os.path.join(workdir, f"sysport-{tag}.log")

    def config(self, port: int) -> str:
        lines = [
            "listen:",
            '  host: "127.0.0.1"',
            f"  port: {port}",
            "health:",
            "  interval: 1s",
            "shutdown:",
            "  drain_delay: 0s",
            "limits:",
            "  max_line_bytes: 1MiB",
            "upstreams:",
        ]
        for name, url in self.upstreams:
            lines += [
                f"  - name: {_yaml_str(name)}",
                f"    url: {_yaml_str(url)}",
                '    keep: ["vllm:", "lmcache:"]',
                "    required: false",
                "    timeout: 5s",
            ]
            if name in self.compressed:
                lines.append("    enable_compression: true")
        return "\n".join(lines) + "\n"

    def start(self, attempts: int = 3):
        last = ""
        for _ in range(attempts):
            if _STOPPING.is_set():
                raise Stopping()
            port = free_port()
            path = os.path.join(self.workdir, f"sysport-{self.tag}.yaml")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(self.config(port))
            env = {k: v for k, v in os.environ.items()
                   if not k.startswith("DYN_SYSTEM_") and k not in ("SYSPORT_CONFIG",)
                   and k.lower() not in ("http_proxy", "https_proxy", "all_proxy")}
            env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
            env.setdefault("SYSPORT_LOG", "warn")
            log = open(self.log_path, "wb")
            # With setpriv, the kernel stops sysport if this runner dies without cleaning up.
            wrap = ["setpriv", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
            proc = subprocess.Popen(
                wrap + [self.binary, "--config", path], stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                env=env,
            )
            log.close()
            with _LOCK:
                _PROCS.append(proc)
                stopping = _STOPPING.is_set()
            if stopping:
                proc.kill()
                raise Stopping()
            self.proc, self.port = proc, port
            if self._wait_live(timeout=15.0):
                return
            last = self.log_tail()
            self.stop()
        raise RuntimeError(f"sysport did not answer GET /live with 200: {last}")

    def _wait_live(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                status, _, _ = self.get("/live", timeout=2.0)
                if status == 200:
                    return True
            except OSError:
                pass
            time.sleep(0.02)
        return False

    def get(self, path: str, headers=None, timeout: float = 20.0):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request("GET", path, headers=headers or {})
            r = conn.getresponse()
            body = r.read()
            return r.status, {k.lower(): v for k, v in r.getheaders()}, body
        finally:
            conn.close()

    def log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as fh:
                return fh.read()[-600:].decode("utf-8", "replace").strip()
        except OSError:
            return ""

    def stop(self):
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        with _LOCK:
            if p in _PROCS:
                _PROCS.remove(p)
        self.proc = None


def stop_all():
    """Stops every process and server started here; nothing new starts afterwards."""
    _STOPPING.set()
    with _LOCK:
        procs, servers = list(_PROCS), list(_SERVERS)
        _PROCS.clear()
        _SERVERS.clear()
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        try:
            p.wait(timeout=5)
        except Exception:
            pass
    for s in servers:
        s.shutdown()
        s.server_close()
