#!/usr/bin/env bash
# sysport's control routes (/metadata, /engine/{name}, /v1/loras) in front of the real engines:
# vLLM 0.32 (CPU) in its development mode and llama.cpp's llama-server (tests/real/control.py).
# Runs alone, in about 100 s once the engines are set up (vLLM's start is most of it); like
# tests/suites/real-engines.sh it runs `scripts/real-engines.sh setup` first (a quick no-op
# when done). No Prometheus: the driver reads the engines' pages with prometheus_client, from
# $VENV when it has it, else from the vLLM venv (vLLM depends on it).
# Usage (from the repo root):
#   SYSPORT_BIN=target/debug/sysport [VENV=.venv] bash tests/suites/real-control.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

bash scripts/real-engines.sh setup
engines_env=$(bash scripts/real-engines.sh env)
eval "$engines_env"
export SYSPORT_VLLM SYSPORT_VLLM_MODEL SYSPORT_LLAMA_SERVER SYSPORT_LLAMA_MODEL
SYSPORT_BIN=${SYSPORT_BIN:-$PWD/target/debug/sysport}
export SYSPORT_BIN
[ -x "$SYSPORT_BIN" ] || { echo "real-control: SYSPORT_BIN=$SYSPORT_BIN is not an executable (cargo build --bin sysport)" >&2; exit 1; }
python=${VENV:+$VENV/bin/python}
if [ -z "$python" ] || ! "$python" -c 'import prometheus_client' 2>/dev/null; then
  python=$(dirname "$SYSPORT_VLLM")/../vllm-venv/bin/python
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/sysport-real-control.XXXXXX")
driver=
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [ -n "$driver" ] && kill -0 "$driver" 2>/dev/null; then
    kill -TERM "$driver" 2>/dev/null || true
    wait "$driver" 2>/dev/null || true
  fi
  # The driver lists what it started and has not stopped ("-PGID" for a process group).
  if [ -s "$work/pids" ]; then
    while read -r pid; do
      [ -n "$pid" ] && kill -KILL -- "$pid" 2>/dev/null || true
    done <"$work/pids"
  fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

"$python" -u tests/real/control.py --workdir "$work" --pidfile "$work/pids" &
driver=$!
rc=0
wait "$driver" || rc=$?
driver=
exit "$rc"
