#!/usr/bin/env bash
# Endpoint pickers read /metrics/router as they are built: a Go client using prometheus/common's
# expfmt.TextParser, url.URL{Path} and Go's default transport (tests/picker/picker.go), against
# sysport in front of six engine set-ups rendered by prometheus_client (tests/picker/run.py).
# Needs SYSPORT_BIN, VENV (with prometheus_client), Debian's golang-go and
# golang-github-prometheus-common-dev (scripts/test.sh installs them). Built in GOPATH mode from
# the Debian sources: no module downloads.
set -euo pipefail
cd "$(dirname "$0")/../.."

: "${SYSPORT_BIN:?SYSPORT_BIN must name the sysport binary}"
: "${VENV:?VENV must name the Python venv}"
GOPATH_DEBIAN=/usr/share/gocode
if ! command -v go >/dev/null || [ ! -d "$GOPATH_DEBIAN/src/github.com/prometheus/common/expfmt" ]; then
  echo "picker: needs golang-go and golang-github-prometheus-common-dev (apt-get install)" >&2
  exit 1
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/sysport-picker.XXXXXX")
trap 'rm -rf "$work"' EXIT
GO111MODULE=off GOPATH=$GOPATH_DEBIAN GOCACHE="$work/cache" GOFLAGS= \
  go build -o "$work/picker" tests/picker/picker.go
SYSPORT_BIN=$SYSPORT_BIN PYTHONDONTWRITEBYTECODE=1 "$VENV/bin/python" tests/picker/run.py "$work/picker"
