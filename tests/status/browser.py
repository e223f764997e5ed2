"""A real browser on sysport's status page: Debian's headless Chromium loads `/` of a running
sysport in front of one healthy upstream (the simulated vLLM of `sysport demo`) and one that
refuses connections, and

  - the rendered DOM names both, shows the refused one down with its error in words, the
    healthy one up, links /metrics, /metrics/router, /health, /live and /status, and draws an
    SVG chart for each;
  - the healthy one's card shows every vitals figure /status reports, and five sparklines;
  - an engine whose gauges say -10 requests running, +Inf waiting and a KV cache usage of
    -500 % gets "n/a" with the reason for each on its card, never a number;
  - a screenshot is taken and is not blank (its pixels are decoded here, with zlib);
  - /status agrees with /health and /metrics.

    python browser.py                       (SYSPORT_BIN names the sysport binary)
    python browser.py --screenshot-to docs/status.png --seconds 90

The second form is how docs/status.md's screenshot is made: the same run, scraped for longer so
that the chart has a history. Everything listens on 127.0.0.1; every process started here is
stopped when it ends.
"""

import argparse
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import zlib
from html.parser import HTMLParser
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--hide-scrollbars", "--force-device-scale-factor=1",
]
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=10):
    """(status, body) of a GET; an HTTP error status is an answer too."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


class Element:
    def __init__(self, tag, attrs):
        self.tag, self.attrs, self.children, self.text = tag, dict(attrs), [], []

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find_all(self, tag=None, **attrs):
        return [e for e in self.walk()
                if (tag is None or e.tag == tag)
                and all(attr in (e.attrs.get(k.rstrip("_")) or "").split()
                        if k.rstrip("_") == "class" else e.attrs.get(k) == attr
                        for k, attr in attrs.items())]

    def content(self):
        return "".join(self.text) + "".join(c.content() for c in self.children)


class Dom(HTMLParser):
    """Chromium's --dump-dom output as a tree of Elements."""

    def __init__(self, html):
        super().__init__()
        self.root = Element("#document", {})
        self.stack = [self.root]
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        e = Element(tag, attrs)
        self.stack[-1].children.append(e)
        if tag not in VOID:
            self.stack.append(e)

    def handle_startendtag(self, tag, attrs):
        self.stack[-1].children.append(Element(tag, attrs))

    def handle_endtag(self, tag):
        for i in range(len(self.stack) - 1, 0, -1):
            if self.stack[i].tag == tag:
                del self.stack[i:]
                return

    def handle_data(self, data):
        self.stack[-1].text.append(data)


def png_pixels(path):
    """(width, height, rows of RGB(A) tuples) of an 8-bit RGB or RGBA PNG, unfiltered."""
    data = open(path, "rb").read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        chunk = data[pos + 8:pos + 8 + length]
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", chunk)
        elif kind == b"IDAT":
            idat += chunk
        pos += 12 + length
    width, height, depth, color, _, _, interlace = header
    assert depth == 8 and color in (2, 6) and interlace == 0, f"unexpected PNG {header}"
    bpp = 3 if color == 2 else 4
    raw = zlib.decompress(idat)
    stride = width * bpp
    rows, prev = [], bytearray(stride)
    for y in range(height):
        f = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b = prev[i]
            c = prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append([tuple(line[x:x + 3]) for x in range(0, stride, bpp)])
        prev = line
    return width, height, rows


