#!/usr/bin/env bash
# Soak: sysport in front of two flapping upstreams for DURATION seconds at RATE scrapes/s.
#   - "crashy": a vLLM-like endpoint killed (SIGKILL) every 20 s and restarted 2 s later;
#   - "moody":  a vLLM-like endpoint that is slow (2 s, over the 1 s timeout), HTTP 500 and
#               normal in turn, 10 s each.
# Samples sysport's RSS and open fds every second. Passes when, after a warm-up (the first 40%),
# RSS grows under 5% and fds by at most 5 (medians of an early and a late window), no /metrics
# answer is other than 200, no /live probe fails, and every fault was seen by sysport.
# Prints a Markdown summary for bench/RESULTS.md; the last line is `soak: N passed, M failed`.
#
# Usage: bench/soak.sh                      (release build, 600 s)
#        DURATION=60 SYSPORT_BIN=target/debug/sysport bench/soak.sh
# Environment: DURATION (600), RATE (50), SYSPORT_BIN (default: cargo build --release),
#              VENV (python with prometheus_client: $VENV/bin/python, default .venv), PYTHON,
#              SOAK_SAMPLES (keep the per-second RSS/fd samples in this CSV file).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DURATION="${DURATION:-600}"
RATE="${RATE:-50}"
VENV="${VENV:-$ROOT/.venv}"
PYTHON="${PYTHON:-$VENV/bin/python}"
HERE="$ROOT/bench/soak"
export PYTHONDONTWRITEBYTECODE=1

if ! "$PYTHON" -c 'import prometheus_client' 2>/dev/null; then
  echo "soak: $PYTHON cannot import prometheus_client (set VENV or PYTHON)" >&2
  echo "soak: 0 passed, 1 failed"
  exit 1
fi
if [ -z "${SYSPORT_BIN:-}" ]; then
  cargo build --release --locked --bin sysport >&2
  SYSPORT_BIN="$ROOT/target/release/sysport"
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/sysport-soak.XXXXXX")
PIDS=()
cleanup() {
  for pid in "${PIDS[@]}"; do
    kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${PIDS[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'echo "soak: 0 passed, 1 failed (interrupted)"; exit 130' INT TERM

free_port() {
  "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
wait_http() { # URL: until it answers at all (any status, even slowly), for about 10 s
  for _ in $(seq 100); do
    if "$PYTHON" -c 'import sys, urllib.request, urllib.error
try: urllib.request.urlopen(sys.argv[1], timeout=5)
except urllib.error.HTTPError: pass' "$1" 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  echo "soak: $1 never answered" >&2
  return 1
}

CRASHY=$(free_port)
MOODY=$(free_port)
PORT=$(free_port)
"$PYTHON" "$HERE/flap.py" --period 20 --down 2 -- "$PYTHON" "$HERE/upstream.py" --port "$CRASHY" \
  2>"$WORK/crashy.log" &
PIDS+=($!)
"$PYTHON" "$HERE/upstream.py" --port "$MOODY" --mode phases --phase 10 2>"$WORK/moody.log" &
PIDS+=($!)
cat >"$WORK/sysport.yaml" <<EOF
listen: {host: 127.0.0.1, port: $PORT}
health: {interval: 2s}
shutdown: {drain_delay: 0s}
upstreams:
  - name: crashy
    url: http://127.0.0.1:$CRASHY/metrics
    keep: ["vllm:"]
    timeout: 1s
  - name: moody
    url: http://127.0.0.1:$MOODY/metrics
    keep: ["vllm:"]
    timeout: 1s
    required: false
EOF
wait_http "http://127.0.0.1:$CRASHY/metrics"
wait_http "http://127.0.0.1:$MOODY/health"
SYSPORT_LOG=warn "$SYSPORT_BIN" --config "$WORK/sysport.yaml" 2>"$WORK/sysport.log" &
SYSPORT_PID=$!
PIDS+=("$SYSPORT_PID")
wait_http "http://127.0.0.1:$PORT/live"

echo "soak: $SYSPORT_BIN (pid $SYSPORT_PID), ${DURATION}s at ${RATE}/s, upstreams crashy :$CRASHY, moody :$MOODY" >&2
# In the background, so that a signal to this script stops the run at once (bash runs traps
# only between foreground commands, but interrupts `wait`).
"$PYTHON" "$HERE/drive.py" --port "$PORT" --pid "$SYSPORT_PID" --duration "$DURATION" --rate "$RATE" \
  --expect crashy=success --expect crashy=connect_error \
  --expect moody=success --expect moody=timeout --expect moody=http_status \
  ${SOAK_SAMPLES:+--samples "$SOAK_SAMPLES"} >"$WORK/drive.out" &
DRIVER_PID=$!
PIDS+=("$DRIVER_PID")
status=0
wait "$DRIVER_PID" || status=$?
cat "$WORK/drive.out"
if ! kill -0 "$SYSPORT_PID" 2>/dev/null; then
  echo "soak: sysport died; its log:" >&2
  cat "$WORK/sysport.log" >&2
  status=1
fi
last=$(sed -n 's/^result: \([0-9]* passed, [0-9]* failed\)$/soak: \1/p' "$WORK/drive.out" | tail -n 1)
cleanup
trap - EXIT
if [ -z "$last" ]; then
  last="soak: 0 passed, 1 failed (the driver stopped early)"
  status=1
fi
echo "$last"
exit "$status"
