#!/bin/sh
# train_compare.sh - training speed of chorus-train against PyTorch on the same MLP
# (784-512-256-10, Fashion-MNIST, global batch 256 split across the ranks, SGD with Nesterov
# momentum), in one invocation, interleaved (the machine is shared and noisy: compare the
# numbers of one run, not numbers from different runs):
#
#   chorus-train     2 ranks --grad-sync fused; 2 ranks --grad-sync engine; 1 rank with the
#                    per-rank batch (128) and with the global batch (256)
#   PyTorch DDP      2 ranks (gloo); 1 rank with batch 128 and 256   (Debian python3-torch)
#   PyTorch          one process, no DDP, 2 intra-op threads on the same cores, batch 256:
#                    as installed, and tuned (OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=2: on
#                    this 2-core VM the default OpenMP spin-waiting makes it several times slower)
#
# Every rank uses one BLAS / intra-op thread. Each run times STEPS steps after WARMUP steps;
# samples/s counts all ranks. Scaling efficiency = (samples/s at 2 ranks) / (2 x samples/s at
# 1 rank): "per-rank batch" keeps 128 samples per rank per step (weak scaling, as Horovod
# reports it), "global batch" keeps the step at 256 samples (strong scaling: the same training
# on more ranks). The table gives the median of REPEAT runs.
#
# ONLY="chorus_2_fused ddp_2 ..." runs only those rows (names as in the loop below; the table
# shows 0 for the others); RESULTS=FILE appends every run's "name samples/s" line to FILE
# (bench/summary.sh takes its training cells so, one round at a time). The host's topology
# (bench/topology.sh; TOPO_MEMBW=skip leaves out its bandwidth probe) heads the output.
# BASE=DIR adds, interleaved with the rest, chorus-train from another build (DIR/bin/chorus-train,
# e.g. a worktree of the commit before a change) at 2 ranks fused and at 1 rank with the per-rank
# batch: a before/after in one invocation.
#
#   sh bench/train_compare.sh            BUILD=build STEPS=200 WARMUP=20 REPEAT=2 BATCH=256 BASE=
set -u
BUILD=${BUILD:-build}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
REPEAT=${REPEAT:-2}
BATCH=${BATCH:-256}
BASE=${BASE:-}
PYTHON=${PYTHON:-/usr/bin/python3}
HERE=$(cd "$(dirname "$0")" && pwd)
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/train-compare.XXXXXX")
trap 'rm -rf "$OUT"' EXIT

[ -z "$BASE" ] || [ -x "$BASE/bin/chorus-train" ] ||
    { echo "train_compare: BASE=$BASE has no bin/chorus-train" >&2; exit 1; }
[ -x "$TRAIN" ] || { echo "train_compare: build first (make trainer): $TRAIN is missing" >&2; exit 1; }
"$PYTHON" -c 'import torch' 2>/dev/null ||
    { echo "train_compare: $PYTHON has no torch (sudo apt-get install python3-torch)" >&2; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

# chorus NP SYNC [BATCH]: samples/s of steps WARMUP+1 .. WARMUP+STEPS from rank 0's metrics.
chorus() {
    m=$OUT/m.jsonl
    rm -f "$m"
    "$RUN" -np "$1" "${CHORUS_TRAIN:-$TRAIN}" --model mlp --batch "${3:-$BATCH}" --epochs 1 --threads 1 --no-eval \
        --max-steps $((WARMUP + STEPS)) --grad-sync "$2" --log-every 1000000 --metrics "$m" \
        > "$OUT/chorus.log" 2>&1 || { cat "$OUT/chorus.log" >&2; echo 0; return; }
    "$PYTHON" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l][int(sys.argv[2]):]
print("%.0f" % (sum(r["samples_per_s"] * r["step_s"] for r in rows) / sum(r["step_s"] for r in rows)))
' "$m" "$WARMUP"
}

# torch BATCH ARGS...: samples/s printed by train_ddp_torch.py.
torch_run() {
    b=$1
    shift
    "$PYTHON" "$HERE/train_ddp_torch.py" --batch "$b" --steps "$STEPS" --warmup "$WARMUP" \
        "$@" > "$OUT/torch.log" 2>&1 || { cat "$OUT/torch.log" >&2; echo 0; return; }
    sed -n 's/.*: \([0-9][0-9]*\) samples\/s.*/\1/p' "$OUT/torch.log" | tail -n 1
}

# The baseline build's chorus-train (BASE).
base() { CHORUS_TRAIN=$BASE/bin/chorus-train chorus "$@"; }

# The same, with the threading settings that suit PyTorch best here.
torch_tuned() { (export OMP_WAIT_POLICY=PASSIVE OPENBLAS_NUM_THREADS=2; torch_run "$@"); }

