#!/bin/sh
# parallel.sh - the model splits of chorus-train side by side on --model large (784-1024x8-10,
# 8.2M parameters, AdamW): samples/s and memory per rank (parameters, gradients, optimizer
# state, activations, peak) for data parallelism, tensor parallelism, ZeRO-1, ZeRO-2 and
# activation recomputation, and pipelines of NP stages (GPipe and 1F1B, 8 micro-batches), NP
# ranks each, global batch BATCH, STEPS timed steps after WARMUP; then bench/pipeline.sh for the
# pipeline's bubble and activation targets.
# Checks the target: ZeRO-1's optimizer memory per rank at most 1/NP of data parallel's plus
# 64 KiB (padding of the last chunk of every segment).
#
#   sh bench/parallel.sh     BUILD=build NP=2 BATCH=64 WARMUP=2 STEPS=10 REPEAT=3
#
# Prints a Markdown table (docs/PERFORMANCE.md). Memory columns: MiB, the largest over the
# ranks (they differ by a few floats of chunk padding at most).
set -u
BUILD=${BUILD:-build}
NP=${NP:-2}
BATCH=${BATCH:-64}
WARMUP=${WARMUP:-2}
STEPS=${STEPS:-10}
REPEAT=${REPEAT:-3}
PYTHON=${PYTHON:-python3}
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/parallel.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
[ -x "$TRAIN" ] || { echo "parallel: build first (make trainer): $TRAIN is missing" >&2; exit 1; }

echo "parallel: --model large, $NP ranks, global batch $BATCH, AdamW, $STEPS timed steps after" \
    "$WARMUP, $REPEAT rounds; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| configuration | samples/s (best) | samples/s (median) | params MiB | grads MiB | optimizer MiB | activations MiB | peak MiB |"
echo "|---|---|---|---|---|---|---|---|"

# row NAME ARGS...: one run of chorus-train with ARGS; appends NAME's samples/s and memory to
# $OUT/rows and keeps the metrics file as $OUT/NAME.jsonl (spaces in NAME become _).
row() {
    name=$1
    shift
    f=$OUT/$(echo "$name" | tr ' ' _).jsonl
    "$RUN" -np "$NP" "$TRAIN" --model large --optim adamw --batch "$BATCH" --no-eval \
        --max-steps $((WARMUP + STEPS)) --log-every 1000000 --metrics "$f" "$@" \
        > "$OUT/log" 2>&1 || { echo "$name: failed: $(tail -1 "$OUT/log")" >&2; return; }
    "$PYTHON" - "$f" "$name" "$WARMUP" >> "$OUT/rows" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
steps = [r for r in lines if "step" in r][int(sys.argv[3]):]
mem = [r for r in lines if "memory" in r][-1]["memory"]
sps = sum(r["step_s"] * r["samples_per_s"] for r in steps) / sum(r["step_s"] for r in steps)
big = lambda k: max(m[k] for m in mem) / 1048576.0
print("%s|%.1f|%.1f|%.1f|%.1f|%.1f|%.1f" % (sys.argv[2], sps, big("params"), big("grads"),
      big("optimizer"), big("activations"), big("peak")))
PY
}

# The machine is shared: the configurations take turns REPEAT times, and the table gives the
# best run's samples/s (the least disturbed one) and the median run's.
i=1
while [ "$i" -le "$REPEAT" ]; do
    row "data parallel"
    row "tensor parallel $NP" --tensor-parallel "$NP"
    row "ZeRO-1" --zero 1
    row "ZeRO-2" --zero 2
    row "recompute" --recompute
    row "ZeRO-2 + recompute" --zero 2 --recompute
    row "pipeline $NP stages, gpipe" --pipeline-stages "$NP" --microbatches 8 --schedule gpipe
    row "pipeline $NP stages, 1f1b" --pipeline-stages "$NP" --microbatches 8 --schedule 1f1b
    i=$((i + 1))
done
"$PYTHON" - "$OUT/rows" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    f = line.strip().split("|")
    runs.setdefault(f[0], []).append(f[1:])
for name, rs in runs.items():
    sps = [float(r[0]) for r in rs]
    print("| %s | %.0f | %.0f | %s |" % (name, max(sps), statistics.median(sps), " | ".join(rs[-1][1:])))
PY

"$PYTHON" - "$OUT/data_parallel.jsonl" "$OUT/ZeRO-1.jsonl" "$NP" <<'PY'
import json, sys
def opt(path):
    mem = [json.loads(l) for l in open(path) if l.startswith('{"memory"')][-1]["memory"]
    return max(m["optimizer"] for m in mem)
try:
    dp, z1, p = opt(sys.argv[1]), opt(sys.argv[2]), int(sys.argv[3])
except (OSError, IndexError, ValueError):
    sys.exit("\ntarget: not measured (a run failed)")
ok = z1 <= dp / p + 65536
print("\ntarget: ZeRO-1 optimizer memory per rank %.1f MiB <= data parallel's %.1f MiB / %d + 64 KiB: %s"
      % (z1 / 1048576.0, dp / 1048576.0, p, "met" if ok else "MISSED"))
PY
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"

# The pipeline's own targets (1F1B's activations below GPipe's, the measured bubble against
# (p-1)/(m+p-1)) at a batch whose micro-batches keep the stages' compute above the messages.
echo
sh "$(dirname "$0")/pipeline.sh"
