#!/usr/bin/env bash
# The instructions sysport spends on the /metrics hot path, for one or more builds side by side:
# each binary serves 200 scrapes of the 740 KB vLLM payload from a static loopback server, one at
# a time, under valgrind's callgrind, which counts instructions (the same for the same binary and
# inputs, whatever else the machine is doing). Start-up, the health checks and shutdown are in
# the total too, and are the same for every build; the difference between builds is the hot
# path's.
#
# Build the binaries to compare first, with the release profile (for example the commit before a
# change in a worktree: `cargo build --release --locked --bin sysport --target-dir DIR`).
# Makes bench/.venv (prometheus-client) and the static server of bench/load/driver when missing.
#
# Usage: bash bench/load/hotpath.sh OUT_DIR BIN [BIN...]
#        SYSPORT_HOTPATH_PAGE=FILE bash bench/load/hotpath.sh OUT_DIR BIN [BIN...]
#          (another page than the 740 KB payload, e.g. tests/fixtures/small.prom)
#        SYSPORT_HOTPATH_WALL=5 bash bench/load/hotpath.sh OUT_DIR BIN [BIN...]
#          (no valgrind: each binary answers one connection for 5 s of wrk; scrapes per second and
#          latency, which depend on the machine's load, unlike the instruction counts)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${1:?usage: hotpath.sh OUT_DIR BIN [BIN...]}
shift
mkdir -p "$OUT"
VENV=$ROOT/bench/.venv
DRIVER=$ROOT/target/bench-driver/release
SCRAPES=${SYSPORT_HOTPATH_SCRAPES:-200}
export PATH="$HOME/.cargo/bin:$PATH"

command -v valgrind >/dev/null || { echo "hotpath.sh: needs valgrind" >&2; exit 1; }
command -v wrk >/dev/null || { echo "hotpath.sh: needs wrk (Debian's wrk)" >&2; exit 1; }
if [ ! -x "$VENV/bin/python" ]; then python3 -m venv "$VENV"; fi
"$VENV/bin/python" -c 'import prometheus_client' 2>/dev/null || "$VENV/bin/pip" install -q prometheus-client
[ -x "$DRIVER/static-serve" ] || cargo build --release --manifest-path bench/load/driver/Cargo.toml \
  --target-dir target/bench-driver --bin static-serve
PAGE=${SYSPORT_HOTPATH_PAGE:-$OUT/payload-740KB.prom}
[ -n "${SYSPORT_HOTPATH_PAGE:-}" ] || [ -s "$PAGE" ] || "$VENV/bin/python" bench/load/registry.py write 12 "$PAGE"

free_ports() {
  "$VENV/bin/python" -c 'import socket
ss=[socket.socket() for _ in range(2)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(*[s.getsockname()[1] for s in ss])'
}

n=0
for BIN in "$@"; do
  n=$((n + 1))
  read -r UP SP <<<"$(free_ports)"
  "$DRIVER/static-serve" "127.0.0.1:$UP" "$PAGE" 2>/dev/null &
  STATIC=$!
  cat > "$OUT/sysport-$n.yaml" <<EOF
listen: { host: 127.0.0.1, port: $SP }
health: { starting_status: ready, interval: 1h }
upstreams:
  - name: vllm
    url: http://127.0.0.1:$UP/metrics
    keep: ["vllm:", "lmcache:"]
    timeout: 60s
shutdown: { drain_delay: 0s }
EOF
  if [ -n "${SYSPORT_HOTPATH_WALL:-}" ]; then
    SYSPORT_LOG=warn "$BIN" --config "$OUT/sysport-$n.yaml" > "$OUT/server-$n.log" 2>&1 &
  else
    SYSPORT_LOG=warn valgrind --tool=callgrind --callgrind-out-file=/dev/null \
      "$BIN" --config "$OUT/sysport-$n.yaml" > "$OUT/server-$n.log" 2>&1 &
  fi
  SERVER=$!
  for _ in $(seq 1 300); do curl -s -o /dev/null -m 1 "127.0.0.1:$SP/live" && break; sleep 0.2; done
  if [ -n "${SYSPORT_HOTPATH_WALL:-}" ]; then
    wrk -t1 -c1 -d"${SYSPORT_HOTPATH_WALL}s" --latency "http://127.0.0.1:$SP/metrics" > "$OUT/wrk-$n.txt" 2>&1 || true
    kill -TERM "$SERVER"; wait "$SERVER" || true
    kill "$STATIC"; wait "$STATIC" 2>/dev/null || true
    echo "$BIN: $(grep -E 'Requests/sec' "$OUT/wrk-$n.txt" | tr -s ' '); p50$(grep -E '^ +50%' "$OUT/wrk-$n.txt" | tr -s ' ' | cut -d' ' -f3-); p99$(grep -E '^ +99%' "$OUT/wrk-$n.txt" | tr -s ' ' | cut -d' ' -f3-)"
    continue
  fi
  WRK_MAX_REQUESTS=$SCRAPES wrk -t1 -c1 -d60s --timeout 30s -s bench/load/wrk.lua \
    "http://127.0.0.1:$SP/metrics" > "$OUT/wrk-$n.txt" 2>&1 || true
  kill -TERM "$SERVER"; wait "$SERVER" || true
  kill "$STATIC"; wait "$STATIC" 2>/dev/null || true
  refs=$(grep -o 'refs: *[0-9,]*' "$OUT/server-$n.log" | tr -dc '0-9')
  done_requests=$(grep -o '[0-9]* requests in' "$OUT/wrk-$n.txt" | cut -d' ' -f1)
  echo "$BIN: ${refs:-?} instructions for ${done_requests:-?} scrapes ($(( ${refs:-0} / ${done_requests:-1} )) per scrape, start-up and shutdown included)"
done
