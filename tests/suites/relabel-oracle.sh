#!/usr/bin/env bash
# Oracle for metric_relabel_configs: a real Prometheus stores the same series from the engine's
# page whether it applies the rules itself or scrapes sysport applying them (tests/e2e/
# relabel_oracle.py), through the end-to-end wrapper (work directory, cleanup, checks).
# Usage (from the repo root; scripts/test.sh sets both variables):
#   SYSPORT_BIN=target/debug/sysport VENV=.venv bash tests/suites/relabel-oracle.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
E2E_SUITE=relabel-oracle E2E_DRIVER=tests/e2e/relabel_oracle.py exec bash tests/suites/e2e-prometheus.sh
