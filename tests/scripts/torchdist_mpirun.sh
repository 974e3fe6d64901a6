#!/bin/sh
# torchdist_mpirun.sh - torch.distributed under `mpirun -np 2` (Open MPI) with none of torch's
# variables set (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): init_process_group's env:// finds
# rank, size and meeting point from Open MPI's through libchorus (chorus.torch.distributed).
#   ddp    tests/python/torchdist_ddp.py: DDP and ZeroRedundancyOptimizer on "chorus" end with
#          Gloo's parameters to the bit; each rank's INFO log says it is an mpirun rank
#   gloo   a Gloo script that imports chorus.torch.distributed runs too, and its ranks see
#          torchrun's variables (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR) set
#   hvd    hvd.init() (chorus.torch) after init_process_group("chorus") in the same ranks:
#          both worlds work side by side (the variables set for torch do not mislead it)
#   size   init_process_group("chorus", world_size=3) under -np 2 fails on every rank, saying
#          both sizes
# Python is $TEST_PYTHON (default /usr/bin/python3).
set -u
BUILD=${BUILD:-build}
py=${TEST_PYTHON:-/usr/bin/python3}
command -v mpirun > /dev/null 2>&1 || { echo "SKIP torchdist_mpirun: mpirun is not installed (Debian: openmpi-bin)"; exit 0; }
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
fail() { echo "FAILED: $*"; exit 1; }
root=""
[ "$(id -u)" = 0 ] && root=--allow-run-as-root
# mpirun -np 2 PROGRAM...: no variable of torch's or Chorus's, whatever the caller had set.
# Each rank's output goes to its own files, $d/out/1/rank.R/stdout and stderr (mpirun
# --output-filename), and is shown, each line prefixed [R].
run() {
    env -u MASTER_ADDR -u MASTER_PORT -u RANK -u WORLD_SIZE -u LOCAL_RANK -u LOCAL_WORLD_SIZE \
        -u CHORUS_STORE_ADDR -u CHORUS_RANK -u CHORUS_SIZE -u CHORUS_LOCAL_RANK \
        -u CHORUS_LOCAL_SIZE -u CHORUS_JOB_ID PYTHONPATH="$PWD/python" \
        timeout 120 mpirun $root --oversubscribe -np 2 --output-filename "$d/out" "$@" > "$d/mpirun.log" 2>&1
    rc=$?
    for r in 0 1; do
        cat "$d/out/1/rank.$r/stdout" "$d/out/1/rank.$r/stderr" 2> /dev/null | sed "s/^/[$r] /"
    done > "$d/log"
    return $rc
}

case "${1:-}" in
ddp)
    run -x CHORUS_DEBUG=INFO -x CHORUS_DEBUG_SUBSYS=INIT "$py" tests/python/torchdist_ddp.py
    rc=$?
    grep -v " CHORUS INFO " "$d/log"
    [ $rc = 0 ] || fail "mpirun -np 2 of a DDP script: exit $rc"
    for r in 0 1; do
        [ "$(grep -c "^\[$r\] torchdist ddp: .* on 2 ranks: identical to gloo" "$d/log")" = 2 ] ||
            fail "rank $r did not end identical to gloo"
        grep -q "^\[$r\] .*launcher mpirun: rank $r of 2, job ompi-" "$d/log" ||
            fail "rank $r is not an mpirun rank"
    done
    ;;
gloo)
    cat > "$d/gloo.py" << 'EOF2'
import os
import torch
import torch.distributed as dist
import chorus.torch.distributed  # noqa: F401

dist.init_process_group("gloo")
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
print("gloo rank %d of %d: sum %g; RANK=%s LOCAL_RANK=%s WORLD_SIZE=%s MASTER_ADDR=%s" % (
    dist.get_rank(), dist.get_world_size(), t.item(), os.environ["RANK"],
    os.environ["LOCAL_RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_ADDR"]))
dist.destroy_process_group()
EOF2
    run "$py" "$d/gloo.py"
    rc=$?
    cat "$d/log"
    [ $rc = 0 ] || fail "mpirun -np 2 of a Gloo script: exit $rc"
    for r in 0 1; do
        grep -qx "\[$r\] gloo rank $r of 2: sum 3; RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1" "$d/log" ||
            fail "rank $r: no sum of 3 with torchrun's variables"
    done
    ;;
hvd)
    cat > "$d/hvd.py" << 'EOF2'
import torch
import torch.distributed as dist
import chorus.torch as hvd
import chorus.torch.distributed  # noqa: F401

dist.init_process_group("chorus")
hvd.init()
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
h = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum)
print("rank %d of %d: torch.distributed sum %g, hvd rank %d of %d sum %g" % (
    dist.get_rank(), dist.get_world_size(), t.item(), hvd.rank(), hvd.size(), h.item()))
EOF2
    run "$py" "$d/hvd.py"
    rc=$?
    cat "$d/log"
    [ $rc = 0 ] || fail "mpirun -np 2 of init_process_group then hvd.init(): exit $rc"
    for r in 0 1; do
        grep -qx "\[$r\] rank $r of 2: torch.distributed sum 3, hvd rank $r of 2 sum 3" "$d/log" ||
            fail "rank $r: no sum of 3 from both"
    done
    ;;
size)
    run "$py" -c 'import torch.distributed as dist, chorus.torch.distributed
dist.init_process_group("chorus", world_size=3)'
    rc=$?
    cat "$d/log"
    [ $rc != 0 ] || fail "world_size=3 under -np 2 accepted"
    for r in 0 1; do
        grep -q "^\[$r\] ValueError: chorus: init_process_group under mpirun: init_process_group was given world size 3, but the launcher says 2" "$d/log" ||
            fail "rank $r does not name both sizes"
    done
    ;;
*)
    fail "usage: torchdist_mpirun.sh ddp|gloo|hvd|size"
    ;;
esac
echo "torchdist_mpirun $1: OK"