echo "train_compare: MLP 784-512-256-10, global batch $BATCH, $STEPS timed steps after $WARMUP," \
    "$REPEAT runs each, interleaved"
BUILD=$BUILD sh "$HERE/topology.sh"
echo "load average before: $(load)"
blas=$(ldd "$TRAIN" | sed -n 's/.*\(libopenblas[^ ]*\) => \([^ ]*\).*/\2/p' | head -n 1)
echo "chorus-train BLAS: ${blas:-?} (OpenBLAS $(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || echo '?'));" \
    "torch $("$PYTHON" -c 'import torch; print(torch.__version__)')"

: > "$OUT/results"
i=1
while [ "$i" -le "$REPEAT" ]; do
    echo "run $i: load $(load)"
    half=$((BATCH / 2))
    extra=
    [ -n "$BASE" ] && extra="base_2_fused:base:2:fused base_1_half:base:1:fused:$half"
    for c in chorus_2_fused:chorus:2:fused chorus_2_engine:chorus:2:engine \
             chorus_1_half:chorus:1:fused:$half chorus_1:chorus:1:fused $extra \
             ddp_2:torch_run:$BATCH:--np:2 ddp_1_half:torch_run:$half:--np:1 \
             ddp_1:torch_run:$BATCH:--np:1 plain_2t:torch_run:$BATCH:--plain:--threads:2 \
             plain_2t_tuned:torch_tuned:$BATCH:--plain:--threads:2; do
        set -- $(echo "$c" | tr ':' ' ')
        name=$1
        shift
        case " ${ONLY:-$name} " in *" $name "*) ;; *) continue ;; esac
        v=$("$@")
        echo "  $name: $v samples/s"
        echo "$name $v" >> "$OUT/results"
        [ -z "${RESULTS:-}" ] || echo "$name $v" >> "$RESULTS"
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
    c1 = median("chorus_1"); ch = median("chorus_1_half")
    cf = median("chorus_2_fused"); ce = median("chorus_2_engine")
    d1 = median("ddp_1"); dh = median("ddp_1_half"); d2 = median("ddp_2"); p2 = median("plain_2t")
    pt = median("plain_2t_tuned")
    bf = median("base_2_fused"); bh = median("base_1_half")
    h = '"$BATCH"' / 2
    printf "| run | ranks x threads | batch per rank | samples/s (median) | scaling vs 1 rank, per-rank batch | global batch |\n"
    printf "|---|---|---|---|---|---|\n"
    printf "| chorus-train --grad-sync fused | 2 x 1 | %d | %.0f | %.0f%% | %.0f%% |\n", h, cf, ch ? 100 * cf / (2 * ch) : 0, c1 ? 100 * cf / (2 * c1) : 0
    printf "| chorus-train --grad-sync engine | 2 x 1 | %d | %.0f | %.0f%% | %.0f%% |\n", h, ce, ch ? 100 * ce / (2 * ch) : 0, c1 ? 100 * ce / (2 * c1) : 0
    printf "| chorus-train | 1 x 1 | %d | %.0f | | |\n", h, ch
    printf "| chorus-train | 1 x 1 | %d | %.0f | | |\n", 2 * h, c1
    printf "| PyTorch DDP (gloo) | 2 x 1 | %d | %.0f | %.0f%% | %.0f%% |\n", h, d2, dh ? 100 * d2 / (2 * dh) : 0, d1 ? 100 * d2 / (2 * d1) : 0
    printf "| PyTorch DDP (gloo) | 1 x 1 | %d | %.0f | | |\n", h, dh
    printf "| PyTorch DDP (gloo) | 1 x 1 | %d | %.0f | | |\n", 2 * h, d1
    printf "| PyTorch, one process | 1 x 2 | %d | %.0f | | |\n", 2 * h, p2
    printf "| PyTorch, one process, tuned threading | 1 x 2 | %d | %.0f | | |\n", 2 * h, pt
    if (bf || bh) {
        printf "| chorus-train (BASE build) --grad-sync fused | 2 x 1 | %d | %.0f | %.0f%% | |\n", h, bf, bh ? 100 * bf / (2 * bh) : 0
        printf "| chorus-train (BASE build) | 1 x 1 | %d | %.0f | | |\n", h, bh
    }
    best = cf > ce ? cf : ce
    bp = p2 > pt ? p2 : pt
    printf "\nchorus-train at 2 ranks (best of fused/engine) vs PyTorch DDP at 2 ranks: %.2fx; vs PyTorch in one process with 2 threads (its better setting): %.2fx\n", \
        d2 ? best / d2 : 0, bp ? best / bp : 0
}' "$OUT/results"
