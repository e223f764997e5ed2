"""(c): NVIDIA Dynamo 1.6.1's system port serving the registry's vllm:/lmcache: families, wired
the way Dynamo's own vLLM worker (dynamo/vllm/main.py) does it: register_engine_metrics_callback
with the prefix filters and the namespace/component/endpoint/model auto-labels. The runtime
runs on CPU with in-memory discovery; DYN_SYSTEM_HOST/DYN_SYSTEM_PORT choose the address.

Before serving, it prints the median time of the registry's own generate_latest() (what the
engine pays to render its body), measured in this process, so the overhead of Dynamo's path can
be told apart from the cost of producing its input.

    DYN_SYSTEM_HOST=127.0.0.1 DYN_SYSTEM_PORT=PORT python dynamo_server.py ENGINES
"""
import asyncio
import json
import signal
import sys

import registry

engines = int(sys.argv[1])
reg = registry.build(engines)
render = registry.render_seconds(reg)

from dynamo._core import DistributedRuntime  # noqa: E402
from dynamo.common.utils.prometheus import register_engine_metrics_callback  # noqa: E402


async def main():
    loop = asyncio.get_running_loop()
    runtime = DistributedRuntime(loop, "mem", "tcp")
    endpoint = runtime.endpoint("bench.backend.generate")
    register_engine_metrics_callback(
        endpoint=endpoint,
        registry=reg,
        metric_prefix_filters=["vllm:", "lmcache:"],
        namespace_name="bench",
        component_name="backend",
        endpoint_name="generate",
        model_name="meta-llama/Llama-3.1-8B-Instruct",
    )
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print("ready " + json.dumps({"render_seconds": render}), flush=True)
    await stop.wait()
    runtime.shutdown()


asyncio.run(main())
