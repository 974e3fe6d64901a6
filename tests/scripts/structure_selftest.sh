#!/bin/sh
# The structure checks find what they are for: a small tree with one of each violation (an
# include circle and a call circle in src/base, a lower folder including and calling a higher
# one, a tool including a private header, a function of 121 lines, a file of 901 lines, two
# Python modules importing each other, one inside a function, a variable of the config table
# read with chorus__env, a CHORUS_* variable written into os.environ, an ARCHITECTURE.md whose
# picture of the layers is out of date and whose walk names a missing file, goes up a layer
# and comes back to a folder, one transport including and calling another) is reported by
# tools/check_structure.py line by line, and its circles by tools/check_circles.py; a function
# of exactly 120 lines is not; an allow-list entry absent from the small tree is reported as
# stale.
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
printf 'CHORUS_CFG(CHORUS_TIMEOUT_S, timeout_s, DOUBLE, "300", "help")\nCHORUS_JOB_VAR(MASTER_PORT, "torchrun")\n' > "$d/src/base/config_table.h"
printf 'const char *chorus__env(const char *name);\nint e_f(void)\n{\n    return chorus__env("CHORUS_TIMEOUT_S") != 0;\n}\n' > "$d/src/base/e.c"
mkdir -p "$d/python/chorus" "$d/docs"
printf 'import os\nos.environ.setdefault("CHORUS_DEBUG", "INFO")\n' > "$d/python/chorus/d.py"
{
    printf '# Architecture\n\n```text\nlayers: the rows\n| tools/   the tools |\n| src/base/   base |\n```\n\n'
    printf '```text\nwalk: up and back\nsrc/base/a.c   a\nsrc/coll/c.c   up\nsrc/base/b.c   back\nsrc/base/gone.c   missing\n```\n'
} > "$d/docs/ARCHITECTURE.md"
for c in src/base/a.c src/base/e.c src/base/b.c src/coll/c.c src/wire/w.c tools/t.c nn/big.c \
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
    "src/base/e.c:4: chorus__env(\"CHORUS_TIMEOUT_S\") reads a variable of the config table around it" \
    "python/chorus/d.py:2: a CHORUS_* variable written into os.environ (pass it with chorus_config_set)" \
    "docs/ARCHITECTURE.md:12: walk up and back goes up, from src/base/ to src/coll/" \
    "docs/ARCHITECTURE.md:13: walk up and back comes back to src/base/" \
    "docs/ARCHITECTURE.md:14: walk up and back names src/base/gone.c, which does not exist" \
    "docs/ARCHITECTURE.md: 1 walks of a gradient (blocks starting \"walk:\"), want two" \
    "cross-transport include: src/transport/x/x.c includes src/transport/y/y.h" \
    "cross-transport call: src/transport/x/x uses y_f from src/transport/y/y"; do
    echo "$out" | grep -qxF "$want" || fail "check_structure does not report: $want"
done
echo "$out" | grep -q "ok_one" && fail "a function of 120 lines was reported"

echo "$out" | grep -q "^docs/ARCHITECTURE.md: the picture of the layers shows \[\['tools'\], \['src/base'\]\]" ||
    fail "check_structure does not report the picture of the layers out of date"

out=$(python3 tools/check_structure.py --allow "private include: tools/x.c includes src/y.h" \
    --root "$d" build 2>&1); rc=$?
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
