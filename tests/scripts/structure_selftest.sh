#!/bin/sh
# The structure checks find what they are for: a small tree with one of each violation (an
# include circle and a call circle in src/base, a lower folder including and calling a higher
# one, a tool including a private header, a function of 121 lines, a file of 901 lines, two
# Python modules importing each other, one inside a function, one transport including and
# calling another) is
# reported by tools/check_structure.py line by line, and its circles by tools/check_circles.py;
# a function of exactly 120 lines is not; the repository's allow-list entries, absent from
# the small tree, are reported as stale.
set -u
fail() { echo "FAILED: $*"; exit 1; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
mkdir -p "$d/src/base" "$d/src/wire" "$d/src/coll" "$d/tools" "$d/nn" "$d/src/transport/x" \
    "$d/src/transport/y"
printf 'int y_f(void);\n' > "$d/src/transport/y/y.h"
printf '#include "transport/y/y.h"\nint y_f(void)\n{\n    return 3;\n}\n' > "$d/src/transport/y/y.c"
printf '#include "transport/y/y.h"\nint x_f(void)\n{\n    return y_f();\n}\n' > "$d/src/transport/x/x.c"

printf 'int a_f(void);\n' > "$d/src/base/a.h"
printf 'int b_f(void);\n' > "$d/src/base/b.h"
printf '#include "base/b.h"\nint a_f(void)\n{\n    return b_f() + 1;\n}\n' > "$d/src/base/a.c"
printf '#include "base/a.h"\nint b_f(void)\n{\n    return 0;\n}\nint b_g(void)\n{\n    return a_f();\n}\n' > "$d/src/base/b.c"
printf 'int c_f(void);\n' > "$d/src/coll/c.h"
printf '#include "coll/c.h"\nint c_f(void)\n{\n    return 2;\n}\n' > "$d/src/coll/c.c"
printf '#include "coll/c.h"\nint w_f(void)\n{\n    return c_f();\n}\n' > "$d/src/wire/w.c"
# tools/t.c: long_one spans 121 lines (declaration to closing brace), ok_one 120.
{
    printf '#include "base/a.h"\n'
    printf 'int long_one(int x)\n{\n'
    i=0; while [ $i -lt 117 ]; do printf '    x += %d;\n' $i; i=$((i + 1)); done
    printf '    return x;\n}\n'
    printf 'int ok_one(int x)\n{\n'
    i=0; while [ $i -lt 116 ]; do printf '    x += %d;\n' $i; i=$((i + 1)); done
    printf '    return x;\n}\n'
    printf 'int main(void)\n{\n    return long_one(a_f()) + ok_one(0);\n}\n'
} > "$d/tools/t.c"
{
    i=0; while [ $i -lt 900 ]; do printf '/* line %d */\n' $i; i=$((i + 1)); done
    printf 'int big_f(void);\n'
} > "$d/nn/big.c"
mkdir -p "$d/python/pkg"
printf '' > "$d/python/pkg/__init__.py"
printf 'from . import b\n' > "$d/python/pkg/a.py"
printf 'def f():\n    from pkg import a\n    return a\n' > "$d/python/pkg/b.py"
for c in src/base/a.c src/base/b.c src/coll/c.c src/wire/w.c tools/t.c nn/big.c \
    src/transport/x/x.c src/transport/y/y.c; do
    mkdir -p "$d/build/obj/$(dirname $c)"
    (cd "$d" && ${CC:-cc} -Isrc -c $c -o build/obj/${c%.c}.o) || fail "compiling $c"
done

out=$(python3 tools/check_structure.py --no-allow --root "$d" build 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] || fail "check_structure: exit $rc, expected 1"
for want in "include circle: src/base/a, src/base/b" \
    "call circle: src/base/a, src/base/b" \
    "    edges: src/base/a -> src/base/b (b_f), src/base/b -> src/base/a (a_f)" \
    "upward include: src/wire/w.c includes src/coll/c.h" \
    "upward call: src/wire/w uses c_f from src/coll/c" \
    "private include: tools/t.c includes src/base/a.h" \
    "long function: tools/t.c long_one (121 lines, at most 120)" \
    "long file: nn/big.c (901 lines, at most 900)" \
    "python import circle: pkg.a, pkg.b" \
    "cross-transport include: src/transport/x/x.c includes src/transport/y/y.h" \
    "cross-transport call: src/transport/x/x uses y_f from src/transport/y/y"; do
    echo "$out" | grep -qxF "$want" || fail "check_structure does not report: $want"
done
echo "$out" | grep -q "ok_one" && fail "a function of 120 lines was reported"

out=$(python3 tools/check_structure.py --root "$d" build 2>&1); rc=$?
[ $rc = 1 ] || fail "check_structure with the allow-list: exit $rc, expected 1"
echo "$out" | grep -q "^stale allow-list entry (fixed: remove it from ALLOWED): " ||
    fail "stale allow-list entries not reported"

out=$(python3 tools/check_circles.py --root "$d" build 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] || fail "check_circles: exit $rc, expected 1"
for want in "include circle: src/base/a src/base/b" "call circle: src/base/a src/base/b" \
    "python import circle: pkg.a pkg.b"; do
    echo "$out" | grep -qxF "$want" || fail "check_circles does not report: $want"
done
echo "structure_selftest: ok"
