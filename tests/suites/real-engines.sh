#!/usr/bin/env bash
# sysport in front of the real engines: vLLM 0.32 (CPU) and llama.cpp's llama-server on their tiny
# models (scripts/real-engines.sh), with a real Prometheus; no stand-in engine. Checks the
# /metrics pass-through (text 0.0.4 and OpenMetrics, vLLM's _created families), the vitals
# against Prometheus' PromQL over the engines' own series, canaries in the engines' own counters,
# and readiness while the engines start, freeze (SIGSTOP) and die, and AIPerf's server-metrics
# export through sysport against vLLM's own (tests/real/run.py, through the end-to-end wrapper,
# which owns the work directory, the pid file and the cleanup).
#
# The first run on a machine sets the engines up (about 6 GB of downloads and a llama-server
# compile, ~15 minutes on two cores, into $SYSPORT_ENGINES_DIR, default ~/.cache/sysport/engines);
# later runs reuse that cache. The checks take about 5 minutes (vLLM's start is 30-120 s of it).
# Usage (from the repo root; scripts/test.sh sets both variables):
#   SYSPORT_BIN=target/debug/sysport VENV=.venv bash tests/suites/real-engines.sh
set -euo pipefail
cd "$(dirname "$0")/../.."

bash scripts/real-engines.sh setup
engines_env=$(bash scripts/real-engines.sh env)
eval "$engines_env"
export SYSPORT_VLLM SYSPORT_VLLM_MODEL SYSPORT_LLAMA_SERVER SYSPORT_LLAMA_MODEL
# AIPerf (and the other readers) from scripts/real-tools.sh; its env line exports them.
bash scripts/real-tools.sh setup
tools_env=$(bash scripts/real-tools.sh env)
eval "$tools_env"
E2E_SUITE=real-engines E2E_DRIVER=tests/real/run.py exec bash tests/suites/e2e-prometheus.sh
