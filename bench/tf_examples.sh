#!/bin/sh
# tf_examples.sh - Horovod's own TensorFlow 2 examples, examples/tensorflow2/
# tensorflow2_keras_mnist.py and tensorflow2_mnist.py of Horovod HVD_VERSION (default 0.28.1),
# run under `chorus-run -np NP` with only their imports switched (`import horovod` becomes
# `import chorus as horovod`, `import horovod.tensorflow[.keras] as hvd` becomes
# `import chorus.tensorflow[.keras] as hvd`; the script prints the diff and checks that
# nothing else differs), then checks that every rank ends with the same weights.
#
# The examples call tf.keras.datasets.mnist.load_data, which would download MNIST. Instead a
# sitecustomize.py put on PYTHONPATH for the run (written into $OUT) has load_data's download
# return an .npz made from Fashion-MNIST (same format) in DATA (default Debian's
# /usr/share/datasets/fashion-mnist), and at exit writes a SHA-256 of every Keras model's
# weights to $OUT/<example>.weights.<rank>; the ranks' hashes must be equal. The examples are
# read from HVD_SRC (a Horovod source tree) or downloaded from GitHub into $OUT; they are
# never part of this repository.
#
#   PYTHON=~/.cache/chorus/tensorflow-venv/bin/python HVD_SRC=~/horovod bench/tf_examples.sh
#
# Knobs: NP (2), PYTHON (a Python with tensorflow-cpu and tf-keras, such as the venv of `make
# check-tensorflow`), BUILD (build), OUT (a new temporary folder), DATA, HVD_SRC, HVD_VERSION.
# STEPS=n EPOCHS=e shorten the runs (the examples' own lengths are 24 epochs of 500 steps and
# 10000 steps, divided by the ranks: hours on a small CPU machine): the step and epoch counts
# are then changed too, and the printed diff shows those lines. Exits 1 when a run fails or
# the ranks' weights differ.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PYTHON=${PYTHON:-$HOME/.cache/chorus/tensorflow-venv/bin/python}
NP=${NP:-2}
DATA=${DATA:-/usr/share/datasets/fashion-mnist}
HVD_VERSION=${HVD_VERSION:-0.28.1}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/tf-examples.XXXXXX")}
fail() { echo "tf_examples.sh: $*" >&2; exit 1; }
[ -x "$BUILD/bin/chorus-run" ] || fail "$BUILD/bin/chorus-run not found; run make"
"$PYTHON" -c 'import tensorflow, tf_keras' 2>/dev/null ||
    fail "$PYTHON has no tensorflow/tf_keras (make check-tensorflow makes such a venv)"
[ -f "$DATA/train-images-idx3-ubyte.gz" ] || fail "no Fashion-MNIST in $DATA (Debian: dataset-fashion-mnist)"
mkdir -p "$OUT/shim"

cat > "$OUT/shim/sitecustomize.py" <<'EOF'
"""MNIST's download answered from local Fashion-MNIST files; the weights' hash at exit."""
import atexit
import gzip
import hashlib
import os

import numpy as np

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
_OUT = os.environ["TF_EXAMPLES_OUT"]


def _npz():
    path = os.path.join(_OUT, "fashion-mnist.npz")
    if not os.path.exists(path):
        d = os.environ["TF_EXAMPLES_DATA"]

        def read(name, off, shape):
            with gzip.open(os.path.join(d, name)) as f:
                return np.frombuffer(f.read()[off:], dtype=np.uint8).reshape(shape)
        tmp = "%s.%d.npz" % (path[:-4], os.getpid())
        np.savez(tmp, x_train=read("train-images-idx3-ubyte.gz", 16, (-1, 28, 28)),
                 y_train=read("train-labels-idx1-ubyte.gz", 8, (-1,)),
                 x_test=read("t10k-images-idx3-ubyte.gz", 16, (-1, 28, 28)),
                 y_test=read("t10k-labels-idx1-ubyte.gz", 8, (-1,)))
        os.replace(tmp, path)
    return path


import tf_keras  # noqa: E402
import tf_keras.src.datasets.mnist as _mnist  # noqa: E402

