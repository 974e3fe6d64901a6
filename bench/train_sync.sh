#!/bin/sh
# train_sync.sh - chorus-train's gradient synchronisation modes side by side: --grad-sync
# fused (one blocking allreduce after backward), layer (one per layer after backward) and
# engine (each layer enqueued with the training engine during backward), on the MLP and the
# CNN, global batch 256, one BLAS thread per rank, NP ranks.
#
# The machine is shared: the modes take turns (fused, layer, engine, fused, ...) REPEAT times,
# and each run is summarised by its MEDIAN step time (after the warm-up), which a burst of
# load in part of the run does not move much. Per mode the table gives samples/s from the
# best run (the least disturbed) and from the median run, and, for the best run, the gradient
# communication time per step, the part of it hidden behind backward (a lower bound, see
# nn_dist.hidden_s) and the time the step waited for it (means over its steps).
#
#   sh bench/train_sync.sh    BUILD=build NP=2 REPEAT=5 MODES="fused layer engine"
#                             MLP_STEPS=200 CNN_STEPS=20 (timed steps, after WARMUP=10)
set -u
BUILD=${BUILD:-build}
NP=${NP:-2}
REPEAT=${REPEAT:-5}
MODES=${MODES:-fused layer engine}
MLP_STEPS=${MLP_STEPS:-200}
CNN_STEPS=${CNN_STEPS:-20}
WARMUP=${WARMUP:-10}
EXTRA=${EXTRA:-}
PYTHON=${PYTHON:-python3}
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/train-sync.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
[ -x "$TRAIN" ] || { echo "train_sync: build first (make trainer): $TRAIN is missing" >&2; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }

echo "train_sync: $NP ranks, global batch 256, 1 BLAS thread per rank, modes: $MODES;" \
    "$REPEAT rounds; load average before: $(load)"
i=1
while [ "$i" -le "$REPEAT" ]; do
    for model in mlp cnn; do
        if [ $model = mlp ]; then steps=$MLP_STEPS; else steps=$CNN_STEPS; fi
        for mode in $MODES; do
            "$RUN" -np "$NP" "$TRAIN" --model $model --batch 256 --epochs 1 --threads 1 \
                --no-eval --max-steps $((WARMUP + steps)) --grad-sync $mode --log-every 1000000 \
                --metrics "$OUT/$model.$mode.$i.jsonl" $EXTRA > "$OUT/log" 2>&1 ||
                { cat "$OUT/log" >&2; exit 1; }
        done
    done
    echo "  round $i done, load $(load)"
    i=$((i + 1))
done
echo "load average after: $(load)"
echo
"$PYTHON" - "$OUT" "$MODES" "$WARMUP" "$REPEAT" <<'EOF'
import json, os, statistics as st, sys
out, modes, warm, rep = sys.argv[1], sys.argv[2].split(), int(sys.argv[3]), int(sys.argv[4])
print("| model | --grad-sync | samples/s, best run | median run | step ms | grad comm ms/step | hidden behind backward | waited ms/step | best vs fused |")
print("|---|---|---|---|---|---|---|---|---|")
for model in ("mlp", "cnn"):
    base = None
    for mode in modes:
        runs = []
        for i in range(1, rep + 1):
            rows = [json.loads(l) for l in open(os.path.join(out, "%s.%s.%d.jsonl" % (model, mode, i))) if "\"step\"" in l][warm:]
            mean = lambda k: sum(x[k] for x in rows) / len(rows)
            runs.append((st.median(x["step_s"] for x in rows), mean("grad_comm_s"),
                         mean("grad_hidden_s"), mean("grad_wait_s")))
        step, comm, hid, wait = min(runs)
        med = st.median(r[0] for r in runs)
        if mode == "fused":
            base = step
        rel = "%+.1f%%" % (100 * (base / step - 1)) if base else ""
        print("| %s | %s | %.0f | %.0f | %.3f | %.3f | %.0f%% | %.3f | %s |" % (
            model, mode, 256 / step, 256 / med, 1e3 * step, 1e3 * comm,
            100 * hid / comm if comm else 0, 1e3 * wait, rel))
EOF
