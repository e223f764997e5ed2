#!/usr/bin/env bash
# Instruction-level profiles of the hot path with valgrind's callgrind (counts instructions, so
# the figures do not depend on what else the machine is doing):
#   1. expfmt-driver: parse + filter + merge + write_text, 10 times over the large input
#      (48 engines, 2.3 MB, made by gen_vllm_like.py);
#   2. the sysport server itself (release profile with line tables, not stripped) answering 200
#      scrapes of the 740 KB payload from a static loopback server, one at a time.
# Prints the top functions by inclusive and by exclusive cost. Run bench/load.sh once first
# (it makes the venv, the payloads and the driver).
#
# Usage: bash bench/load/profile.sh [OUT_DIR]   (default bench/out/profile)
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$(pwd)
OUT=${1:-$ROOT/bench/out/profile}
mkdir -p "$OUT"
PY=$ROOT/bench/.venv/bin/python
DRIVER=$ROOT/target/bench-driver/release
export PATH="$HOME/.cargo/bin:$PATH"

top() { # FILE: top 25 by inclusive, then by exclusive cost, paths shortened
  local f=$1
  echo "--- inclusive"
  callgrind_annotate --inclusive=yes "$f" 2>/dev/null | sed -n '/file:function/,/^$/p' | sed -n '3,27p'
  echo "--- exclusive"
  callgrind_annotate "$f" 2>/dev/null | sed -n '/file:function/,/^$/p' | sed -n '3,27p'
}
shorten() { sed -E 's|/root/.cargo/registry/src/index.crates.io-[^/]*/||g; s|/rustc/[0-9a-f]*/library/||g; s|bench/load/driver/src/../../../../||g' | cut -c1-190; }

cargo build --release --manifest-path bench/load/driver/Cargo.toml --target-dir target/bench-driver
"$PY" "${GEN_VLLM_LIKE:-$ROOT/../shared/fixtures/gen_vllm_like.py}" --engines 48 --lmcache --tp 2 \
  --lora-adapters 4 --spec-decode 2 -o "$OUT/large.prom"
echo "== expfmt-driver loop 10 large.prom ($(wc -c < "$OUT/large.prom") bytes)"
valgrind --tool=callgrind --callgrind-out-file="$OUT/driver.callgrind" \
  "$DRIVER/expfmt-driver" loop 10 "$OUT/large.prom" 2>&1 | grep "refs"
top "$OUT/driver.callgrind" | shorten
callgrind_annotate --auto=yes "$OUT/driver.callgrind" > "$OUT/driver.annotated.txt" 2>/dev/null

echo "== sysport serving 200 scrapes of the 740 KB payload"
CARGO_PROFILE_RELEASE_STRIP=none CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
  cargo build --release --locked --bin sysport --target-dir target/bench-profile
"$PY" bench/load/registry.py write 12 "$OUT/payload-740KB.prom"
ports=$("$PY" -c 'import socket
ss=[socket.socket() for _ in range(2)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(*[s.getsockname()[1] for s in ss])')
read -r UP SP <<<"$ports"
"$DRIVER/static-serve" "127.0.0.1:$UP" "$OUT/payload-740KB.prom" 2>/dev/null &
STATIC=$!
cat > "$OUT/sysport.yaml" <<EOF
listen: { host: 127.0.0.1, port: $SP }
health: { starting_status: ready }
upstreams:
  - name: vllm
    url: http://127.0.0.1:$UP/metrics
    keep: ["vllm:", "lmcache:"]
    timeout: 60s
shutdown: { drain_delay: 0s }
EOF
SYSPORT_LOG=warn valgrind --tool=callgrind --callgrind-out-file="$OUT/server.callgrind" \
  target/bench-profile/release/sysport --config "$OUT/sysport.yaml" > "$OUT/server.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 200); do curl -s -o /dev/null -m 1 "127.0.0.1:$SP/live" && break; sleep 0.2; done
WRK_MAX_REQUESTS=200 wrk -t1 -c1 -d30s --timeout 30s -s bench/load/wrk.lua "http://127.0.0.1:$SP/metrics" | tail -1
kill -TERM "$SERVER"; wait "$SERVER" || true
kill "$STATIC"; wait "$STATIC" 2>/dev/null || true
grep "refs" "$OUT/server.log"
top "$OUT/server.callgrind" | shorten
