#!/usr/bin/env bash
# Runs the cargo-fuzz target on the exposition lexer/merge/writers for a bounded time when a
# nightly toolchain is available; otherwise the property tests in `cargo test` carry it.
set -euo pipefail
cd "$(dirname "$0")/../.."
SECONDS_TO_RUN="${FUZZ_SECONDS:-60}"
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
  echo "fuzz: no nightly toolchain here; skipped (the property tests in cargo test cover the same contract)"
  exit 0
fi
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --quiet
fi
mkdir -p fuzz/corpus/expfmt
# Seed the corpus with the real fixtures (first byte: 0 = text, 1 = OpenMetrics).
for f in tests/fixtures/small.prom tests/fixtures/small.openmetrics.txt tests/fixtures/small_multiproc.prom; do
  case "$f" in *openmetrics*) sel='\x01' ;; *) sel='\x00' ;; esac
  { printf "$sel"; head -c 60000 "$f"; } > "fuzz/corpus/expfmt/seed-$(basename "$f")"
done
cargo +nightly fuzz run expfmt fuzz/corpus/expfmt -- \
  -max_total_time="$SECONDS_TO_RUN" -rss_limit_mb=1024 -max_len=65536 -print_final_stats=1
echo "fuzz: 1 passed, 0 failed"