class Run:
    def __init__(self, sysport, chromium):
        self.sysport, self.chromium = sysport, chromium
        self.work = tempfile.mkdtemp(prefix="sysport-status-")
        self.procs = []
        self.passed = self.failed = 0

    def check(self, what, problem):
        if problem:
            self.failed += 1
            print(f"FAIL {what}: {problem}", flush=True)
        else:
            self.passed += 1
            print(f"ok   {what}", flush=True)

    def start(self, args, log):
        p = subprocess.Popen([self.sysport, *args], stdout=subprocess.PIPE, text=True,
                             stderr=open(os.path.join(self.work, log), "w"))
        self.procs.append(p)
        return p

    def start_engine(self):
        """`sysport demo`: its simulated vLLM is the healthy upstream."""
        demo = self.start(["demo", "--host", "127.0.0.1", "--port", str(free_port())],
                          "demo.log")
        deadline = time.time() + 20
        while time.time() < deadline:
            line = demo.stdout.readline()
            if "simulated vLLM at " in line:
                return line.split("simulated vLLM at ")[1].split()[0].rsplit("/", 1)[0]
            if not line and demo.poll() is not None:
                break
        raise RuntimeError("sysport demo did not start")

    def start_sysport(self, engine):
        refused = free_port()
        return self.start_config("sysport", f"""health: {{ interval: 1s }}
upstreams:
  - name: vllm
    url: {engine}/metrics
    health_url: {engine}/health
  - name: lmcache
    url: http://127.0.0.1:{refused}/metrics
    keep: ["lmcache:"]
    timeout: 1s
""")

    def start_config(self, name, config):
        """sysport with `config` (a listen: section added) on a free port, once it answers
        /live; its base URL."""
        port = free_port()
        path = os.path.join(self.work, f"{name}.yaml")
        with open(path, "w") as f:
            f.write(f"listen: {{ host: 127.0.0.1, port: {port} }}\n{config}")
        self.start(["--config", path], f"{name}.log")
        base = f"http://127.0.0.1:{port}"
        deadline = time.time() + 20
        while time.time() < deadline:
            try:
                if get(f"{base}/live", timeout=1)[0] == 200:
                    return base
            except OSError:
                time.sleep(0.05)
        raise RuntimeError("sysport did not start")

    def browse(self, args, timeout=90):
        profile = tempfile.mkdtemp(dir=self.work)
        out = subprocess.run([self.chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args],
                             capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise RuntimeError(f"chromium exited {out.returncode}: {out.stderr[-2000:]}")
        return out.stdout

    def check_dom(self, base):
        dom = Dom(self.browse(["--dump-dom", f"{base}/"])).root
        cards = {s.attrs.get("id"): s for s in dom.find_all("section", class_="card")}
        self.check("the page has a card for each upstream",
                   None if {"upstream-vllm", "upstream-lmcache"} <= cards.keys()
                   else f"cards {sorted(cards)}")
        vllm, lmcache = cards.get("upstream-vllm"), cards.get("upstream-lmcache")
        if not (vllm and lmcache):
            return
        badge = lambda card: " ".join(b.content() for b in card.find_all("span", class_="badge"))
        self.check("the healthy upstream shows up", None if badge(vllm) == "up" else badge(vllm))
        self.check("the refused upstream shows down", None if badge(lmcache) == "down"
                   else badge(lmcache))
        errors = [e.content() for e in lmcache.find_all("p", class_="error")]
        self.check("the refused upstream's error is in words",
                   None if any(e.startswith("connection refused") for e in errors) else errors)
        for name, card in (("vllm", vllm), ("lmcache", lmcache)):
            self.check(f"{name} is named on its card",
                       None if card.find_all("h2") and card.find_all("h2")[0].content().startswith(name)
                       else "no heading")
            charts = card.find_all("svg", class_="chart")
            self.check(f"{name} has an SVG chart", None if len(charts) == 1 else f"{len(charts)} charts")
        bars = vllm.find_all("path", class_="took")
        self.check("the healthy upstream's chart draws its scrapes",
                   None if bars and bars[0].attrs.get("d", "").count("M") >= 2 else "no bars")
        fails = lmcache.find_all("path", class_="fail")
        self.check("the refused upstream's chart marks its failures",
                   None if fails else "no failure marks")
        links = {a.attrs.get("href") for a in dom.find_all("a")}
        want = {"/metrics", "/metrics/router", "/health", "/live", "/status"}
        self.check("the page links every route", None if want <= links else f"missing {want - links}")
        why = dom.find_all(id="why")
        self.check("the page says why it is not ready, once",
                   None if why and "lmcache: " in why[0].content()
                   and why[0].content().lower().count("not ready") == 1
                   else [w.content() for w in why])
        props = {dt.content(): dd.content() for dt, dd in zip(lmcache.find_all("dt"), lmcache.find_all("dd"))}
        self.check("the LMCache upstream is not called vLLM",
                   None if props.get("families") == "lmcache:" and "engine" not in props else props)
        pills = [li.content() for li in vllm.find_all("ul", class_="series")[0].find_all("li")] \
            if vllm.find_all("ul", class_="series") else []
        self.check("no pill is in snake_case",
                   None if pills and not any("_" in p for p in pills) else pills)
        external = [e.tag for e in dom.walk()
                    if e.tag in ("script", "link", "img", "iframe") or "src" in e.attrs]
        self.check("the page loads nothing from elsewhere", external or None)

    def check_vitals(self, base):
        """The figures and sparklines of the vLLM card are those /status reports (read just
        before and just after the page: a health check may land in between)."""
        # /status at every reading while the browser loads the page: the page is compared with
        # the report made from the same readings (`readings_total`).
        reports, done = {}, threading.Event()

        def poll():
            while not done.is_set():
                status = json.loads(get(f"{base}/status")[1])
                reports.setdefault(status["upstreams"][0]["vitals"]["readings_total"], status)
                time.sleep(0.1)

        poller = threading.Thread(target=poll)
        poller.start()
        try:
            dom = Dom(self.browse(["--dump-dom", f"{base}/"])).root
        finally:
            done.set()
            poller.join()
        block = dom.find_all(id="vitals-vllm")
        self.check("the healthy upstream's card shows its vitals", None if block else "no vitals block")
        if not block:
            return
        shown = {d.attrs["data-key"]: d for d in block[0].find_all("div") if "data-key" in d.attrs}
        want = {"running", "waiting", "kv_cache_usage", "requests_per_second", "prompt_tokens_per_second",
                "generation_tokens_per_second", "preemptions_per_second", "prefix_cache_hit_rate",
                "time_to_first_token_seconds.p50", "time_to_first_token_seconds.p99",
                "inter_token_latency_seconds.p50", "inter_token_latency_seconds.p99",
                "e2e_request_latency_seconds.p50", "e2e_request_latency_seconds.p99"}
        self.check("every figure is on the page", None if want <= shown.keys() else sorted(want - shown.keys()))

        def value(status, key):
            v = status["upstreams"][0]["vitals"]
            for part in key.split("."):
                v = v[part]
            return v

        total = int(block[0].attrs.get("data-readings-total", "-1"))
        self.check("/status was read at the page's readings", None if total in reports
                   else f"page at reading {total}, /status at {sorted(reports)}")
        if total not in reports:
            return
        after = reports[total]
        wrong = []
        for key in sorted(want & shown.keys()):
            on_page = shown[key].attrs.get("data-value")
            page_value = None if on_page == "null" else float(on_page)
            if page_value != value(after, key):
                wrong.append(f"{key}: page {on_page}, /status {value(after, key)}")
            text = shown[key].find_all("dd")[0].content()
            if (page_value is None) != (text == "–"):
                wrong.append(f"{key}: shows {text!r} for {on_page}")
        self.check("the page shows the figures /status reports", wrong or None)
        live = [k for k in ("running", "generation_tokens_per_second", "time_to_first_token_seconds.p99")
                if value(after, k) is None]
        self.check("the simulated engine's vitals are figures, not null", live or None)
        sparks = {f.attrs.get("data-key"): f for f in block[0].find_all("figure", class_="spark")}
        self.check("five sparklines", None if set(sparks) == {"running", "waiting", "kv_cache_usage",
                   "generation_tokens_per_second", "ttft_p99_seconds"} else sorted(sparks))
        lines = [k for k, f in sparks.items()
                 if not f.find_all("path") or f.find_all("path")[0].attrs.get("d", "").count("L") < 2]
        self.check("the sparklines draw the last minutes", lines or None)

    def check_screenshot(self, base, keep):
        shot = os.path.join(self.work, "status.png")
        self.browse([f"--screenshot={shot}", "--window-size=1200,640", f"{base}/"])
        width, height, rows = png_pixels(shot)
        counts = {}
        for row in rows:
            for px in row:
                counts[px] = counts.get(px, 0) + 1
        background = max(counts.values())
        total = width * height
        reds = sum(n for (r, g, b), n in counts.items() if r > 150 and g < 90 and b < 90)
        self.check("the screenshot is not blank",
                   None if len(counts) >= 50 and background < 0.95 * total
                   else f"{len(counts)} colours, {background / total:.1%} one colour")
        self.check("the screenshot shows red for the refused upstream",
                   None if reds >= 20 else f"{reds} red pixels")
        if keep:
            shutil.copyfile(shot, keep)
            print(f"screenshot written to {keep} ({width}x{height})", flush=True)

    def check_agreement(self, base):
        _, metrics = get(f"{base}/metrics")
        health_code, health = get(f"{base}/health")
        _, status = get(f"{base}/status")
        health, status = json.loads(health), json.loads(status)
        self.check("/status ready agrees with /health",
                   None if status["ready"] == (health_code == 200) else f"{status['ready']} vs {health_code}")

        def gauge(name, **labels):
            want = ",".join(f'{k}="{v}"' for k, v in labels.items())
            for line in metrics.splitlines():
                if line.startswith(f"{name}{{") and line.split("}")[0][len(name) + 1:] in (
                        want, ",".join(f'{k}="{v}"' for k, v in reversed(labels.items()))):
                    return float(line.rsplit(" ", 1)[1])
            return None

        for u in status["upstreams"]:
            name = u["name"]
            up = gauge("dynamo_sysport_upstream_up", upstream=name)
            self.check(f"{name}: /status up agrees with /metrics",
                       None if up is not None and u["up"] == (up == 1.0) else f"{u['up']} vs {up}")
            ready = health["endpoints"][name] == "ready"
            self.check(f"{name}: /status readiness agrees with /health",
                       None if u["health"]["ready"] == ready else f"{u['health']} vs {ready}")
            kept = gauge("dynamo_sysport_upstream_series", upstream=name, outcome="kept")
            self.check(f"{name}: /status series kept agrees with /metrics",
                       None if kept == u["series"]["kept"] else f"{u['series']['kept']} vs {kept}")

    def check_impossible_figures(self):
        """An engine whose gauges cannot be figures: none is shown as a number."""
        page = (b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running -10\n"
                b"# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting +Inf\n"
                b"# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc -5\n")

        class Engine(BaseHTTPRequestHandler):
            def do_GET(self):
                body = page if self.path.startswith("/metrics") else b"ok"
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Engine)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            engine = f"http://127.0.0.1:{server.server_address[1]}"
            base = self.start_config("impossible", f"""health: {{ interval: 1s }}
upstreams:
  - name: vllm
    url: {engine}/metrics
    health_url: {engine}/health
    canary_after: 0s
""")
            deadline = time.time() + 20
            while time.time() < deadline:
                try:
                    status = json.loads(get(f"{base}/status", timeout=1)[1])
                    if status["upstreams"][0]["vitals"]["readings_total"] >= 1:
                        break
                except (OSError, ValueError, KeyError, TypeError):
                    pass
                time.sleep(0.2)
            dom = Dom(self.browse(["--dump-dom", f"{base}/"])).root
            figures = {d.attrs.get("data-key"): d for d in dom.find_all("div")
                       if d.attrs.get("data-key")}
            for key in ("running", "waiting", "kv_cache_usage"):
                shown = figures[key].content() if key in figures else None
                self.check(f"an impossible {key} is not shown as a number",
                           None if shown and "n/a" in shown and not any(c.isdigit() for c in
                                                                         shown.replace(key, ""))
                           else repr(shown))
                why = figures.get(key).attrs.get("title", "") if key in figures else ""
                self.check(f"the page says why {key} is not available", None if why else "no reason")
            text = " ".join(e.content() for e in dom.find_all("dd"))
            self.check("no figure reads inf or a negative number",
                       None if "inf" not in text.lower() and "-1" not in text and "-5" not in text
                       else text)
            reasons = [li.content() for li in dom.find_all("li") if "not available" in li.content()]
            self.check("the reasons are listed under the figures",
                       None if len(reasons) == 3 else reasons)
        finally:
            server.shutdown()

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
        shutil.rmtree(self.work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--screenshot-to", help="also keep the screenshot at this path")
    ap.add_argument("--seconds", type=float, default=6, help="how long to scrape before looking")
    args = ap.parse_args()
    chromium = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not chromium:
        sys.exit("status-browser: no chromium (apt-get install chromium)")
    run = Run(os.environ.get("SYSPORT_BIN", "target/debug/sysport"), chromium)
    try:
        base = run.start_sysport(run.start_engine())
        # Prometheus-like scrapes, so that the chart has a history.
        deadline = time.time() + args.seconds
        while time.time() < deadline:
            get(f"{base}/metrics")
            time.sleep(0.5)
        run.check_dom(base)
        run.check_vitals(base)
        run.check_impossible_figures()
        run.check_screenshot(base, args.screenshot_to)
        run.check_agreement(base)
    finally:
        run.stop()
    print(f"status-browser: {run.passed} passed, {run.failed} failed", flush=True)
    sys.exit(1 if run.failed else 0)


if __name__ == "__main__":
    main()
