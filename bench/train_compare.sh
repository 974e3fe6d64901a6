#!/bin/sh
# train_compare.sh - training speed of chorus-train against PyTorch on the same MLP
# (784-512-256-10, Fashion-MNIST, global batch 256 split across the ranks, SGD with Nesterov
# momentum), in one invocation, interleaved (the machine is shared and noisy: compare the
# numbers of one run, not numbers from different runs):
#
#   chorus-train     1 rank; 2 ranks --grad-sync fused; 2 ranks --grad-sync engine
#   PyTorch DDP      1 rank; 2 ranks (gloo)                   (Debian python3-torch)
#   PyTorch          one process, no DDP, 2 intra-op threads on the same cores
#
# Every rank uses one BLAS / intra-op thread. Each run times STEPS steps after WARMUP steps;
# samples/s counts all ranks. Scaling efficiency = (samples/s at 2 ranks) / (2 x at 1 rank),
# the global batch staying 256 (strong scaling). The table gives the median of REPEAT runs.
#
#   sh bench/train_compare.sh            BUILD=build STEPS=200 WARMUP=20 REPEAT=2 BATCH=256
set -u
BUILD=${BUILD:-build}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
REPEAT=${REPEAT:-2}
BATCH=${BATCH:-256}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/train-compare.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

[ -x "$TRAIN" ] || { echo "train_compare: build first (make): $TRAIN is missing" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null ||
    { echo "train_compare: $PYTHON has no torch (sudo apt-get install python3-torch)" >&2; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# chorus NP SYNC: samples/s of steps WARMUP+1 .. WARMUP+STEPS from rank 0's metrics.
chorus() {
    m=$OUT/m.jsonl
    rm -f "$m"
    "$RUN" -np "$1" "$TRAIN" --model mlp --batch "$BATCH" --epochs 1 --threads 1 --no-eval \
        --max-steps $((WARMUP + STEPS)) --grad-sync "$2" --log-every 1000000 --metrics "$m" \
        > "$OUT/chorus.log" 2>&1 || { cat "$OUT/chorus.log" >&2; echo 0; return; }
    "$PYTHON" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
print("%.0f" % (sum(r["samples_per_s"] * r["step_s"] for r in rows) / sum(r["step_s"] for r in rows)))
' "$m" "$WARMUP"
}

# torch ARGS...: samples/s printed by train_ddp_torch.py.
torch_run() {
    "$PYTHON" "$HERE/train_ddp_torch.py" --batch "$BATCH" --steps "$STEPS" --warmup "$WARMUP" \
        "$@" > "$OUT/torch.log" 2>&1 || { cat "$OUT/torch.log" >&2; echo 0; return; }
    sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' "$OUT/torch.log" | tail -n 1
}

echo "train_compare: MLP 784-512-256-10, global batch $BATCH, $STEPS timed steps after $WARMUP," \
    "$REPEAT runs each, interleaved"
echo "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo | head -n 1);" \
    "load average before: $(load)"
blas=$(ldd "$TRAIN" | sed -n 's/.*\(libopenblas[^ ]*\) => \([^ ]*\).*/\2/p' | head -n 1)
echo "chorus-train BLAS: ${blas:-?} (OpenBLAS $(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || echo '?'));" \
    "torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"

: > "$OUT/results"
i=1
while [ "$i" -le "$REPEAT" ]; do
    echo "run $i: load $(load)"
    for c in "chorus_1 chorus 1 fused" "chorus_2_fused chorus 2 fused" \
             "chorus_2_engine chorus 2 engine" "ddp_1 torch_run --np 1" "ddp_2 torch_run --np 2" \
             "plain_2t torch_run --plain --threads 2"; do
        set -- $c
        name=$1
        shift
        v=$("$@")
        echo "  $name: $v samples/s"
        echo "$name $v" >> "$OUT/results"
    done
    i=$((i + 1))
done
echo "load average after: $(load)"
echo

awk '
function median(name,   n, i, j, t, a) {
    n = 0
    for (i = 1; i <= NR; i++) if (nm[i] == name) a[++n] = v[i]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    if (n == 0) return 0
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{ nm[NR] = $1; v[NR] = $2 }
END {
    c1 = median("chorus_1"); cf = median("chorus_2_fused"); ce = median("chorus_2_engine")
    d1 = median("ddp_1"); d2 = median("ddp_2"); p2 = median("plain_2t")
    printf "| run | ranks x threads | samples/s (median) | scaling 1->2 ranks |\n"
    printf "|---|---|---|---|\n"
    printf "| chorus-train | 1 x 1 | %.0f | |\n", c1
    printf "| chorus-train --grad-sync fused | 2 x 1 | %.0f | %.0f%% |\n", cf, c1 ? 100 * cf / (2 * c1) : 0
    printf "| chorus-train --grad-sync engine | 2 x 1 | %.0f | %.0f%% |\n", ce, c1 ? 100 * ce / (2 * c1) : 0
    printf "| PyTorch DDP (gloo) | 1 x 1 | %.0f | |\n", d1
    printf "| PyTorch DDP (gloo) | 2 x 1 | %.0f | %.0f%% |\n", d2, d1 ? 100 * d2 / (2 * d1) : 0
    printf "| PyTorch, one process | 1 x 2 | %.0f | |\n", p2
    best = cf > ce ? cf : ce
    printf "\nchorus-train at 2 ranks (best of fused/engine) vs DDP at 2 ranks: %.2fx; vs PyTorch one process 2 threads: %.2fx\n", \
        d2 ? best / d2 : 0, p2 ? best / p2 : 0
}' "$OUT/results"
