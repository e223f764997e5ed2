#!/usr/bin/env bash
# End-to-end: loopback vLLM and LMCache engines (Python, prometheus_client) -> sysport -> a real
# Prometheus (Debian's /usr/bin/prometheus) scraping every second with deploy/prometheus's rules.
# Checks the data through Prometheus' HTTP API, kills and restarts the engine, and runs every
# expression of deploy/grafana/sysport-dashboard.json and every recording rule. The checks live in
# tests/e2e/run.py; this wrapper owns the work directory and the cleanup.
#
# Usage (from the repo root; scripts/test.sh sets both variables):
#   SYSPORT_BIN=target/debug/sysport VENV=.venv bash tests/suites/e2e-prometheus.sh
# Other suites with a real Prometheus run their own driver through this wrapper:
#   E2E_SUITE=relabel-oracle E2E_DRIVER=tests/e2e/relabel_oracle.py bash tests/suites/e2e-prometheus.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

suite=${E2E_SUITE:-e2e-prometheus}
driver_script=${E2E_DRIVER:-tests/e2e/run.py}

SYSPORT_BIN=${SYSPORT_BIN:-$PWD/target/debug/sysport}
VENV=${VENV:-$PWD/.venv}
PROMETHEUS_BIN=${PROMETHEUS_BIN:-/usr/bin/prometheus}
export SYSPORT_BIN PROMETHEUS_BIN

fail() { echo "$suite: $*" >&2; echo "$suite: 0 passed, 1 failed"; exit 1; }
[ -x "$SYSPORT_BIN" ] || fail "SYSPORT_BIN=$SYSPORT_BIN is not an executable (cargo build --bin sysport)"
[ -x "$VENV/bin/python" ] || fail "no Python at $VENV/bin/python (python3 -m venv $VENV)"
"$VENV/bin/python" -c 'import prometheus_client' 2>/dev/null \
  || fail "prometheus_client is not installed in $VENV ($VENV/bin/pip install prometheus-client)"
[ -x "$PROMETHEUS_BIN" ] || fail "no Prometheus at $PROMETHEUS_BIN (apt-get install prometheus)"
version=$("$PROMETHEUS_BIN" --version 2>&1) || fail "$PROMETHEUS_BIN --version failed: $version"
echo "${version%%$'\n'*}"

work=$(mktemp -d "${TMPDIR:-/tmp}/sysport-$suite.XXXXXX")
driver=

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
    kill -TERM "$driver" 2>/dev/null || true
    wait "$driver" 2>/dev/null || true
  fi
  # The driver keeps $work/pids listing the processes it started and has not reaped yet; it
  # empties the file when it cleans up itself. Anything left there is stopped here.
  if [ -s "$work/pids" ]; then
    while read -r pid; do
      [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
    done <"$work/pids"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$VENV/bin/python" -u "$driver_script" --workdir "$work" --pidfile "$work/pids" &
driver=$!
rc=0
wait "$driver" || rc=$?
driver=
exit "$rc"
