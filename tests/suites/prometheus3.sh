#!/usr/bin/env bash
# A real Prometheus 3.16 scrapes sysport: with its default scrape_protocols, with each protocol
# alone and with metric_name_escaping_scheme: underscores, every stored sample equal to the one
# sysport served in that answer, no scrape error or warning, the Content-Type naming the version
# and escaping served; Prometheus 3's promtool reads both formats (tests/e2e/prometheus3.py,
# through the end-to-end wrapper). Prometheus 3.16 is built from its Go module by
# scripts/real-tools.sh (the first run: see the note on time and disk in README.md).
# Usage (from the repo root; scripts/test.sh sets both variables):
#   SYSPORT_BIN=target/debug/sysport VENV=.venv bash tests/suites/prometheus3.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

bash scripts/real-tools.sh setup
eval "$(bash scripts/real-tools.sh env)"
export PROMETHEUS_BIN=$SYSPORT_PROMETHEUS3 PROMTOOL3=$SYSPORT_PROMTOOL3
E2E_SUITE=prometheus3 E2E_DRIVER=tests/e2e/prometheus3.py exec bash tests/suites/e2e-prometheus.sh
