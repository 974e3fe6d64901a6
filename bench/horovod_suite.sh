#!/bin/sh
# horovod_suite.sh - Horovod's own test files (HVD_TEST, default
# test/parallel/test_torch.py, of Horovod HVD_VERSION, default 0.28.1; several files separated
# by spaces) run against Chorus: one 2-rank `chorus-run` job per test, each under a deadline,
# a verdict per test (PASS, FAIL, SKIP, TIMEOUT), then the counts of passed, failed, skipped
# and timed-out tests per file and in all. HVD_TEST=test/parallel/test_tensorflow.py and
# test/parallel/test_tensorflow2_keras.py run Horovod's TensorFlow and Keras files against
# chorus.tensorflow (PYTHON: a Python with tensorflow-cpu and tf-keras, such as the venv of
# `make check-tensorflow`):
#
#   HVD_SRC=~/horovod PYTHON=~/.cache/chorus/tensorflow-venv/bin/python \
#       HVD_TEST="test/parallel/test_tensorflow.py test/parallel/test_tensorflow2_keras.py" \
#       bench/horovod_suite.sh
#
# Horovod's test file is not part of this repository and is not in Horovod's PyPI sdist: it
# is read from HVD_SRC (a checkout of Horovod's source, holding test/parallel/test_torch.py and
# test/utils/common.py) or else downloaded from GitHub at the tag v$HVD_VERSION into $OUT.
# `import horovod.torch as hvd` in it gives chorus.torch itself: bench/horovod_shim/ is put
# first on PYTHONPATH (horovod.torch is an alias of chorus.torch, horovod.tensorflow of
# chorus.tensorflow, horovod.keras of chorus.keras; see the shim's files).
#
#   bench/horovod_suite.sh                              Debian's python3-torch
#   PYTHON=/path/to/venv/bin/python bench/horovod_suite.sh    another torch (no build needed:
#                                                       chorus.torch is Python over libchorus)
#   HVD_SRC=~/horovod bench/horovod_suite.sh test_horovod_allreduce test_horovod_join
#
# Knobs: NP (2), TEST_TIMEOUT (seconds per test; default 120 for test_torch.py, 300 for the
# TensorFlow files, whose tests each start TensorFlow on every rank and run twice, in graph and
# eager mode: the heaviest took more than 120 s on the 2-core machine at load 20), HVD_SRC,
# HVD_VERSION, OUT
# (where the downloaded file and the per-test logs go; default a new temporary folder),
# BUILD (build). Arguments: test names to run (default all of them; names given are looked
# for in every file of HVD_TEST). Every test's output is kept in
# $OUT/logs/<file name without .py>/<test>.log. Exits 1 when a test failed or timed out.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PYTHON=${PYTHON:-/usr/bin/python3}
NP=${NP:-2}
case $HVD_TEST in *tensorflow*) TEST_TIMEOUT=${TEST_TIMEOUT:-300} ;; *) TEST_TIMEOUT=${TEST_TIMEOUT:-120} ;; esac
HVD_VERSION=${HVD_VERSION:-0.28.1}
HVD_TEST=${HVD_TEST:-test/parallel/test_torch.py}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/horovod-suite.XXXXXX")}
mkdir -p "$OUT/logs"
[ -x "$BUILD/bin/chorus-run" ] || { echo "horovod_suite.sh: $BUILD/bin/chorus-run not found; run make" >&2; exit 2; }

if [ -z "${HVD_SRC:-}" ]; then
    HVD_SRC=$OUT/horovod-$HVD_VERSION
    url=https://raw.githubusercontent.com/horovod/horovod/v$HVD_VERSION
    for f in $HVD_TEST test/utils/common.py test/parallel/base_test_tensorflow.py; do
        [ -s "$HVD_SRC/$f" ] && continue
        mkdir -p "$(dirname "$HVD_SRC/$f")"
        curl -fsSL --retry 3 -o "$HVD_SRC/$f" "$url/$f" || {
            echo "horovod_suite.sh: cannot download $url/$f; set HVD_SRC to a Horovod checkout" >&2
            exit 2
        }
    done
fi
for f in $HVD_TEST; do
    [ -f "$HVD_SRC/$f" ] || { echo "horovod_suite.sh: $HVD_SRC/$f not found" >&2; exit 2; }
done

