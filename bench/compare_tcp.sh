#!/bin/sh
# compare_tcp: Chorus over TCP against Open MPI over TCP, 2 ranks on loopback, one run.
#
#   bench/compare_tcp.sh                 # 4 B .. 64 MiB, factor 4
#   REPEAT=3 bench/compare_tcp.sh        # three interleaved runs each, per-size medians
#   LANES="1 2 4" bench/compare_tcp.sh   # Chorus once per CHORUS_TCP_LANES value, side by side
#   VARIANT="CHORUS_TCP_READY_MIN=16G" bench/compare_tcp.sh   # and a column 'variant': Chorus
#                                        # with these settings too, in the same rounds
#
# Runs, in turn (REPEAT times, interleaved so both see the same machine noise):
#   chorus   CHORUS_SHM=0 chorus-run -np 2 -- chorus-bench --coll allreduce -d float32 -o sum ...
#   ompi     mpirun --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo -np 2
#            bench/mpi_allreduce (built here with mpicc)
# and prints one table: time and busbw of each, chorus/ompi busbw and time ratios.
# Without a built chorus-bench the Open MPI baseline still runs (and the table says so).
# Knobs (BUILD, MIN, MAX, FACTOR, REPEAT, OUT, NP, ...): see bench/common.sh.
# Exit status 1 if any run failed or reported wrong results.
set -eu
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "$0")" && pwd)/common.sh"
NP=${NP:-2}
LANES=${LANES:-}
VARIANT=${VARIANT:-}

build_baselines
describe_env >"$OUT/env.txt"
have_chorus || say "bench: chorus-bench missing at $CHORUS_BENCH: running the Open MPI baseline only"

r=1
while [ "$r" -le "$REPEAT" ]; do
    if have_chorus && [ -z "$LANES" ]; then
        run_chorus "chorus.$r" "$NP" CHORUS_SHM=0
    fi
    if have_chorus && [ -n "$VARIANT" ]; then
        # shellcheck disable=SC2086  # one word per setting
        run_chorus "variant.$r" "$NP" CHORUS_SHM=0 $VARIANT
    fi
    if have_chorus; then
        for l in $LANES; do run_chorus "lanes$l.$r" "$NP" CHORUS_SHM=0 CHORUS_TCP_LANES="$l"; done
    fi
    run_ompi "ompi.$r" "$NP" --mca btl tcp,self --mca btl_tcp_if_include lo
    r=$((r + 1))
done

{
    cat "$OUT/env.txt"
    echo "# allreduce float32 sum, $NP ranks on loopback TCP; $MIN..$MAX x$FACTOR; REPEAT=$REPEAT"
    echo "#   chorus: CHORUS_SHM=0 chorus-run -np $NP -- chorus-bench"
    echo "#   ompi:   mpirun --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include lo"
    if [ -z "$LANES" ]; then
        [ -z "$VARIANT" ] || echo "#   variant: the same with $VARIANT"
        # shellcheck disable=SC2046  # the variant's spec is one word or none
        "$PYTHON" "$BENCH_DIR/benchtab.py" --np "$NP" "$(chorus_spec chorus)" \
            $([ -z "$VARIANT" ] || echo "variant=$(files variant)${CHORUS_COLS:+@$CHORUS_COLS}") \
            "ompi=$(files ompi)"
    else
        echo "#   lanesN: the same with CHORUS_TCP_LANES=N"
        specs=""
        for l in $LANES; do specs="$specs lanes$l=$(files "lanes$l")${CHORUS_COLS:+@$CHORUS_COLS}"; done
        # shellcheck disable=SC2086  # one word per label
        "$PYTHON" "$BENCH_DIR/benchtab.py" --np "$NP" $specs "ompi=$(files ompi)"
    fi
} | tee "$OUT/table.txt"
say "bench: raw outputs and table in $OUT"
exit "$FAILED"
