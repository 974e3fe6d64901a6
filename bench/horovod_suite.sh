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
# HOROVOD=1 runs each test also under Horovod itself, in the same invocation: first under
# `horovodrun --gloo -np $NP` with Horovod $HVD_VERSION (built from PyPI into $BUILD/hvd-venv
# by bench/hvd_venv.sh, or reused from there; never committed; HVD_VENV names another), then
# under chorus-run, and prints a table of both verdicts per test, both totals and the tests
# that Horovod passes and Chorus does not (the exit status then judges those alone). The
# Horovod venv is over Debian's python3-torch: with PYTHON of another torch the two columns
# run different torches (the header names both).
#
#   HOROVOD=1 HVD_SRC=/path/to/horovod bench/horovod_suite.sh
#
# Knobs: NP (2), TEST_TIMEOUT (seconds per test; default 120 for test_torch.py, 300 for the
# TensorFlow files, whose tests each start TensorFlow on every rank and run twice, in graph and
# eager mode: the heaviest took more than 120 s on the 2-core machine at load 20), HVD_SRC,
# HVD_VERSION, OUT (where the downloaded file and the per-test logs go; default a new
# temporary folder), BUILD (build). Arguments: test names to run (default all of them; names
# given are looked for in every file of HVD_TEST). Every test's output is kept in
# $OUT/logs/<file name without .py>/<test>.log (Horovod's in $OUT/hvd-logs/...). Exits 1 when
# a test failed or timed out (with HOROVOD=1: when Horovod passed a test that Chorus did not).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PYTHON=${PYTHON:-/usr/bin/python3}
NP=${NP:-2}
HVD_VERSION=${HVD_VERSION:-0.28.1}
HVD_TEST=${HVD_TEST:-test/parallel/test_torch.py}
case $HVD_TEST in *tensorflow*) TEST_TIMEOUT=${TEST_TIMEOUT:-300} ;; *) TEST_TIMEOUT=${TEST_TIMEOUT:-120} ;; esac
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/horovod-suite.XXXXXX")}
mkdir -p "$OUT/logs"
[ -x "$BUILD/bin/chorus-run" ] || { echo "horovod_suite.sh: $BUILD/bin/chorus-run not found; run make" >&2; exit 2; }
HOROVOD=${HOROVOD:-0}
if [ "$HOROVOD" = 1 ]; then
    case $HVD_TEST in *tensorflow*) echo "horovod_suite.sh: HOROVOD=1 is for test_torch.py" >&2; exit 2 ;; esac
    HVD_VENV=${HVD_VENV:-$BUILD/hvd-venv}
    . "$ROOT/bench/hvd_venv.sh"
    HOROVOD_VERSION=$HVD_VERSION PYTHON=/usr/bin/python3 hvd_venv "$HVD_VENV" || exit 2
    mkdir -p "$OUT/hvd-logs"
fi

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
# Horovod's test helpers import mock and cloudpickle; stand-ins only where they are missing.
# The Horovod side gets the stand-ins alone (its own horovod package comes from its venv).
hpp=${PYTHONPATH:-}
if [ "$HOROVOD" = 1 ] && ! "$HVD_VENV/bin/python" -c 'import mock, cloudpickle' 2>/dev/null; then
    hpp=$shim/fallback${hpp:+:$hpp}
fi
pp=$shim:$ROOT/python
"$PYTHON" -c 'import mock, cloudpickle' 2>/dev/null || pp=$pp:$shim/fallback
export PYTHONPATH="$pp${PYTHONPATH:+:$PYTHONPATH}"
export CHORUS_LIB="${CHORUS_LIB:-$BUILD/lib/libchorus.so}"
export PATH="$BUILD/bin:$PATH"
# Horovod's Keras layer is Keras 2's: with TensorFlow >= 2.16 a script that imports
# tensorflow.keras before horovod gets Keras 3 unless this is set (tf_keras is then tf.keras).
case $HVD_TEST in *tensorflow*) export TF_USE_LEGACY_KERAS=${TF_USE_LEGACY_KERAS:-1} ;; esac

