#!/bin/sh
# compress.sh - time to accuracy with gradient compression on a slow link: a namespace cluster
# (tests/net/cluster.sh) of 2 hosts x 1 rank whose links are shaped with tbf, for each RATE in
# turn (100mbit, then 1gbit), chorus-train --model mlp on Fashion-MNIST with each compressor
# of COMPRESS (none fp16 topk:0.01 powersgd:2), evaluated on the test set every EVAL steps
# (--eval-every: the training time so far, evaluations left out), for EPOCHS epochs (no
# --time-limit: it would stretch the learning-rate schedule over the time instead). The table
# gives, per rate and compressor, the bytes a rank sends per step, the training time until the
# test accuracy first reaches TARGET, the best accuracy seen, and the speed-up over no
# compression; a gnuplot PNG
# (PLOT, default docs/compress.png) draws test accuracy against training time, one panel per
# rate, one line per compressor.
#
#   sudo sh bench/compress.sh        RATES="100mbit 1gbit" TARGET=0.85 EVAL=20 EPOCHS=3
# Needs root (namespaces), tc, gnuplot (make bench-compress installs gnuplot-nox); run after
# make trainer. The metrics files and logs stay in the directory printed first.
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
BUILD=${BUILD:-build}
RATES=${RATES:-100mbit 1gbit}
COMPRESS=${COMPRESS:-none fp16 topk:0.01 powersgd:2}
TARGET=${TARGET:-0.85}
EVAL=${EVAL:-20}
EPOCHS=${EPOCHS:-3}
PLOT=${PLOT:-docs/compress.png}
case "$PLOT" in /*) ;; *) PLOT=$ROOT/$PLOT ;; esac
TRAIN=$ROOT/$BUILD/bin/chorus-train
[ -x "$TRAIN" ] || { echo "compress: $TRAIN is missing (make trainer)" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "compress: needs root (network namespaces)" >&2; exit 1; }
command -v gnuplot > /dev/null || { echo "compress: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
RES=$(mktemp -d "${TMPDIR:-/tmp}/compress.XXXXXX")
load() { cut -d' ' -f1-3 /proc/loadavg; }
echo "# compress: results in $RES; 2 hosts x 1 rank, mlp, target test accuracy $TARGET, evaluation every $EVAL steps, $EPOCHS epochs; $(nproc) cores; load before: $(load)"
echo "# $(git describe --always --dirty 2>/dev/null)"

# One rate: a cluster of its own, removed when the subshell ends (cluster.sh's trap).
one_rate() (
    rate=$1
    . tests/net/cluster.sh
    cluster_up cz 2 "$rate"
    a1=$(cluster_addr 1)
    for c in $COMPRESS; do
        f=$(echo "$rate-$c" | tr ':' '_')
        p2=""
        for r in 0 1; do
            ip netns exec "$(cluster_host $((r + 1)))" env RANK=$r WORLD_SIZE=2 LOCAL_RANK=0 \
                LOCAL_WORLD_SIZE=1 MASTER_ADDR="$a1" MASTER_PORT=29650 CHORUS_JOB_ID="cz-$f-$tag" \
                "$TRAIN" --model mlp --epochs "$EPOCHS" --compress "$c" \
                --eval-every "$EVAL" --metrics "$RES/$f.jsonl" > "$RES/$f.$r.log" 2>&1 &
            p2="$p2 $!"
            pids="$pids $!"
        done
        for p in $p2; do wait "$p" || echo "compress: $rate $c: a rank failed, see $RES/$f.*.log" >&2; done
        grep '"test_acc"' "$RES/$f.jsonl" |
            sed 's/.*"train_s":\([0-9.]*\),.*"test_acc":\([0-9.]*\).*/\1 \2/' > "$RES/$f.dat"
        sent=$(sed -n 's/.*a rank sends \([0-9.]*\)%.*/\1/p' "$RES/$f.0.log")
        echo "$rate $c ${sent:-100} $(load | cut -d' ' -f1)" >> "$RES/runs"
    done
)

for rate in $RATES; do one_rate "$rate" || echo "compress: $rate failed" >&2; done

# The table: time to TARGET per rate and compressor, speed-up against none at that rate.
awk -v target="$TARGET" -v res="$RES" '
function first(file,   line, n, t, a, best) {
    hit = ""; best = 0
    while ((getline line < file) > 0) {
        n = split(line, v, " "); t = v[1]; a = v[2]
        if (a > best) best = a
        if (hit == "" && a >= target) hit = t
    }
    close(file)
    return best
}
{
    rate = $1; c = $2; f = rate "-" c; gsub(":", "_", f)
    best = first(res "/" f ".dat")
    if (c == "none") base[rate] = hit
    if (rate != last) {
        printf "\n## %s\n\n| compressor | bytes sent per step (of dense) | time to %.2f test accuracy (s) | best test accuracy | speed-up over none | load |\n|---|---|---|---|---|---|\n", rate, target
        last = rate
    }
    up = (hit != "" && base[rate] != "") ? sprintf("%.1fx", base[rate] / hit) : "-"
    printf "| %s | %s%% | %s | %.4f | %s | %s |\n", c, $3, hit == "" ? "not reached" : hit, best, up, $4
}' "$RES/runs"

# The plot: one panel per rate, test accuracy against training time, one line per compressor.
n=$(echo $RATES | wc -w)
{
    echo "set terminal pngcairo size 1000,$((380 * n)) font 'sans,10'"
    echo "set output '$PLOT'"
    echo "set multiplot layout $n,1"
    echo "set grid; set key bottom right; set yrange [0.6:0.9]"
    echo "set xlabel 'training time (s, evaluations excluded)'; set ylabel 'test accuracy'"
    for rate in $RATES; do
        echo "set title 'mlp on Fashion-MNIST, 2 hosts x 1 rank, $rate link (target $TARGET dashed)'"
        printf "plot %s title 'target' dt 2 lc rgb 'gray'" "$TARGET"
        for c in $COMPRESS; do
            f=$(echo "$rate-$c" | tr ':' '_')
            printf ", '%s' using 1:2 with linespoints pt 7 ps 0.5 title '%s'" "$RES/$f.dat" "$c"
        done
        echo
    done
    echo "unset multiplot"
} > "$RES/plot.gp"
gnuplot "$RES/plot.gp" && printf "\nplot: %s\n" "$PLOT"
