#!/usr/bin/env bash
# Installs fai into a temporary prefix, then builds a program against the installed copy twice:
# with pkg-config and with find_package(fai). Checks the installed files, the SONAME, fai.pc's
# prefix, and that libfai.so exports exactly the functions fai.h declares.
#
# usage: test_install.sh [/path/to/fai]   (the argument, given by ctest, is not needed: the
# library is configured and built afresh from the sources next to this script)
set -euo pipefail
src=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/fai-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
jobs=$(nproc 2>/dev/null || echo 2)

fail() {
    echo "test_install: $*" >&2
    exit 1
}
# runs a command quietly, showing its output only when it fails
quiet() {
    "$@" >"$tmp/log" 2>&1 || {
        cat "$tmp/log" >&2
        fail "failed: $*"
    }
}

# -- build and install; configured for one prefix, installed to another with --prefix, as
#    `make install PREFIX=...` does: fai.pc must name the prefix installed to
prefix=$tmp/prefix
quiet cmake -S "$src" -B "$tmp/build" -DCMAKE_BUILD_TYPE=Release -DFAI_BUILD_EXAMPLES=OFF \
    -DCMAKE_INSTALL_PREFIX="$tmp/configured"
quiet cmake --build "$tmp/build" -j "$jobs" --target fai_shared fai_static fai
quiet cmake --install "$tmp/build" --prefix "$prefix"

so=$(find "$prefix" -name 'libfai.so.*.*.*' -type f)
[ -n "$so" ] || fail "no libfai.so.X.Y.Z under $prefix"
libdir=$(dirname "$so")
for f in "$libdir/libfai.a" "$prefix/include/fai.h" "$prefix/bin/fai" \
    "$libdir/pkgconfig/fai.pc" "$libdir/cmake/fai/faiConfig.cmake" \
    "$libdir/cmake/fai/faiConfigVersion.cmake" "$libdir/cmake/fai/faiTargets.cmake"; do
    [ -f "$f" ] || fail "not installed: ${f#"$prefix"/}"
done
[ "$(readlink "$libdir/libfai.so")" = libfai.so.0 ] || fail "libfai.so does not point to libfai.so.0"
[ "$(readlink "$libdir/libfai.so.0")" = "$(basename "$so")" ] ||
    fail "libfai.so.0 does not point to $(basename "$so")"
soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libfai.so.0 ] || fail "SONAME is '$soname', expected libfai.so.0"
"$prefix/bin/fai" --help >/dev/null || fail "the installed fai tool does not run"

# -- exports: exactly the functions fai.h declares, each marked FAI_API
decl='^(FAI_API )?(const )?[a-z_0-9]+ \**fai_[a-z0-9_]+\('
grep -E "$decl" "$prefix/include/fai.h" | grep -v '^FAI_API ' >"$tmp/unmarked" || true
[ ! -s "$tmp/unmarked" ] || fail "declared in fai.h without FAI_API: $(cat "$tmp/unmarked")"
grep -E "$decl" "$prefix/include/fai.h" | sed -E 's/^.*\b(fai_[a-z0-9_]+)\(.*/\1/' |
    sort >"$tmp/declared"
nm -D --defined-only "$so" | awk '{print $NF}' | sort >"$tmp/exported"
[ "$(wc -l <"$tmp/declared")" -ge 10 ] || fail "found too few declarations in fai.h"
if ! diff "$tmp/declared" "$tmp/exported" >"$tmp/diff"; then
    cat "$tmp/diff" >&2
    fail "libfai.so exports differ from fai.h's functions (< declared only, > exported only)"
fi

# -- a consumer through pkg-config, dynamically linked
export PKG_CONFIG_PATH=$libdir/pkgconfig
[ "$(pkg-config --variable=prefix fai)" = "$prefix" ] ||
    fail "fai.pc prefix is '$(pkg-config --variable=prefix fai)', expected $prefix"
pkg-config --static --libs fai | grep -q -- -lpthread || fail "fai.pc lacks -lpthread"
pkg-config --static --libs fai | grep -q -- -lm || fail "fai.pc lacks -lm"
# shellcheck disable=SC2046  # the flags are meant to split into words
quiet cc -std=c11 -Wall -Wextra -Werror "$src/tests/consumer/consumer.c" -o "$tmp/consumer_pc" \
    $(pkg-config --cflags --libs fai)
readelf -d "$tmp/consumer_pc" | grep -q 'NEEDED.*\[libfai\.so\.0\]' ||
    fail "the pkg-config consumer does not load libfai.so.0"
LD_LIBRARY_PATH=$libdir "$tmp/consumer_pc" >/dev/null || fail "the pkg-config consumer failed"

# -- a consumer through find_package(fai): fai::fai (run by its build rpath) and fai::fai_static
quiet cmake -S "$src/tests/consumer" -B "$tmp/consumer" -DCMAKE_PREFIX_PATH="$prefix" \
    -DCMAKE_BUILD_TYPE=Release
quiet cmake --build "$tmp/consumer" -j "$jobs"
readelf -d "$tmp/consumer/consumer" | grep -q 'NEEDED.*\[libfai\.so\.0\]' ||
    fail "fai::fai does not link libfai.so.0"
if readelf -d "$tmp/consumer/consumer_static" | grep -q 'NEEDED.*libfai'; then
    fail "fai::fai_static links libfai.so"
fi
"$tmp/consumer/consumer" >/dev/null || fail "the find_package consumer (fai::fai) failed"
"$tmp/consumer/consumer_static" >/dev/null ||
    fail "the find_package consumer (fai::fai_static) failed"

echo "test_install: ok ($(wc -l <"$tmp/exported") exported functions)"
