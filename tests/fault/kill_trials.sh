#!/bin/sh
# kill_trials.sh MODE SIGNAL TRIALS - fault injection with real processes.
#
# Each trial starts 4 ranks of tests/fault/elastic_sgd under chorus-run, waits until they
# train, then at a random moment sends SIGNAL (KILL or STOP) to a random rank, and checks:
#   plain   (no --elastic): chorus-run exits non-zero naming the rank, and every survivor
#           ended with an error that names the lost rank (on its own, within the timeout:
#           --grace is longer than the detection needs);
#   elastic (--elastic --min-np 2 --max-restarts 0): the job finishes with 3 ranks whose final
#           parameters are identical and equal to the serial reference (elastic_sgd checks
#           that, and that no worker resumed before its last commit).
# Always: no process of the trial and no /dev/shm segment of its communicators is left.
# FAULT_SEED=n replays the same choices of victim and moment.
set -u
mode=$1; sig=$2; trials=$3
seed=${FAULT_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "seed $seed (FAULT_SEED=$seed replays these trials)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED (trial $t, seed $seed): $*"; echo "--- output"; cat "$out"; exit 1; }
# rnd N K: the K-th pseudo-random number in [0, N) of this seed (CRC32 of "seed K")
rnd() { echo $(( $(echo "$seed $2" | cksum | cut -d' ' -f1) % $1 )); }
export CHORUS_HEARTBEAT_TIMEOUT_S=2 CHORUS_HEARTBEAT_S=0.5

t=0
while [ $t -lt "$trials" ]; do
    t=$((t + 1))
    tag="ftest-$$-$t"
    out="$tmp/out.$t"
    case $mode in
        plain) opts="--grace 5" ;;
        elastic) opts="--elastic --min-np 2 --max-restarts 0" ;;
        *) echo "unknown mode $mode"; exit 2 ;;
    esac
    CHORUS_JOB_ID=$tag chorus-run $opts -np 4 "$BUILD/tests/fault/elastic_sgd" \
        --steps 50 --step-ms 20 --dim 500 --tag "$tag" >"$out" 2>&1 &
    runner=$!
    i=0
    while [ "$(cat "$out" 2>/dev/null | grep -c '\] gen 1 size 4')" -lt 4 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    [ $i -lt 300 ] || fail "the job did not start"
    victim=$(rnd 4 "$t")
    delay=$(awk -v ms="$(rnd 700 $((t + 1000)))" 'BEGIN { printf "%.3f", ms / 1000 }')
    pid=$(sed -n "s/^\[$victim\] started worker $victim pid \([0-9]*\)$/\1/p" "$out")
    [ -n "$pid" ] || fail "no pid for worker $victim"
    sleep "$delay"
    echo "trial $t: SIG$sig to rank $victim (pid $pid) after ${delay}s"
    kill -"$sig" "$pid"
    wait $runner
    rc=$?
    case $mode in
        plain)
            [ $rc != 0 ] || fail "chorus-run exited 0 although rank $victim was lost"
            if [ "$sig" = KILL ]; then
                grep -q "chorus-run: rank $victim (pid $pid) was killed by signal 9" "$out" ||
                    fail "chorus-run did not name rank $victim"
            else
                grep -q "chorus-run: rank $victim (pid $pid) stopped responding" "$out" ||
                    fail "chorus-run did not name the stopped rank $victim"
            fi
            for r in 0 1 2 3; do
                [ $r = "$victim" ] && continue
                # over TCP the message names the host; over shared memory (same host) the pid
                grep -q "^\[$r\] error: CHORUS_ERR_\(PEER_LOST\|TIMEOUT\).*rank $victim (\(host\|pid\) [^)]*)" "$out" ||
                    fail "survivor $r did not report rank $victim and its host"
            done
            ;;
        elastic)
            [ $rc = 0 ] || fail "chorus-run exited $rc"
            n=$(grep -c '\] final step 50 hash [0-9a-f]* ok$' "$out")
            [ "$n" = 3 ] || fail "$n survivors finished correctly, expected 3"
            h=$(sed -n 's/^\[[0-9]*\] final step 50 hash \([0-9a-f]*\) ok$/\1/p' "$out" | sort -u | wc -l)
            [ "$h" = 1 ] || fail "survivors disagree on the final parameters"
            grep -q "^\[$victim\] final" "$out" && fail "the lost rank $victim finished"
            grep -q "generation [0-9]* has 3 ranks" "$out" || fail "no generation of 3 ranks"
            ;;
    esac
    sleep 0.2
    left=$(pgrep -f -- "--tag $tag\$" | wc -l)
    [ "$left" = 0 ] || fail "$left processes of the trial are still running"
    for id in $(sed -n 's/^\[[0-9]*\] shm-id \([0-9a-f]*\)$/\1/p' "$out" | sort -u); do
        ls /dev/shm 2>/dev/null | grep -q "chorus-$id" && fail "/dev/shm segment of $id left behind"
    done
    grep -h "error:\|chorus-run:" "$out" | sed 's/^/    /'
done
echo "ok: $trials trials of SIG$sig ($mode)"
