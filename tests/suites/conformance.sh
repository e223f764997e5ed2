#!/usr/bin/env bash
# Conformance of sysport's /metrics with promtool and Python prometheus_client: every fixture
# and freshly rendered prometheus_client output (text, OpenMetrics, multiprocess) goes through
# sysport; the output must parse and carry every kept sample unchanged (tests/conformance/run.py).
# Needs SYSPORT_BIN (the sysport binary), VENV (a Python venv) and promtool on PATH.
# Loopback only, OS-chosen ports; every process it starts is stopped when it ends.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${SYSPORT_BIN:?SYSPORT_BIN must name the sysport binary}"
: "${VENV:?VENV must name the Python venv}"
py="$VENV/bin/python"
if ! "$py" -c 'import prometheus_client' 2>/dev/null; then
  "$VENV/bin/pip" install -q prometheus-client
fi
if ! command -v promtool >/dev/null; then
  echo "conformance: promtool is not on PATH" >&2
  exit 1
fi
export SYSPORT_BIN PYTHONDONTWRITEBYTECODE=1

# The runner stops its upstream server and sysport instances itself on exit, SIGTERM or SIGINT;
# signals that reach this script are passed on to it.
"$py" tests/conformance/run.py &
runner=$!
forward() { kill -TERM "$runner" 2>/dev/null || true; }
trap forward INT TERM HUP
trap 'kill -TERM "$runner" 2>/dev/null || true' EXIT
status=0
wait "$runner" || status=$?
# `wait` returns early when a trapped signal arrives: wait for the runner's own exit.
while kill -0 "$runner" 2>/dev/null; do
  wait "$runner" || status=$?
done
trap - EXIT INT TERM HUP
exit "$status"
