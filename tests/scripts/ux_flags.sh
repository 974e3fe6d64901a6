#!/bin/sh
# chorus-run's command line as horovodrun, torchrun and mpirun users type it: the variables
# every rank gets, the flags that map onto Chorus (each shown doing what it does upstream),
# the flags that do not (refused, naming what to use instead), and a missing -np said first.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }
export PYTHONPATH="$PWD/python" CHORUS_LIB="$PWD/$BUILD/lib/libchorus.so"
unset RANK WORLD_SIZE LOCAL_RANK MASTER_ADDR MASTER_PORT PYTHONUNBUFFERED CHORUS_DEBUG OMP_NUM_THREADS
PY=/usr/bin/python3
ALLREDUCE='import chorus, numpy as np; chorus.init(); print("sum", chorus.allreduce(np.ones(2), op=chorus.Sum)[0])'
RANK1_LATE='import os, time, chorus
if os.environ["RANK"] == "1":
    time.sleep(60)
chorus.init()'
# refused FLAG... MESSAGE: exit status 2 and MESSAGE on the first line
refused() {
    msg=$1; shift
    out=$(chorus-run "$@" -np 2 true 2>&1); rc=$?
    echo "$out"
    [ $rc = 2 ] || fail "chorus-run $*: exit $rc, expected 2"
    echo "$out" | head -1 | grep -qF -- "$msg" || fail "chorus-run $*: no '$msg'"
}

# a missing -np is the first line, not the end of the usage
out=$(chorus-run python3 train.py 2>&1); rc=$?
echo "$out"
[ $rc = 2 ] || fail "missing -np: exit $rc"
echo "$out" | head -1 | grep -q "^chorus-run: -np N is required" || fail "missing -np is not the first line"
[ "$(echo "$out" | wc -l)" -le 2 ] || fail "missing -np printed the whole usage"