# verdict LOG RC: PASS, FAIL, SKIP or TIMEOUT of one test's job (pytest's summary line is
# printed by every rank; a pass needs all NP of them). Horovod's TensorFlow tests run twice,
# in graph and in eager mode, as subtests: a test whose subtests all skipped ("1 passed, 2
# skipped") was skipped, not passed.
verdict() {
    if [ "$2" = 124 ] || [ "$2" = 137 ]; then
        echo TIMEOUT
    elif [ "$2" = 0 ] && { [ "$(grep -c ' subtests passed' "$1")" -ge "$NP" ] ||
                           { [ "$(grep -c ' passed' "$1")" -ge "$NP" ] &&
                             ! grep -q ' skipped' "$1"; }; }; then
        echo PASS
    elif [ "$2" = 0 ] && grep -q ' skipped' "$1"; then
        echo SKIP
    else
        echo FAIL
    fi
}
# count VERDICT VAR...: increments the counter of a verdict in the set named by the prefix
count() { eval "$2_$1=\$((\${$2_$1:-0} + 1))"; }
# totals SET LABEL
totals() {
    eval "p=\${$1_PASS:-0} f=\${$1_FAIL:-0} s=\${$1_SKIP:-0} h=\${$1_TIMEOUT:-0}"
    echo "horovod_suite.sh: $2: $p passed, $f failed, $s skipped, $h timed out (of $((p + f + s + h)))"
}
failed="" hvd_only=""
# run_file FILE [TEST ...]: every test of FILE (or those named), one job each (under Horovod
# too with HOROVOD=1); adds to the totals
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
    file=$(basename "$TESTS" .py)
    logs=$OUT/logs/$file
    mkdir -p "$logs"
    echo "horovod_suite.sh: $TESTS, np=$NP, $fw, $TEST_TIMEOUT s per test, logs in $logs"
    if [ "$HOROVOD" = 1 ]; then
        mkdir -p "$OUT/hvd-logs/$file"
        hfw=$("$HVD_VENV/bin/python" -c 'import torch; print("torch", torch.__version__)')
        echo "horovod_suite.sh: Horovod $HVD_VERSION ($HVD_VENV, horovodrun --gloo), $hfw; logs in $OUT/hvd-logs/$file"
        echo "horovod_suite.sh: $(date -u '+%F %T') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
        printf '%-52s %-8s %s\n' TEST HOROVOD CHORUS
    fi
    for t in $names; do
        hv=
        if [ "$HOROVOD" = 1 ]; then
            hlog=$OUT/hvd-logs/$file/$t.log
            PYTHONPATH=$hpp timeout -k 10 "$TEST_TIMEOUT" "$HVD_VENV/bin/horovodrun" --gloo \
                -np "$NP" -H "localhost:$NP" "$HVD_VENV/bin/python" -m pytest -q -rs \
                -p no:cacheprovider "$TESTS::$class::$t" > "$hlog" 2>&1
            hv=$(verdict "$hlog" $?)
            count "$hv" hvd
        fi
        log=$logs/$t.log
        timeout -k 10 "$TEST_TIMEOUT" chorus-run -np "$NP" "$PYTHON" -m pytest -q -rs \
            -p no:cacheprovider "$TESTS::$class::$t" > "$log" 2>&1
        v=$(verdict "$log" $?)
        count "$v" chorus
        count "$v" "f_$file"
        case $v in PASS | SKIP) ;; *) failed="$failed $file::$t" ;; esac
        if [ "$HOROVOD" = 1 ]; then
            [ "$hv" = PASS ] && [ "$v" != PASS ] && hvd_only="$hvd_only $file::$t"
            printf '%-52s %-8s %s\n' "$t" "$hv" "$v"
        else
            printf '%-8s %s\n' "$v" "$t"
        fi
    done
    totals "f_$file" "$file.py"
}
for f in $HVD_TEST; do
    run_file "$f" "$@"
done
if [ "$HOROVOD" = 1 ]; then
    totals hvd "Horovod $HVD_VERSION, horovodrun --gloo"
    totals chorus "chorus.torch, chorus-run"
    echo "horovod_suite.sh: load after: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "horovod_suite.sh: passed by Horovod, not by Chorus:${hvd_only:- none}"
    [ -n "$failed" ] && echo "horovod_suite.sh: not passed by Chorus:$failed"
    [ -z "$hvd_only" ]
else
    totals chorus "in all"
    [ -n "$failed" ] && echo "horovod_suite.sh: not passed:$failed"
    [ -z "$failed" ]
fi