shim=$ROOT/bench/horovod_shim
pp=$shim:$ROOT/python
# Horovod's test helpers import mock and cloudpickle; stand-ins only where they are missing.
"$PYTHON" -c 'import mock, cloudpickle' 2>/dev/null || pp=$pp:$shim/fallback
export PYTHONPATH="$pp${PYTHONPATH:+:$PYTHONPATH}"
export CHORUS_LIB="${CHORUS_LIB:-$BUILD/lib/libchorus.so}"
export PATH="$BUILD/bin:$PATH"
# Horovod's Keras layer is Keras 2's: with TensorFlow >= 2.16 a script that imports
# tensorflow.keras before horovod gets Keras 3 unless this is set (tf_keras is then tf.keras).
case $HVD_TEST in *tensorflow*) export TF_USE_LEGACY_KERAS=${TF_USE_LEGACY_KERAS:-1} ;; esac

# run_file FILE [TEST ...]: every test of FILE (or those named), one job each; adds to the
# totals
pass=0 fail=0 skip=0 hang=0 failed=""
run_file() {
    TESTS=$HVD_SRC/$1
    shift
    if [ $# -gt 0 ]; then
        names=$*
    else
        # pytest's own list (it has the names that parameterized.expand makes), else the defs
        names=$("$PYTHON" -m pytest -q --collect-only -p no:cacheprovider "$TESTS" 2>/dev/null |
                sed -n 's/^.*::\(test_[A-Za-z0-9_]*\)$/\1/p')
        [ -n "$names" ] || names=$(sed -n 's/^    def \(test_[A-Za-z0-9_]*\)(.*/\1/p' "$TESTS")
    fi
    # the file's test class (TorchTests, TensorFlowTests, Tf2KerasTests)
    class=$(sed -n 's/^class \([A-Za-z0-9_]*Tests\)(.*/\1/p' "$TESTS" | tail -n 1)
    case $TESTS in
        *tensorflow*) fw=$("$PYTHON" -c 'import tensorflow as t; print("tensorflow", t.__version__)' 2>/dev/null) ;;
        *) fw=$("$PYTHON" -c 'import torch; print("torch", torch.__version__)') ;;
    esac
    logs=$OUT/logs/$(basename "$TESTS" .py)
    mkdir -p "$logs"
    echo "horovod_suite.sh: $TESTS, np=$NP, $fw, $TEST_TIMEOUT s per test, logs in $logs"
    p0=$pass f0=$fail s0=$skip h0=$hang
    for t in $names; do
        log=$logs/$t.log
        # each rank runs one test of the file; pytest's summary line is printed by every rank
        timeout -k 10 "$TEST_TIMEOUT" chorus-run -np "$NP" "$PYTHON" -m pytest -q -rs \
            -p no:cacheprovider "$TESTS::$class::$t" > "$log" 2>&1
        rc=$?
        # Horovod's TensorFlow tests run twice, in graph and in eager mode, as subtests: a
        # test whose subtests all skipped ("1 passed, 2 skipped") was skipped, not passed
        if [ $rc = 124 ] || [ $rc = 137 ]; then
            verdict=TIMEOUT hang=$((hang + 1)) failed="$failed $(basename "$TESTS")::$t"
        elif [ $rc = 0 ] && { [ "$(grep -c ' subtests passed' "$log")" -ge "$NP" ] ||
                              { [ "$(grep -c ' passed' "$log")" -ge "$NP" ] &&
                                ! grep -q ' skipped' "$log"; }; }; then
            verdict=PASS pass=$((pass + 1))
        elif [ $rc = 0 ] && grep -q ' skipped' "$log"; then
            verdict=SKIP skip=$((skip + 1))
        else
            verdict=FAIL fail=$((fail + 1)) failed="$failed $(basename "$TESTS")::$t"
        fi
        printf '%-8s %s\n' "$verdict" "$t"
    done
    echo "horovod_suite.sh: $(basename "$TESTS"): $((pass - p0)) passed, $((fail - f0)) failed," \
        "$((skip - s0)) skipped, $((hang - h0)) timed out (of $((pass + fail + skip + hang - p0 - f0 - s0 - h0)))"
}

for f in $HVD_TEST; do
    run_file "$f" "$@"
done
echo "horovod_suite.sh: in all: $pass passed, $fail failed, $skip skipped, $hang timed out (of $((pass + fail + skip + hang)))"
[ -n "$failed" ] && echo "horovod_suite.sh: not passed:$failed"
[ -z "$failed" ]