_mnist.get_file = lambda *a, **k: _npz()


_MODELS = []  # every Keras model the example makes, kept alive until exit
_model_init = tf_keras.Model.__init__


def _keep(self, *args, **kwargs):
    _model_init(self, *args, **kwargs)
    _MODELS.append(self)


tf_keras.Model.__init__ = _keep


def _weights():
    models = [m for m in _MODELS if m.weights]
    h = hashlib.sha256()
    for m in models:
        for w in m.get_weights():
            h.update(np.ascontiguousarray(w).tobytes())
    with open(os.path.join(_OUT, "%s.weights.%s" % (os.environ["TF_EXAMPLES_NAME"],
                                                     os.environ.get("CHORUS_RANK", "0"))),
              "w") as f:
        f.write("%d models %s\n" % (len(models), h.hexdigest()))


atexit.register(_weights)
EOF

status=0
for ex in tensorflow2_keras_mnist tensorflow2_mnist; do
    rel=examples/tensorflow2/$ex.py
    if [ -n "${HVD_SRC:-}" ]; then
        orig=$HVD_SRC/$rel
    else
        orig=$OUT/$ex.orig.py
        [ -s "$orig" ] || curl -fsSL --retry 3 -o "$orig" \
            "https://raw.githubusercontent.com/horovod/horovod/v$HVD_VERSION/$rel" ||
            fail "cannot download $rel; set HVD_SRC to a Horovod checkout"
    fi
    [ -f "$orig" ] || fail "$orig not found"
    sed -e 's/^import horovod$/import chorus as horovod/' \
        -e 's/^import horovod\.tensorflow\.keras as hvd$/import chorus.tensorflow.keras as hvd/' \
        -e 's/^import horovod\.tensorflow as hvd$/import chorus.tensorflow as hvd/' \
        "$orig" > "$OUT/$ex.py"
    if [ -n "${STEPS:-}" ]; then
        sed -i -e "s|steps_per_epoch=500 // hvd.size()|steps_per_epoch=$STEPS // hvd.size()|" \
            -e "s|epochs=24|epochs=${EPOCHS:-24}|" \
            -e "s|dataset.take(10000 // hvd.size())|dataset.take($STEPS // hvd.size())|" "$OUT/$ex.py"
    fi
    echo "== $ex: diff against Horovod's"
    diff "$orig" "$OUT/$ex.py"
    changed=$(diff "$orig" "$OUT/$ex.py" | grep -c '^>')
    [ -n "${STEPS:-}" ] || [ "$changed" = 2 ] || fail "$ex: expected the two import lines changed, $changed lines differ"
    rm -f "$OUT/$ex.weights."*
    t0=$(date +%s)
    (cd "$OUT" && TF_EXAMPLES_OUT=$OUT TF_EXAMPLES_DATA=$DATA TF_EXAMPLES_NAME=$ex \
        PYTHONPATH=$OUT/shim:$ROOT/python CHORUS_LIB=$BUILD/lib/libchorus.so \
        PATH=$BUILD/bin:$PATH chorus-run -np "$NP" "$PYTHON" "$OUT/$ex.py") > "$OUT/$ex.log" 2>&1
    rc=$?
    grep -v 'WARNING\|I0000\|E0000\|oneDNN\|cuda\|rebuild TensorFlow\|AVX' "$OUT/$ex.log" | tail -n 6
    echo "$ex: exit $rc after $(( $(date +%s) - t0 )) s; weights per rank:"
    cat "$OUT/$ex.weights."* 2>/dev/null
    n=$(cat "$OUT/$ex.weights."* 2>/dev/null | wc -l)
    same=$(cat "$OUT/$ex.weights."* 2>/dev/null | sort -u | wc -l)
    if [ "$rc" = 0 ] && [ "$n" = "$NP" ] && [ "$same" = 1 ] && ! grep -q "^0 models" "$OUT/$ex.weights.0"; then
        echo "$ex: PASS, every rank ends with the same weights"
    else
        echo "$ex: FAIL"; status=1
    fi
done
exit $status
