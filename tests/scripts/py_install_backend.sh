#!/bin/sh
# What `pip install ./python` does about the torch.distributed backend, from a copy of the
# source tree without a build (so nothing prebuilt is bundled and the backend is compiled):
#   * with torch installed and a compiler that fails, pip fails with the compiler's error
#     and writes no wheel (never a package silently without the backend);
#   * without torch the package builds without the backend and says so, unless
#     CHORUS_WITH_TORCH=1 asks for it, which makes that an error naming the reason.
set -u
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
mkdir -p "$tmp/src"
cp -r python include "$tmp/src/" || fail "copying the source tree"
rm -rf "$tmp/src/python/build"
export CHORUS_LIB="$PWD/$BUILD/lib/libchorus.so" CHORUS_RUN="$PWD/$BUILD/bin/chorus-run"
unset PYTHONPATH

# Torch (Debian's, with its headers) is there; the compiler fails.
out=$(cd "$tmp/src" && CXX="g++ -fno-such-flag" /usr/bin/python3 -m pip wheel --no-build-isolation \
    --no-index --no-deps -w "$tmp/dist" ./python 2>&1)
rc=$?
echo "$out" | tail -n 8
[ $rc != 0 ] || fail "pip wheel exited 0 although the backend failed to compile"
echo "$out" | grep -q "error: unrecognized command-line option .-fno-such-flag" ||
    fail "pip's output does not carry the compiler's error"
echo "$out" | grep -q "chorus: the torch.distributed backend failed to compile (exit status 1, the compiler's error is above); set CHORUS_WITHOUT_TORCH=1 to install the package without it" ||
    fail "no message saying the backend failed to compile"
[ -z "$(ls "$tmp/dist" 2> /dev/null)" ] || fail "a wheel was written: $(ls "$tmp/dist")"

# No torch: a venv without the system's packages.
/usr/bin/python3 -m venv "$tmp/venv" || fail "python3 -m venv"
rm -rf "$tmp/src/python/build"
out=$(cd "$tmp/src/python" && "$tmp/venv/bin/python" setup.py -q build 2>&1) ||
    { echo "$out"; fail "setup.py build without torch"; }
echo "$out" | grep "torch.distributed"
echo "$out" | grep -q "chorus: no torch.distributed backend: torch is not importable by $tmp/venv/bin/python .*; install torch first to have the backend" ||
    fail "no message saying the backend is left out for want of torch"
ls "$tmp"/src/python/build/lib*/chorus/libchorus.so > /dev/null || fail "libchorus.so was not bundled"
[ -z "$(ls "$tmp"/src/python/build/lib*/chorus/_chorus_torchdist.so 2> /dev/null)" ] ||
    fail "a backend appeared without torch"
out=$(cd "$tmp/src/python" && CHORUS_WITH_TORCH=1 "$tmp/venv/bin/python" setup.py -q build 2>&1)
rc=$?
echo "$out" | tail -n 1
[ $rc != 0 ] || fail "CHORUS_WITH_TORCH=1 without torch exited 0"
echo "$out" | grep -q "chorus: cannot build the torch.distributed backend: torch is not importable by .*; set CHORUS_WITHOUT_TORCH=1 to install the package without it" ||
    fail "CHORUS_WITH_TORCH=1 without torch did not say why it failed"
echo "install backend test ok"
