#!/bin/sh
# One version, from include/chorus.h: every tool answers --version with one line
# "<tool> <version>", the library's chorus_version() returns it, the Python package and its
# metadata carry it, and the manual pages (make man) are made for it (chorus-run's with the
# CHORUS_* variables).
set -u
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
version=$(awk '/^#define CHORUS_VERSION_(MAJOR|MINOR|PATCH) /{v = v s $3; s = "."} END{print v}' include/chorus.h)
echo "include/chorus.h: $version"
echo "$version" | grep -Eqx '[0-9]+\.[0-9]+\.[0-9]+' || fail "no version in include/chorus.h"

for t in chorus-run chorus-bench chorus-train; do
    out=$("$BUILD/bin/$t" --version) || fail "$t --version exited with $?"
    echo "$out"
    [ "$out" = "$t $version" ] || fail "$t --version printed '$out', not '$t $version'"
done

san=""
[ -n "${SANITIZE:-}" ] && san="-fsanitize=$SANITIZE"
printf '#include <chorus.h>\n#include <stdio.h>\n#include <string.h>\nint main(void) { printf("%%s %%s\\n", chorus_version(), CHORUS_VERSION_STRING); return strcmp(chorus_version(), CHORUS_VERSION_STRING) != 0; }\n' > "$tmp/v.c"
cc -std=c11 -Wall -Werror $san -Iinclude -o "$tmp/v" "$tmp/v.c" "$BUILD/lib/libchorus.a" -lsodium -lrt -lm -pthread ||
    fail "building a program that calls chorus_version"
out=$("$tmp/v") || fail "chorus_version() differs from CHORUS_VERSION_STRING: $out"
[ "$out" = "$version $version" ] || fail "chorus_version() and CHORUS_VERSION_STRING say '$out'"
echo "chorus_version(): $version"

grep -qx "version = \"$version\"" python/pyproject.toml || fail "python/pyproject.toml has another version"
grep -qx "__version__ = \"$version\"" python/chorus/__init__.py || fail "chorus.__version__ is another version"

make --no-print-directory -s man BUILD="$BUILD" SANITIZE="${SANITIZE:-}" CHORUS_SKIP_DEPS=1 || fail "make man"
for t in chorus-run chorus-bench chorus-train; do
    page=$BUILD/man/$t.1
    head -3 "$page" | grep "^\.TH"
    grep -q "^\.TH $(echo "$t" | tr a-z A-Z) \"1\" .* \"$t $version\"" "$page" || fail "$page is not made for $t $version"
    grep -q -- '\\-\\-version' "$page" || fail "$page does not document --version"
done
grep -q '^\.SH ENVIRONMENT' "$BUILD/man/chorus-run.1" && grep -q '^CHORUS_TIMEOUT_S ' "$BUILD/man/chorus-run.1" ||
    fail "chorus-run.1 has no ENVIRONMENT section listing the CHORUS_* variables"
echo "version test ok"
