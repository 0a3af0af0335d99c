#!/usr/bin/env bash
# `make install` into a temporary prefix, staged through DESTDIR as a
# packager would, then C programs built against the installed copy only:
#
#   - the files and links are where `make install` says they are;
#   - the shared library's SONAME is libmqlite.so.<major> (readelf -d), and a
#     program linked with `pkg-config --cflags --libs mqlite` records that
#     name and runs against the installed library;
#   - a program linked with `pkg-config --static --libs mqlite` (with the
#     archive picked by `-l:libmqlite.a`, since libmqlite.so sits beside it)
#     needs no libmqlite at run time and runs.
#
#   bash tests/install/run.sh        (what `make install-test` runs)
#
# pkg-config is installed with apt-get when missing and running as root;
# otherwise the test says so and reads mqlite.pc's fields itself.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
CC=${CC:-cc}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/mqlite-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
PREFIX=$WORK/prefix
STAGE=$WORK/stage
VERSION=$(sed -n '/^version = "/{s/^version = "\(.*\)"/\1/p;q}' Cargo.toml)
MAJOR=${VERSION%%.*}

fail() {
    echo "install-test: FAIL: $*" >&2
    exit 1
}

# Staged install: everything under $STAGE$PREFIX, nothing under $PREFIX.
make -s install PREFIX="$PREFIX" DESTDIR="$STAGE" >/dev/null
[ ! -e "$PREFIX" ] || fail "DESTDIR install wrote outside DESTDIR"
# Then the files are moved where the prefix says, as a package would be unpacked.
mv "$STAGE$PREFIX" "$PREFIX"
LIB=$PREFIX/lib

for f in include/mqlite.h "lib/libmqlite.so.$VERSION" lib/libmqlite.a lib/pkgconfig/mqlite.pc; do
    [ -f "$PREFIX/$f" ] || fail "$f not installed"
done
[ "$(readlink "$LIB/libmqlite.so.$MAJOR")" = "libmqlite.so.$VERSION" ] ||
    fail "libmqlite.so.$MAJOR does not link to libmqlite.so.$VERSION"
[ "$(readlink "$LIB/libmqlite.so")" = "libmqlite.so.$MAJOR" ] ||
    fail "libmqlite.so does not link to libmqlite.so.$MAJOR"
grep -q "^prefix=$PREFIX\$" "$LIB/pkgconfig/mqlite.pc" || fail "mqlite.pc names another prefix"
grep -q "^Version: $VERSION\$" "$LIB/pkgconfig/mqlite.pc" || fail "mqlite.pc names another version"

soname=$(readelf -d "$LIB/libmqlite.so.$VERSION" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = "libmqlite.so.$MAJOR" ] || fail "SONAME is '$soname', want libmqlite.so.$MAJOR"
echo "ok: installed files, links, SONAME $soname"

if ! command -v pkg-config >/dev/null 2>&1; then
    if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "pkg-config not found; installing it with apt-get"
        apt-get update -qq >/dev/null
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pkg-config >/dev/null
    fi
fi
if command -v pkg-config >/dev/null 2>&1; then
    export PKG_CONFIG_PATH=$LIB/pkgconfig
    HOW_SHARED="pkg-config --libs mqlite"
    HOW_STATIC="pkg-config --static --libs mqlite"
    [ "$(pkg-config --modversion mqlite)" = "$VERSION" ] || fail "pkg-config --modversion mqlite"
    CFLAGS_PC=$(pkg-config --cflags mqlite)
    LIBS_SHARED=$(pkg-config --libs mqlite)
    LIBS_STATIC=$(pkg-config --static --libs mqlite)
else
    # No pkg-config (not root, or no apt-get): the same fields read from the file.
    echo "WARNING: pkg-config is missing and cannot be installed here;" \
        "using mqlite.pc's Cflags/Libs/Libs.private read directly" >&2
    field() { sed -n "s/^$1: //p" "$LIB/pkgconfig/mqlite.pc" | sed "s|\${libdir}|$LIB|g; s|\${includedir}|$PREFIX/include|g"; }
    CFLAGS_PC=$(field Cflags)
    LIBS_SHARED=$(field Libs)
    LIBS_STATIC="$LIBS_SHARED $(field Libs.private)"
    HOW_SHARED="mqlite.pc's Libs"
    HOW_STATIC="mqlite.pc's Libs and Libs.private"
