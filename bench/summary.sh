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
#            2 ranks, 1 rank at batch 128 and at 256; PyTorch DDP (gloo) 2 ranks; PyTorch in
#            one process with 2 intra-op threads, as installed and tuned (bench/train_compare.sh)
#   balance  chorus-train --balance dynamic against static, MLP and CNN, with rank 1 sharing
#            its core with a busy loop (rank 0 alone on CPU 0, rank 1 and the loop on CPU 1:
#            tests/scripts/cpucap.sh's pinning) and with equal ranks (one core each)
#
# Each cell is the median of the REPEAT runs with their range; ratios are taken within each
# round (the two runs beside each other) and their median and range reported. The cells go to
# $SUMDIR/<UTC stamp>.tsv; the newest earlier .tsv there is compared cell by cell (within TOL
# per cent?). WRITE=1 rewrites the summary between the bench-summary markers in
# docs/PERFORMANCE.md (host topology, date, commit, command, table); WRITE=0 leaves it.
#
# Knobs (environment):
#   REPEAT=3 WRITE=1 TOL=15 PARTS="shm tcp train balance" BUILD=build SUMDIR=$BUILD/bench-summary
#   TRAIN_STEPS=200 TRAIN_WARMUP=20          timed and warm-up steps of every training run
#   BAL_MLP_STEPS=300 BAL_MLP_BATCH=512      balance runs: steps (all timed: the shares start
#   BAL_CNN_STEPS=60 BAL_CNN_BATCH=256       even and adapt every 10 steps) and global batch
#   DOC=docs/PERFORMANCE.md
# Raw outputs stay in $SUMDIR/<stamp>/. Exit status 1 if a run failed (its cells are missing).
set -eu
REPEAT=${REPEAT:-3}
WRITE=${WRITE:-1}
TOL=${TOL:-15}
PARTS=${PARTS:-shm tcp train balance}
TRAIN_STEPS=${TRAIN_STEPS:-200}
TRAIN_WARMUP=${TRAIN_WARMUP:-20}
BAL_MLP_STEPS=${BAL_MLP_STEPS:-300}
BAL_MLP_BATCH=${BAL_MLP_BATCH:-512}
BAL_CNN_STEPS=${BAL_CNN_STEPS:-60}
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
case " $PARTS " in *" train "* | *" balance "*)
    [ -x "$TRAIN" ] || { say "summary: build first (make trainer): $TRAIN is missing"; exit 1; } ;;
esac
build_baselines

# shellcheck source=tests/scripts/cpucap.sh
. "$ROOT/tests/scripts/cpucap.sh"
BUSY_UP=""
trap '[ -z "$BUSY_UP" ] || cpucap_down' EXIT
trap 'exit 1' INT TERM HUP

say "summary: $REPEAT round(s) of: $PARTS; raw outputs in $OUT"
run_logged membw "$OUT/membw" -t "1,$NCPU"
TOPO_MEMBW=$OUT/membw.txt BUILD=$BUILD sh "$BENCH_DIR/topology.sh" >"$OUT/topology.txt"
cut -d' ' -f1-3 /proc/loadavg >"$OUT/load.before"

# sweep NAME NP MIN MAX FACTOR KIND [VAR=value...]: one chorus-bench (KIND chorus) or
# mpi_allreduce (KIND ompi: the rest are mca flags) sweep.
sweep() {
    _n=$1 _p=$2 MIN=$3 MAX=$4 FACTOR=$5 _k=$6
    shift 6
    if [ "$_k" = chorus ]; then run_chorus "$_n" "$_p" "$@"; else run_ompi "$_n" "$_p" "$@"; fi
}

# bal NAME MODEL POLICY SLOW: one chorus-train balance run; SLOW=1 puts rank 1 on CPU 1 beside
# the busy loop and rank 0 on CPU 0 (cpucap_exec.sh); else chorus-run pins one rank per core.
bal() {
    if [ "$2" = mlp ]; then _s=$BAL_MLP_STEPS _b=$BAL_MLP_BATCH; else _s=$BAL_CNN_STEPS _b=$BAL_CNN_BATCH; fi
    _pin=""
    [ "$4" = 1 ] && _pin=" 1 "
    run_logged "$1" env CPUCAP_PIN_SLOW="$_pin" "$CHORUS_RUN" -np 2 sh "$ROOT/tests/scripts/cpucap_exec.sh" \
        "$TRAIN" --model "$2" --batch "$_b" --epochs 1 --max-steps "$_s" --no-eval \
        --balance "$3" --log-every 1000000 --metrics "$OUT/$1.jsonl"
}

r=1
while [ "$r" -le "$REPEAT" ]; do
    say "summary: round $r of $REPEAT, load $(cut -d' ' -f1-3 /proc/loadavg)"
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
                ONLY="chorus_2_fused chorus_1_half chorus_1 ddp_2 plain_2t plain_2t_tuned" \
                sh "$BENCH_DIR/train_compare.sh"
            ;;
        balance)
            set +e # tests/scripts/cpucap.sh is written for set -u scripts
            for m in mlp cnn; do
                CPUCAP_FORCE_PIN=1
                cpucap_up chorus-summary || { say "summary: cannot pin a busy loop (taskset)"; exit 1; }
                BUSY_UP=1
                cpucap_rank 0 100000 && cpucap_rank 1 50000 # starts the loop on CPU 1
                bal "bal.$m.busy.static.$r" "$m" static 1
                bal "bal.$m.busy.dynamic.$r" "$m" dynamic 1
                cpucap_down
                BUSY_UP=""
                CPUCAP_PIN_SLOW=""
                bal "bal.$m.equal.static.$r" "$m" static 0
                bal "bal.$m.equal.dynamic.$r" "$m" dynamic 0
            done
            set -e
            ;;
        *) say "summary: unknown part '$part' (shm tcp train balance)"; exit 2 ;;
        esac
    done
    r=$((r + 1))
done
cut -d' ' -f1-3 /proc/loadavg >"$OUT/load.after"
WALL=$(($(date +%s) - T0))

CMD="make bench-summary"
[ "$REPEAT" = 3 ] || CMD="$CMD REPEAT=$REPEAT"
[ "$PARTS" = "shm tcp train balance" ] || CMD="$CMD PARTS=\"$PARTS\""
"$PYTHON" "$BENCH_DIR/summary.py" --out "$OUT" --repeat "$REPEAT" --tsv "$SUMDIR/$STAMP.tsv" \
    --tol "$TOL" --write "$WRITE" --doc "$DOC" --command "$CMD" --wall "$WALL" \
    --params "TRAIN_STEPS=$TRAIN_STEPS TRAIN_WARMUP=$TRAIN_WARMUP BAL_MLP_STEPS=$BAL_MLP_STEPS BAL_MLP_BATCH=$BAL_MLP_BATCH BAL_CNN_STEPS=$BAL_CNN_STEPS BAL_CNN_BATCH=$BAL_CNN_BATCH" ||
    FAILED=1
say "summary: $WALL s of measuring; cells in $SUMDIR/$STAMP.tsv, raw outputs in $OUT"
exit "$FAILED"
