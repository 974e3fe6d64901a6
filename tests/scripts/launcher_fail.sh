#!/bin/sh
# launcher_fail.sh CASE [ARGS] - how chorus-run ends a job that fails, with real processes
# (tests/fault/launch_probe):
#   orphan [script] chorus-run killed with SIGKILL: no rank is left running shortly after
#                  (CHORUS_SHM=0 for the TCP path; script: each rank started by a shell)
#   stop           a rank stopped (SIGSTOP) while its peers report the error and keep running:
#                  chorus-run ends the job within its grace and names the stopped rank
#   blame N        N trials (LAUNCHER_TRIALS overrides) of SIGKILL to a random rank at a random
#                  moment: chorus-run names that rank first and exits 137
#   python         a Python rank raises RuntimeError: chorus-run names it first, with its
#                  last lines, and the other ranks as stopped
#   verdict        rank 0 fails on its own and tells the others, which fail on its verdict
#                  (chorus_report_peer_failure) and exit first: rank 0 is named first, the
#                  others as failing after it; the same for chorus-train's failed --resume
#   twojobs N      N trials of two jobs started at once on one MASTER_PORT, torchrun style
#                  (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT by hand, no secret): no rank
#                  of one job ever finishes in a job with a rank of the other
# Every process a case starts is stopped on every exit path.
set -u
case_=$1
tmp=$(mktemp -d)
pids=""
cleanup() {
    for p in $pids; do kill -9 "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
out=$tmp/out
fail() { echo "FAILED: $*"; [ -f "$out" ] && { echo "--- output"; cat "$out"; }; exit 1; }
probe=$BUILD/tests/fault/launch_probe
export CHORUS_HEARTBEAT_TIMEOUT_S=2 CHORUS_HEARTBEAT_S=0.5

# wait_ready N: until N ranks printed "ready" in $out (at most 20 s); each job writes a new $out
wait_ready() {
    i=0
    while :; do
        c=$(grep -c '^\[[0-9]*\] ready rank' "$out" 2>/dev/null); [ "${c:-0}" -ge "$1" ] && break
        i=$((i + 1)); [ $i -lt 200 ] || fail "the job did not start"
        sleep 0.1
    done
}
rank_pid() {
    p=$(sed -n "s/^\[$1\] ready rank $1 of [0-9]* pid \([0-9]*\)$/\1/p" "$out")
    echo "$p"
    [ -n "$p" ]
}
alive() { n=0; for p in "$@"; do kill -0 "$p" 2>/dev/null && n=$((n + 1)); done; echo $n; }

case $case_ in
orphan)
    # "script": each rank is a shell that runs the program as its child, which the launcher's
    # parent-death signal does not reach: the library's watchdog must see the launcher go.
    if [ "${2:-}" = script ]; then
        chorus-run -np 3 sh -c '"$0" "$@"; exit $?' "$probe" > "$out" 2>&1 &
    else
        chorus-run -np 3 "$probe" > "$out" 2>&1 &
    fi
    runner=$!; pids="$runner"
    wait_ready 3
    ranks=""
    for r in 0 1 2; do p=$(rank_pid $r) || fail "no pid for rank $r"; ranks="$ranks $p"; done
    pids="$pids $ranks"
    kill -9 $runner
    i=0
    while [ "$(alive $ranks)" != 0 ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
    left=$(alive $ranks)
    [ "$left" = 0 ] || fail "$left ranks still run 5 s after chorus-run was killed"
    echo "ok: every rank ended after chorus-run was killed (CHORUS_SHM=${CHORUS_SHM:-1} ${2:-})"
    ;;
stop)
    start=$(date +%s)
    chorus-run -np 3 --grace 2 "$probe" --linger 120 > "$out" 2>&1 &
    runner=$!; pids="$runner"
    wait_ready 3
    for r in 0 1 2; do p=$(rank_pid $r) || fail "no pid for rank $r"; pids="$pids $p"; done
    victim=$p
    kill -STOP "$victim"
    i=0
    while kill -0 $runner 2>/dev/null && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    kill -0 $runner 2>/dev/null && fail "chorus-run still runs 30 s after rank 2 was stopped"
    wait $runner; rc=$?
    cat "$out"
    grep -q "error: CHORUS_ERR_" "$out" || fail "the peers did not report the lost rank"
    [ $rc != 0 ] || fail "chorus-run exited 0"
    grep -q "^chorus-run: rank 2 (pid $victim) stopped responding (it was stopped, SIGSTOP?).*it failed first" "$out" ||
        fail "chorus-run did not name the stopped rank 2 first"
    [ "$(alive $victim)" = 0 ] || fail "the stopped rank was left behind"
    echo "ok: the job with a stopped rank ended in $(( $(date +%s) - start ))s"
    ;;