fi
[[ " $LIBS_STATIC " == *" -lpthread "* ]] || fail "the static flags lack Libs.private: $LIBS_STATIC"

# A program that uses the library for real: a topic, a send, a poll.
cat >"$WORK/app.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <mqlite.h>

int main(int argc, char **argv) {
    if (argc < 2 || mql_version_number() != MQLITE_VERSION_NUMBER) return 2;
    mql_broker *mq;
    if (mql_open(argv[1], NULL, &mq) != MQL_OK) { fprintf(stderr, "%s\n", mql_last_error()); return 1; }
    mql_topic_config *tc;
    if (mql_topic_config_new(1, &tc) != MQL_OK) return 1;
    mql_status st = mql_topic_create(mq, "t", tc);
    mql_topic_config_free(tc);
    if (st != MQL_OK && st != MQL_TOPIC_EXISTS) return 1;
    mql_producer *p;
    mql_metadata md;
    if (mql_producer_new(mq, NULL, &p) != MQL_OK || mql_send(p, "t", NULL, 0, "hello", 5, &md) != MQL_OK) return 1;
    mql_consumer *c;
    if (mql_consumer_new(mq, "g", NULL, &c) != MQL_OK || mql_subscribe(c, "t") != MQL_OK) return 1;
    mql_message *m;
    if (mql_poll(c, 5000, &m) != MQL_OK) { fprintf(stderr, "%s\n", mql_last_error()); return 1; }
    size_t n;
    const void *v = mql_message_value(m, &n);
    int ok = n == 5 && memcmp(v, "hello", 5) == 0;
    mql_message_free(m);
    mql_consumer_free(c);
    mql_producer_free(p);
    mql_close(mq);
    printf("%s %s\n", mql_version(), ok ? "ok" : "wrong value");
    return ok ? 0 : 1;
}
C

# Shared: the program records the SONAME and loads the installed library.
# shellcheck disable=SC2086 # the flags are words
"$CC" -std=c11 -Wall -Werror $CFLAGS_PC "$WORK/app.c" -o "$WORK/app-shared" $LIBS_SHARED
# Outputs are captured before grep: `grep -q` stops reading at the first
# match, and under pipefail the writer's SIGPIPE would fail the check.
needed=$(readelf -d "$WORK/app-shared")
grep -q "(NEEDED).*\[libmqlite.so.$MAJOR\]" <<<"$needed" ||
    fail "the shared program does not need libmqlite.so.$MAJOR"
out=$(LD_LIBRARY_PATH=$LIB "$WORK/app-shared" "$WORK/data-shared") || fail "the shared program failed"
[ "$out" = "$VERSION ok" ] || fail "the shared program printed '$out'"
# The library it loaded is the installed one.
loaded=$(LD_LIBRARY_PATH=$LIB ldd "$WORK/app-shared")
grep -q "$LIB/libmqlite.so.$MAJOR" <<<"$loaded" ||
    fail "the shared program does not load $LIB/libmqlite.so.$MAJOR"
echo "ok: shared link with $HOW_SHARED ($LIBS_SHARED)"

# Static: the archive instead of the shared library beside it.
LIBS_ARCHIVE=${LIBS_STATIC//-lmqlite/-l:libmqlite.a}
# shellcheck disable=SC2086
"$CC" -std=c11 -Wall -Werror $CFLAGS_PC "$WORK/app.c" -o "$WORK/app-static" $LIBS_ARCHIVE
needed=$(readelf -d "$WORK/app-static")
if grep -q "(NEEDED).*libmqlite" <<<"$needed"; then
    fail "the static program still needs libmqlite at run time"
fi
out=$(env -u LD_LIBRARY_PATH "$WORK/app-static" "$WORK/data-static") || fail "the static program failed"
[ "$out" = "$VERSION ok" ] || fail "the static program printed '$out'"
echo "ok: static link with $HOW_STATIC ($LIBS_ARCHIVE)"
echo "install-test: all passed"
