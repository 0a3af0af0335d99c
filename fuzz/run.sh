#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (`make fuzz`).
#
#   bash fuzz/run.sh [SECONDS_PER_TARGET] [TARGET...]
#
# Needs a nightly toolchain and cargo-fuzz (installed here if missing).
# Each target starts from fuzz/seeds/<target>/ and fuzz/regressions/<target>/
# and keeps its growing corpus in fuzz/corpus/<target>/ (not committed). A
# failing input is left in fuzz/artifacts/<target>/: fix the bug, then copy
# the input to fuzz/regressions/<target>/ so `make test` replays it.
# The full libFuzzer output of a target is in fuzz/logs/<target>.log.
# Inputs are capped at 64 KiB, memory at 2 GiB, one input at 10 s.
set -euo pipefail
cd "$(dirname "$0")"
SECS=${1:-60}
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(batch_decode segment_recovery index_load)
toolchains=$(rustup toolchain list)
if ! grep -q nightly <<<"$toolchains"; then
    echo "error: make fuzz needs a nightly toolchain (rustup toolchain install nightly)" >&2
    exit 1
fi
command -v cargo-fuzz >/dev/null || cargo install -q cargo-fuzz
cargo +nightly fuzz build -O
mkdir -p logs
for t in "${TARGETS[@]}"; do
    mkdir -p "corpus/$t"
    echo "== fuzzing $t for ${SECS}s"
    cargo +nightly fuzz run -O "$t" "corpus/$t" "seeds/$t" "regressions/$t" -- \
        -max_total_time="$SECS" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
        -print_final_stats=1 >"logs/$t.log" 2>&1 || true
    grep -E "^(#[0-9]+ *DONE|stat::number_of_executed_units|stat::peak_rss_mb|Done [0-9]+ runs)" "logs/$t.log" || tail -20 "logs/$t.log"
    if ls "artifacts/$t"/* >/dev/null 2>&1; then
        echo "error: $t left failing inputs in fuzz/artifacts/$t" >&2
        exit 1
    fi
done
