#!/bin/sh
# summary.sh - docs/PERFORMANCE.md's summary table, measured on the machine it runs on
# (`make bench-summary` builds what it needs and runs this). At np=2, REPEAT rounds, every
# round running each measurement once, in turn (so the machine's noise hits every row alike):
#
#   shm      allreduce float32 sum over shared memory, 4 B and 1-64 MiB: chorus-run -np 2
#            chorus-bench (the default transport) against Open MPI vader (bench/mpi_allreduce);
#            Chorus's busbw as a percentage of the memory bound (bench/membw, taken once)
#   tcp      the same over loopback TCP, 4 B, 16 and 64 MiB: CHORUS_SHM=0 against Open MPI
#            btl tcp (as bench/compare_tcp.sh)
#   train    the MLP (784-512-256-10, global batch 256, 128 per rank at 2 ranks): chorus-train
#            2 ranks (the default --grad-sync fused, and engine), 1 rank at batch 128 and at 256; PyTorch DDP (gloo) 2 ranks; PyTorch in
#            one process with 2 intra-op threads, tuned (OMP_WAIT_POLICY=PASSIVE: its faster
#            setting here; TORCH_DEFAULT=1 adds it as installed) (bench/train_compare.sh)
#   balance  chorus-train --balance dynamic against static, MLP and CNN, with rank 1 sharing
#            its core with a busy loop (rank 0 alone on CPU 0, rank 1 and the loop on CPU 1, as
#            tests/scripts/cpucap.sh pins them; no cgroup) and with equal ranks (one core each)
#
# Each cell is the median of the REPEAT runs with their range; ratios are taken within each
# round (the two runs beside each other) and their median and range reported. The cells go to
# $SUMDIR/<UTC stamp>.tsv; the newest earlier .tsv there is compared cell by cell (within TOL
# per cent?). The memory bandwidth (bench/membw, 1 thread and all cores) is taken before the
# first round and after the last, the better of the two kept. WRITE=1 rewrites the summary between the bench-summary markers in
# docs/PERFORMANCE.md (host topology, date, commit, command, table); WRITE=0 leaves it.
#
# Knobs (environment):
#   REPEAT=3 WRITE=1 TOL=15 PARTS="shm tcp train balance" BUILD=build SUMDIR=$BUILD/bench-summary
#   TRAIN_STEPS=200 TRAIN_WARMUP=20          timed and warm-up steps of every training run
#   TORCH_DEFAULT=                           1: also PyTorch in one process with its default
#                                            threading (OpenMP spin-waits: several times slower
#                                            on 2 cores, and very slow beside other load)
#   BAL_MLP_STEPS=120 BAL_MLP_BATCH=2048     balance runs: steps (all timed: the shares start
#   BAL_CNN_STEPS=100 BAL_CNN_BATCH=256      even and adapt every 10 steps) and global batch
#   DOC=docs/PERFORMANCE.md
# Raw outputs stay in $SUMDIR/<stamp>/. Exit status 1 if a run failed (its cells are missing).
set -eu
REPEAT=${REPEAT:-3}
WRITE=${WRITE:-1}
TOL=${TOL:-15}
PARTS=${PARTS:-shm tcp train balance}
TRAIN_STEPS=${TRAIN_STEPS:-200}
TRAIN_WARMUP=${TRAIN_WARMUP:-20}
BAL_MLP_STEPS=${BAL_MLP_STEPS:-120}
BAL_MLP_BATCH=${BAL_MLP_BATCH:-2048}
BAL_CNN_STEPS=${BAL_CNN_STEPS:-100}
BAL_CNN_BATCH=${BAL_CNN_BATCH:-256}
STAMP=$(date -u '+%Y%m%dT%H%M%SZ')
T0=$(date +%s)
_root=$(cd "$(dirname "$0")/.." && pwd)
_build=${BUILD:-build}
case $_build in /*) ;; *) _build=$_root/$_build ;; esac
SUMDIR=${SUMDIR:-$_build/bench-summary}
OUT=$SUMDIR/$STAMP
mkdir -p "$OUT"
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "$0")" && pwd)/common.sh"
DOC=${DOC:-$ROOT/docs/PERFORMANCE.md}
TRAIN=$BUILD/bin/chorus-train

have_chorus || { say "summary: build first (make): $CHORUS_BENCH is missing"; exit 1; }
case " $PARTS " in *" balance "*)
    if ! command -v taskset >/dev/null || [ "$NCPU" -lt 2 ]; then
        say "summary: the balance rows need taskset and 2 CPUs"
        exit 1
    fi
    ;;
esac
case " $PARTS " in *" train "* | *" balance "*)
    [ -x "$TRAIN" ] || { say "summary: build first (make trainer): $TRAIN is missing"; exit 1; } ;;
esac
build_baselines

# The busy loop that shares rank 1's core (as tests/scripts/cpucap.sh's pinned mode, but with no
# CPU cgroup: every run here is at normal priority, beside whatever else the machine runs).
BUSY=""
busy_stop() {
    [ -z "$BUSY" ] && return
    kill "$BUSY" 2>/dev/null || :
    wait "$BUSY" 2>/dev/null || :
    BUSY=""
}
trap busy_stop EXIT
trap 'exit 1' INT TERM HUP

say "summary: $REPEAT round(s) of: $PARTS; raw outputs in $OUT"
cut -d' ' -f1-3 /proc/loadavg >"$OUT/load.before"
run_logged membw.before "$OUT/membw" -t "1,$NCPU"

# sweep NAME NP MIN MAX FACTOR KIND [VAR=value...]: one chorus-bench (KIND chorus) or
# mpi_allreduce (KIND ompi: the rest are mca flags) sweep.
sweep() {
    _n=$1 _p=$2 MIN=$3 MAX=$4 FACTOR=$5 _k=$6
    shift 6
    if [ "$_k" = chorus ]; then run_chorus "$_n" "$_p" "$@"; else run_ompi "$_n" "$_p" "$@"; fi
}

# bal NAME MODEL POLICY SLOW: one chorus-train balance run; SLOW=1 puts rank 1 on CPU 1 beside
# the busy loop and rank 0 on CPU 0 (tests/scripts/cpucap_exec.sh); else chorus-run pins one
# rank per core.
bal() {
    if [ "$2" = mlp ]; then _s=$BAL_MLP_STEPS _b=$BAL_MLP_BATCH; else _s=$BAL_CNN_STEPS _b=$BAL_CNN_BATCH; fi
    # enough epochs of the 60000 training images for the steps (--max-steps ends the run)
    _pin=""
    [ "$4" = 1 ] && _pin=" 1 "
    run_logged "$1" env CPUCAP_DIR= CPUCAP_PIN_SLOW="$_pin" "$CHORUS_RUN" -np 2 sh "$ROOT/tests/scripts/cpucap_exec.sh" \
        "$TRAIN" --model "$2" --batch "$_b" --epochs $(((_s * _b + 59999) / 60000)) --max-steps "$_s" --no-eval \
        --balance "$3" --log-every 1000000 --metrics "$OUT/$1.jsonl"
}

r=1
while [ "$r" -le "$REPEAT" ]; do
    say "summary: round $r of $REPEAT, $(date -u +%T) UTC, load $(cut -d' ' -f1-3 /proc/loadavg)"
    for part in $PARTS; do
        case $part in
        shm)
            sweep "shm.chorus.small.$r" 2 4 4 4 chorus -u CHORUS_SHM
            sweep "shm.ompi.small.$r" 2 4 4 4 ompi --mca btl vader,self
            sweep "shm.chorus.big.$r" 2 1M 64M 4 chorus -u CHORUS_SHM
            sweep "shm.ompi.big.$r" 2 1M 64M 4 ompi --mca btl vader,self
            ;;
        tcp)
            sweep "tcp.chorus.small.$r" 2 4 4 4 chorus CHORUS_SHM=0
            sweep "tcp.ompi.small.$r" 2 4 4 4 ompi --mca btl tcp,self --mca btl_tcp_if_include lo
            sweep "tcp.chorus.big.$r" 2 16M 64M 4 chorus CHORUS_SHM=0
            sweep "tcp.ompi.big.$r" 2 16M 64M 4 ompi --mca btl tcp,self --mca btl_tcp_if_include lo
            ;;
        train)
            : >"$OUT/train.$r.results"
            run_logged "train.$r" env REPEAT=1 STEPS="$TRAIN_STEPS" WARMUP="$TRAIN_WARMUP" BATCH=256 \
                BUILD="$BUILD" PYTHON="$PYTHON" TOPO_MEMBW=skip RESULTS="$OUT/train.$r.results" \
                ONLY="chorus_2_fused chorus_2_engine chorus_1_half chorus_1 ddp_2 plain_2t_tuned${TORCH_DEFAULT:+ plain_2t}" \
                sh "$BENCH_DIR/train_compare.sh"
            ;;
        balance)
            for m in mlp cnn; do
                taskset -c 1 sh -c 'while :; do :; done' &
                BUSY=$!
                bal "bal.$m.busy.static.$r" "$m" static 1
                bal "bal.$m.busy.dynamic.$r" "$m" dynamic 1
                busy_stop
                bal "bal.$m.equal.static.$r" "$m" static 0
                bal "bal.$m.equal.dynamic.$r" "$m" dynamic 0
            done
            ;;
        *) say "summary: unknown part '$part' (shm tcp train balance)"; exit 2 ;;
        esac
    done
    r=$((r + 1))
done
run_logged membw.after "$OUT/membw" -t "1,$NCPU"
cut -d' ' -f1-3 /proc/loadavg >"$OUT/load.after"
WALL=$(($(date +%s) - T0))
# The memory bandwidth: the better of the runs before and after, row by row (another
# process's burst lowers one of them).
awk '!/^#/ && NF == 3 { k = $1 " " $2; if (!(k in best) || $3 > best[k]) best[k] = $3;
                        if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
     END { print "# kernel threads GBps"; for (i = 1; i <= n; i++) print order[i], best[order[i]] }' \
    "$OUT/membw.before.txt" "$OUT/membw.after.txt" >"$OUT/membw.txt"
TOPO_MEMBW=$OUT/membw.txt BUILD=$BUILD sh "$BENCH_DIR/topology.sh" | sed '/^# load:/d' >"$OUT/topology.txt"

CMD="make bench-summary"
[ "$REPEAT" = 3 ] || CMD="$CMD REPEAT=$REPEAT"
[ "$PARTS" = "shm tcp train balance" ] || CMD="$CMD PARTS=\"$PARTS\""
"$PYTHON" "$BENCH_DIR/summary.py" --out "$OUT" --repeat "$REPEAT" --tsv "$SUMDIR/$STAMP.tsv" \
    --tol "$TOL" --write "$WRITE" --doc "$DOC" --command "$CMD" --wall "$WALL" \
    --params "TRAIN_STEPS=$TRAIN_STEPS TRAIN_WARMUP=$TRAIN_WARMUP BAL_MLP_STEPS=$BAL_MLP_STEPS BAL_MLP_BATCH=$BAL_MLP_BATCH BAL_CNN_STEPS=$BAL_CNN_STEPS BAL_CNN_BATCH=$BAL_CNN_BATCH" ||
    FAILED=1
say "summary: $WALL s of measuring; cells in $SUMDIR/$STAMP.tsv, raw outputs in $OUT"
exit "$FAILED"
