#!/bin/sh
# compare_shm: Chorus on one host against Open MPI shared memory, Gloo and the memory bound.
#
#   bench/compare_shm.sh                 # np 2 and 4, 4 B .. 64 MiB, factor 4
#   NPS=2 REPEAT=3 bench/compare_shm.sh  # np 2 only, three interleaved runs, medians
#
# For each np in $NPS (default "2 4"; np above the core count is oversubscribed and the table
# says so), REPEAT times, interleaved:
#   chorus   chorus-run -np N -- chorus-bench --coll allreduce ...   (default transport; CHORUS_SHM
#            is removed from the environment)
#   ompi     mpirun --mca pml ob1 --mca btl vader,self -np N bench/mpi_allreduce
#   gloo     bench/gloo_allreduce.py -np N   (torch.distributed gloo, CPU tensors, TCP loopback)
# plus bench/membw once before and once after (copy and c=a+b bandwidth, 1 thread and all
# cores; the better of the two runs is used). The table shows each library's time, busbw and
# percentage of the memory bound, and chorus/ompi, chorus/gloo ratios. Bound: an allreduce of
# S bytes over P ranks reads P*S and writes P*S bytes, t >= 2*P*S / sum_bw, as busbw
# sum_bw*(P-1)/P^2 (only meaningful for sizes beyond the last-level cache).
# Knobs (BUILD, MIN, MAX, FACTOR, REPEAT, OUT, NPS, GLOO=0 to skip Gloo, ...): bench/common.sh.
# Exit status 1 if any run failed or reported wrong results.
set -eu
# shellcheck source=bench/common.sh
. "$(cd "$(dirname "$0")" && pwd)/common.sh"
NPS=${NPS:-2 4}
GLOO=${GLOO:-1}

build_baselines
run_logged membw.before "$OUT/membw" -t "1,$NCPU"
DESCRIBE_MEMBW=$OUT/membw.before.txt describe_env >"$OUT/env.txt"
have_chorus || say "bench: chorus-bench missing at $CHORUS_BENCH: running the baselines only"
# Which shared-memory allreduce Chorus will use here (single copy needs the kernel's consent:
# Yama ptrace_scope, seccomp), and the load, for the record.
{
    echo "# yama ptrace_scope: $(cat /proc/sys/kernel/yama/ptrace_scope 2>/dev/null || echo none)"
    if have_chorus; then
        env -u CHORUS_SHM CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=SHM "$CHORUS_RUN" -np 2 -- \
            "$CHORUS_BENCH" -c allreduce -b 4 -e 4 -n 1 2>&1 |
            sed -n 's/.*CHORUS INFO \(single-copy allreduce .*\)/# chorus: \1/p' | head -n 1
    fi
    echo "# load before: $(uptime | sed 's/.*load average/load average/')"
} >>"$OUT/env.txt"

for np in $NPS; do
    r=1
    while [ "$r" -le "$REPEAT" ]; do
        if have_chorus; then
            run_chorus "chorus.np$np.$r" "$np" -u CHORUS_SHM
        fi
        run_ompi "ompi.np$np.$r" "$np" --mca btl vader,self
        if [ "$GLOO" = 1 ]; then
            run_gloo "gloo.np$np.$r" "$np"
        fi
        r=$((r + 1))
    done
done
run_logged membw.after "$OUT/membw" -t "1,$NCPU"
echo "# load after: $(uptime | sed 's/.*load average/load average/')" >>"$OUT/env.txt"

# The better run of membw, row by row.
awk '!/^#/ && NF == 3 { k = $1 " " $2; if (!(k in best) || $3 > best[k]) best[k] = $3;
                        if (!(k in seen)) { seen[k] = 1; order[++n] = k } }
     END { print "# membw: best of the runs before and after"; print "# kernel threads GBps";
           for (i = 1; i <= n; i++) print order[i], best[order[i]] }' \
    "$OUT/membw.before.txt" "$OUT/membw.after.txt" >"$OUT/membw.txt"

{
    cat "$OUT/env.txt"
    echo "# allreduce float32 sum on one host; $MIN..$MAX x$FACTOR; REPEAT=$REPEAT"
    echo "#   chorus: chorus-run -np N -- chorus-bench (default transport)"
    echo "#   ompi:   mpirun --mca pml ob1 --mca btl vader,self"
    [ "$GLOO" = 1 ] && echo "#   gloo:   torch.distributed gloo, CPU tensors, OMP_NUM_THREADS=1"
    for np in $NPS; do
        note=""
        [ "$np" -gt "$NCPU" ] && note=" (OVERSUBSCRIBED: $np ranks on $NCPU cores)"
        gloo_spec=""
        [ "$GLOO" = 1 ] && gloo_spec="gloo=$(files "gloo.np$np")"
        echo
        # shellcheck disable=SC2086  # gloo_spec is one word or nothing
        "$PYTHON" "$BENCH_DIR/benchtab.py" --np "$np" --membw "$OUT/membw.txt" \
            --title "== np=$np$note ==" "$(chorus_spec "chorus.np$np")" \
            "ompi=$(files "ompi.np$np")" $gloo_spec
    done
} | tee "$OUT/table.txt"
say "bench: raw outputs and table in $OUT"
exit "$FAILED"
