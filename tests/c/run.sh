#!/usr/bin/env bash
# Builds and runs the C tests against the C library.
#
#   bash tests/c/run.sh LIBDIR [NAME...]
#
# LIBDIR is the directory holding libmqlite.so (e.g. target/release, what
# `make c-test` passes). NAMEs (e.g. `producer_async`) run only those tests.
# Every tests/c/*.c is compiled with
# `cc -std=c11 -Wall -Wextra -Werror` and run under valgrind memcheck, each
# with its own empty scratch directory as argv[1]; tests/c/header_check.cpp
# proves the header compiles, links and runs from C++17. Binaries and logs go
# to target/ctest/ (or $MQLITE_CTEST_OUT). Exits non-zero if anything fails.
#
# Environment: CC, CXX (compilers; default cc, c++), MQLITE_VALGRIND=0 (run
# without valgrind, e.g. on a machine where it cannot be installed),
# MQLITE_CTEST_OUT (where binaries and logs go).
set -euo pipefail

if [ $# -lt 1 ]; then
    echo "usage: $0 LIBDIR [NAME...]   (LIBDIR: the directory holding libmqlite.so)" >&2
    exit 2
fi
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
LIBDIR=$(cd "$1" && pwd)
shift
ONLY=("$@")
if [ ! -e "$LIBDIR/libmqlite.so" ]; then
    echo "error: no libmqlite.so in $LIBDIR (build it with: cargo build --release -p mqlite-ffi)" >&2
    exit 2
fi
CC=${CC:-cc}
CXX=${CXX:-c++}
OUT=${MQLITE_CTEST_OUT:-$ROOT/target/ctest}
mkdir -p "$OUT"

VALGRIND=()
if [ "${MQLITE_VALGRIND:-1}" != 0 ]; then
    if ! command -v valgrind >/dev/null 2>&1; then
        echo "valgrind not found; installing it with apt-get"
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            apt-get update -qq >/dev/null
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq valgrind >/dev/null
        else
            echo "error: valgrind is missing and cannot be installed here (set MQLITE_VALGRIND=0 to run without)" >&2
            exit 1
        fi
    fi
    VALGRIND=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
        --show-leak-kinds=definite --suppressions="$ROOT/tests/c/valgrind.supp")
fi

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/mqlite-ctest.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT

LINK=(-L"$LIBDIR" -lmqlite -Wl,-rpath,"$LIBDIR" -pthread)
passed=0
failed=0
failures=()

# run NAME LOG CMD...: runs one step, reports it, counts it.
run() {
    local name=$1 log=$2
    shift 2
    local start=${EPOCHREALTIME/./} ms
    if "$@" >"$log" 2>&1; then
        ms=$(((${EPOCHREALTIME/./} - start) / 1000))
        printf 'PASS  %-28s %5d ms\n' "$name" "$ms"
        passed=$((passed + 1))
    else
        printf 'FAIL  %s (log: %s)\n' "$name" "${log#"$ROOT"/}"
        sed 's/^/    | /' "$log" | tail -n 40
        failed=$((failed + 1))
        failures+=("$name")
    fi
}

# wanted NAME: whether NAME was asked for (all are, without NAME arguments).
wanted() {
    [ ${#ONLY[@]} -eq 0 ] && return 0
    local n
    for n in "${ONLY[@]}"; do
        [ "$n" = "$1" ] && return 0
    done
    return 1
}

# build_and_run NAME LOG COMPILER FLAGS... : compiles $src to $bin, then runs it.
build_and_run() {
    local name=$1 log=$2
    shift 2
    wanted "$name" || return 0
    if ! "$@" >"$log" 2>&1; then
        printf 'FAIL  %s (does not compile; log: %s)\n' "$name" "${log#"$ROOT"/}"
        sed 's/^/    | /' "$log" | tail -n 40
        failed=$((failed + 1))
        failures+=("$name")
        return
    fi
    mkdir -p "$SCRATCH/$name"
    run "$name" "$log" "${VALGRIND[@]}" "$OUT/$name" "$SCRATCH/$name"
}

cd "$ROOT"
for src in tests/c/*.c; do
    name=$(basename "$src" .c)
    build_and_run "$name" "$OUT/$name.log" \
        "$CC" -std=c11 -Wall -Wextra -Werror -g -Iinclude "$src" -o "$OUT/$name" "${LINK[@]}"
done

# The header from C++: compile, link and run.
build_and_run header_check_cpp "$OUT/header_check_cpp.log" \
    "$CXX" -std=c++17 -Wall -Wextra -Werror -g -Iinclude tests/c/header_check.cpp \
    -o "$OUT/header_check_cpp" "${LINK[@]}"

echo
if [ "$failed" -ne 0 ]; then
    echo "failed: ${failures[*]}"
fi
echo "C tests: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
