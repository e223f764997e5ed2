#!/usr/bin/env bash
# Real readers of sysport's page for the suites, built from their registries' packages: Prometheus
# 3.16 (prometheus and promtool, from the Go module github.com/prometheus/prometheus v0.316.0), a
# small OpenTelemetry Collector (the Collector's v0.165.0 modules: OTLP receiver on gRPC and HTTP,
# file and debug exporters; scripts/real-tools/otelcol/) and AIPerf 0.13.0 (PyPI) in its own venv.
# Everything lives in a cache outside the clone: $SYSPORT_TOOLS_DIR, default
# ~/.cache/sysport/tools, Go's module and build caches included (so a rebuild is quick).
#
# Usage:
#   scripts/real-tools.sh setup   build and install what is missing (first run: ~1 GB of Go
#                                 modules and wheels, and about 10 minutes of Go compiling on two
#                                 busy cores); a quick no-op when done
#   scripts/real-tools.sh env     print `export` lines to eval:
#                                   SYSPORT_PROMETHEUS3  prometheus 3.16.0
#                                   SYSPORT_PROMTOOL3    promtool 3.16.0
#                                   SYSPORT_OTELCOL      the Collector (otelcol --config FILE)
#                                   SYSPORT_AIPERF       aiperf 0.13.0
#                                   SYSPORT_PY_SPY       py-spy 0.4.3 (the incidents' stacks)
#                                 fails with a message on stderr when setup has not been done
#   scripts/real-tools.sh lock    (maintainers) re-resolve scripts/real-tools/aiperf-requirements.txt
#   scripts/real-tools.sh --help  this text
#
# Example:  eval "$(scripts/real-tools.sh env)"
#           "$SYSPORT_PROMTOOL3" check metrics <page.txt
#
# Pins: the Go programs by their go.mod and go.sum under scripts/real-tools/ (built with
# -mod=readonly, so a module not in go.sum fails the build); AIPerf and its dependencies by
# sha256 in scripts/real-tools/aiperf-requirements.txt (pip --require-hashes). Each component is
# stamped in $SYSPORT_TOOLS_DIR/stamps/ with its pins once built and checked; a changed pin
# rebuilds it. Prometheus is built as its Makefile builds it (tag netgo) but without the web UI's
# assets (no `builtinassets` tag: they come from an npm build that the Go module does not carry;
# the API, scraping and promtool do not need them) and with `remove_all_sd`, which leaves out the
# cloud service discoveries (only file and HTTP discovery and static targets stay), halving the
# compile.
set -euo pipefail

# ---- pins ----------------------------------------------------------------------------------
PROMETHEUS_VERSION=3.16.0            # module tag v0.316.0, in real-tools/prometheus/go.mod
PROMETHEUS_TAGS=netgo,remove_all_sd
OTELCOL_VERSION=0.165.0              # every collector module at this release (v1.71.0 for 1.x)
AIPERF_VERSION=0.13.0
GO_MIN=1.26.7                        # what the two go.mod files ask for
# ---------------------------------------------------------------------------------------------

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FILES=$HERE/real-tools
AIPERF_LOCK=$FILES/aiperf-requirements.txt
DIR=${SYSPORT_TOOLS_DIR:-$HOME/.cache/sysport/tools}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
DIR=${DIR%/}

BIN=$DIR/bin
PROMETHEUS=$BIN/prometheus-$PROMETHEUS_VERSION
PROMTOOL=$BIN/promtool-$PROMETHEUS_VERSION
OTELCOL=$BIN/otelcol-$OTELCOL_VERSION
AIPERF_VENV=$DIR/aiperf-venv
AIPERF=$AIPERF_VENV/bin/aiperf
# py-spy for the incidents' stacks (tests/real/run.py): PyPI's binary wheel, pinned by sha256.
PY_SPY_VERSION=0.4.3
PY_SPY_SHA256=8a4277225f470d394a85cca0cdd944bef87f0097b6f20150a6dd3ac2e92806b8
PY_SPY_VENV=$DIR/py-spy-venv
PY_SPY=$PY_SPY_VENV/bin/py-spy
STAMPS=$DIR/stamps
SETUP_NAME=real-tools
# shellcheck source=setup-common.sh
. "$HERE/setup-common.sh"
PIP_FLAGS=(--no-cache-dir --progress-bar off --disable-pip-version-check)


