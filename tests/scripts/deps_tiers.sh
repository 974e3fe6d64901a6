#!/bin/sh
# The Debian packages each target needs, by tier. On a machine where only a compiler and
# libsodium are installed (a dpkg-query on PATH that knows just those), plain `make` run by a
# user who is not root builds the library and the tools and tries to install nothing; the
# trainer, the tests and the Python package name exactly what they miss with the apt-get
# command; as root the missing ones are installed (an apt-get on PATH records the call);
# CHORUS_SKIP_DEPS=1 skips the check. Runs in a copy of the tree that starts from this
# build's objects, so make only archives and links; the machine with only the core tier has
# no Python either, so plain make skips the torch.distributed extension there, saying why
# (compiling it against this machine's torch would be most of the test's time on a busy
# machine, and is not what a user with the core tier sees).
set -u
BUILD=${BUILD:-build}
top=$PWD
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
CORE="gcc make libc6-dev libsodium-dev"

mkdir -p "$tmp/fakebin" "$tmp/tree/b"
cat > "$tmp/fakebin/dpkg-query" <<'EOF'
#!/bin/sh
# dpkg-query -W -f='${Status}' PACKAGE, for a machine holding only $FAKE_INSTALLED ("all": any)
for a in "$@"; do pkg=$a; done
for p in $FAKE_INSTALLED; do
    if [ "$p" = "$pkg" ] || [ "$p" = all ]; then printf 'install ok installed'; exit 0; fi
done
echo "dpkg-query: no packages found matching $pkg" >&2
exit 1
EOF
cat > "$tmp/fakebin/apt-get" <<EOF
#!/bin/sh
echo "apt-get \$*" >> "$tmp/apt.log"
EOF
chmod 755 "$tmp/fakebin/dpkg-query" "$tmp/fakebin/apt-get"
touch "$tmp/apt.log"
cp -a Makefile mk src include tools nn python "$tmp/tree/"
[ -d "$BUILD/obj" ] && cp -a "$BUILD/obj" "$tmp/tree/b/"
chmod -R a+rwX "$tmp"

# as_user CMD...: runs CMD in the copy as a user who is not root (nobody, when this is root)
as_user() {
    if [ "$(id -u)" = 0 ]; then
        setpriv --reuid=65534 --regid=65534 --clear-groups -- "$@"
    else
        "$@"
    fi
}
# mk WHO INSTALLED ARGS...: make in the copy with that dpkg view (a Python, $PYTHON, only
# when everything is installed), as a make of its own (none of the enclosing make's flags);
# output in $tmp/out
mk() {
    who=$1 inst=$2
    shift 2
    py=/usr/bin/python3
    [ "$inst" = all ] || py=$tmp/no-python/python3
    (cd "$tmp/tree" && $who env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL HOME="$tmp" \
        PATH="$tmp/fakebin:$PATH" FAKE_INSTALLED="$inst" \
        make --no-print-directory BUILD=b SANITIZE="${SANITIZE:-}" PYTHON="$py" "$@") > "$tmp/out" 2>&1
}

echo "== not root, only a compiler and libsodium: make -j2"
mk as_user "$CORE" -j2
rc=$?
grep "deps:" "$tmp/out"
[ $rc = 0 ] || { tail -20 "$tmp/out"; fail "make as a user with only $CORE failed"; }
grep -q "deps:" "$tmp/out" && fail "make checked or asked for more than the core tier"
[ -s "$tmp/apt.log" ] && fail "make tried to install: $(cat "$tmp/apt.log")"
for f in lib/libchorus.a lib/libchorus.so bin/chorus-run bin/chorus-bench lib/pkgconfig/chorus.pc; do
    [ -f "$tmp/tree/b/$f" ] || fail "make did not build $f"
done
[ -e "$tmp/tree/b/bin/chorus-train" ] && fail "plain make built the trainer's tier"
if [ -z "${SANITIZE:-}" ]; then # (a sanitized build has no torch.distributed extension)
    grep "^torchdist: skipped" "$tmp/out" || fail "plain make without Python did not skip the torch.distributed extension, saying why"
