"""(d): the Python way to do what sysport does. A prometheus_client collector that, per
scrape, fetches the upstream, parses it with prometheus_client's parser, keeps the vllm:/lmcache:
families and hands them back to prometheus_client's threaded server to re-expose.

    python pyproxy.py UPSTREAM_URL PORT
"""
import signal
import sys
import threading
import urllib.request

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.parser import text_string_to_metric_families

KEEP = ("vllm:", "lmcache:")


class Proxy:
    def __init__(self, url):
        self.url = url

    def collect(self):
        req = urllib.request.Request(self.url, headers={"Accept": "text/plain;version=0.0.4"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            text = resp.read().decode("utf-8")
        for family in text_string_to_metric_families(text):
            if family.name.startswith(KEEP):
                yield family


url, port = sys.argv[1], int(sys.argv[2])
reg = CollectorRegistry(auto_describe=False)
reg.register(Proxy(url))
server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
print(f"ready {port}", flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
stop.wait()
server.shutdown()