# Go with its caches in $DIR and nothing taken from the machine's own settings.
go_env() {
  env GOPATH="$DIR/go/path" GOMODCACHE="$DIR/go/mod" GOCACHE="$DIR/go/cache" GOTOOLCHAIN=local \
    GOFLAGS="-mod=readonly -buildvcs=false" "$@"
}
GO_VERSION=
go_version() {
  if [ -z "$GO_VERSION" ]; then
    command -v go >/dev/null || die "go is missing (Go $GO_MIN or newer is needed)"
    GO_VERSION=$(go_env go env GOVERSION) || die "\`go env GOVERSION\` failed"
    GO_VERSION=${GO_VERSION#go}
  fi
  echo "$GO_VERSION"
}
check_go() {
  local v
  v=$(go_version)
  [ "$(printf '%s\n%s\n' "$GO_MIN" "$v" | sort -V | head -n 1)" = "$GO_MIN" ] ||
    die "go is $v; Go $GO_MIN or newer is needed"
}

# ---- stamps ---------------------------------------------------------------------------------
key_prometheus3() {
  echo "component: prometheus3"
  echo "go: $(go_version)"
  echo "tags: $PROMETHEUS_TAGS"
  local f
  for f in go.mod go.sum; do echo "$f: sha256:$(sha256 "$FILES/prometheus/$f")"; done
}
key_otelcol() {
  echo "component: otelcol"
  echo "go: $(go_version)"
  local f
  for f in go.mod go.sum main.go; do echo "$f: sha256:$(sha256 "$FILES/otelcol/$f")"; done
}
key_aiperf() {
  echo "component: aiperf"
  echo "python3: $(python_version)"
  echo "lock: $(basename "$AIPERF_LOCK") sha256:$(sha256 "$AIPERF_LOCK")"
}
key_pyspy() {
  echo "component: py-spy"
  echo "py-spy: $PY_SPY_VERSION sha256:$PY_SPY_SHA256"
}
COMPONENTS=(prometheus3 otelcol aiperf pyspy)

is_done() {
  local c=$1
  [ -f "$STAMPS/$c" ] && [ "$(cat "$STAMPS/$c")" = "$("key_$c")" ] || return 1
  case $c in
    prometheus3) [ -x "$PROMETHEUS" ] && [ -x "$PROMTOOL" ] ;;
    otelcol) [ -x "$OTELCOL" ] ;;
    aiperf) [ -x "$AIPERF" ] ;;
    pyspy) [ -x "$PY_SPY" ] ;;
  esac
}

# ---- components -----------------------------------------------------------------------------
# go_build MODULE_DIR OUT PACKAGE [GO BUILD FLAGS...]: one binary, moved into place when whole.
go_build() {
  local mod=$1 out=$2 pkg=$3
  shift 3
  mkdir -p "$BIN"
  (cd "$mod" && go_env go build -trimpath "$@" -o "$out.tmp" "$pkg")
  mv -f "$out.tmp" "$out"
}

build_prometheus3() {
  check_go
  local ldflags="-X github.com/prometheus/common/version.Version=$PROMETHEUS_VERSION"
  ldflags+=" -X github.com/prometheus/common/version.Branch=HEAD"
  ldflags+=" -X github.com/prometheus/common/version.BuildUser=sysport"
  log "prometheus3: go build prometheus $PROMETHEUS_VERSION (tags $PROMETHEUS_TAGS)"
  go_build "$FILES/prometheus" "$PROMETHEUS" github.com/prometheus/prometheus/cmd/prometheus \
    -tags "$PROMETHEUS_TAGS" -ldflags "$ldflags"
  log "prometheus3: go build promtool $PROMETHEUS_VERSION"
  go_build "$FILES/prometheus" "$PROMTOOL" github.com/prometheus/prometheus/cmd/promtool \
    -tags "$PROMETHEUS_TAGS" -ldflags "$ldflags"
  local v
  v=$("$PROMETHEUS" --version 2>&1 | head -n 1)
  case $v in *"version $PROMETHEUS_VERSION "*) ;; *) die "prometheus3: --version says: $v" ;; esac
  v=$("$PROMTOOL" --version 2>&1 | head -n 1)
  case $v in *"version $PROMETHEUS_VERSION "*) ;; *) die "prometheus3: promtool --version says: $v" ;; esac
  log "prometheus3: $v"
}

build_otelcol() {
  check_go
  log "otelcol: go build (collector modules v$OTELCOL_VERSION)"
  go_build "$FILES/otelcol" "$OTELCOL" . -ldflags "-s -w"
  local v
  v=$("$OTELCOL" --version 2>&1 | head -n 1)
  case $v in *"$OTELCOL_VERSION"*) ;; *) die "otelcol: --version says: $v" ;; esac
  "$OTELCOL" components 2>&1 | grep -q 'name: otlp' || die "otelcol: no otlp receiver in \`components\`"
  "$OTELCOL" components 2>&1 | grep -q 'name: file' || die "otelcol: no file exporter in \`components\`"
  # A configuration as the suites write one (loopback receivers, the file exporter, a variable)
  # must validate.
  local cfg=$DIR/otelcol-check.yaml
  printf '%s\n' 'receivers:' '  otlp:' '    protocols:' \
    '      grpc: { endpoint: "127.0.0.1:4317" }' '      http: { endpoint: "127.0.0.1:4318" }' \
    'exporters:' '  file: { path: "${OTELCOL_CHECK_OUT}" }' \
    'service:' '  pipelines:' '    metrics: { receivers: [otlp], exporters: [file] }' >"$cfg"
  OTELCOL_CHECK_OUT=$DIR/otelcol-check.jsonl "$OTELCOL" validate --config "$cfg" ||
    die "otelcol: \`validate\` refused $cfg"
  rm -f "$cfg"
  log "otelcol: $v"
}

