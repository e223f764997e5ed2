"""(e) upstream: prometheus_client's own threaded HTTP server rendering the registry per request,
as a vLLM process serves /metrics.

    python pyserver.py ENGINES PORT
"""
import signal
import sys
import threading

from prometheus_client import start_http_server

import registry

engines, port = int(sys.argv[1]), int(sys.argv[2])
reg = registry.build(engines)
server, thread = start_http_server(port, addr="127.0.0.1", registry=reg)
print(f"ready {port}", flush=True)
stop = threading.Event()
signal.signal(signal.SIGTERM, lambda *_: stop.set())
stop.wait()
server.shutdown()
