# Sourced by the benchmarks' scripts from the repository's root: stops with a clear message
# when the fixtures' page generator is missing, and gives bench/.venv (VENV) with the Python
# packages the script names, installing what is missing (python3-venv from Debian when python3
# cannot make a venv).
#
#   bench_venv NAME IMPORTS PACKAGE...   e.g. bench_venv stall.sh prometheus_client prometheus-client
bench_venv() {
  local name=$1 imports=$2
  shift 2
  if [ ! -f "$ROOT/../shared/fixtures/gen_vllm_like.py" ] && [ -z "${GEN_VLLM_LIKE:-}" ]; then
    echo "$name: ../shared/fixtures/gen_vllm_like.py not found (set GEN_VLLM_LIKE)" >&2
    exit 1
  fi
  VENV=$ROOT/bench/.venv
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV" || {
      apt-get update -qq && apt-get install -y -qq python3-venv >/dev/null && python3 -m venv "$VENV"
    }
  fi
  "$VENV/bin/python" -c "import $imports" 2>/dev/null || "$VENV/bin/pip" install -q "$@"
}
