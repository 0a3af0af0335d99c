#!/usr/bin/env bash
# Builds and runs the C tests against the C library, in two passes.
#
#   bash tests/c/run.sh LIBDIR [NAME...]
#
# LIBDIR is the directory holding libmqlite.so (e.g. target/release, what
# `make c-test` passes). NAMEs (e.g. `producer_async`) run only those tests.
#
# The tests: every tests/c/*.c; null_every_arg.c and closed_every_call.c,
# generated from include/mqlite.h by tests/c/gen_contract_tests.py (NULL for
# every pointer argument of every function; every call on closed handles);
# and tests/c/header_check.cpp (the header from C++17). Each gets its own empty scratch directory as argv[1] and is
# compiled with `-Wall -Wextra -Werror`, then run in each pass:
#
#   valgrind  compiled with -g, run under valgrind memcheck (leaks of kind
#             "definite" fail the test);
#   asan      compiled with -fsanitize=address,undefined
#             -fno-omit-frame-pointer -fno-sanitize-recover=all, run with
#             LeakSanitizer on and UBSan halting on the first error.
#             The library itself is Rust and not instrumented, but every
#             allocation it makes goes through the sanitizer's malloc, so
#             leaks of library objects and C code reading or writing past
#             the memory the library hands out are caught.
#
# Before the tests, each pass runs the canaries in tests/c/canary/: programs
# with a deliberate leak, overflow or undefined behaviour that the pass must
# report (a pass that reports nothing proves nothing).
#
# Binaries and logs go to target/ctest/<pass>/ (or $MQLITE_CTEST_OUT/<pass>).
# Exits non-zero if anything fails.
#
# Environment: CC, CXX (compilers; default cc, c++), PYTHON (default
# python3), MQLITE_VALGRIND=0 (skip the valgrind pass, e.g. where valgrind
# cannot be installed), MQLITE_CTEST_SANITIZE=0 (skip the sanitizer pass),
# MQLITE_CTEST_OUT (where binaries and logs go), MQLITE_CTEST_TIMEOUT
# (seconds one test may run; default 600).
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
PYTHON=${PYTHON:-python3}
OUT=${MQLITE_CTEST_OUT:-$ROOT/target/ctest}
TIMEOUT=${MQLITE_CTEST_TIMEOUT:-600}
mkdir -p "$OUT"

PASSES=()
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
    PASSES+=(valgrind)
fi
if [ "${MQLITE_CTEST_SANITIZE:-1}" != 0 ]; then
    PASSES+=(asan)
