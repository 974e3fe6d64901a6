#!/bin/sh
# torchdist.sh - the torch.distributed backend "chorus" against Gloo, in one invocation:
#   1. the same DDP training script (bench/torchdist_train.py: 4 x Linear(1024), 16 MiB of
#      gradients, 32 samples per rank per step, one thread per rank; torch's BLAS is OpenBLAS
#      on Debian) on each backend, np=2: samples per second;
#   2. torch.distributed.all_reduce (bench/gloo_allreduce.py --backend ...), float32 sum,
#      np=2, at 1 MiB and 64 MiB: bus bandwidth.
# Each is run REPEAT times (default 3), interleaved, and the median is shown with the ratio.
# Needs `make` (libchorus and the backend's extension) and Debian's python3-torch. The numbers
# mean something only on a quiet machine: the load average is printed before and after. Every
# run is stopped after 300 s.
#
#   bench/torchdist.sh                  REPEAT=5 NP=2 STEPS=60 BATCH=32 bench/torchdist.sh
set -e
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${BUILD:-build}
PYTHON=${PYTHON:-/usr/bin/python3}
REPEAT=${REPEAT:-3}
NP=${NP:-2}
STEPS=${STEPS:-40}
BATCH=${BATCH:-32}  # samples per rank per step of the DDP script
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
export CHORUS_LIB="${CHORUS_LIB:-$ROOT/$BUILD/lib/libchorus.so}"
[ -f "$ROOT/$BUILD/lib/_chorus_torchdist.so" ] || {
    echo "torchdist.sh: $BUILD/lib/_chorus_torchdist.so not found; run make (needs libtorch-dev)" >&2
    exit 1
}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT INT TERM

median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

echo "# $(date -u '+%F %T') UTC, $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# torch $($PYTHON -c 'import torch; print(torch.__version__)' 2>/dev/null), BLAS $(readlink -f /usr/lib/x86_64-linux-gnu/libblas.so.3 2>/dev/null), chorus $(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null)"
i=0
while [ $i -lt "$REPEAT" ]; do
    for b in gloo chorus; do
        timeout -k 5 300 "$PYTHON" "$ROOT/bench/torchdist_train.py" --backend $b -np "$NP" --steps "$STEPS" --batch "$BATCH" |
            sed -n 's/.*samples_per_s //p' >> "$out/train.$b"
        timeout -k 5 300 "$PYTHON" "$ROOT/bench/gloo_allreduce.py" --backend $b -np "$NP" -b 1M -e 64M -f 64 -T 1 |
            awk '!/^#/ {print $1, $5}' >> "$out/ar.$b"
    done
    i=$((i + 1))
done

printf '\n| np=%s, %s runs, median (DDP: %s samples per rank per step) | gloo | chorus | chorus / gloo |\n|---|---|---|---|\n' "$NP" "$REPEAT" "$BATCH"
g=$(median < "$out/train.gloo"); c=$(median < "$out/train.chorus")
printf '| DDP training, samples/s | %s | %s | %.2fx |\n' "$g" "$c" "$(echo "$c $g" | awk '{print $1 / $2}')"
for size in 1048576 67108864; do
    g=$(awk -v s=$size '$1 == s {print $2}' "$out/ar.gloo" | median)
    c=$(awk -v s=$size '$1 == s {print $2}' "$out/ar.chorus" | median)
    printf '| all_reduce %s MiB, busbw GB/s | %s | %s | %.2fx |\n' $((size >> 20)) "$g" "$c" \
        "$(echo "$c $g" | awk '{print $1 / $2}')"
done
echo
echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
