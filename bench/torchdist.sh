#!/bin/sh
# torchdist.sh - the torch.distributed backend "chorus" against Gloo, in one invocation:
#   1. the same DDP training script (bench/torchdist_train.py: the MLP 784-512-256-10, 64
#      samples per rank per step, SGD) on each backend, np=2, started by each of LAUNCHERS
#      (default: chorus-run, then torchrun, each as users start it, with the thread counts
#      that launcher gives): samples per second;
#   2. torch.distributed.all_reduce (bench/gloo_allreduce.py --backend ...), float32 sum,
#      np=2, at 1 MiB and 64 MiB: bus bandwidth (ALLREDUCE=0 skips it).
# Each is run REPEAT times (default 5), interleaved; the table shows the median, the spread
# (min - max, and (max - min) / median) and the ratio of the medians.
#
# PYTHON picks the Python and so the torch (default /usr/bin/python3, Debian's python3-torch);
# LIBDIR the folder of libchorus.so and the backend's _chorus_torchdist.so built against that
# torch (default $BUILD/lib, which `make` builds for $(PYTHON); `make check-torch2` builds one
# for a torch 2.x venv into $BUILD/torch2/lib). The numbers mean something only on a quiet
# machine: the load average is printed before and after. HIPRI=1 (root): each run goes in a
# session of its own whose scheduling group has nice -19 (bench/hipri.sh), so that on a shared
# machine the other sessions' load takes little of its CPU; the table says so. Every run is
# stopped after 300 s.
#
#   bench/torchdist.sh
#   PYTHON=/path/to/venv/bin/python LIBDIR=build/torch2/lib bench/torchdist.sh
#   REPEAT=5 NP=2 STEPS=1000 BATCH=64 MODEL=mlp LAUNCHERS="chorus-run torchrun" bench/torchdist.sh
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
LIBDIR=$(cd "$ROOT" && cd "${LIBDIR:-$BUILD/lib}" && pwd)
REPEAT=${REPEAT:-5}
NP=${NP:-2}
# 1000 timed steps, 2.5-7 s a run: at 200 (0.5-1.5 s) one scheduling hiccup of a 2-vCPU host
# moved a run's rate by tens of percent (docs/PERFORMANCE.md)
STEPS=${STEPS:-1000}
BATCH=${BATCH:-64}  # samples per rank per step of the DDP script
MODEL=${MODEL:-mlp}
LAUNCHERS=${LAUNCHERS:-chorus-run torchrun}
ALLREDUCE=${ALLREDUCE:-1}
. "$ROOT/bench/hipri.sh"
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export CHORUS_LIB="$LIBDIR/libchorus.so"
export CHORUS_RUN="$ROOT/$BUILD/bin/chorus-run"
[ -f "$LIBDIR/_chorus_torchdist.so" ] || {
    echo "torchdist.sh: $LIBDIR/_chorus_torchdist.so not found; run make (needs PyTorch's headers)" >&2
    exit 1
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

echo "# $(date -u '+%F %T') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)$HIPRI_NOTE"
BUILD=$BUILD sh "$ROOT/bench/topology.sh" # CPUs, caches and who shares them, memory bandwidth
blas=$("$PYTHON" -c 'import re, torch; m = re.search("BLAS_INFO=([^,]*)", torch.__config__.show()); print(m.group(1) if m else "?")' 2>/dev/null)
[ "$blas" = generic ] && blas="generic: $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null)"
echo "# torch $("$PYTHON" -c 'import torch; print(torch.__version__)' 2>/dev/null) (BLAS $blas) at $PYTHON, chorus $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
i=0
while [ $i -lt "$REPEAT" ]; do
    for l in $LAUNCHERS; do
        for b in gloo chorus; do
            hipri timeout -k 5 300 "$PYTHON" "$ROOT/bench/torchdist_train.py" --backend $b \
                --launcher $l -np "$NP" --steps "$STEPS" --batch "$BATCH" --model "$MODEL" 2>&1 |
                sed -n 's/.*torchdist_train: .*samples_per_s \([0-9.]*\).*/\1/p' >> "$out/train.$l.$b"
        done
    done
    if [ "$ALLREDUCE" = 1 ]; then
        for b in gloo chorus; do
            hipri timeout -k 5 300 "$PYTHON" "$ROOT/bench/gloo_allreduce.py" --backend $b -np "$NP" \
                -b 1M -e 64M -f 64 -T 1 | awk '!/^#/ {print $1, $5}' >> "$out/ar.$b"
        done
    fi
    i=$((i + 1))
done

ratio() { echo "$1 $2" | awk '$2 > 0 {printf "%.2fx", $1 / $2}'; }
printf '\n| DDP, %s, np=%s, %s samples per rank per step, %s runs | median samples/s | min - max | spread |\n|---|---|---|---|\n' \
    "$MODEL" "$NP" "$BATCH" "$REPEAT"
for l in $LAUNCHERS; do
    for b in gloo chorus; do stats "$b under $l" < "$out/train.$l.$b"; done
done
echo
for l in $LAUNCHERS; do
    printf 'chorus / gloo under %s: %s\n' "$l" \
        "$(ratio "$(median < "$out/train.$l.chorus")" "$(median < "$out/train.$l.gloo")")"
done
if [ "$ALLREDUCE" = 1 ]; then
    printf '\n| all_reduce, np=%s, busbw GB/s, median of %s | gloo | chorus | chorus / gloo |\n|---|---|---|---|\n' "$NP" "$REPEAT"
    for size in 1048576 67108864; do
        g=$(awk -v s=$size '$1 == s {print $2}' "$out/ar.gloo" | median)
        c=$(awk -v s=$size '$1 == s {print $2}' "$out/ar.chorus" | median)
        printf '| %s MiB | %s | %s | %s |\n' $((size >> 20)) "$g" "$c" "$(ratio "$c" "$g")"
    done
fi
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
