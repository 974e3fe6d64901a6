#!/bin/sh
# horovod_elastic_mnist.sh - Horovod's own elastic example,
# examples/elastic/pytorch/pytorch_mnist_elastic.py of Horovod HVD_VERSION (default 0.28.1),
# run under `chorus-run --elastic -np NP` with one line changed: `import horovod.torch as hvd`
# becomes `import chorus.torch as hvd` (the script checks that nothing else differs). The
# example trains with hvd.elastic.run, then calls hvd.allreduce in its test() after run() has
# returned.
#
# What the example needs besides Chorus: torchvision and filelock (Debian: python3-torchvision
# python3-filelock), and MNIST, which torchvision would download. Instead its --data-dir gets
# local files in MNIST's layout (<dir>/MNIST/raw/*-ubyte): Fashion-MNIST, which has the same
# format, from DATA (default /usr/share/datasets/fashion-mnist), cut to TRAIN_N training and
# TEST_N test images (defaults 2000 and 1000; 0 keeps them all) so that a run takes a minute.
# The example file is read from HVD_SRC (a Horovod source tree) or downloaded from GitHub into
# $OUT; it is never part of this repository.
#
#   bench/horovod_elastic_mnist.sh                 HVD_SRC=~/horovod EPOCHS=2 NP=2 bench/...
#
# Knobs: NP (2), EPOCHS (1), PYTHON (/usr/bin/python3), BUILD (build), OUT (a new temporary
# folder). Exits 0 when the job exits 0 and rank 0 printed the test set's accuracy.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PYTHON=${PYTHON:-/usr/bin/python3}
NP=${NP:-2}
EPOCHS=${EPOCHS:-1}
TRAIN_N=${TRAIN_N:-2000}
TEST_N=${TEST_N:-1000}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
HVD_VERSION=${HVD_VERSION:-0.28.1}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/horovod-elastic.XXXXXX")}
fail() { echo "horovod_elastic_mnist.sh: $*" >&2; exit 1; }
[ -x "$BUILD/bin/chorus-run" ] || fail "$BUILD/bin/chorus-run not found; run make"
"$PYTHON" -c 'import torchvision, filelock' 2>/dev/null ||
    fail "the example needs torchvision and filelock (Debian: apt install python3-torchvision python3-filelock)"

rel=examples/elastic/pytorch/pytorch_mnist_elastic.py
if [ -n "${HVD_SRC:-}" ]; then
    orig=$HVD_SRC/$rel
else
    orig=$OUT/horovod-$HVD_VERSION/$rel
    mkdir -p "$(dirname "$orig")"
    [ -s "$orig" ] || curl -fsSL --retry 3 -o "$orig" \
        "https://raw.githubusercontent.com/horovod/horovod/v$HVD_VERSION/$rel" ||
        fail "cannot download Horovod's $rel; set HVD_SRC to a Horovod checkout"
fi
[ -f "$orig" ] || fail "$orig not found"
ex=$OUT/pytorch_mnist_elastic.py
sed 's/^import horovod\.torch as hvd$/import chorus.torch as hvd/' "$orig" > "$ex"
changed=$(diff "$orig" "$ex" | grep -c '^[<>]')
[ "$changed" = 2 ] || fail "expected to change one line (the import) of $orig, changed $changed"

# MNIST's raw files, as torchvision finds them without downloading
"$PYTHON" - "$DATA" "$OUT/data/MNIST/raw" "$TRAIN_N" "$TEST_N" <<'PY' || fail "cannot write the data"
import gzip, os, struct, sys
src, dst, ntrain, ntest = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
os.makedirs(dst, exist_ok=True)
for name, keep in [("train-images-idx3-ubyte", ntrain), ("train-labels-idx1-ubyte", ntrain),
                   ("t10k-images-idx3-ubyte", ntest), ("t10k-labels-idx1-ubyte", ntest)]:
    raw = gzip.open(os.path.join(src, name + ".gz")).read()
    ndim = raw[3]
    dims = list(struct.unpack(">%dI" % ndim, raw[4:4 + 4 * ndim]))
    item = 1
    for d in dims[1:]:
        item *= d
    n = dims[0] if keep <= 0 else min(keep, dims[0])
    head = raw[:4] + struct.pack(">%dI" % ndim, n, *dims[1:])
    body = raw[4 + 4 * ndim:4 + 4 * ndim + n * item]
    with open(os.path.join(dst, name), "wb") as f:
        f.write(head + body)
PY

export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export CHORUS_LIB="${CHORUS_LIB:-$BUILD/lib/libchorus.so}"
echo "horovod_elastic_mnist.sh: $orig (import changed), np=$NP, $EPOCHS epoch(s), $TRAIN_N/$TEST_N images (0: all) of $DATA, in $OUT"
cd "$OUT" || exit 1
"$BUILD/bin/chorus-run" --elastic -np "$NP" "$PYTHON" "$ex" --epochs "$EPOCHS" \
    --data-dir "$OUT/data" > "$OUT/log" 2>&1
rc=$?
grep -v "Train Epoch" "$OUT/log" | tail -20
[ $rc = 0 ] || fail "the job exited with status $rc (log: $OUT/log)"
grep -q "Test set: Average loss: [0-9.]*, Accuracy: [0-9.]*%" "$OUT/log" ||
    fail "rank 0 did not print the test set's accuracy (log: $OUT/log)"
grep -q "replace\|worker left\|workers left" "$OUT/log" && fail "workers failed or were replaced (log: $OUT/log)"
echo "horovod_elastic_mnist.sh: ok: the example trained, returned from hvd.elastic.run and averaged its test metrics"
