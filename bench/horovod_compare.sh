#!/bin/sh
# horovod_compare.sh - the same Horovod-API training script (bench/hvd_train.py: the MLP
# 784-512-256-10, 64 samples per rank per step, hvd.DistributedOptimizer) under Horovod 0.28.1
# itself, over Gloo (horovodrun --gloo) and over MPI (horovodrun --mpi, Open MPI), and under
# chorus-run with chorus.torch, np=2, in one invocation: samples per second, the median and
# spread (min-max) of REPEAT interleaved runs (default 5), and Chorus's ratio to Horovod's
# better transport (by the medians, and to Horovod's fastest single run).
#
# Horovod is not part of Chorus and is never committed: the first run builds it from PyPI into
# a venv at $BUILD/hvd-venv, or at HVD_VENV when set (bench/hvd_venv.sh: --system-site-packages
# over Debian's python3-torch, Horovod $HOROVOD_VERSION with PyTorch, Gloo and MPI; about 5
# minutes on 2 cores, then reused). Needs `make` (libchorus, chorus-run). The numbers mean
# something only on a quiet machine: the load average is printed before and after. HIPRI=1
# (root): each run goes in a session of its own whose scheduling group has nice -19, so that
# on a shared machine the other sessions' load takes little of its CPU (the table says so
# when it is used). Every run is stopped after 300 s.
# BEFORE=DIR adds a row: the same script on DIR's chorus.torch (another checkout, built with
# make: DIR/python, DIR/$BUILD), interleaved with the others, to measure a change of Chorus.
#
#   bench/horovod_compare.sh            REPEAT=5 STEPS=200 BATCH=64 bench/horovod_compare.sh
#   git archive <commit> | tar -x -C /tmp/old && make -C /tmp/old trainer &&
#       BEFORE=/tmp/old bench/horovod_compare.sh
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
REPEAT=${REPEAT:-5}
STEPS=${STEPS:-200}
BATCH=${BATCH:-64}
HOROVOD_VERSION=${HOROVOD_VERSION:-0.28.1}
VENV=${HVD_VENV:-$ROOT/$BUILD/hvd-venv}
. "$ROOT/bench/hipri.sh"
. "$ROOT/bench/hvd_venv.sh"

[ -x "$ROOT/$BUILD/bin/chorus-run" ] || { echo "horovod_compare.sh: run make first" >&2; exit 1; }
if [ -n "${BEFORE:-}" ]; then
    BEFORE=$(cd "$BEFORE" && pwd) && [ -x "$BEFORE/$BUILD/bin/chorus-run" ] && [ -d "$BEFORE/python/chorus" ] ||
        { echo "horovod_compare.sh: BEFORE=$BEFORE needs a built checkout ($BUILD/bin/chorus-run, python/chorus)" >&2; exit 1; }
fi
hvd_venv "$VENV" || exit 1

export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" CHORUS_LIB="$ROOT/$BUILD/lib/libchorus.so"
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM
args="--steps $STEPS --batch $BATCH"
run() { # name command...: one run, its samples/s appended to $out/name
    name=$1
    shift
    hipri timeout -k 5 300 "$@" 2>&1 | sed -n 's/.*hvd_train: .*samples_per_s \([0-9.]*\).*/\1/p' \
        >> "$out/$name"
}

echo "# $(date -u '+%F %T') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)$HIPRI_NOTE"
echo "# torch $("$PYTHON" -c 'import torch; print(torch.__version__)'), Horovod $HOROVOD_VERSION, chorus $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)${BEFORE:+, before: $BEFORE}"
i=0
while [ $i -lt "$REPEAT" ]; do
    run hvd_gloo "$VENV/bin/horovodrun" --gloo -np 2 -H localhost:2 "$VENV/bin/python" \
        "$ROOT/bench/hvd_train.py" --api horovod $args
    run hvd_mpi "$VENV/bin/horovodrun" --mpi -np 2 -H localhost:2 "$VENV/bin/python" \
        "$ROOT/bench/hvd_train.py" --api horovod $args
    run chorus "$ROOT/$BUILD/bin/chorus-run" -np 2 "$PYTHON" "$ROOT/bench/hvd_train.py" \
        --api chorus $args
    if [ -n "${BEFORE:-}" ]; then
        run chorus_before env PYTHONPATH="$BEFORE/python" CHORUS_LIB="$BEFORE/$BUILD/lib/libchorus.so" \
            "$BEFORE/$BUILD/bin/chorus-run" -np 2 "$PYTHON" "$ROOT/bench/hvd_train.py" --api chorus $args
    fi
    i=$((i + 1))
done

printf '\n| np=2, %s samples per rank per step, %s runs | median samples/s | min - max | spread |\n|---|---|---|---|\n' "$BATCH" "$REPEAT"
for n in hvd_gloo hvd_mpi chorus ${BEFORE:+chorus_before}; do
    label=$(case $n in hvd_gloo) echo "Horovod, horovodrun --gloo";; hvd_mpi) echo "Horovod, horovodrun --mpi";;
        chorus_before) echo "chorus.torch, chorus-run, before (BEFORE)";; *) echo "chorus.torch, chorus-run";; esac)
    stats "$label" < "$out/$n"
done
best=$( (median < "$out/hvd_gloo"; median < "$out/hvd_mpi") | sort -g | tail -1)
c=$(median < "$out/chorus")
printf '\nchorus.torch / Horovod (better transport): %s\n' "$(echo "$c $best" | awk '$2 > 0 {printf "%.2fx", $1 / $2}')"
top=$(cat "$out/hvd_gloo" "$out/hvd_mpi" | sort -g | tail -1)
printf 'chorus.torch (median) / Horovod'"'"'s fastest single run (%s): %s\n' "${top:-none}" \
    "$(echo "$c ${top:-0}" | awk '$2 > 0 {printf "%.2fx", $1 / $2}')"
if [ -n "${BEFORE:-}" ]; then
    printf 'chorus.torch / before: %s\n' "$(echo "$c $(median < "$out/chorus_before")" | awk '$2 > 0 {printf "%.2fx", $1 / $2}')"
fi
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
