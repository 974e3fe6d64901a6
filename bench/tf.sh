#!/bin/sh
# tf.sh - Keras training throughput on 2 workers of this machine: the MLP 784-512-256-10
# (bench/tf_mlp.py, synthetic data, 64 samples per worker per step, model.fit) with
# chorus.tensorflow.keras.DistributedOptimizer under `chorus-run -np 2`, against TensorFlow's
# own tf.distribute.MultiWorkerMirroredStrategy (two workers on loopback through TF_CONFIG,
# its gRPC ring collectives). ROUNDS rounds, the two alternating in each; prints every
# round's samples/s (summed over the workers) and the median and range of each, and the ratio
# of the medians, with the load average the run started at.
#
#   bench/tf.sh      ROUNDS=5 STEPS=300 PYTHON=<venv python> bench/tf.sh
#
# Knobs: ROUNDS (3), STEPS (200 timed steps after WARMUP=20), PYTHON (a Python with
# tensorflow-cpu and tf-keras; default the venv of `make check-tensorflow` in
# ~/.cache/chorus/tensorflow-venv), BUILD (build).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PYTHON=${PYTHON:-$HOME/.cache/chorus/tensorflow-venv/bin/python}
ROUNDS=${ROUNDS:-3}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/tf-bench.XXXXXX")
[ -x "$BUILD/bin/chorus-run" ] || { echo "tf.sh: $BUILD/bin/chorus-run not found; run make" >&2; exit 2; }
"$PYTHON" -c 'import tensorflow, tf_keras' 2>/dev/null || { echo "tf.sh: $PYTHON has no tensorflow/tf_keras" >&2; exit 2; }
export TF_CPP_MIN_LOG_LEVEL=2 TF_USE_LEGACY_KERAS=1
args="--steps $STEPS --warmup $WARMUP"

free_ports() {
    "$PYTHON" -c 'import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))'
}

run_chorus() {
    PYTHONPATH=$ROOT/python CHORUS_LIB=$BUILD/lib/libchorus.so PATH=$BUILD/bin:$PATH \
        chorus-run -np 2 "$PYTHON" "$ROOT/bench/tf_mlp.py" --mode chorus $args 2> "$OUT/err" |
        sed -n 's/^\[0\] chorus \([0-9.]*\) .*/\1/p'
}

run_mwms() {
    set -- $(free_ports)
    cluster="{\"worker\": [\"127.0.0.1:$1\", \"127.0.0.1:$2\"]}"
    TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": 1}}" \
        "$PYTHON" "$ROOT/bench/tf_mlp.py" --mode mwms $args > /dev/null 2> "$OUT/err1" &
    pid=$!
    TF_CONFIG="{\"cluster\": $cluster, \"task\": {\"type\": \"worker\", \"index\": 0}}" \
        "$PYTHON" "$ROOT/bench/tf_mlp.py" --mode mwms $args 2> "$OUT/err0" |
        sed -n 's/^mwms \([0-9.]*\) .*/\1/p'
    wait $pid
}

echo "tf.sh: MLP 784-512-256-10, 64 samples/worker/step, 2 workers, $STEPS steps after $WARMUP, $ROUNDS rounds; $("$PYTHON" -c 'import tensorflow as t; print("tensorflow", t.__version__)' 2>/dev/null); $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
: > "$OUT/chorus"; : > "$OUT/mwms"
for r in $(seq "$ROUNDS"); do
    c=$(run_chorus); m=$(run_mwms)
    [ -n "$c" ] || { echo "tf.sh: the chorus run failed:"; tail -n 5 "$OUT/err"; exit 1; }
    [ -n "$m" ] || { echo "tf.sh: the MultiWorkerMirroredStrategy run failed:"; tail -n 5 "$OUT/err0"; exit 1; }
    echo "$c" >> "$OUT/chorus"; echo "$m" >> "$OUT/mwms"
    echo "round $r: chorus $c samples/s, MultiWorkerMirroredStrategy $m samples/s"
done
"$PYTHON" - "$OUT/chorus" "$OUT/mwms" <<'PY'
import statistics, sys
c, m = ([float(v) for v in open(f)] for f in sys.argv[1:3])
for name, v in (("chorus.tensorflow.keras", c), ("MultiWorkerMirroredStrategy", m)):
    print("%-28s median %8.1f samples/s  (min %.1f, max %.1f, %d rounds)"
          % (name, statistics.median(v), min(v), max(v), len(v)))
print("ratio of the medians: %.2fx" % (statistics.median(c) / statistics.median(m)))
PY
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
rm -rf "$OUT"
