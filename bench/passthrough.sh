#!/usr/bin/env bash
# /metrics side by side with a raw passthrough at one and eight connections: nginx serving the
# page, exporter_exporter's raw passthrough in front of nginx, a store-and-forward proxy in Go
# (the same program streaming and reading each page whole first), and sysport in front of nginx, on
# a ~2 MB vLLM-style page (40 data-parallel engines from the shared fixture generator) and a
# ~60 KB one (one engine: tests/fixtures/small.prom). See bench/passthrough/run.py for what is
# measured and bench/RESULTS.md section 26 for figures. Loopback only; every run bounded by
# wrk's -d. About 3 minutes once built (3 rounds of 5 s runs).
#
# Installs what it needs when missing: Debian's wrk and nginx-light; bench/.venv with
# prometheus-client and prometheus-fastapi-instrumentator (the page generator); exporter_exporter
# built from its own Go module (pinned by bench/passthrough/go.mod and go.sum, from the Go module
# proxy) into $SYSPORT_TOOLS_DIR/bin (default ~/.cache/sysport/tools, the cache
# scripts/real-tools.sh uses), outside the clone. Builds target/release/sysport.
# go.sum was written with GOSUMDB=off: the module proxy here serves exporter_exporter v0.5.0 but
# not its checksum database entry (404), so the hashes pin what the proxy served, unchecked by
# sum.golang.org; -mod=readonly then refuses any module not in go.sum.
#
# Usage: bash bench/passthrough.sh [OUT_DIR]   (default bench/out/passthrough)
#        SYSPORT_PT_SYSPORTS=OLD_BIN bash bench/passthrough.sh OUT   (another sysport build
#          measured in the same rounds, e.g. the commit before a change)
#        SYSPORT_PT_ROUNDS=1 SYSPORT_PT_SECONDS=2 bash bench/passthrough.sh OUT   (a smoke run)
#        SYSPORT_PT_DELAY_MS=50 bash bench/passthrough.sh OUT   (one connection read every 50 ms
#          after each answer, a gateway's pace; RESULTS.md section 34)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$ROOT/bench/out/passthrough}
export PATH="$HOME/.cargo/bin:$PATH"
EXPEXP_VERSION=0.5.0   # in bench/passthrough/go.mod
TOOLS=${SYSPORT_TOOLS_DIR:-$HOME/.cache/sysport/tools}
EXPEXP=$TOOLS/bin/exporter_exporter-$EXPEXP_VERSION

missing=()
command -v wrk >/dev/null || missing+=(wrk)
command -v nginx >/dev/null || missing+=(nginx-light)
if [ ${#missing[@]} -gt 0 ]; then
  echo "passthrough.sh: installing Debian's ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if [ ! -x "$EXPEXP" ] || [ "$EXPEXP.sum" -ot bench/passthrough/go.sum ] ||
   ! cmp -s bench/passthrough/go.sum "$EXPEXP.sum"; then
  command -v go >/dev/null || { echo "passthrough.sh: go is missing (Go 1.26 is needed)" >&2; exit 1; }
  echo "passthrough.sh: go build exporter_exporter $EXPEXP_VERSION into $EXPEXP"
  mkdir -p "$TOOLS/bin"
  (cd bench/passthrough &&
    env GOPATH="$TOOLS/go/path" GOMODCACHE="$TOOLS/go/mod" GOCACHE="$TOOLS/go/cache" GOTOOLCHAIN=local \
      GOFLAGS="-mod=readonly -buildvcs=false" \
      go build -trimpath -o "$EXPEXP.tmp" github.com/QubitProducts/exporter_exporter)
  mv -f "$EXPEXP.tmp" "$EXPEXP"
  cp bench/passthrough/go.sum "$EXPEXP.sum"
fi

# A proxy that reads each page whole, or streams it (bench/passthrough/storeforward: Go's
# standard library only),
# rebuilt when its source is newer than the binary.
STOREFORWARD=$TOOLS/bin/storeforward
if [ ! -x "$STOREFORWARD" ] || [ "$STOREFORWARD" -ot bench/passthrough/storeforward/main.go ]; then
  echo "passthrough.sh: go build bench/passthrough/storeforward into $STOREFORWARD"
  mkdir -p "$TOOLS/bin"
  (cd bench/passthrough &&
    env GOPATH="$TOOLS/go/path" GOMODCACHE="$TOOLS/go/mod" GOCACHE="$TOOLS/go/cache" GOTOOLCHAIN=local \
      GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -o "$STOREFORWARD.tmp" ./storeforward)
  mv -f "$STOREFORWARD.tmp" "$STOREFORWARD"
fi
export SYSPORT_PT_STOREFORWARD=$STOREFORWARD

. bench/venv.sh
bench_venv passthrough.sh "prometheus_client, prometheus_fastapi_instrumentator" \
  prometheus-client prometheus-fastapi-instrumentator

echo "passthrough.sh: building target/release/sysport"
cargo build --release --locked --bin sysport

mkdir -p "$OUT"
[ -s "$OUT/vllm-2MB.prom" ] || "$VENV/bin/python" bench/load/registry.py write 40 "$OUT/vllm-2MB.prom"
cp tests/fixtures/small.prom "$OUT/vllm-60KB.prom"

echo "passthrough.sh: load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
python3 bench/passthrough/run.py "$OUT/run" target/release/sysport "$EXPEXP" \
  "$OUT/vllm-2MB.prom" "$OUT/vllm-60KB.prom"
echo "passthrough.sh: results in $OUT/run/results.md"
