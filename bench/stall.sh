#!/usr/bin/env bash
# What the health checks' family reads cost (bench/stall/run.py; figures in bench/RESULTS.md §17
# and §18): engine /metrics requests, bytes and render time and sysport CPU per health check,
# with and without stall_after, the vitals and health_url, against prometheus_client serving
# the 740 KB registry. The engine's figures do not depend on sysport's build; its CPU does:
# SYSPORT_BIN (default target/release/sysport, built when missing).
#
# Usage: bash bench/stall.sh [OUT_DIR] [SECONDS] [--only=I,J,...]  (default bench/out/stall, 20, all)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$ROOT/bench/out/stall}
mkdir -p "$OUT"
. bench/venv.sh
bench_venv stall.sh prometheus_client prometheus-client
BIN=${SYSPORT_BIN:-$ROOT/target/release/sysport}
[ -x "$BIN" ] || cargo build --release --locked --bin sysport
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
"$VENV/bin/python" bench/stall/run.py "$BIN" "$OUT" "${2:-20}" "${@:3}" | tee "$OUT/results.md"
