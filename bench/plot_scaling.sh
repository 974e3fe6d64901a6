#!/bin/sh
# Scaling pictures for docs/PERFORMANCE.md, drawn with gnuplot (make plot-deps):
#   docs/img/scaling_train.png  samples/s of chorus-train (mlp and cnn, --grad-sync engine)
#                               against ranks, 1 and 2 (this machine has 2 cores), with the
#                               ideal line (1 rank's speed times the ranks)
#   docs/img/busbw_ranks.png    allreduce busbw of 1 MiB and 16 MiB against ranks 2..MAXNP
#                               (chorus-bench; above the core count the ranks share cores)
#   docs/img/busbw_algos.png    chorus-bench --plot: busbw against size, one line per
#                               allreduce algorithm, 2 ranks
# The numbers are also printed as tables. Knobs: OUT=docs/img MAXNP=4 STEPS=300 (mlp; cnn a
# fifth) REPEAT=1 (runs of each point; the best is kept, as the least disturbed by load).
#   make plots      (or: BUILD=build sh bench/plot_scaling.sh)
set -eu
BUILD=${BUILD:-build}
OUT=${OUT:-docs/img}
MAXNP=${MAXNP:-4}
STEPS=${STEPS:-300}
REPEAT=${REPEAT:-1}
export PATH="$PWD/$BUILD/bin:$PATH"
command -v gnuplot > /dev/null 2>&1 || {
    echo "plot_scaling.sh: gnuplot is not installed: sudo apt-get install -y gnuplot-nox (or make plot-deps)" >&2
    exit 1
}
mkdir -p "$OUT"
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
echo "load: $(cat /proc/loadavg)"

# best NUMBERS...: the largest
best() { printf '%s\n' "$@" | sort -g | tail -1; }

echo "# chorus-train --grad-sync engine: samples/s against ranks (best of $REPEAT)"
echo "# model ranks samples/s"
for model in mlp cnn; do
    steps=$STEPS
    [ $model = cnn ] && steps=$((STEPS / 5))
    for np in 1 2; do
        v=""
        i=0
        while [ $i -lt "$REPEAT" ]; do
            s=$(chorus-run -np $np chorus-train --model $model --max-steps $steps --no-eval \
                --grad-sync engine 2>&1 | sed -n 's/.*done: .* steps, \([0-9.]*\) samples\/s.*/\1/p')
            v="$v $s"
            i=$((i + 1))
        done
        # shellcheck disable=SC2086
        echo "$model $np $(best $v)" | tee -a "$d/train.dat"
    done
done

echo "# chorus-bench allreduce float sum: busbw (GB/s, out-of-place) against ranks (best of $REPEAT)"
echo "# ranks busbw_1MiB busbw_16MiB"
np=2
while [ $np -le "$MAXNP" ]; do
    row="$np"
    for size in 1M 16M; do
        v=""
        i=0
        while [ $i -lt "$REPEAT" ]; do
            b=$(chorus-run -np $np chorus-bench -b $size -e $size -c 0 | awk '$1 == "[0]" && $2 ~ /^[0-9]+$/ {print $9}')
            v="$v $b"
            i=$((i + 1))
        done
        # shellcheck disable=SC2086
        row="$row $(best $v)"
    done
    echo "$row" | tee -a "$d/ranks.dat"
    np=$((np + 1))
done

chorus-run -np 2 chorus-bench -b 4K -e 64M -f 4 --algo auto,shm_oneshot,shm_pipelined,direct_ring,ring \
    --plot "$OUT/busbw_algos.png" | sed 's/^\[0\] //'

gnuplot << EOF2
set terminal png size 800,500 noenhanced
set grid
set key top left
set output "$OUT/scaling_train.png"
set title "chorus-train --grad-sync engine on this 2-core machine: samples/s against ranks"
set xlabel "ranks"
set ylabel "samples/s"
set xrange [0.8:2.2]
set xtics 1
set yrange [0:*]
one_mlp = real(system("awk '\$1==\"mlp\" && \$2==1 {print \$3}' $d/train.dat"))
one_cnn = real(system("awk '\$1==\"cnn\" && \$2==1 {print \$3}' $d/train.dat"))
plot "< awk '\$1==\"mlp\"' $d/train.dat" using 2:3 with linespoints title "mlp", \
     "< awk '\$1==\"cnn\"' $d/train.dat" using 2:3 with linespoints title "cnn", \
     one_mlp * x with lines dashtype 2 title "mlp, ideal", \
     one_cnn * x with lines dashtype 2 title "cnn, ideal"
set output "$OUT/busbw_ranks.png"
set key top right
set title "chorus-bench allreduce on one host: busbw against ranks (2 cores)"
set xlabel "ranks"
set ylabel "busbw (GB/s)"
set xrange [1.8:$MAXNP.2]
plot "$d/ranks.dat" using 1:2 with linespoints title "1 MiB", \
     "$d/ranks.dat" using 1:3 with linespoints title "16 MiB"
EOF2
ls -l "$OUT"/scaling_train.png "$OUT"/busbw_ranks.png "$OUT"/busbw_algos.png
echo "load: $(cat /proc/loadavg)"
