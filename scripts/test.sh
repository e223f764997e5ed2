#!/usr/bin/env bash
# The whole test suite: lint, unit and integration tests, the conformance suite against
# promtool and prometheus_client, the end-to-end suite with a real Prometheus, the fault and soak
# suite, sysport in front of real vLLM and llama.cpp engines, the deployment checks, the
# documentation (README at most 12 KB, every relative link in README.md and docs/ resolves) and
# the code's layering (no import cycle between the files of src/, no import against the layer
# table of docs/architecture.md, no #[path] include).
# Installs what it needs when missing:
#   - Debian's `prometheus` package (prometheus + promtool)
#   - openssl (the TLS tests make their certificates with it) and prlimit (util-linux: the
#     listener tests run sysport under a 1024-descriptor limit)
#   - Debian's golang-go and golang-github-prometheus-common-dev (the endpoint-picker client)
#   - Debian's chromium and fonts-dejavu-core (the status page in a headless browser)
#   - a Python venv at .venv with prometheus-client (and the deploy linters)
#   - the real engines, vLLM 0.32 (CPU) and llama.cpp's llama-server, with tiny models, in
#     ~/.cache/sysport/engines (tests/suites/real-engines.sh runs scripts/real-engines.sh setup:
#     about 6 GB of downloads and a compile the first time, a no-op later)
#   - Prometheus 3.16, an OpenTelemetry Collector and AIPerf 0.13.0 in ~/.cache/sysport/tools
#     (tests/suites/prometheus3.sh runs scripts/real-tools.sh setup: Go modules and wheels and a
#     Prometheus compile the first time, a no-op later)
# Usage: scripts/test.sh            (from anywhere; CI runs it through .ci/run)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
export VENV="${VENV:-$ROOT/.venv}"

passed=0
failed=0
failures=()
step() {
  local name=$1; shift
  echo "==> $name"
  local t0=$SECONDS
  if "$@"; then
    passed=$((passed + 1)); echo "<== $name: ok ($((SECONDS - t0)) s)"
  else
    failed=$((failed + 1)); failures+=("$name"); echo "<== $name: FAILED ($((SECONDS - t0)) s)"
  fi
}

ensure_tools() {
  if ! command -v promtool >/dev/null || ! command -v prometheus >/dev/null; then
    echo "installing Debian's prometheus package (promtool, prometheus)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq prometheus >/dev/null
    # The package starts a system service where an init system runs; the tests start their own.
    (systemctl stop prometheus prometheus-node-exporter 2>/dev/null || true)
  fi
  local missing=()
  command -v openssl >/dev/null || missing+=(openssl)
  command -v prlimit >/dev/null || missing+=(util-linux)
  # The endpoint-picker client: Go and prometheus/common's sources for GOPATH mode.
  command -v go >/dev/null || missing+=(golang-go)
  [ -d /usr/share/gocode/src/github.com/prometheus/common/expfmt ] \
    || missing+=(golang-github-prometheus-common-dev)
  # The status page in a real browser, with a font to render its text in.
  command -v chromium >/dev/null || missing+=(chromium)
  [ -d /usr/share/fonts/truetype/dejavu ] || missing+=(fonts-dejavu-core)
  if [ "${#missing[@]}" -gt 0 ]; then
    echo "installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  fi
  if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
  fi
  if ! "$VENV/bin/python" -c 'import prometheus_client' 2>/dev/null; then
    "$VENV/bin/pip" install -q prometheus-client
  fi
}

ensure_tools
export PATH="$HOME/.cargo/bin:$PATH"
export SYSPORT_BIN="$ROOT/target/debug/sysport"

step "docs: README size and links" python3 scripts/check-docs.py
step "layers: no import cycle, no import against the layers" python3 scripts/check-layers.py
step "layers: the check catches cycles added on purpose" python3 scripts/check-layers.py --self-test
step "no #[path] include" bash -c '! grep -rnI --exclude-dir=target "#\[path" src crates benches bench tests fuzz'
step "cargo fmt --check" cargo fmt --all -- --check
step "cargo clippy -D warnings" cargo clippy --workspace --all-targets --locked -- -D warnings
step "cargo doc -D warnings" env RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
step "cargo test" cargo test --workspace --all-targets --locked
step "cargo build (binary for the suites below)" cargo build --locked --bin sysport
# The image is built by the Dockerfile's own cargo line; run exactly that line so the two stay
# in step (no Docker engine is needed for it).
dockerfile_build() {
  local line
  line=$(grep -E '^RUN cargo build ' Dockerfile | tail -n 1 | sed 's/^RUN //')
  [ -n "$line" ] || { echo "no 'RUN cargo build' line in Dockerfile"; return 1; }
  echo "+ $line"
  bash -c "$line"
}
step "Dockerfile build line" dockerfile_build
for suite in tests/suites/*.sh; do
  [ -e "$suite" ] || continue
  step "$(basename "$suite" .sh)" bash "$suite"
done
step "deployment checks" bash scripts/check-deploy.sh

echo
echo "suites: $passed passed, $failed failed"
if [ "$failed" -gt 0 ]; then
  printf 'failed: %s\n' "${failures[@]}"
  exit 1
fi