fi
if [ ${#PASSES[@]} -eq 0 ]; then
    PASSES=(plain) # neither tool: the tests still run
fi

SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/mqlite-ctest.XXXXXX")
TANSU_PID=
trap 'rm -rf "$SCRATCH"; [ -z "$TANSU_PID" ] || kill "$TANSU_PID" 2>/dev/null' EXIT

# The Kafka-compatible broker kafka.c talks to (MQLITE_KAFKA_URL): tansu,
# started here when its binary is found (MQLITE_TANSU, PATH, ~/.cargo/bin)
# and stopped when this script exits. Without it kafka.c says so and
# passes, unless MQLITE_KAFKA_REQUIRED=1 (set by `make test`).
if [ -z "${MQLITE_KAFKA_URL:-}" ]; then
    TANSU_BIN=${MQLITE_TANSU:-$(command -v tansu || echo "$HOME/.cargo/bin/tansu")}
    if [ -x "$TANSU_BIN" ]; then
        port=$("$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        "$TANSU_BIN" broker --listener-url "tcp://127.0.0.1:$port" \
            --advertised-listener-url "tcp://127.0.0.1:$port" \
            --storage-engine memory://tansu/ >"$SCRATCH/tansu.log" 2>&1 &
        TANSU_PID=$!
        for _ in $(seq 600); do
            (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
            sleep 0.05
        done
        export MQLITE_KAFKA_URL="kafka://127.0.0.1:$port"
    elif [ "${MQLITE_KAFKA_REQUIRED:-0}" = 1 ]; then
        echo "error: MQLITE_KAFKA_REQUIRED=1 but no tansu binary was found" >&2
        exit 1
    fi
fi

LINK=(-L"$LIBDIR" -lmqlite -Wl,-rpath,"$LIBDIR" -pthread)
WARN=(-Wall -Wextra -Werror)
passed=0
failed=0
failures=()

# use_pass PASS: sets FLAGS (extra compiler flags), RUN (the command prefix
# and environment of a run) and SIGNATURE (what the pass prints when it
# finds something, for the canaries).
use_pass() {
    case $1 in
    valgrind)
        FLAGS=(-g)
        RUN=(valgrind -q --error-exitcode=1 --leak-check=full --errors-for-leak-kinds=definite
            --show-leak-kinds=definite --suppressions="$ROOT/tests/c/valgrind.supp")
        SIGNATURE='Invalid (read|write)|definitely lost'
        ;;
    asan)
        FLAGS=(-g -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all)
        RUN=(env "ASAN_OPTIONS=detect_leaks=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_string_checks=1"
            "LSAN_OPTIONS=suppressions=$ROOT/tests/c/lsan.supp:print_suppressions=0"
            "UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1")
        SIGNATURE='ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:'
        ;;
    plain)
        FLAGS=(-g)
        RUN=()
        SIGNATURE=
        ;;
    esac
}

# report_fail LABEL WHY LOG
report_fail() {
    printf 'FAIL  %s (%s; log: %s)\n' "$1" "$2" "${3#"$ROOT"/}"
    sed 's/^/    | /' "$3" | tail -n 40
    failed=$((failed + 1))
    failures+=("$1")
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

# compile LABEL LOG COMPILER ARGS...: compiles; reports a failure.
compile() {
    local label=$1 log=$2
    shift 2
    if ! "$@" >"$log" 2>&1; then
        report_fail "$label" "does not compile" "$log"
        return 1
    fi
}

# test_one PASS NAME SRC COMPILER STD: compiles SRC and runs it in PASS.
test_one() {
    local pass=$1 name=$2 src=$3 compiler=$4 std=$5
    local dir="$OUT/$pass" label="$pass/$name"
    local log="$dir/$name.log" bin="$dir/$name"
    compile "$label" "$log" "$compiler" "$std" "${WARN[@]}" "${FLAGS[@]}" \
        -Iinclude -Itests/c "$src" -o "$bin" "${LINK[@]}" || return 0
    mkdir -p "$SCRATCH/$pass/$name"
    local start=${EPOCHREALTIME/./} ms
    if timeout -k 10 "$TIMEOUT" "${RUN[@]}" "$bin" "$SCRATCH/$pass/$name" >"$log" 2>&1; then
        ms=$(((${EPOCHREALTIME/./} - start) / 1000))
        printf 'PASS  %-36s %6d ms\n' "$label" "$ms"
        passed=$((passed + 1))
    else
        local rc=$?
        report_fail "$label" "exit status $rc$([ $rc -eq 124 ] && echo ", timed out after ${TIMEOUT}s")" "$log"
    fi
}

# canary PASS SRC: SRC must fail in PASS with the pass's own report.
canary() {
    local pass=$1 src=$2
    local name
    name=canary_$(basename "$src" .c)
    local dir="$OUT/$pass" label="$pass/$name"
    local log="$dir/$name.log" bin="$dir/$name"
    grep -q "canary:.*\b$pass\b" "$src" || return 0
    compile "$label" "$log" "$CC" -std=c11 "${WARN[@]}" "${FLAGS[@]}" \
        -Iinclude -Itests/c "$src" -o "$bin" "${LINK[@]}" || return 0
    mkdir -p "$SCRATCH/$pass/$name"
    if timeout -k 10 "$TIMEOUT" "${RUN[@]}" "$bin" "$SCRATCH/$pass/$name" >"$log" 2>&1; then
        report_fail "$label" "the deliberate error went unreported" "$log"
    elif grep -Eq "$SIGNATURE" "$log"; then
        printf 'PASS  %-36s (reported, as it must be)\n' "$label"
        passed=$((passed + 1))
    else
        report_fail "$label" "failed without the ${pass} report" "$log"
    fi
}

cd "$ROOT"

# The generated tests.
GEN="$OUT/generated"
GENERATED=(null_every_arg closed_every_call)
mkdir -p "$GEN"
SOURCES=(tests/c/*.c)
if "$PYTHON" tests/c/gen_contract_tests.py include/mqlite.h "$GEN" 2>"$GEN/generate.log"; then
    for name in "${GENERATED[@]}"; do
        SOURCES+=("$GEN/$name.c")
    done
else
    report_fail generate "tests/c/gen_contract_tests.py failed" "$GEN/generate.log"
fi

for pass in "${PASSES[@]}"; do
    mkdir -p "$OUT/$pass"
    use_pass "$pass"
    pass_start=$SECONDS
    if [ ${#ONLY[@]} -eq 0 ] && [ "$pass" != plain ]; then
        for src in tests/c/canary/*.c; do
            canary "$pass" "$src"
        done
    fi
    for src in "${SOURCES[@]}"; do
        name=$(basename "$src" .c)
        wanted "$name" || continue
        test_one "$pass" "$name" "$src" "$CC" -std=c11
    done
    # The header from C++: compile, link and run.
    if wanted header_check_cpp; then
        test_one "$pass" header_check_cpp tests/c/header_check.cpp "$CXX" -std=c++17
    fi
    echo "--- $pass pass: $((SECONDS - pass_start)) s (compiling and running)"
done

echo
if [ "$failed" -ne 0 ]; then
    echo "failed: ${failures[*]}"
fi
echo "C tests (${PASSES[*]}): $passed passed, $failed failed"
[ "$failed" -eq 0 ]
