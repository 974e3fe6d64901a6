#!/bin/sh
# make install into a temporary prefix, build programs written outside the project with
# pkg-config (the collectives, and the nn library shared and static), and run them under
# chorus-run, a torchrun-style environment, and mpirun. Then a packager's staged install
# (make install DESTDIR=stage PREFIX=/usr): every file under stage/usr, pkg-config files for
# /usr, a program built from the stage; and make uninstall removing exactly what install put.
set -eu
top=$PWD
prefix=$(mktemp -d)
stage=$(mktemp -d)
trap 'rm -rf "$prefix" "$stage"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
mk() { make -C "$top" --no-print-directory -s BUILD="$BUILD" SANITIZE="${SANITIZE:-}" CHORUS_SKIP_DEPS=1 "$@"; }
version=$("$top/$BUILD/bin/chorus-run" --version | awk '{print $2}')
# What install puts under PREFIX, every file and link (man pages come from mk/man.mk).
expected="bin/chorus-bench bin/chorus-run bin/chorus-train include/chorus.h
$(cd "$top" && ls include/chorus/*.h include/chorus/nn/*.h)
lib/libchorus.a lib/libchorus.so lib/libchorus.so.0 lib/libchorus.so.$version
lib/libchorus_nn.a lib/libchorus_nn.so lib/libchorus_nn.so.0 lib/libchorus_nn.so.$version
lib/pkgconfig/chorus.pc lib/pkgconfig/chorus_nn.pc
$(mk print-installed-man)"
expected=$(echo $expected | tr ' ' '\n' | sort)
listing() { (cd "$1" && find . -type f -o -type l | sed 's|^\./||' | sort); }
same() { [ "$2" = "$expected" ] || { echo "$expected" > "$prefix.want"; echo "$2" | diff -u "$prefix.want" -; rm -f "$prefix.want"; fail "$1"; }; }

mk install PREFIX="$prefix" >/dev/null
got=$(listing "$prefix")
same "install put other files than these" "$got"
echo "== installed under PREFIX: $(echo $got | wc -w) files"
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
cd "$prefix"
# A sanitizer build installs a sanitized library: the program must load the same runtime.
san=""
[ -n "${SANITIZE:-}" ] && san="-fsanitize=$SANITIZE"
cc -std=c11 -Wall -Werror $san -o hello "$top/tests/external/hello_allreduce.c" $(pkg-config --cflags --libs chorus)
echo "== the nn library, shared (pkg-config --libs chorus_nn)"
cc -std=c11 -Wall -Werror $san -o hello_nn "$top/tests/external/hello_nn.c" $(pkg-config --cflags --libs chorus_nn)
./hello_nn
ldd ./hello_nn | grep -q "libchorus_nn.so.0 => $prefix/lib/libchorus_nn.so.0" || fail "hello_nn does not load the installed libchorus_nn.so.0"
echo "== the nn library, static (pkg-config --static)"
cc -std=c11 -Wall -Werror $san -o hello_nn_static "$top/tests/external/hello_nn.c" $(pkg-config --cflags chorus_nn) \
    -Wl,-Bstatic -lchorus_nn -lchorus -Wl,-Bdynamic -L"$prefix/lib" $(pkg-config --static --libs-only-l chorus_nn | sed 's/-lchorus_nn//; s/-lchorus//')
./hello_nn_static
! ldd ./hello_nn_static | grep -q libchorus || fail "hello_nn_static loads a shared libchorus"
echo "== chorus-run"
"$prefix/bin/chorus-run" -np 3 ./hello
echo "== torchrun-style environment (RANK WORLD_SIZE MASTER_ADDR MASTER_PORT), rank 0 starting 2 s late"
# two ports the kernel has just found free (a port derived from the pid may be another job's
# on a machine running other tests: its store then answers rank 1)
set -- $(python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
port=$1 port2=$2
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
    mpirun --allow-run-as-root --oversubscribe -np 2 -x MASTER_ADDR=127.0.0.1 -x MASTER_PORT=$port2 ./hello
else
    echo "== mpirun not installed (Debian package openmpi-bin): skipped"
fi

echo "== make install DESTDIR=$stage PREFIX=/usr"
mkdir -p "$stage/usr/lib"
echo "not Chorus's" > "$stage/usr/lib/other-package.txt"
mk install DESTDIR="$stage" PREFIX=/usr >/dev/null
[ "$(cd "$stage" && ls)" = usr ] || fail "install with DESTDIR wrote outside DESTDIR/usr: $(ls "$stage")"
got=$(listing "$stage/usr" | grep -v '^lib/other-package.txt$')
same "the staged install differs" "$got"
grep -qx "prefix=/usr" "$stage/usr/lib/pkgconfig/chorus.pc" || fail "chorus.pc is not written for /usr"
grep -q "$stage" "$stage/usr/lib/pkgconfig/chorus.pc" "$stage/usr/lib/pkgconfig/chorus_nn.pc" && fail "a pkg-config file names the stage"
cat "$stage/usr/lib/pkgconfig/chorus_nn.pc"
flags=$(PKG_CONFIG_PATH= PKG_CONFIG_SYSROOT_DIR="$stage" PKG_CONFIG_LIBDIR="$stage/usr/lib/pkgconfig" pkg-config --cflags --libs chorus_nn)
echo "pkg-config in the stage: $flags"
cc -std=c11 -Wall -Werror $san -o hello_nn_stage "$top/tests/external/hello_nn.c" $flags
LD_LIBRARY_PATH="$stage/usr/lib" ./hello_nn_stage

echo "== make uninstall (DESTDIR, then PREFIX)"
mk uninstall DESTDIR="$stage" PREFIX=/usr >/dev/null
left=$(listing "$stage")
[ "$left" = "usr/lib/other-package.txt" ] || fail "after uninstall the stage still holds: $left"
[ -d "$stage/usr/include/chorus" ] && fail "uninstall left include/chorus/"
rm -f hello hello_nn hello_nn_static hello_nn_stage
mk uninstall PREFIX="$prefix" >/dev/null
left=$(listing "$prefix")
[ -z "$left" ] || fail "after uninstall the prefix still holds: $left"
echo "install test ok"
