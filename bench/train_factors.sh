#!/bin/sh
# train_factors.sh - what separates chorus-train at 2 ranks from twice one rank, each factor on
# its own, on the MLP of bench/train_compare.sh (batch 128 per rank, one BLAS thread, SGD):
#
#   solo        1 rank on CPU 0 alone                                       (the baseline)
#   twins       two independent 1-rank runs at once, one on CPU 0, one on CPU 1: what the other
#               core's work costs through the shared caches and memory, with no communication
#   2 ranks     chorus-run -np 2 (ranks pinned, one per core: chorus-run's default), split into
#               compute (forward + backward), waiting in the gradient allreduce, and the rest
#               (the optimizer step and bookkeeping)
#   unpinned    the same with CHORUS_BIND=none
#
# Each variant runs once per round, the rounds interleaved (the machine is shared); the table
# gives the median step time over ROUNDS rounds, each run's figure being the median over its
# STEPS timed steps after WARMUP, with the min-max over the rounds.
#
#   sh bench/train_factors.sh          BUILD=build STEPS=200 WARMUP=20 ROUNDS=5
set -u
BUILD=${BUILD:-build}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
ROUNDS=${ROUNDS:-5}
PYTHON=${PYTHON:-python3}
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/train-factors.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
[ -x "$TRAIN" ] || { echo "train_factors: build first (make trainer): $TRAIN is missing" >&2; exit 1; }
command -v taskset > /dev/null || { echo "train_factors: needs taskset (util-linux)" >&2; exit 1; }
load() { cut -d' ' -f1-3 /proc/loadavg; }
ARGS="--model mlp --epochs 1 --threads 1 --no-eval --max-steps $((WARMUP + STEPS)) --log-every 20"

# summary FILE: median step, compute (rank 0's 20-step windows), wait, in ms
summary() {
    "$PYTHON" - "$1" "$WARMUP" << 'EOF'
import json, statistics as S, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if '"step"' in l][int(sys.argv[2]):]
win = [r["ranks"][0]["compute_s"] for r in rows if "ranks" in r]
print("%.4f %.4f %.4f" % (S.median(r["step_s"] for r in rows) * 1e3,
                          S.median(win) * 1e3 if win else 0, S.median(r["comm_wait_s"] for r in rows) * 1e3))
EOF
}

solo() {
    taskset -c 0 "$TRAIN" $ARGS --batch 128 --metrics "$OUT/a.jsonl" > "$OUT/a.log" 2>&1 || { cat "$OUT/a.log" >&2; return 1; }
    summary "$OUT/a.jsonl"
}

twins() {
    taskset -c 1 "$TRAIN" $ARGS --batch 128 --epochs 20 --max-steps 100000 > "$OUT/b.log" 2>&1 &
    other=$!
    sleep 1 # the twin is training (past loading the data) before the timed run starts; it is
    # stopped when the timed run ends
    taskset -c 0 "$TRAIN" $ARGS --batch 128 --metrics "$OUT/a.jsonl" > "$OUT/a.log" 2>&1
    rc=$?
    kill "$other" 2> /dev/null
    wait "$other" 2> /dev/null
    [ $rc -eq 0 ] || { cat "$OUT/a.log" >&2; return 1; }
    summary "$OUT/a.jsonl"
}

ranks2() {
    "$RUN" -np 2 "$TRAIN" $ARGS --batch 256 --metrics "$OUT/a.jsonl" > "$OUT/a.log" 2>&1 || { cat "$OUT/a.log" >&2; return 1; }
    summary "$OUT/a.jsonl"
}

unpinned() { (export CHORUS_BIND=none; ranks2); }

echo "train_factors: MLP 784-512-256-10, 128 samples per rank per step, $STEPS timed steps after $WARMUP, $ROUNDS rounds"
echo "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo | head -n 1);" \
    "L2 $(cat /sys/devices/system/cpu/cpu0/cache/index2/size 2>/dev/null) per core" \
    "(shared with CPUs $(cat /sys/devices/system/cpu/cpu0/cache/index2/shared_cpu_list 2>/dev/null));" \
    "L3 $(cat /sys/devices/system/cpu/cpu0/cache/index3/size 2>/dev/null); load before: $(load)"
: > "$OUT/results"
r=1
while [ "$r" -le "$ROUNDS" ]; do
    for v in solo twins ranks2 unpinned; do
        line=$($v) || exit 1
        echo "$v $line" >> "$OUT/results"
    done
    echo "round $r: load $(load)"
    r=$((r + 1))
done
echo "load after: $(load)"
echo
awk '
function stat(name, col,   n, i, j, t, a) {
    n = 0
    for (i = 1; i <= NR; i++) if (nm[i] == name) a[++n] = f[i, col]
    for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
    lo = a[1]; hi = a[n]
    return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function row(label, name,   s, c, w) {
    s = stat(name, 2); sl = lo; sh = hi
    c = stat(name, 3); w = stat(name, 4)
    if (name ~ /ranks2|unpinned/)
        printf "| %s | %.3f (%.3f-%.3f) | %.3f | %.3f | %.3f | %.2f |\n", label, s, sl, sh, c, w, s - c - w, solo_s / s
    else
        printf "| %s | %.3f (%.3f-%.3f) | | | | %.2f |\n", label, s, sl, sh, solo_s / s
}
{ nm[NR] = $1; f[NR, 2] = $2; f[NR, 3] = $3; f[NR, 4] = $4 }
END {
    solo_s = stat("solo", 2)
    printf "| run | step, ms (min-max) | compute | allreduce wait | rest (optimizer, bookkeeping) | efficiency (solo step / step) |\n"
    printf "|---|---|---|---|---|---|\n"
    row("1 rank on CPU 0 alone", "solo")
    row("1 rank on CPU 0, an independent 1-rank run on CPU 1", "twins")
    row("2 ranks, pinned (chorus-run default)", "ranks2")
    row("2 ranks, CHORUS_BIND=none", "unpinned")
}' "$OUT/results"
