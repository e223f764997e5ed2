"""The vLLM-style registries the load test serves, built by the shared fixture generator.

`build(engines)` returns a real prometheus_client CollectorRegistry holding what a vLLM process
with that many data-parallel engines (LMCache with TP 2, 4 LoRA adapters, spec decode, the
Python runtime and HTTP families) registers: 12 engines render to ~740 KB, 360 to ~15.8 MB.

    python registry.py write ENGINES FILE   # generate_latest() of that registry into FILE
"""
import importlib.util
import os
import sys
import time

GEN = os.environ.get(
    "GEN_VLLM_LIKE",
    os.path.join(os.path.dirname(__file__), "../../../shared/fixtures/gen_vllm_like.py"),
)
FLAGS = ["--lmcache", "--tp", "2", "--lora-adapters", "4", "--spec-decode", "2"]


def build(engines):
    """A registry for `engines` engines (the generator reads its options from argv on import)."""
    argv = sys.argv
    sys.argv = [GEN, "--engines", str(engines), *FLAGS]
    try:
        import prometheus_fastapi_instrumentator  # noqa: F401
    except ImportError:
        sys.argv.append("--no-http")
    try:
        spec = importlib.util.spec_from_file_location("gen_vllm_like", GEN)
        gen = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(gen)
        return gen.build_single(gen.ARGS)
    finally:
        sys.argv = argv


def render_seconds(registry, runs=9):
    """Median wall time of generate_latest(registry): the cost of producing the engine's body."""
    from prometheus_client import generate_latest

    times = []
    for _ in range(runs):
        t = time.perf_counter()
        generate_latest(registry)
        times.append(time.perf_counter() - t)
    times.sort()
    return times[len(times) // 2]


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] != "write":
        sys.exit(__doc__)
    from prometheus_client import generate_latest

    body = generate_latest(build(int(sys.argv[2])))
    with open(sys.argv[3], "wb") as f:
        f.write(body)
