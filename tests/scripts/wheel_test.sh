#!/bin/sh
# The Python wheel (make wheel): tagged for this platform because it carries libchorus.so and
# the chorus-run launcher; pip installs it offline into a venv, and the launcher it puts on the
# venv's PATH starts two ranks that find the bundled library.
set -u
BUILD=${BUILD:-build}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
version=$("$BUILD/bin/chorus-run" --version | awk '{print $2}')

make --no-print-directory -s wheel BUILD="$BUILD" DIST="$tmp/dist" CHORUS_SKIP_DEPS=1 || fail "make wheel"
whl=$(ls "$tmp"/dist/*.whl) || fail "no wheel in $tmp/dist"
name=$(basename "$whl")
echo "wheel: $name"
arch=$(uname -m)
# Tagged for this platform (machine code, no Python ABI) unless the torch.distributed backend,
# a CPython extension, was built: then for this interpreter too, and the wheel carries it.
if [ -f "$BUILD/lib/_chorus_torchdist.so" ]; then
    py=$(/usr/bin/python3 -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
    want="chorus-$version-$py-$py-linux_$arch.whl"
else
    want="chorus-$version-py3-none-linux_$arch.whl"
fi
[ "$name" = "$want" ] || fail "$name is not $want (a platform wheel)"
unzip -p "$whl" "chorus-$version.dist-info/WHEEL" > "$tmp/WHEEL"
cat "$tmp/WHEEL"
grep -qx "Root-Is-Purelib: false" "$tmp/WHEEL" || fail "the wheel says it is pure Python"
zipinfo "$whl" > "$tmp/list"
grep -q " chorus/libchorus.so$" "$tmp/list" || fail "libchorus.so is not in the wheel"
[ ! -f "$BUILD/lib/_chorus_torchdist.so" ] || grep -q " chorus/_chorus_torchdist.so$" "$tmp/list" ||
    fail "the torch.distributed backend was built but is not in the wheel"
grep -q "^-rwxr-xr-x .* chorus-$version.data/scripts/chorus-run$" "$tmp/list" ||
    fail "the executable chorus-run is not in the wheel's scripts"

/usr/bin/python3 -m venv --system-site-packages "$tmp/venv" || fail "python3 -m venv"
env -u PYTHONPATH "$tmp/venv/bin/python" -m pip install -q --no-index --no-deps "$whl" ||
    fail "pip install $name"
out=$(PATH="$tmp/venv/bin:/usr/bin:/bin" chorus-run --version) || fail "chorus-run --version from the venv"
echo "$out"
[ "$(PATH="$tmp/venv/bin:/usr/bin:/bin" command -v chorus-run)" = "$tmp/venv/bin/chorus-run" ] ||
    fail "chorus-run on the venv's PATH is not the one pip installed"
[ "$out" = "chorus-run $version" ] || fail "chorus-run --version printed '$out'"
cd "$tmp"
out=$(env -u PYTHONPATH -u CHORUS_LIB PATH="$tmp/venv/bin:/usr/bin:/bin" chorus-run -np 2 python -c \
    "import chorus; chorus.init(); import numpy as np; print(chorus.lib_path, chorus.allreduce(np.ones(1), op=chorus.Sum)[0])" 2>&1) ||
    { echo "$out"; fail "two ranks through the installed launcher"; }
echo "$out"
[ "$(echo "$out" | grep -c "$tmp/venv/.*site-packages/chorus/libchorus.so 2.0")" = 2 ] ||
    fail "the ranks did not use the wheel's library or did not sum to 2"
echo "wheel test ok"
