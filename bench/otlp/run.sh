#!/usr/bin/env bash
# Usage: bench/otlp/run.sh target/release/sysport "$SYSPORT_OTELCOL"   (eval "$(scripts/real-tools.sh env)")
# What OTLP push costs /metrics and /live: sysport (release) in front of a 16.6 MB page served by
# python's http.server (make_page.py), /metrics read back to back and /live every 50 ms for 30 s, without OTLP
# and with OTLP over gRPC to the Collector every second (60 times the default rate).
set -euo pipefail
BIN=$(realpath "$1"); OTELCOL=$2
cd "$(dirname "$0")"
WORK=$(mktemp -d); cp measure.py oc.yaml "$WORK"/; python3 make_page.py "$WORK/page.prom"; cd "$WORK"
python3 -m http.server 28000 --bind 127.0.0.1 >/dev/null 2>&1 & HTTP=$!
$OTELCOL --config "$PWD/oc.yaml" > oc.log 2>&1 & OC=$!
trap 'kill $HTTP $OC 2>/dev/null; rm -rf "$WORK"' EXIT
sleep 2
for mode in off on; do
  if [ $mode = on ]; then
    export OTEL_METRICS_EXPORTER=otlp OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:24317 OTEL_METRIC_EXPORT_INTERVAL=1000
  fi
  $BIN --host 127.0.0.1 --port 28081 --upstream vllm=http://127.0.0.1:28000/page.prom > sp-$mode.log 2>&1 & SP=$!
  sleep 3
  python3 measure.py http://127.0.0.1:28081 5 > /dev/null   # warm-up
  echo "otlp $mode: $(python3 measure.py http://127.0.0.1:28081 30)"
  curl -s http://127.0.0.1:28081/metrics | grep '^dynamo_sysport_otlp_exports_total' || true
  kill $SP; wait $SP 2>/dev/null || true
done
