#!/bin/sh
# train_sync.sh - chorus-train's gradient synchronisation modes side by side at 2 ranks:
# --grad-sync fused (one blocking allreduce after backward), layer (one per layer after
# backward) and engine (each layer enqueued with the training engine during backward), on the
# MLP and the CNN, global batch 256, one BLAS thread per rank. Runs are interleaved
# (fused, layer, engine, fused, ...) REPEAT times so that a change in machine load hits every
# mode alike; the table gives per mode the median over runs of samples/s (steps after the
# warm-up, from the metrics), the gradient communication time per step, the part of it hidden
# behind backward, and the time the step waited for it.
#
#   sh bench/train_sync.sh              BUILD=build NP=2 REPEAT=3 MODES="fused layer engine"
#   (MLP: 200 timed steps after 20; CNN: 30 after 5 - MLP_STEPS, CNN_STEPS, WARMUP to change)
set -u
BUILD=${BUILD:-build}
NP=${NP:-2}
REPEAT=${REPEAT:-3}
MODES=${MODES:-fused layer engine}
MLP_STEPS=${MLP_STEPS:-200}
CNN_STEPS=${CNN_STEPS:-30}
PYTHON=${PYTHON:-python3}
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/train-sync.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
[ -x "$TRAIN" ] || { echo "train_sync: build first (make): $TRAIN is missing" >&2; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "train_sync: $NP ranks, global batch 256, 1 BLAS thread per rank, modes: $MODES;" \
    "$REPEAT interleaved runs; load average before: $(load)"
: > "$OUT/rows"
for model in mlp cnn; do
    if [ $model = mlp ]; then steps=$MLP_STEPS warm=${WARMUP:-20}; else steps=$CNN_STEPS warm=${WARMUP:-5}; fi
    i=1
    while [ "$i" -le "$REPEAT" ]; do
        for mode in $MODES; do
            m=$OUT/m.jsonl
            rm -f "$m"
            "$RUN" -np "$NP" "$TRAIN" --model $model --batch 256 --epochs 1 --threads 1 --no-eval \
                --max-steps $((warm + steps)) --grad-sync $mode --log-every 1000000 --metrics "$m" \
                > "$OUT/log" 2>&1 || { cat "$OUT/log" >&2; exit 1; }
            "$PYTHON" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])][int(sys.argv[2]):]
n = len(rows)
t = sum(r["step_s"] for r in rows)
print(sys.argv[3], sys.argv[4], "%.1f" % (sum(r["samples_per_s"] * r["step_s"] for r in rows) / t),
      "%.4f" % (1e3 * sum(r["grad_comm_s"] for r in rows) / n),
      "%.4f" % (1e3 * sum(r["grad_hidden_s"] for r in rows) / n),
      "%.4f" % (1e3 * sum(r["grad_wait_s"] for r in rows) / n), "%.4f" % (1e3 * t / n))
' "$m" "$warm" "$model" "$mode" | tee -a "$OUT/rows" | sed 's/^/  /'
        done
        i=$((i + 1))
    done
done
echo "load average after: $(load)"
echo
"$PYTHON" - "$OUT/rows" "$MODES" <<'EOF'
import statistics as st, sys
rows = [l.split() for l in open(sys.argv[1])]
print("| model | --grad-sync | samples/s | step ms | grad comm ms/step | hidden behind backward | waited ms/step | vs fused |")
print("|---|---|---|---|---|---|---|---|")
for model in ("mlp", "cnn"):
    base = None
    for mode in sys.argv[2].split():
        r = [x for x in rows if x[0] == model and x[1] == mode]
        if not r:
            continue
        med = lambda k: st.median(float(x[k]) for x in r)
        sps, comm, hid, wait, step = med(2), med(3), med(4), med(5), med(6)
        if mode == "fused":
            base = sps
        rel = "%+.1f%%" % (100 * (sps / base - 1)) if base else ""
        print("| %s | %s | %.0f | %.2f | %.3f | %.0f%% | %.3f | %s |" % (
            model, mode, sps, step, comm, 100 * hid / comm if comm else 0, wait, rel))
EOF
