#!/usr/bin/env bash
# The status page in a real browser: Debian's headless Chromium loads / of sysport in front of a
# healthy and a refused upstream, and the rendered DOM, a screenshot and /status are checked
# (tests/status/browser.py, standard library only). Needs SYSPORT_BIN and Debian's chromium
# (scripts/test.sh installs it). `--screenshot-to docs/status.png --seconds 90` remakes docs/status.png, the screenshot in docs/status.md.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${SYSPORT_BIN:?SYSPORT_BIN must name the sysport binary}"
command -v chromium >/dev/null || { echo "status-browser: chromium is not installed" >&2; exit 1; }
SYSPORT_BIN=$SYSPORT_BIN PYTHONDONTWRITEBYTECODE=1 python3 tests/status/browser.py "$@"