# torchrun's and horovodrun's variables; MASTER_PORT is free and not Chorus's store port
out=$(chorus-run -np 2 sh -c 'echo "R=$RANK LR=$LOCAL_RANK WS=$WORLD_SIZE LWS=$LOCAL_WORLD_SIZE GR=$GROUP_RANK RR=$ROLE_RANK MA=$MASTER_ADDR HR=$HOROVOD_RANK HS=$HOROVOD_SIZE HLR=$HOROVOD_LOCAL_RANK HLS=$HOROVOD_LOCAL_SIZE HCR=$HOROVOD_CROSS_RANK HCS=$HOROVOD_CROSS_SIZE PU=$PYTHONUNBUFFERED"; echo "port $MASTER_PORT store ${CHORUS_STORE_ADDR##*:}"' 2>&1)
echo "$out"
echo "$out" | grep -q '^\[1\] R=1 LR=1 WS=2 LWS=2 GR=0 RR=1 MA=127.0.0.1 HR=1 HS=2 HLR=1 HLS=2 HCR=0 HCS=1 PU=1$' || fail "standard variables"
ports=$(echo "$out" | sed -n 's/^\[0\] port \([0-9]*\) store \([0-9]*\)$/\1 \2/p')
set -- $ports
[ $# = 2 ] && [ "$1" -gt 0 ] && [ "$1" != "$2" ] || fail "MASTER_PORT '$ports' is not a port of its own"
out=$(MASTER_PORT=29555 chorus-run -np 1 sh -c 'echo "port $MASTER_PORT"' 2>&1)
echo "$out" | grep -q '^\[0\] port 29555$' || fail "the user's MASTER_PORT was not kept"

# OMP_NUM_THREADS, as torchrun sets it: ranks sharing the host get their share of its CPUs
# (pinned or not), one rank alone gets none, and a value already set is kept
share() { n=$(( $(nproc) / $1 )); [ $n -ge 1 ] || n=1; echo $n; }
out=$(chorus-run -np 2 sh -c 'echo "omp $OMP_NUM_THREADS"' 2>&1)
echo "$out"
[ "$(echo "$out" | grep -c "^\[[01]\] omp $(share 2)\$")" = 2 ] || fail "OMP_NUM_THREADS of 2 ranks"
out=$(chorus-run -np 3 --bind-to none sh -c 'echo "omp $OMP_NUM_THREADS"' 2>&1)
[ "$(echo "$out" | grep -c "^\[[0-2]\] omp $(share 3)\$")" = 3 ] || fail "OMP_NUM_THREADS of 3 ranks: $out"
out=$(chorus-run -np 1 sh -c 'echo "omp ${OMP_NUM_THREADS-unset}"' 2>&1)
echo "$out" | grep -q '^\[0\] omp unset$' || fail "OMP_NUM_THREADS set for a rank alone: $out"
out=$(OMP_NUM_THREADS=3 chorus-run -np 2 sh -c 'echo "omp $OMP_NUM_THREADS"' 2>&1)
echo "$out" | grep -q '^\[1\] omp 3$' || fail "the user's OMP_NUM_THREADS was not kept: $out"

# torchrun: --nproc-per-node / --nproc_per_node=N, --nnodes 1; --nnodes N with --node-rank and
# --master-addr (or torchrun's PET_* variables, or JOB_COMPLETION_INDEX in a Kubernetes pod)
# runs one node's ranks of a world of N nodes, node 0's chorus-run serving the store
out=$(chorus-run --nnodes 1 --nproc_per_node=2 sh -c 'echo "r $RANK"' 2>&1)
echo "$out"
echo "$out" | grep -q '^\[1\] r 1$' || fail "--nproc_per_node=2"
out=$(chorus-run --nproc-per-node 3 sh -c 'echo "r $RANK"' 2>&1)
[ "$(echo "$out" | grep -c '^\[[0-2]\] r [0-2]$')" = 3 ] || fail "--nproc-per-node 3"
refused "--nnodes 1:2: a number of nodes from 1 to 4096 (N, or N:N); nodes joining and leaving need torchrun's rendezvous" --nnodes 1:2
refused "--nnodes 2 needs --node-rank I (this node's index, 0 to N-1)" --nnodes 2
refused "--nnodes 2 needs --master-addr HOST (where node 0 is)" --nnodes 2 --node-rank 1
out=$(env -u CHORUS_SECRET chorus-run --nnodes 2 --node-rank 1 --master-addr 127.0.0.1 -np 2 true 2>&1)
echo "$out" | grep -q "^chorus-run: --nnodes 2 needs CHORUS_SECRET (the same on every node)" || fail "--nnodes without a secret: $out"
export CHORUS_SECRET=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
refused "--node-rank 2 is not below --nnodes 2" --nnodes 2 --node-rank 2 --master-addr 127.0.0.1
refused "--nnodes 2 runs one node's ranks of a fixed world: not with --elastic" --nnodes 2 --node-rank 0 --master-addr 127.0.0.1 --elastic
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
VARS='echo "R=$RANK LR=$LOCAL_RANK WS=$WORLD_SIZE LWS=$LOCAL_WORLD_SIZE GR=$GROUP_RANK GWS=$GROUP_WORLD_SIZE HCR=$HOROVOD_CROSS_RANK HCS=$HOROVOD_CROSS_SIZE MA=$MASTER_ADDR MP=$MASTER_PORT S=$CHORUS_STORE_ADDR"'
PET_NNODES=2 PET_NPROC_PER_NODE=2 JOB_COMPLETION_INDEX=1 PET_MASTER_ADDR=127.0.0.1 PET_MASTER_PORT=$port \
    chorus-run sh -c "$VARS; exec chorus-bench -b 1K -e 1K -w 1 -n 2" > "$tmp/node1" 2>&1 &
out=$(chorus-run --nnodes 2 --node-rank 0 -np 2 --master-addr 127.0.0.1 --master-port $port sh -c "$VARS; exec chorus-bench -b 1K -e 1K -w 1 -n 2" 2>&1)
wait $! || fail "node 1 of 2: $(cat "$tmp/node1")"
out="$out
$(cat "$tmp/node1")"
echo "$out"
echo "$out" | grep -q "^\[2\] R=2 LR=0 WS=4 LWS=2 GR=1 GWS=2 HCR=1 HCS=2 MA=127.0.0.1 MP=$((port + 1)) S=127.0.0.1:$port$" || fail "--nnodes 2: the variables of node 1's first rank"
echo "$out" | grep -q "^\[1\] R=1 LR=1 WS=4 LWS=2 GR=0 GWS=2 HCR=0 HCS=2 MA=127.0.0.1 MP=$((port + 1)) S=127.0.0.1:$port$" || fail "--nnodes 2: the variables of node 0's second rank"
echo "$out" | grep -q '^\[0\] # chorus-bench .*: allreduce, 4 ranks' || fail "--nnodes 2: chorus-bench did not run on 4 ranks"
echo "$out" | grep -q '^\[0\] # Out of bounds values : 0 OK' || fail "--nnodes 2: the allreduce of 4 ranks on 2 nodes"

# a rank of node 1 fails: node 0's chorus-run names the node its ranks lost
# (rank 3 is killed once it runs its allreduces: tests/fault/survivor_blame; CHORUS_SHM=0:
# the two nodes on this one host talk TCP, as two machines do)
blame=$BUILD/tests/fault/survivor_blame
export CHORUS_SHM=0
chorus-run --nnodes 2 --node-rank 1 -np 2 --master-addr 127.0.0.1 --master-port $port \
    sh -c '[ "$RANK" = 3 ] || exec "$0"; "$0" | while read -r l; do echo "$l"; case $l in *running) kill -9 "$(echo "$l" | cut -d" " -f4)" ;; esac; done' \
    "$blame" > "$tmp/node1" 2>&1 &
out=$(chorus-run --nnodes 2 --node-rank 0 -np 2 --master-addr 127.0.0.1 --master-port $port "$blame" 2>&1)
rc=$?
wait $!
echo "$out"
[ $rc != 0 ] || fail "--nnodes 2: node 0 succeeded though rank 3 of node 1 failed"
echo "$out" | grep -q "^chorus-run: it lost rank 3 of node 1 (CHORUS_ERR_PEER_LOST): that node, or the link to it, failed first$" || fail "--nnodes 2: node 0's chorus-run did not name node 1"
echo "$out" | grep -q "^chorus-run: rank [01] (pid [0-9]* on node 0) exited with status 3; it failed first on this node$" || fail "--nnodes 2: the first failure is not said to be this node's"
unset CHORUS_SECRET CHORUS_SHM

# -x VAR=value sets it for every rank; -x VAR passes it on, and says so when it is unset
out=$(FROM_HERE=yes chorus-run -np 2 -x GREETING=hello -x FROM_HERE -x NOT_SET_XYZ sh -c 'echo "$GREETING $FROM_HERE"' 2>&1)
echo "$out"
echo "$out" | grep -q '^\[1\] hello yes$' || fail "-x"
echo "$out" | grep -q "chorus-run: -x NOT_SET_XYZ: NOT_SET_XYZ is not set here" || fail "-x of an unset variable"

# --verbose: what is started, and the ranks log at INFO
out=$(chorus-run -np 2 --verbose sh -c 'echo "debug $CHORUS_DEBUG"' 2>&1)
echo "$out"
echo "$out" | grep -q "^chorus-run: job .*: 2 ranks of sh; rendezvous store 127.0.0.1:[0-9]*; MASTER_PORT (picked) [0-9]*" || fail "--verbose"
echo "$out" | grep -q '^\[1\] debug INFO$' || fail "--verbose: ranks are not at INFO"

# --max-restarts, plain job: all ranks start again (TORCHELASTIC_RESTART_COUNT counts)
out=$(chorus-run -np 2 --grace 1 --max-restarts 2 sh -c 'if [ "$TORCHELASTIC_RESTART_COUNT" = 0 ] && [ "$RANK" = 1 ]; then exit 5; fi; echo "run $TORCHELASTIC_RESTART_COUNT ok"' 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] || fail "--max-restarts: exit $rc after a successful restart"
echo "$out" | grep -q "chorus-run: rank 1 (pid [0-9]*) exited with status 5" || fail "--max-restarts: the failure was not reported"
echo "$out" | grep -q "^chorus-run: restarting all 2 ranks (restart 1 of --max-restarts 2)$" || fail "--max-restarts: no restart line"
[ "$(echo "$out" | grep -c '^\[[01]\] run 1 ok$')" = 2 ] || fail "--max-restarts: the second run did not run both ranks"
out=$(chorus-run -np 2 --grace 1 --max-restarts 2 sh -c 'exit 6' 2>&1); rc=$?
echo "$out"
[ $rc = 6 ] || fail "--max-restarts: exit $rc, expected 6 once the restarts are used"
[ "$(echo "$out" | grep -c '^chorus-run: restarting all')" = 2 ] || fail "--max-restarts 2 did not restart exactly twice"

# --timeout covers every run together, not each restart
start=$(date +%s)
out=$(chorus-run -np 1 --timeout 3 --max-restarts 1000 sh -c 'sleep 1; exit 1' 2>&1); rc=$?
echo "$out" | tail -2
[ $rc = 124 ] || fail "--timeout with --max-restarts: exit $rc, expected 124"
[ $(( $(date +%s) - start )) -lt 15 ] || fail "--timeout restarted with every run"

# --log-dir: per-rank files; --tee 1 also shows stdout here; --tag-output is the default
out=$(chorus-run -np 2 --log-dir "$tmp/logs" --tee 1 --tag-output sh -c 'echo "out $RANK"; echo "err $RANK" >&2' 2>&1)
echo "$out"
echo "$out" | grep -q '^\[1\] out 1$' || fail "--tee 1: stdout not shown"
echo "$out" | grep -q 'err' && fail "--log-dir: stderr was shown although only stdout is teed"
[ "$(cat "$tmp/logs/attempt_0/1/stdout.log")" = "out 1" ] || fail "--log-dir: rank 1's stdout.log"
[ "$(cat "$tmp/logs/attempt_0/0/stderr.log")" = "err 0" ] || fail "--log-dir: rank 0's stderr.log"
refused "--tee and --redirects need --log-dir DIR" --tee 3
touch "$tmp/file"
refused "chorus-run: --log-dir $tmp/file/logs: Not a directory" --log-dir "$tmp/file/logs"
# a --log-dir that is a file: refused before any rank starts (the ranks ran, their files failed)
refused "chorus-run: --log-dir $tmp/file: Not a directory" --log-dir "$tmp/file"

# --redirects 2: only stderr goes to the file; stdout stays here
out=$(chorus-run -np 1 --log-dir "$tmp/logs2" --redirects 2 sh -c 'echo "out"; echo "err" >&2' 2>&1)
echo "$out"
[ "$out" = "[0] out" ] || fail "--redirects 2: '$out' shown here"
[ "$(cat "$tmp/logs2/attempt_0/0/stderr.log")" = "err" ] && [ ! -e "$tmp/logs2/attempt_0/0/stdout.log" ] || fail "--redirects 2: files"

# horovodrun's tuning flags are CHORUS_* variables of every rank; torchrun's --master-port is
# MASTER_PORT; --standalone is what chorus-run does anyway (--no-python: tests/scripts/launcher_python.sh)
out=$(chorus-run -np 1 --fusion-threshold-mb 8 --cycle-time-ms 3 --cache-capacity 10 \
    --stall-check-warning-time-seconds 7 --stall-check-shutdown-time-seconds 9 --master-port 29777 \
    --standalone sh -c 'echo "$CHORUS_FUSION_THRESHOLD $CHORUS_CYCLE_TIME_MS $CHORUS_CACHE_CAPACITY $CHORUS_STALL_WARN_S $CHORUS_STALL_SHUTDOWN_S $MASTER_PORT"' 2>&1)
echo "$out"
[ "$out" = "[0] 8M 3 10 7 9 29777" ] || fail "horovodrun's tuning flags"
out=$(env -u CHORUS_AUTOTUNE chorus-run -np 1 --autotune --autotune-warmup-samples 4 \
    --autotune-steps-per-sample 2 sh -c 'echo "$CHORUS_AUTOTUNE $CHORUS_AUTOTUNE_WARMUP $CHORUS_AUTOTUNE_STEPS"' 2>&1)
echo "$out"
[ "$out" = "[0] 1 4 2" ] || fail "horovodrun's --autotune flags"
refused "CHORUS_CYCLE_TIME_MS=abc is not a non-negative number (set by --cycle-time-ms)" --cycle-time-ms abc

# The flags that reach the library, shown through Python ranks (a sanitized libchorus cannot be
# loaded into the interpreter: the sanitizer builds check the rest).
if [ -z "${SANITIZE:-}" ]; then
    # --timeline-filename: rank 0 writes Chorus's Chrome trace there
    out=$(chorus-run -np 2 --timeline-filename "$tmp/timeline.json" $PY -c "$ALLREDUCE" 2>&1)
    echo "$out"
    echo "$out" | grep -q '^\[1\] sum 2.0$' || fail "--timeline-filename: the job failed"
    grep -q '"name":"CYCLE"' "$tmp/timeline.json" || fail "--timeline-filename wrote no timeline"

    # --network-interface: the interface the ranks listen on (one; an unknown one is named)
    out=$(chorus-run -np 2 --network-interface lo $PY -c "$ALLREDUCE" 2>&1)
    echo "$out" | grep -q '^\[0\] sum 2.0$' || fail "--network-interface lo"
    out=$(chorus-run -np 2 --network-interface nosuch0 $PY -c "$ALLREDUCE" 2>&1)
    echo "$out" | grep -q "CHORUS_IFACE=nosuch0 is neither an IPv4 address nor an interface" || fail "--network-interface nosuch0"
    refused "Chorus listens on one interface" --network-interfaces eth0,eth1

    # --start-timeout: ranks give up waiting for a rank that never starts after S seconds, not
    # after CHORUS_TIMEOUT_S (20 s here)
    start=$(date +%s)
    out=$(chorus-run -np 2 --grace 1 --start-timeout 2 $PY -c "$RANK1_LATE" 2>&1); rc=$?
    echo "$out" | tail -3
    [ $rc != 0 ] || fail "--start-timeout: the job did not fail"
    echo "$out" | grep -q "rank 1 never registered with the rendezvous store.*CHORUS_START_TIMEOUT_S" || fail "--start-timeout message"
    [ $(( $(date +%s) - start )) -lt 15 ] || fail "--start-timeout 2 waited as long as CHORUS_TIMEOUT_S"
fi
chorus-run -np 1 --timeline-mark-cycles true || fail "--timeline-mark-cycles"

# flags of other launchers that do not apply, each with what to use instead
refused "rank 0 log every candidate with its step time, and its choice, on stderr" --autotune-log-file f
refused "rather than sampling a Bayesian model" --autotune-bayes-opt-max-samples 5
refused "force one with -x CHORUS_ALGO_ALLREDUCE=name" --hierarchical-allreduce
refused "chorus-run has no rendezvous service of torchrun's kind; launch across hosts with -H" --rdzv-endpoint=node1:29400
refused "chorus-run -np N python3 -m MODULE" -m
refused "use --log-dir DIR" --output-filename out
# values and paths checked before anything starts, each in one line (exit status 2)
refused "chorus-run: --master-port needs a TCP port from 1 to 65535, not '99999'" --master-port 99999
refused "chorus-run: --servers 8 with -np 2 leaves no worker: ranks 0..K-1 serve and the others work; at most 1 server with -np 2" --servers 8
refused "chorus-run: --timeline-filename $tmp/nodir/t.json: the directory $tmp/nodir does not exist" --timeline-filename "$tmp/nodir/t.json"
refused "chorus-run: --hostfile: $tmp/nohosts: No such file or directory" --hostfile "$tmp/nohosts"
refused "chorus-run: --host-discovery-script $tmp/nodisc: No such file or directory" --elastic --host-discovery-script "$tmp/nodisc"
refused "chorus-run: --ssh-identity-file $tmp/nokey: No such file or directory" --ssh-identity-file "$tmp/nokey"
refused "chorus-run: --grace needs a number of seconds (0 or more), not '5s'" --grace 5s
# Horovod's name for it is what the ranks would read too: checked alike, named as set
out=$(HOROVOD_TIMELINE="$tmp/nodir/h.json" chorus-run -np 1 true 2>&1); rc=$?
[ $rc = 2 ] && [ "$out" = "chorus-run: HOROVOD_TIMELINE=$tmp/nodir/h.json: the directory $tmp/nodir does not exist" ] ||
    fail "HOROVOD_TIMELINE in a missing directory: exit $rc: $out"
out=$(MASTER_PORT=99999 chorus-run -np 1 true 2>&1); rc=$?
[ $rc = 2 ] && [ "$out" = "chorus-run: invalid environment: MASTER_PORT=99999 is not a TCP port (1 to 65535)" ] || fail "MASTER_PORT=99999: exit $rc: $out"
out=$(chorus-run -np 1 "$tmp/noprog" 2>&1); rc=$?
[ $rc = 127 ] && [ "$out" = "chorus-run: cannot run '$tmp/noprog': No such file or directory" ] || fail "a missing program: exit $rc: $out"
# the failure summary shows a rank's last lines whole (up to 4 KiB; a longer one is marked)
long=$(printf '%0900d' 0)
out=$(chorus-run -np 1 sh -c "echo 'allgather of 5 x float32: $long end'; printf '%05000d\\n' 7; exit 3" 2>&1); rc=$?
[ $rc = 3 ] || fail "the failing rank: exit $rc"
echo "$out" | grep -qx "chorus-run: | allgather of 5 x float32: $long end" || fail "a 940-byte line was not shown whole"
echo "$out" | grep -q "^chorus-run: | 0000*\\.\\.\\. \\[cut: the line has 5000 bytes\\]$" || fail "a 5000-byte line was not marked as cut"
out=$(chorus-run -np 2>&1); rc=$?
[ $rc = 2 ] && [ "$out" = "chorus-run: -np needs a value (see chorus-run --help)" ] || fail "-np without a value: $out"
echo "ok: chorus-run's flags"
