#!/bin/sh
# mpirun.sh - `mpirun -H h1:2,h2:2` (Debian's Open MPI) across two namespace hosts of the test
# cluster (tests/net/cluster.sh), with no -x MASTER_ADDR: rank 0 serves the store on its host's
# address and shares it through mpirun's PMIx server, which libchorus loads at run time.
# mpirun runs inside host 1, so that its daemon on host 2 can reach it; it reaches host 2
# through a remote shell (--mca plm_rsh_agent) that does what ssh does: run the command line
# it is given with sh, here inside the host's namespace (`ip netns exec`). tests/mp/coll_select
# checks every collective on 4 ranks over 2 hosts; each rank's INFO log must show the store
# address from PMIx and a world on 2 hosts. Also checked: neither libchorus.so nor a program
# linked with libchorus.a needs MPI or PMIx (readelf -d).
#
# sh tests/net/mpirun.sh ddp: instead, `mpirun -H h1:1,h2:1` of a DistributedDataParallel
# script on the torch.distributed backend "chorus" (tests/python/torchdist_ddp.py: parameters
# identical to Gloo's) with none of torch's variables: init_process_group meets through PMIx
# and rank 0 serves torch's store on its host's address (chorus_host_address).
#
# sh tests/net/mpirun.sh noserver: a rank that looks like a multi-host mpirun rank
# (PMIX_NAMESPACE set) but has no PMIx server fails at once, saying so (needs no root).
BUILD=${BUILD:-build}
prog=$BUILD/tests/mp/coll_select
[ -x "$prog" ] && [ -x "$BUILD/tests/mp/reinit" ] || { echo "mpirun: test programs are not built"; exit 1; }
if [ "${1:-}" = noserver ]; then
    out=$(env -u MASTER_ADDR -u MASTER_PORT -u CHORUS_STORE_ADDR -u CHORUS_RANK -u CHORUS_SIZE \
        OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_LOCAL_SIZE=1 \
        PMIX_NAMESPACE=nonesuch CHORUS_DEBUG=INFO CHORUS_TIMEOUT_S=20 timeout 30 "$prog" 2>&1)
    rc=$?
    echo "$out" | grep "error:"
    [ $rc != 0 ] && [ $rc != 124 ] || { echo "mpirun: exit $rc, expected a failure at once"; exit 1; }
    echo "$out" | grep -q "PMIx_Init failed: .*PMIX_NAMESPACE is set but no PMIx server answered" ||
        { echo "$out"; echo "mpirun: no message naming the missing PMIx server"; exit 1; }
    echo "mpirun: OK (no PMIx server: a clear error, no wait)"
    exit 0
fi

command -v mpirun > /dev/null 2>&1 && command -v readelf > /dev/null 2>&1 ||
    { echo "SKIP mpirun: mpirun or readelf is missing (Debian: openmpi-bin libpmix2 binutils)"; exit 0; }
for f in "$prog" "$BUILD/lib/libchorus.so"; do
    needed=$(readelf -d "$f" | grep NEEDED)
    if echo "$needed" | grep -E -i "mpi|pmix|open-pal|open-rte"; then
        echo "mpirun: $f links MPI or PMIx"
        exit 1
    fi
done
echo "mpirun: libchorus.so needs only:" $(echo "$needed" | sed 's/.*\[\(.*\)\]/\1/')

. tests/net/cluster.sh
cluster_up mpirun 2 "" 10.234.0
h1=$(cluster_host 1)
h2=$(cluster_host 2)

# The remote shell: "AGENT HOST COMMAND..." runs COMMAND... as one shell line on HOST, as ssh.
cat > "$logs/rsh" << 'EOF2'
#!/bin/sh
host=$1
shift
exec ip netns exec "$host" sh -c "$*"
EOF2
chmod +x "$logs/rsh"

if [ "${1:-}" = ddp ]; then
    py=${TEST_PYTHON:-/usr/bin/python3}
    [ -e "$BUILD/lib/_chorus_torchdist.so" ] || { echo "mpirun: the torch.distributed backend is not built"; exit 1; }
    # The script ends with os._exit, which skips atexit and so libchorus's PMIx_Finalize: Open
    # MPI would call that an abnormal end. Here its os._exit is a normal exit.
    ddp='import os, runpy, sys
