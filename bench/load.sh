#!/usr/bin/env bash
# Side-by-side load test of sysport against direct fetches, NVIDIA Dynamo 1.6.1's system port,
# a Python prometheus_client proxy, and prometheus_client's own server; see bench/load/run.py
# for the scenarios and bench/RESULTS.md for figures. Everything listens on 127.0.0.1 and every
# run is bounded in time and request count. Takes about 6 minutes on 2 cores once built.
#
# Installs what it needs when missing: Debian's wrk; a venv at bench/.venv with prometheus-client,
# prometheus-fastapi-instrumentator (the HTTP families vLLM serves), ai-dynamo-runtime==1.6.1 and
# ai-dynamo==1.6.1 (--no-deps). Builds target/release/sysport and the helpers in
# bench/load/driver (static server, allocation counter).
#
# Usage: bash bench/load.sh [OUT_DIR]     (default bench/out; results.md and results.json there)
#        SYSPORT_BENCH_QUICK=1 bash bench/load.sh   (one payload, 2 s runs: a smoke test)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$ROOT/bench/out}
export PATH="$HOME/.cargo/bin:$PATH"

if ! command -v wrk >/dev/null; then
  echo "load.sh: installing Debian's wrk"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq wrk >/dev/null
fi

. bench/venv.sh
bench_venv load.sh "prometheus_client, prometheus_fastapi_instrumentator" \
  prometheus-client prometheus-fastapi-instrumentator
DYNAMO=1
dynamo_ok() {
  "$VENV/bin/python" -c 'import dynamo._core, dynamo.common.utils.prometheus' 2>/dev/null
}
if ! dynamo_ok; then
  if ! { "$VENV/bin/pip" install -q "ai-dynamo-runtime==1.6.1" \
         && "$VENV/bin/pip" install -q --no-deps "ai-dynamo==1.6.1"; } || ! dynamo_ok; then
    echo "load.sh: NVIDIA Dynamo 1.6.1 (ai-dynamo-runtime, ai-dynamo) cannot be installed or" \
         "imported here: scenario (c) is SKIPPED, no Dynamo figures are produced" >&2
    DYNAMO=0
  fi
fi

echo "load.sh: building target/release/sysport and the bench helpers"
cargo build --release --locked --bin sysport
# The helpers pin the same dependency versions as sysport itself.
cp Cargo.lock bench/load/driver/Cargo.lock
cargo build --release --manifest-path bench/load/driver/Cargo.toml --target-dir target/bench-driver

echo "load.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
SYSPORT_BENCH_DYNAMO=$DYNAMO "$VENV/bin/python" bench/load/run.py "$OUT"
echo "load.sh: results in $OUT/results.md"
