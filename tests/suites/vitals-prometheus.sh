#!/usr/bin/env bash
# Oracle for the engine vitals: sysport's /status vitals agree within 2 % with a real
# Prometheus answering the same PromQL (rate, histogram_quantile) over the same stand-in engine
# (tests/e2e/vitals_oracle.py), through the end-to-end wrapper (work directory, cleanup, checks).
# Takes a little over a minute (one full 1 m window).
# Usage (from the repo root; scripts/test.sh sets both variables):
#   SYSPORT_BIN=target/debug/sysport VENV=.venv bash tests/suites/vitals-prometheus.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_SUITE=vitals-prometheus E2E_DRIVER=tests/e2e/vitals_oracle.py exec bash tests/suites/e2e-prometheus.sh
