#!/usr/bin/env bash
# OTLP push to real receivers (tests/otlp_real.rs): the OpenTelemetry Collector's OTLP receiver
# over gRPC and HTTP and over mutual TLS (its file exporter's output compared point by point with
# /metrics; certificates made with openssl), and Prometheus 3.16's own OTLP receiver (every series
# queried back equal to /metrics). scripts/real-tools.sh builds both from their Go modules.
set -euo pipefail
cd "$(dirname "$0")/../.."
command -v openssl >/dev/null || { echo "otlp: openssl is not installed" >&2; exit 1; }
if [ -z "${SYSPORT_OTELCOL:-}" ] || [ -z "${SYSPORT_PROMETHEUS3:-}" ]; then
  bash scripts/real-tools.sh setup
  eval "$(bash scripts/real-tools.sh env)"
fi
export SYSPORT_OTELCOL SYSPORT_PROMETHEUS3
cargo test --locked --test otlp_real -- --ignored --test-threads=1