blame)
    trials=${LAUNCHER_TRIALS:-$2}
    seed=${FAULT_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
    echo "seed $seed (FAULT_SEED=$seed replays these trials)"
    rnd() { echo $(( $(echo "$seed $2" | cksum | cut -d' ' -f1) % $1 )); }
    t=0
    while [ $t -lt "$trials" ]; do
        t=$((t + 1))
        np=$((3 + $(rnd 2 "np$t")))
        out=$tmp/out.$t
        chorus-run -np $np "$probe" --step-ms 1 > "$out" 2>&1 &
        runner=$!; pids="$runner"
        wait_ready $np
        victim=$(rnd $np "v$t")
        pid=$(rank_pid $victim) || fail "no pid for rank $victim"
        pids="$pids $pid"
        sleep "$(awk -v ms="$(rnd 300 "d$t")" 'BEGIN { printf "%.3f", ms / 1000 }')"
        kill -9 "$pid"
        wait $runner; rc=$?
        first=$(grep -m1 "^chorus-run: rank" "$out")
        echo "trial $t: np $np, SIGKILL to rank $victim: $first (exit $rc)"
        echo "$first" | grep -q "^chorus-run: rank $victim (pid $pid) was killed by signal 9 .*it failed first" ||
            fail "trial $t (seed $seed): chorus-run did not name rank $victim first"
        [ $rc = 137 ] || fail "trial $t (seed $seed): exit $rc, expected 137"
        n=$(grep -c "^chorus-run: stopped: rank" "$out")
        [ "$n" = $((np - 1)) ] || fail "trial $t: $n other ranks listed as stopped, expected $((np - 1))"
    done
    echo "ok: $trials trials, the killed rank named first every time"
    ;;
python)
    cat > "$tmp/raise.py" <<'EOF'
import time
import numpy as np
import chorus
chorus.init()
for step in range(100000):
    if chorus.rank() == 1 and step == 5:
        raise RuntimeError("rank 1 gives up at step 5")
    chorus.allreduce(np.ones(4, dtype=np.float32), op=chorus.Sum)
    time.sleep(0.01)
EOF
    PYTHONPATH=$PWD/python CHORUS_LIB=$PWD/$BUILD/lib/libchorus.so \
        chorus-run -np 3 --grace 5 /usr/bin/python3 "$tmp/raise.py" > "$out" 2>&1; rc=$?
    cat "$out"
    [ $rc = 1 ] || fail "exit $rc, expected 1 (rank 1's status)"
    grep -m1 "^chorus-run: rank" "$out" | grep -q "^chorus-run: rank 1 (pid [0-9]*) exited with status 1; it failed first" ||
        fail "chorus-run did not name rank 1 first"
    grep -q "^chorus-run: | .*RuntimeError: rank 1 gives up at step 5" "$out" ||
        fail "the summary does not show rank 1's last lines"
    grep -q "^chorus-run: stopped: rank 0 " "$out" && grep -q "^chorus-run: stopped: rank 2 " "$out" ||
        fail "ranks 0 and 2 are not listed as stopped"
    echo "ok: the raising rank is named first"
    ;;
