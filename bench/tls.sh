#!/usr/bin/env bash
# Scrape latency and CPU with TLS and basic auth against plain HTTP on the 740 KB page
# (bench/tls/run.py; figures in bench/RESULTS.md §12). Builds target/release/sysport; makes the
# page with the load test's registry (bench/load/registry.py) and the certificates with openssl.
# Uses bench/.venv (bench/load.sh creates it), adding prometheus-client,
# prometheus-fastapi-instrumentator and bcrypt when missing.
#
# Usage: bash bench/tls.sh [OUT_DIR]     (default bench/out/tls)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${1:-$ROOT/bench/out/tls}
mkdir -p "$OUT"
. bench/venv.sh
bench_venv tls.sh "prometheus_client, prometheus_fastapi_instrumentator, bcrypt" \
  prometheus-client prometheus-fastapi-instrumentator bcrypt
cargo build --release --locked --bin sysport
"$VENV/bin/python" bench/load/registry.py write 12 "$OUT/payload-740KB.prom"
cd "$OUT"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=bench-ca \
  -keyout ca.key -out ca.crt 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=sysport \
  -keyout server.key -out server.csr 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n' > server.ext
openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
  -extfile server.ext -out server.crt 2>/dev/null
cd "$ROOT"
echo "load average $(cut -d' ' -f1-3 /proc/loadavg) before the run"
"$VENV/bin/python" bench/tls/run.py "$OUT" | tee "$OUT/results.md"