install_pyspy() {
  rm -rf "$PY_SPY_VENV"
  python3 -m venv "$PY_SPY_VENV"
  local req
  req=$(mktemp)
  echo "py-spy==$PY_SPY_VERSION --hash=sha256:$PY_SPY_SHA256" >"$req"
  "$PY_SPY_VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" --require-hashes --no-deps \
    --only-binary :all: -r "$req"
  rm -f "$req"
  "$PY_SPY" --version >/dev/null || die "py-spy: \`py-spy --version\` failed"
  log "py-spy: $("$PY_SPY" --version)"
}

install_aiperf() {
  python3 -c 'import venv, ensurepip' 2>/dev/null || die "python3's venv module is missing (apt-get install python3-venv)"
  rm -rf "$AIPERF_VENV"
  log "aiperf: venv $AIPERF_VENV with $(command -v python3) ($(python_version))"
  python3 -m venv "$AIPERF_VENV"
  log "aiperf: installing $(grep -c '^[a-z0-9]' "$AIPERF_LOCK") pinned packages from $(basename "$AIPERF_LOCK")"
  "$AIPERF_VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" --require-hashes --no-deps \
    --only-binary :all: -r "$AIPERF_LOCK"
  local v
  v=$("$AIPERF_VENV/bin/python" -c 'import importlib.metadata as md; print(md.version("aiperf"))')
  [ "$v" = "$AIPERF_VERSION" ] || die "aiperf: installed version is $v, expected $AIPERF_VERSION"
  "$AIPERF" profile --help >/dev/null 2>&1 || die "aiperf: \`aiperf profile --help\` failed"
  log "aiperf: $v"
}

# ---- commands -------------------------------------------------------------------------------


cmd_setup() {
  local t0=$SECONDS
  if [ -d "$DIR" ] && all_done; then
    log "everything in place in $DIR (nothing to do)"
    return 0
  fi
  log "setting up in $DIR"
  mkdir -p "$DIR"
  if command -v flock >/dev/null; then
    exec 9>"$DIR/.setup.lock"
    flock -n 9 || { log "another setup is running in $DIR; waiting for it (up to 1 hour)"; flock -w 3600 9; } ||
      die "another setup still holds $DIR/.setup.lock"
  fi
  component prometheus3 build_prometheus3
  component otelcol build_otelcol
  component aiperf install_aiperf
  component pyspy install_pyspy
  log "setup done in $((SECONDS - t0)) s; $(du -sh "$DIR" 2>/dev/null | cut -f1) in $DIR"
}

cmd_env() {
  local c
  for c in "${COMPONENTS[@]}"; do
    is_done "$c" || die "$c is not set up in $DIR (or its pins changed): run scripts/real-tools.sh setup"
  done
  echo "export SYSPORT_PROMETHEUS3=$(shquote "$PROMETHEUS") SYSPORT_PROMTOOL3=$(shquote "$PROMTOOL")" \
    "SYSPORT_OTELCOL=$(shquote "$OTELCOL") SYSPORT_AIPERF=$(shquote "$AIPERF")" \
    "SYSPORT_PY_SPY=$(shquote "$PY_SPY")"
}

# lock: re-resolve aiperf-requirements.txt in a scratch venv (pip's --dry-run --report gives the
# version and sha256 of each file it would fetch; scripts/real-engines/lock.py writes it).
cmd_lock() {
  local scratch
  scratch=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$scratch'" EXIT
  python3 -m venv "$scratch/venv"
  log "lock: resolving aiperf==$AIPERF_VERSION"
  "$scratch/venv/bin/python" -m pip install "${PIP_FLAGS[@]}" --dry-run --ignore-installed \
    --only-binary :all: --report "$scratch/report.json" "aiperf==$AIPERF_VERSION" >"$scratch/resolve.log" ||
    { tail -n 30 "$scratch/resolve.log" >&2; die "lock: resolving failed"; }
  "$scratch/venv/bin/python" "$HERE/real-engines/lock.py" write "$scratch/report.json" "$AIPERF_LOCK" \
    "Written by \`scripts/real-tools.sh lock\`: do not edit by hand." \
    "aiperf==$AIPERF_VERSION and its dependencies for CPython $(python_version | cut -d. -f1,2), linux" \
    "x86_64, resolved to wheels; each hash is the file pip chose." \
    "Installed with: pip install --require-hashes --no-deps -r this-file" ""
}

case ${1:-} in
  setup) cmd_setup ;;
  env) cmd_env ;;
  lock) cmd_lock ;;
  -h | --help | help | "") usage ;;
  *) usage >&2; exit 2 ;;
esac
