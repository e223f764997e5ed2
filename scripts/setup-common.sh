# What scripts/real-engines.sh and scripts/real-tools.sh share: their log lines, hashes and
# quoting, the Python version, and the stamps that make `setup` a no-op once each component is
# in place. Sourced by both after they set SETUP_NAME, STAMPS and COMPONENTS and define, per
# component C, `key_C` (its pins, one per line) and `is_done C`.
# shellcheck shell=bash

log() { echo "$SETUP_NAME: $*"; }
die() { echo "$SETUP_NAME: error: $*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "$0"; }
sha256() { sha256sum "$1" | cut -d' ' -f1; }
# Single-quoted for sh and bash.
shquote() { local s=$1; printf "'%s'" "${s//\'/\'\\\'\'}"; }

PY_VERSION=
python_version() {
  if [ -z "$PY_VERSION" ]; then
    PY_VERSION=$(python3 -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])' 2>/dev/null) ||
      die "python3 is missing${PYTHON_MINOR:+ (CPython $PYTHON_MINOR is expected)}"
  fi
  echo "$PY_VERSION"
}

# Records that component $1 is in place with the pins its key names now.
stamp() {
  mkdir -p "$STAMPS"
  "key_${1//-/_}" >"$STAMPS/$1.tmp"
  mv -f "$STAMPS/$1.tmp" "$STAMPS/$1"
}

# component C STEP...: runs the steps unless C is in place with the same pins, then stamps it.
component() {
  local c=$1
  shift
  if is_done "$c"; then
    log "$c: in place"
    return 0
  fi
  local t0=$SECONDS f
  rm -f "$STAMPS/$c"
  log "$c: setting up"
  for f in "$@"; do "$f"; done
  stamp "$c"
  log "$c: done ($((SECONDS - t0)) s)"
}

all_done() {
  local c
  for c in "${COMPONENTS[@]}"; do is_done "$c" || return 1; done
}
