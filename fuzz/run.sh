#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 600) in turn, each on its grown corpus and the
# committed seeds, and prints libFuzzer's last status line per target.
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-600}
targets=${TARGETS:-"switch_http config classifier cache_headers input_files"}
cargo +nightly fuzz build -O
for t in $targets; do
  mkdir -p "corpus/$t"
  echo "== $t ($seconds s)"
  cargo +nightly fuzz run -O "$t" "corpus/$t" "seeds/$t" -- -max_total_time="$seconds" 2>&1 \
    | grep -E '^#[0-9]+ +DONE|^Done|panicked|SUMMARY|ERROR' | tail -4
done
