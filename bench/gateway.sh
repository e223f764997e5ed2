#!/usr/bin/env bash
# Gateway readers against one engine, with and without sysport in front (issue 7); see
# bench/gateway/run.py for the scenarios and bench/RESULTS.md section 8 for figures.
#
# 20 simulated inference-gateway endpoint pickers (one GET every 50 ms each) plus one
# Prometheus-like full scrape every 5 s, against (a) a prometheus_client engine endpoint rendering
# the medium fixture registry per request on one thread (bench/gateway/engine.py), (b) sysport with
# min_interval 25ms in front of it, readers asking for four families with ?name=, (r) the same
# sysport with readers reading /metrics/router (issue 15: the path pickers are configured with),
# (b') the same sysport with readers reading the full page, and (c) a control: (b) with a static copy of the
# engine's page as sysport's upstream. Everything listens on 127.0.0.1; every run is bounded:
# 60 s per scenario, about 4.5 minutes in all once built (plus ~1 min for a release build).
#
# Installs what it needs when missing: a venv at bench/.venv with prometheus-client and
# prometheus-fastapi-instrumentator (the HTTP families vLLM serves). Builds target/release/sysport
# and the helpers in bench/load/driver (gateway-readers).
#
# Usage: bash bench/gateway.sh [OUT_DIR]     (default bench/out/gateway; results.md, results.json)
#        SYSPORT_BENCH_QUICK=1 bash bench/gateway.sh   (5 s per scenario: a smoke test)
# Knobs: SYSPORT_GATEWAY_SECONDS (per scenario), SYSPORT_GATEWAY_MIN_INTERVAL (default 25ms),
#        SYSPORT_GATEWAY_FULL=0 (skip (b')), SYSPORT_GATEWAY_CONTROL=0 (skip the control (c)),
#        SYSPORT_GATEWAY_SCENARIOS=r (only those scenarios, comma-separated; default all).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$ROOT/bench/out/gateway}
export PATH="$HOME/.cargo/bin:$PATH"

. bench/venv.sh
bench_venv gateway.sh "prometheus_client, prometheus_fastapi_instrumentator" \
  prometheus-client prometheus-fastapi-instrumentator

echo "gateway.sh: building target/release/sysport and gateway-readers"
cargo build --release --locked --bin sysport
# The helpers pin the same dependency versions as sysport itself.
cp Cargo.lock bench/load/driver/Cargo.lock
cargo build --release --manifest-path bench/load/driver/Cargo.toml --target-dir target/bench-driver

mkdir -p "$OUT"
PIDFILE=$OUT/pids
: > "$PIDFILE"
RUNNER=
# On any exit: stop the runner, then whatever it started that is still there (by pid, and only
# if that pid is still one of ours: the engine, sysport or the readers).
cleanup() {
  if [ -n "$RUNNER" ] && kill -0 "$RUNNER" 2>/dev/null; then
    kill -TERM "$RUNNER" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$RUNNER" 2>/dev/null || break; sleep 0.2; done
  fi
  if [ -f "$PIDFILE" ]; then
    while read -r pid; do
      [ -n "$pid" ] || continue
      if kill -0 "$pid" 2>/dev/null \
          && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null \
             | grep -qE 'target/release/sysport|bench/gateway/engine.py|gateway-readers|static-serve'; then
        kill -TERM "$pid" 2>/dev/null || true
      fi
    done < "$PIDFILE"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

echo "gateway.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
SYSPORT_GATEWAY_PIDFILE=$PIDFILE "$VENV/bin/python" bench/gateway/run.py "$OUT" &
RUNNER=$!
wait "$RUNNER"
RUNNER=
echo "gateway.sh: results in $OUT/results.md"
