#!/usr/bin/env bash
# What asking an engine for gzip costs it (bench/compression/run.py; figures in bench/RESULTS.md
# §35): prometheus_client's ASGI app under uvicorn behind sysport with enable_compression true
# and false, read at a gateway's pace. SYSPORT_BIN (default target/release/sysport, built when
# missing).
#
# Usage: bash bench/compression.sh [OUT_DIR] [SECONDS] [ROUNDS]  (default bench/out/compression, 10, 3)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$ROOT/bench/out/compression}
mkdir -p "$OUT"
. bench/venv.sh
bench_venv compression.sh "prometheus_client, uvicorn, starlette" prometheus-client uvicorn starlette
BIN=${SYSPORT_BIN:-$ROOT/target/release/sysport}
[ -x "$BIN" ] || cargo build --release --locked --bin sysport
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
"$VENV/bin/python" bench/compression/run.py "$BIN" "$OUT" "${2:-10}" "${3:-3}" | tee "$OUT/results.md"
