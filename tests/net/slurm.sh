#!/bin/sh
# slurm.sh - `srun -N 2 -n 4` under a real Slurm whose two nodes are namespace hosts of the
# test cluster (tests/net/cluster.sh), with no MASTER_ADDR: the ranks meet at the first node
# of SLURM_STEP_NODELIST on a port derived from the job and step ids. The test starts munged
# (with a key it makes), slurmctld (in host 1) and one slurmd per host (NodeName h1, h2 with
# NodeAddr the host's address), all with their configuration, spool, state and logs in a
# temporary directory, as root (SlurmUser=root); everything goes on every exit path.
# tests/mp/coll_select checks every collective on 4 ranks over 2 hosts; each rank's INFO log
# must say it is an srun rank meeting at h1 and that its world spans 2 hosts.
# slurmd runs in its host's network namespace through nsenter rather than `ip netns exec`:
# the latter mounts a fresh /sys, hiding /sys/fs/cgroup, and Slurm 22.05's slurmd refuses to
# start without a cgroup file system; /etc/hosts of the host is bound in by hand instead.
#
# sh tests/net/slurm.sh ddp: instead, a DistributedDataParallel script on the torch.distributed
# backend "chorus" (tests/python/torchdist_ddp.py: parameters identical to Gloo's) under
# `srun -n 2` (both ranks on one node) and `srun -N 2 -n 2` (one on each), with none of torch's
# variables set: each rank's RANK, WORLD_SIZE and meeting point come from Slurm's. (Gloo, the
# reference, is told its interface: this machine's name does not resolve to a host's address.)
BUILD=${BUILD:-build}
mode=${1:-collectives}
prog=$BUILD/tests/mp/coll_select
[ "$mode" = ddp ] && prog=$BUILD/lib/_chorus_torchdist.so
[ -e "$prog" ] || { echo "slurm: $prog is not built"; exit 1; }
for t in munged slurmctld slurmd srun sinfo nsenter unshare; do
    command -v $t > /dev/null 2>&1 ||
        { echo "SKIP slurm: $t is not installed (Debian packages: slurm-wlm munge util-linux)"; exit 0; }
done
. tests/net/cluster.sh
cluster_up slurm 2 "" 10.233.0
h1=$(cluster_host 1)
h2=$(cluster_host 2)
d=$logs

# munge: one daemon serves both hosts (its socket is a file, reachable from every namespace).
mkdir -p "$d/munge" "$d/state" "$d/spool/h1" "$d/spool/h2"
chmod 711 "$d" "$d/munge"
head -c 1024 /dev/urandom > "$d/munge/key"
chmod 400 "$d/munge/key"
munged -F --force --socket="$d/munge/sock" --key-file="$d/munge/key" --pid-file="$d/munge/pid" \
    --log-file="$d/munge/log" --seed-file="$d/munge/seed" > "$d/munged.out" 2>&1 &
pids="$pids $!"

