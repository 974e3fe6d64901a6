#!/bin/sh
# pipeline.sh - chorus-train --pipeline-stages: GPipe against 1F1B at m > p micro-batches.
# For each schedule: samples/s (timed steps after WARMUP), the stashed activations per rank
# (the largest over the ranks: stage 0 holds the most), the peak memory of a rank, and the
# measured bubble of every stage (the share of the pipeline step it waited for a neighbour)
# beside the formula (p-1)/(m+p-1).
#
#   sh bench/pipeline.sh     BUILD=build MODEL=large STAGES=2 MICRO=8 BATCH=256 WARMUP=2 STEPS=10
#
# MODEL: large (784-1024x8-10, whose equal hidden layers cut into balanced stages) where the
# trainer has it, else mlp (its first layer holds 2/3 of a step's compute, so its second stage idles
# most of the step whatever the schedule). Checks the targets: 1F1B's activations below GPipe's,
# and the busiest stage's measured bubble (the least idle one: the others also wait for their
# shortfall of work against it) within 10% (relative) of the formula; prints a Markdown
# table (docs/PERFORMANCE.md) and the load average. Exit status 1 when a target is missed.
set -u
BUILD=${BUILD:-build}
MODEL=${MODEL:-large}
STAGES=${STAGES:-2}
MICRO=${MICRO:-8}
BATCH=${BATCH:-256}
WARMUP=${WARMUP:-2}
STEPS=${STEPS:-10}
PYTHON=${PYTHON:-python3}
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/pipeline.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
[ -x "$TRAIN" ] || { echo "pipeline: build first (make trainer): $TRAIN is missing" >&2; exit 1; }
if [ "$MODEL" = large ] && ! "$TRAIN" --help 2>&1 | grep -q -- "--model large"; then
    echo "pipeline: this chorus-train has no --model large; using --model mlp"
    MODEL=mlp
fi

echo "pipeline: --model $MODEL, $STAGES stages, $MICRO micro-batches, global batch $BATCH, $STEPS" \
    "timed steps after $WARMUP; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| schedule | samples/s | activations MiB (max rank) | peak MiB (max rank) | in flight per stage | measured bubble per stage | formula (p-1)/(m+p-1) |"
echo "|---|---|---|---|---|---|---|"
for sched in gpipe 1f1b; do
    f=$OUT/$sched.jsonl
    "$RUN" -np "$STAGES" "$TRAIN" --model "$MODEL" --batch "$BATCH" --no-eval \
        --max-steps $((WARMUP + STEPS)) --log-every 1000000 --metrics "$f" \
        --pipeline-stages "$STAGES" --microbatches "$MICRO" --schedule "$sched" \
        > "$OUT/$sched.log" 2>&1 || { echo "| $sched | failed: $(tail -1 "$OUT/$sched.log") ||||||"; continue; }
done
"$PYTHON" - "$OUT" "$WARMUP" <<'PY'
import json, os, sys
out, warm = sys.argv[1], int(sys.argv[2])
res, bad = {}, []
for sched in ("gpipe", "1f1b"):
    path = os.path.join(out, sched + ".jsonl")
    if not os.path.exists(path):
        bad.append(sched + " did not run")
        continue
    lines = [json.loads(l) for l in open(path)]
    steps = [r for r in lines if "step" in r][warm:]
    pipe = [r for r in lines if "pipeline" in r][-1]["pipeline"]
    mem = [r for r in lines if "memory" in r][-1]["memory"]
    sps = sum(r["step_s"] * r["samples_per_s"] for r in steps) / sum(r["step_s"] for r in steps)
    act = max(m["activations"] for m in mem) / 1048576.0
    peak = max(m["peak"] for m in mem) / 1048576.0
    res[sched] = act
    f = pipe["bubble_formula"]
    print("| %s | %.0f | %.2f | %.2f | %s | %s | %.3f |" % (sched, sps, act, peak,
          " / ".join(str(i) for i in pipe["inflight"]),
          " / ".join("%.3f" % b for b in pipe["bubble"]), f))
    # the busiest stage's idle share is the pipeline's bubble; the others add their
    # shortfall of work against it (stages cut at layer boundaries are rarely equal)
    b = min(pipe["bubble"])
    if abs(b - f) > 0.1 * f:
        bad.append("%s: the busiest stage's measured bubble %.3f is not within 10%% of %.3f" % (sched, b, f))
if "gpipe" in res and "1f1b" in res and not res["1f1b"] < res["gpipe"]:
    bad.append("1f1b activations %.2f MiB are not below gpipe's %.2f MiB" % (res["1f1b"], res["gpipe"]))
print()
for b in bad:
    print("target missed: " + b)
if not bad:
    print("targets met: 1f1b activations below gpipe's; the busiest stage's bubble within 10% of the formula")
sys.exit(1 if bad else 0)
PY
rc=$?
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
exit $rc