os._exit = sys.exit
runpy.run_path("tests/python/torchdist_ddp.py", run_name="__main__")'
    ip netns exec "$h1" env -u MASTER_ADDR -u MASTER_PORT -u CHORUS_STORE_ADDR -u CHORUS_RANK \
        -u CHORUS_SIZE -u CHORUS_JOB_ID -u CHORUS_IFACE -u RANK -u WORLD_SIZE -u LOCAL_RANK \
        timeout 120 mpirun --allow-run-as-root --mca plm_rsh_agent "$logs/rsh" -H "$h1:1,$h2:1" \
        --output-filename "$logs/out" -x PYTHONPATH="$PWD/python" ${CHORUS_LIB:+-x CHORUS_LIB} -x GLOO_SOCKET_IFNAME=eth0 \
        -x CHORUS_DEBUG=INFO -x CHORUS_DEBUG_SUBSYS=INIT "$py" -c "$ddp" > "$logs/ddp.log" 2>&1
    rc=$?
    for r in 0 1; do
        cat "$logs/out/1/rank.$r/stdout" "$logs/out/1/rank.$r/stderr" 2> /dev/null | sed "s/^/[$r] /"
    done > "$logs/ranks.log"
    grep -v " CHORUS INFO " "$logs/ranks.log"
    [ $rc = 0 ] || { cat "$logs/ddp.log"; echo "mpirun: mpirun -H h1:1,h2:1 of a DDP script failed (exit $rc)"; exit 1; }
    for r in 0 1; do
        [ "$(grep -c "^\[$r\] torchdist ddp: .* on 2 ranks: identical to gloo" "$logs/ranks.log")" = 2 ] ||
            { echo "mpirun: rank $r did not end identical to gloo"; exit 1; }
        grep -q "^\[$r\] .*rank $r: store 10.234.0.1:[0-9]*, from the launcher's PMIx server" "$logs/ranks.log" &&
            grep -q "^\[$r\] .*rank $r: local rank 0 of 1, 2 hosts, listening on 10.234.0.$((r + 1)):" "$logs/ranks.log" ||
            { echo "mpirun: rank $r did not meet through PMIx on host h$((r + 1))"; exit 1; }
    done
    echo "mpirun: OK (DDP on \"chorus\" under mpirun -H h1:1,h2:1, no variable set by hand)"
    exit 0
fi

# Under AddressSanitizer, LeakSanitizer would report what libpmix itself never frees
# (pmix_rte_init, pmix_bfrops_base_value_load, more after a second PMIx_Init): suppressed for
# libpmix only. libpmix has no frame pointers, so its allocations are traced with the slow
# unwinder, which sees libpmix on the stack where the fast one stops in libc.
echo "leak:libpmix.so" > "$logs/lsan.supp"
lsan="LSAN_OPTIONS=suppressions=$logs/lsan.supp${LSAN_OPTIONS:+:$LSAN_OPTIONS}"
asan="ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"

# No meeting point: whatever a caller had set is removed from the ranks of host 1 (mpirun's
# own environment; host 2's ranks get only what mpirun sends).
ip netns exec "$h1" env -u MASTER_ADDR -u MASTER_PORT -u CHORUS_STORE_ADDR -u CHORUS_RANK \
    -u CHORUS_SIZE -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE -u CHORUS_JOB_ID -u CHORUS_IFACE \
    -u RANK -u WORLD_SIZE \
    timeout 60 mpirun --allow-run-as-root --mca plm_rsh_agent "$logs/rsh" -H "$h1:2,$h2:2" \
    --tag-output -x CHORUS_DEBUG=INFO -x CHORUS_DEBUG_SUBSYS=INIT,SHM -x "$lsan" -x "$asan" "$prog" > "$logs/job.log" 2>&1
