#!/usr/bin/env bash
# A real Prometheus (Debian's /usr/bin/prometheus, or PROMETHEUS_BIN) scraping sysport over HTTPS
# with tls_config.ca_file and basic_auth (tests/web_prometheus.rs); certificates are made with
# openssl in a temporary directory. scripts/test.sh installs prometheus when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
PROMETHEUS_BIN=${PROMETHEUS_BIN:-/usr/bin/prometheus}
export PROMETHEUS_BIN
[ -x "$PROMETHEUS_BIN" ] || { echo "web-prometheus: no Prometheus at $PROMETHEUS_BIN" >&2; exit 1; }
command -v openssl >/dev/null || { echo "web-prometheus: openssl is not installed" >&2; exit 1; }
cargo test --locked --test web_prometheus -- --ignored --test-threads=1
