#!/bin/sh
# divergence.sh - the cost of chorus-train --check-divergence on the MLP: REPEAT interleaved
# runs without the option and with --check-divergence EVERY (each NP ranks, STEPS steps, no
# evaluation). Prints, as a Markdown table (docs/PERFORMANCE.md): samples/s without and with
# (median, min-max over the runs), the difference of the medians, and the time the trainer
# measured inside the checks (ms per check, and its share of the training time: the direct
# measure, which the run-to-run noise of the end-to-end numbers on a shared machine hides);
# and the load average before and after. Exit status 1 when the measured share is 1% or more.
#
#   sh bench/divergence.sh     BUILD=build NP=2 STEPS=600 EVERY=100 REPEAT=5 BATCH=256
set -u
BUILD=${BUILD:-build}
NP=${NP:-2}
STEPS=${STEPS:-600}
EVERY=${EVERY:-100}
REPEAT=${REPEAT:-5}
BATCH=${BATCH:-256}
TRAIN=$BUILD/bin/chorus-train
RUN=$BUILD/bin/chorus-run
OUT=$(mktemp -d "${TMPDIR:-/tmp}/divergence.XXXXXX")
trap 'rm -rf "$OUT"' EXIT INT TERM
[ -x "$TRAIN" ] || { echo "divergence: build first (make trainer): $TRAIN is missing" >&2; exit 1; }
load0=$(cut -d' ' -f1-3 /proc/loadavg)
common="--model mlp --no-eval --max-steps $STEPS --batch $BATCH --seed 1"
i=1
while [ $i -le "$REPEAT" ]; do
    for mode in off on; do
        extra=""
        [ $mode = on ] && extra="--check-divergence $EVERY"
        "$RUN" -np "$NP" "$TRAIN" $common $extra > "$OUT/$mode.$i" 2>&1 ||
            { cat "$OUT/$mode.$i"; echo "divergence: run $i ($mode) failed" >&2; exit 1; }
    done
    i=$((i + 1))
done
load1=$(cut -d' ' -f1-3 /proc/loadavg)
# samples/s of every run, and the checks' ms and share
for mode in off on; do
    cat "$OUT"/$mode.* | sed -n 's/.*done: [0-9]* steps, \([0-9.]*\) samples\/s.*/\1/p' > "$OUT/$mode.sps"
done
cat "$OUT"/on.* | sed -n 's/.*divergence checks: [0-9]*, \([0-9.]*\) ms each, \([0-9.]*\)% .*/\1 \2/p' > "$OUT/checks"
# med FILE COLUMN FORMAT: "median (min-max)"
med() {
    sort -g -k"$2" "$1" | awk -v c="$2" -v f="$3" '{v[NR] = $c} END {
        m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
        printf f " (" f "-" f ")", m, v[1], v[NR] }'
}
median() { sort -g -k"$2" "$1" | awk -v c="$2" '{v[NR] = $c} END {
        print NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
off=$(median "$OUT/off.sps" 1)
on=$(median "$OUT/on.sps" 1)
share=$(median "$OUT/checks" 2)
echo "divergence: chorus-run -np $NP chorus-train $common [--check-divergence $EVERY]," \
    "$REPEAT interleaved runs each; load average before: $load0, after: $load1"
echo
echo "| samples/s without | samples/s with --check-divergence $EVERY | difference of the medians | ms per check (measured) | share of the training time (measured) |"
echo "|---|---|---|---|---|"
echo "| $(med "$OUT/off.sps" 1 %.0f) | $(med "$OUT/on.sps" 1 %.0f) | $(awk -v a="$off" -v b="$on" 'BEGIN {printf "%+.1f%%", 100 * (b - a) / a}') | $(med "$OUT/checks" 1 %.3f) | $(med "$OUT/checks" 2 %.3f)% |"
awk -v s="$share" 'BEGIN {exit !(s < 1)}' || { echo "divergence: the checks took $share% of the training time (target: under 1%)"; exit 1; }