rc=$?
[ $rc = 0 ] || { cat "$logs/job.log"; echo "mpirun: mpirun -H h1:2,h2:2 failed (exit $rc)"; exit 1; }
for r in 0 1 2 3; do
    grep "^\[1,$r\]<std...>:" "$logs/job.log" > "$logs/rank$r.log"
    grep -q "rank $r: store 10.234.0.1:[0-9]*, from the launcher's PMIx server" "$logs/rank$r.log" ||
        { cat "$logs/job.log"; echo "mpirun: rank $r did not learn rank 0's store from PMIx"; exit 1; }
    grep -q "world of 4 ranks on 2 hosts (TCP); host-local communicator of 2 ranks" "$logs/rank$r.log" ||
        { cat "$logs/job.log"; echo "mpirun: rank $r did not report a world of 4 ranks on 2 hosts"; exit 1; }
    grep -q ", 2 hosts, listening on 10.234.0.$((r / 2 + 1)):" "$logs/rank$r.log" ||
        { cat "$logs/job.log"; echo "mpirun: rank $r did not run on host h$((r / 2 + 1))"; exit 1; }
done
grep "rank 0: store" "$logs/rank0.log" | sed 's/.*CHORUS INFO /mpirun: /'

# A second world in the same processes: it meets at a new store, not at the first one's.
ip netns exec "$h1" env -u MASTER_ADDR -u MASTER_PORT -u CHORUS_STORE_ADDR -u CHORUS_RANK \
    -u CHORUS_SIZE timeout 60 mpirun --allow-run-as-root --mca plm_rsh_agent "$logs/rsh" \
    -H "$h1:1,$h2:1" --tag-output -x CHORUS_DEBUG=INFO -x CHORUS_DEBUG_SUBSYS=INIT -x "$lsan" -x "$asan" \
    "$BUILD/tests/mp/reinit" > "$logs/reinit.log" 2>&1 ||
    { cat "$logs/reinit.log"; echo "mpirun: a second chorus_init in the same job failed"; exit 1; }
grep "reinit: world" "$logs/reinit.log"
[ "$(grep -c "rank 1: store .*, from the launcher's PMIx server" "$logs/reinit.log")" = 2 ] &&
    [ "$(grep "rank 1: store" "$logs/reinit.log" | sed 's/.*store \([^,]*\),.*/\1/' | sort -u | wc -l)" = 2 ] ||
    { cat "$logs/reinit.log"; echo "mpirun: the second world did not meet at a store of its own"; exit 1; }
# ... through the PMIx session of the first: a process that finalized PMIx and initialized it
# again could find the next fence never completing at the launcher's server.
for r in 0 1; do
    [ "$(grep -c "^\[1,$r\].*PMIx session opened" "$logs/reinit.log")" = 1 ] ||
        { cat "$logs/reinit.log"; echo "mpirun: rank $r did not keep one PMIx session for both worlds"; exit 1; }
done

# A rank that never reaches chorus_init: the others fail at the PMIx fence by the deadline
# (CHORUS_TIMEOUT_S=1), saying why, and mpirun ends the job.
late='[ "$OMPI_COMM_WORLD_RANK" = 1 ] && sleep 30; exec "$0"'
start=$(date +%s)
ip netns exec "$h1" env -u MASTER_ADDR -u MASTER_PORT -u CHORUS_STORE_ADDR -u CHORUS_RANK \
    -u CHORUS_SIZE timeout 60 mpirun --allow-run-as-root --mca plm_rsh_agent "$logs/rsh" \
    -H "$h1:1,$h2:1" --tag-output -x CHORUS_DEBUG=INFO -x CHORUS_TIMEOUT_S=1 -x "$lsan" -x "$asan" \
    sh -c "$late" "$prog" > "$logs/late.log" 2>&1
rc=$?
took=$(($(date +%s) - start))
grep "error:" "$logs/late.log"
[ $rc != 0 ] && [ $rc != 124 ] || { cat "$logs/late.log"; echo "mpirun: a late rank: exit $rc"; exit 1; }
grep -q "\[1,0\].*not every rank of the job reached the PMIx fence before the timeout" "$logs/late.log" ||
    { cat "$logs/late.log"; echo "mpirun: rank 0 did not say that a rank never reached the fence"; exit 1; }
[ "$took" -lt 25 ] || { echo "mpirun: a late rank held the job for ${took} s"; exit 1; }
echo "mpirun: a rank that never starts: the job ends in ${took} s with exit $rc"
echo "mpirun: OK (mpirun -H h1:2,h2:2 through ip netns exec, no MASTER_ADDR)"