# slurmctld checks that it runs on SlurmctldHost: this machine's name, at host 1's address.
cat > "$d/slurm.conf" << EOF2
ClusterName=chorus
SlurmctldHost=$(hostname)($(cluster_addr 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/sock
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd-%n.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
MpiDefault=none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
SlurmdParameters=config_overrides
NodeName=h1 NodeAddr=$(cluster_addr 1) CPUs=2 State=UNKNOWN
NodeName=h2 NodeAddr=$(cluster_addr 2) CPUs=2 State=UNKNOWN
PartitionName=all Nodes=h1,h2 Default=YES MaxTime=INFINITE State=UP
EOF2
export SLURM_CONF="$d/slurm.conf"

# Each daemon waits for munged's socket (a deadline, as everything here).
i=0
until [ -S "$d/munge/sock" ]; do
    i=$((i + 1))
    [ $i -le 100 ] || { echo "slurm: munged did not start:"; cat "$d/munged.out"; exit 1; }
    sleep 0.05
done
ip netns exec "$h1" slurmctld -D -i -f "$d/slurm.conf" > "$d/slurmctld.out" 2>&1 &
pids="$pids $!"
for n in 1 2; do
    h=$(cluster_host $n)
    nsenter --net="/run/netns/$h" unshare --mount --propagation private sh -c \
        "mount --bind /etc/netns/$h/hosts /etc/hosts && exec slurmd -D -N h$n -f '$d/slurm.conf'" \
        > "$d/slurmd-h$n.out" 2>&1 &
    pids="$pids $!"
done

show_logs() {
    for f in "$d"/*.out "$d"/*.log; do
        [ -f "$f" ] && { echo "== $f"; tail -20 "$f"; }
    done
}

# Both nodes idle, polled for at most 30 s.
i=0
state=""
while [ "$state" != "idle" ]; do
    i=$((i + 1))
    [ $i -le 150 ] || { echo "slurm: nodes not idle after 30 s (state '$state')"; show_logs; exit 1; }
    sleep 0.2
    state=$(ip netns exec "$h1" sinfo -h -o %t 2> /dev/null | sort -u | tr -d ' \n')
done
echo "slurm: 2 nodes idle after $i polls"

# srun -n 2, then srun -N 2 -n 2, of the DDP script; no variable of torch's or Chorus's set.
if [ "$mode" = ddp ]; then
    py=${TEST_PYTHON:-/usr/bin/python3}
    for nodes in 1 2; do
        ip netns exec "$h1" env -u MASTER_ADDR -u MASTER_PORT -u CHORUS_STORE_ADDR \
            -u CHORUS_RANK -u CHORUS_SIZE -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE \
            -u CHORUS_JOB_ID -u CHORUS_IFACE -u RANK -u WORLD_SIZE -u LOCAL_RANK \
            PYTHONPATH="$PWD/python" GLOO_SOCKET_IFNAME=eth0 CHORUS_DEBUG=INFO \
            CHORUS_DEBUG_SUBSYS=INIT timeout 120 srun -N $nodes -n 2 --label \
            --kill-on-bad-exit=1 "$py" tests/python/torchdist_ddp.py \
            > "$d/ddp$nodes.log" 2>&1
        rc=$?
        grep -v " CHORUS INFO " "$d/ddp$nodes.log"
        [ $rc = 0 ] || { echo "slurm: srun -N $nodes -n 2 of a DDP script failed (exit $rc)"; show_logs; exit 1; }
        for r in 0 1; do
            [ "$(grep -c "^ *$r: torchdist ddp: .* on 2 ranks: identical to gloo" "$d/ddp$nodes.log")" = 2 ] ||
                { echo "slurm: rank $r of srun -N $nodes -n 2 did not end identical to gloo"; exit 1; }
            where="local rank $r of 2, 1 host,"
            [ $nodes = 2 ] && where="local rank 0 of 1, 2 hosts, listening on 10.233.0.$((r + 1)):"
            grep -q "^ *$r: .*launcher srun: rank $r of 2, job slurm-" "$d/ddp$nodes.log" &&
                grep -q "^ *$r: .*rank $r: $where" "$d/ddp$nodes.log" ||
                { echo "slurm: rank $r of srun -N $nodes -n 2 is not an srun rank ($where)"; exit 1; }
        done
    done
    echo "slurm: OK (DDP on \"chorus\" under srun -n 2 and srun -N 2 -n 2, no variable set by hand)"
    exit 0
fi

# No meeting point given: whatever a caller had set is removed (srun passes its environment on).
ip netns exec "$h1" env -u MASTER_ADDR -u MASTER_PORT -u CHORUS_STORE_ADDR -u CHORUS_RANK \
    -u CHORUS_SIZE -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE -u CHORUS_JOB_ID -u CHORUS_IFACE \
    -u RANK -u WORLD_SIZE CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT,SHM \
    timeout 60 srun -N 2 -n 4 --label --kill-on-bad-exit=1 "$prog" > "$d/job.log" 2>&1
rc=$?
cat "$d/job.log" > /dev/null
[ $rc = 0 ] || { echo "slurm: srun -N 2 -n 4 failed (exit $rc)"; show_logs; exit 1; }
for r in 0 1 2 3; do
    grep "^ *$r: " "$d/job.log" > "$d/rank$r.log"
    grep -q "launcher srun: rank $r of 4, job slurm-[0-9]*.0, store h1:[0-9]*" "$d/rank$r.log" ||
        { echo "slurm: rank $r did not meet at h1, the first node of the step"; exit 1; }
    grep -q "world of 4 ranks on 2 hosts (TCP); host-local communicator of 2 ranks" "$d/rank$r.log" ||
        { echo "slurm: rank $r did not report a world of 4 ranks on 2 hosts"; exit 1; }
    grep -q ", 2 hosts, listening on 10.233.0.$((r / 2 + 1)):" "$d/rank$r.log" ||
        { echo "slurm: rank $r did not run on host h$((r / 2 + 1))"; exit 1; }
done

# The example batch script, as shipped (2 ranks a node here: each node has 2 CPUs), running a
# verified chorus-bench; polled until the job has left the queue, at most 60 s.
id=$(ip netns exec "$h1" env -u MASTER_ADDR -u MASTER_PORT -u CHORUS_STORE_ADDR -u CHORUS_RANK \
    -u CHORUS_SIZE -u CHORUS_LOCAL_RANK -u CHORUS_LOCAL_SIZE -u CHORUS_JOB_ID -u RANK -u WORLD_SIZE \
    sbatch --parsable --ntasks-per-node=2 --output="$d/sbatch.out" deploy/slurm/chorus.sbatch \
    "$BUILD/bin/chorus-bench" -b 1K -e 1M -f 32 -n 5 -w 1) ||
    { echo "slurm: sbatch refused deploy/slurm/chorus.sbatch"; show_logs; exit 1; }
i=0
while [ -n "$(ip netns exec "$h1" squeue -h -j "$id" 2> /dev/null)" ]; do
    i=$((i + 1))
    [ $i -le 300 ] || { echo "slurm: batch job $id still queued after 60 s"; show_logs; exit 1; }
    sleep 0.2
done
cat "$d/sbatch.out"
grep -q "Rank  3 Pid" "$d/sbatch.out" && grep -q "Out of bounds values : 0 OK" "$d/sbatch.out" ||
    { echo "slurm: the batch job's chorus-bench did not verify 4 ranks"; show_logs; exit 1; }
echo "slurm: OK (srun -N 2 -n 4 under slurmctld and 2 slurmd, no MASTER_ADDR; sbatch example)"
