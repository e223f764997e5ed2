#!/usr/bin/env bash
# Bounded vitals and probes on their own thread (bench/bounds/run.py; figures in
# bench/RESULTS.md §22): sysport's RSS over ten minutes of health checks of a 16 MB vLLM-like
# page (every 5 s), 1,000 and 2,000 data-parallel ranks (every second), with the vitals on and
# off, `/status` time at the end, and `/live` while four clients read the status page without
# pause. The engines are stand-ins on 127.0.0.1 made again every second. SYSPORT_BIN (default
# target/release/sysport, built when missing) is the build measured: run once per build.
#
# Usage: bash bench/bounds.sh [OUT_DIR] [MINUTES] [--only=16MB,ranks1000,ranks2000] [--status-budget=300]
#        [--cap-mib=1024] [--live-seconds=60] [--tables]   (default bench/out/bounds, 10, all;
#        --tables prints the tables of the runs already in OUT_DIR)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$ROOT/bench/out/bounds}
mkdir -p "$OUT"
. bench/venv.sh
bench_venv bounds.sh prometheus_client prometheus-client
BIN=${SYSPORT_BIN:-$ROOT/target/release/sysport}
[ -x "$BIN" ] || cargo build --release --locked --bin sysport
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
"$VENV/bin/python" bench/bounds/run.py "$BIN" "$OUT" "${2:-10}" "${@:3}" | tee "$OUT/results.md"