verdict)
    chorus-run -np 3 --grace 5 "$BUILD/tests/fault/peer_verdict" > "$out" 2>&1; rc=$?
    cat "$out"
    [ $rc = 2 ] || fail "exit $rc, expected 2 (rank 0's status)"
    grep -m1 "^chorus-run: " "$out" | grep -q "^chorus-run: rank 0 (pid [0-9]*) exited with status 2; it failed first$" ||
        fail "chorus-run did not name rank 0 first"
    grep -q "^chorus-run: | rank 0: the checkpoint is damaged; cannot go on$" "$out" || fail "rank 0's last lines"
    for r in 1 2; do
        grep -q "^chorus-run: stopped: rank $r (pid [0-9]*) exited with status 1 after it was told that rank 0 failed$" "$out" ||
            fail "rank $r is not said to have failed after rank 0"
    done
    # chorus-train: rank 0 cannot resume from checkpoints of another model (every rank reads
    # the recorded options and says why)
    chorus-run -np 2 chorus-train --model mlp --max-steps 2 --no-eval --batch 32 \
        --checkpoint-dir "$tmp/ckpt" > "$out" 2>&1 || fail "the first run failed"
    chorus-run -np 2 chorus-train --model cnn --max-steps 2 --no-eval --batch 32 \
        --checkpoint-dir "$tmp/ckpt" --resume > "$out" 2>&1; rc=$?
    cat "$out"
    [ $rc = 1 ] || fail "--resume: exit $rc, expected 1"
    grep -m1 "^chorus-run: " "$out" | grep -q "^chorus-run: rank 0 (pid [0-9]*) exited with status 1; it failed first$" ||
        fail "--resume: chorus-run did not name rank 0 first"
    grep -q "^chorus-run: | chorus-train\[0\]: cannot resume: --model was mlp in the checkpoint, now cnn; .* resume with the checkpoint's values, or start a new run in another --checkpoint-dir$" "$out" ||
        fail "--resume: rank 0's whole reason is not in its last lines"
    grep -q "^chorus-run: stopped: rank 1 (pid [0-9]*) exited with status 1 after it was told that rank 0 failed$" "$out" ||
        fail "--resume: rank 1 is not said to have failed after rank 0"
    echo "ok: the rank whose own failure is the cause is named first"
    ;;
twojobs)
    trials=${LAUNCHER_TRIALS:-$2}
    unset CHORUS_SECRET
    t=0; merged=0; said=0
    while [ $t -lt "$trials" ]; do
        t=$((t + 1))
        port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
        pids=""
        for job in A B; do
            for r in 0 1; do
                env RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port CHORUS_TIMEOUT_S=10 \
                    "$probe" --job $job --steps 20 --step-ms 5 > "$tmp/$job$r" 2>&1 &
                pids="$pids $!"
            done
        done
        for p in $pids; do wait "$p"; done
        out=$tmp/out.$t
        cat "$tmp"/A0 "$tmp"/A1 "$tmp"/B0 "$tmp"/B1 > "$out"
        done_=$(grep -c "^job [AB] done" "$out")
        grep -q "joined a store that belongs to another job\|another job joined this job's store\|served by another job's rank 0" "$out" &&
            said=$((said + 1))
        if grep -q "^merged:" "$out"; then
            merged=$((merged + 1))
            echo "trial $t: MERGED"; sed 's/^/    /' "$out"
        else
            echo "trial $t: $done_ ranks finished"; grep -h "another job" "$tmp"/?? | sed 's/^/    /'

        fi
    done
    [ $merged = 0 ] || fail "$merged of $trials trials formed a job of ranks of both jobs"
    [ "$said" -gt 0 ] || fail "no rank said that another job shares its store"
    echo "ok: $trials trials, two jobs on one port never merged"
    ;;
*) echo "unknown case $case_"; exit 2 ;;
esac
