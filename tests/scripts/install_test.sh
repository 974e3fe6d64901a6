#!/bin/sh
# make install into a temporary prefix, build a program written outside the project with
# pkg-config, and run it under chorus-run, a torchrun-style environment, and mpirun.
set -eu
top=$PWD
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
make --no-print-directory -s install PREFIX="$prefix" BUILD="$BUILD" SANITIZE="${SANITIZE:-}" CHORUS_SKIP_DEPS=1 >/dev/null
for f in lib/libchorus.so lib/libchorus.a include/chorus.h bin/chorus-run bin/chorus-bench lib/pkgconfig/chorus.pc; do
    [ -e "$prefix/$f" ] || { echo "install is missing $f"; exit 1; }
done
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cd "$prefix"
# A sanitizer build installs a sanitized library: the program must load the same runtime.
san=""
[ -n "${SANITIZE:-}" ] && san="-fsanitize=$SANITIZE"
cc -std=c11 -Wall -Werror $san -o hello "$top/tests/external/hello_allreduce.c" $(pkg-config --cflags --libs chorus)
echo "== chorus-run"
"$prefix/bin/chorus-run" -np 3 ./hello
echo "== torchrun-style environment (RANK WORLD_SIZE MASTER_ADDR MASTER_PORT), rank 0 starting 2 s late"
port=$((20000 + $$ % 20000))
RANK=1 WORLD_SIZE=2 LOCAL_RANK=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ./hello & p1=$!
sleep 2
RANK=0 WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port ./hello & p0=$!
wait $p1
wait $p0
echo "== no launcher (a world of one)"
./hello
if command -v mpirun >/dev/null 2>&1; then
    echo "== mpirun (single host: no address needed)"
    mpirun --allow-run-as-root --oversubscribe -np 2 ./hello
    echo "== mpirun with -x MASTER_ADDR/MASTER_PORT"
    mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$((port + 1)) ./hello
else
    echo "== mpirun not installed (Debian package openmpi-bin): skipped"
fi
echo "install test ok"
