#!/usr/bin/env bash
# The soak (bench/soak.sh) for one minute against the debug binary: two flapping upstreams,
# 50 scrapes/s; fails on RSS or fd growth, any non-200 /metrics, any /live failure.
# CI exports SYSPORT_BIN and VENV; without SYSPORT_BIN the debug binary is built.
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ -z "${SYSPORT_BIN:-}" ]; then
  cargo build --locked --bin sysport >&2
  SYSPORT_BIN="$(pwd)/target/debug/sysport"
fi
export SYSPORT_BIN
DURATION=60 exec bash bench/soak.sh