fi
[ -e "$tmp/tree/b/lib/_chorus_torchdist.so" ] && fail "plain make without Python built the torch.distributed extension"
needed=$(readelf -d "$tmp/tree/b/lib/libchorus.so" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "libchorus.so needs: $needed"
for lib in $needed; do
    case "$lib" in libsodium.so.* | libc.so.* | libm.so.* | librt.so.* | libpthread.so.* | ld-linux*) ;;
    libasan.so.* | libubsan.so.* | libtsan.so.*) [ -n "${SANITIZE:-}" ] || fail "libchorus.so links $lib" ;;
    *) fail "libchorus.so links $lib, outside the core tier" ;; esac
done
echo "$needed" | grep -q libsodium || fail "libchorus.so does not link libsodium (the docs say it does)"

echo "== not root, same machine: make trainer"
mk as_user "$CORE" trainer && fail "make trainer succeeded without OpenBLAS and zlib"
cat "$tmp/out"
grep -qx "deps: libchorus_nn and chorus-train (make trainer): these Debian packages are not installed: zlib1g-dev libopenblas-dev" "$tmp/out" ||
    fail "make trainer did not name exactly its missing packages"
grep -qx "deps: install them with:  sudo apt-get install -y zlib1g-dev libopenblas-dev" "$tmp/out" ||
    fail "make trainer did not give the apt-get command"
grep -q "CHORUS_SKIP_DEPS=1" "$tmp/out" || fail "the message does not mention CHORUS_SKIP_DEPS"

echo "== not root, same machine: make test, make wheel"
mk as_user "$CORE" test && fail "make test succeeded without its packages"
head -1 "$tmp/out"
for p in python3-torch python3-pytest openmpi-bin pkg-config zlib1g-dev libopenblas-dev dataset-fashion-mnist fortunes; do
    grep -q "^deps: the tests (make test): these Debian packages are not installed:.* $p\( \|$\)" "$tmp/out" ||
        fail "make test does not name $p"
done
grep -q "^deps: the tests.* libsodium-dev" "$tmp/out" && fail "make test names an installed package"
mk as_user "$CORE" wheel && fail "make wheel succeeded without Python"
head -1 "$tmp/out"
grep -qx "deps: the Python package (make python-install, make wheel): these Debian packages are not installed: python3 python3-numpy python3-setuptools python3-wheel python3-pip python3-venv" "$tmp/out" ||
    fail "make wheel did not name exactly its missing packages"
[ -s "$tmp/apt.log" ] && fail "a user who is not root made make call apt-get: $(cat "$tmp/apt.log")"

echo "== not root, everything installed: make trainer"
mk as_user all trainer || { tail -20 "$tmp/out"; fail "make trainer with every package installed"; }
grep "deps:" "$tmp/out" && fail "make trainer printed a dependency message with everything installed"
[ -s "$tmp/apt.log" ] && fail "make tried to install with everything installed"

echo "== CHORUS_SKIP_DEPS=1, nothing installed: no check"
mk as_user "" CHORUS_SKIP_DEPS=1 deps deps-core deps-nn deps-python || { cat "$tmp/out"; fail "CHORUS_SKIP_DEPS=1 did not skip"; }
grep "deps:" "$tmp/out" && fail "CHORUS_SKIP_DEPS=1 still checked"

if [ "$(id -u)" = 0 ]; then
    echo "== root, only a compiler and libsodium: make deps-nn installs what the trainer misses"
    mk "" "$CORE" deps-nn || { cat "$tmp/out"; fail "make deps-nn as root"; }
    cat "$tmp/out" "$tmp/apt.log"
    grep -qx "apt-get -o DPkg::Lock::Timeout=600 install -y -q zlib1g-dev libopenblas-dev" "$tmp/apt.log" ||
        fail "root's make deps-nn did not apt-get install exactly zlib1g-dev libopenblas-dev"
fi
echo "deps tiers ok"
