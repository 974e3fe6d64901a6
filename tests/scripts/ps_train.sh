#!/bin/sh
# ps_train.sh - chorus-train's parameter-server modes with real ranks.
#   equal W K OPTIM  W workers and K servers in ps-sync end with the same parameters, to the
#                    bit, as W ranks of allreduce data parallelism on the same data and seed:
#                    the servers sum the workers' gradients in worker order as the allreduce
#                    folds in rank order, and apply the same update code (include/chorus/optim.h)
#   accuracy         chorus-run -np 3 chorus-train --model mlp --epochs 3 --mode ps-async
#                    --servers 1 reaches a test accuracy of at least 0.85 (under a sanitizer,
#                    where every step is slower and CI time is short: 120 steps, at least 0.75)
#   bad              bad --mode and --servers values get clear messages
#   kill_server      ps-sync with checkpoints every 10 steps; the server is killed mid-run:
#                    the job fails naming it; --resume continues from the shards' last
#                    checkpoint and ends with the parameters of a run never interrupted
#   kill_worker      ps-async: a worker killed mid-run; the others make all their steps, and
#                    chorus-run exits 0 naming the lost worker; the server says, without
#                    CHORUS_DEBUG, that it goes on without it
#   stop_server      ps-async and ps-ssp: the server stopped (SIGSTOP) mid-run: the workers
#                    lose it; the job tolerates a lost worker, but when the last worker ends
#                    because it lost the server the job cannot go on: chorus-run stops it,
#                    names the stopped server as the rank that failed first, and exits
#                    non-zero (it used to wait for the stopped server for ever)
#   stop_worker      ps-async: a worker stopped (SIGSTOP) mid-run: the server goes on without
#                    it, the other worker finishes, and chorus-run, whose only running rank is
#                    then the stopped one, stops it after --grace and exits 0 naming it (it
#                    used to wait for it for ever)
#   damaged_shards   ps-sync checkpoints of steps 4 and 6; the server's shard of step 6 is
#                    damaged: the server says what is wrong with it (without CHORUS_DEBUG), the
#                    resume falls back to step 4, says so, and ends with the parameters of a
#                    run never interrupted
#   time_limit       with --time-limit the learning-rate schedule spans the time budget (in
#                    allreduce mode and in a parameter-server mode); allreduce ranks agree
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
case "$1" in
equal)
    W=$2 K=$3 OPT=$4
    common="--max-steps 12 --no-eval --batch 96 --optim $OPT --seed 7"
    chorus-run -np "$W" chorus-train $common --dump-params "$d/ar" > "$d/ar.log" 2>&1 ||
        { cat "$d/ar.log"; exit 1; }
    chorus-run -np $((W + K)) chorus-train $common --mode ps-sync --servers "$K" \
        --dump-params "$d/ps" > "$d/ps.log" 2>&1 || { cat "$d/ps.log"; exit 1; }
    tail -3 "$d/ps.log"
    w=0
    while [ $w -lt "$W" ]; do
        cmp "$d/ar.$w" "$d/ps.$w" || { echo "worker $w: parameters differ from allreduce"; exit 1; }
        w=$((w + 1))
    done
    echo "ps-sync with $W workers and $K servers ($OPT): parameters identical to allreduce on $W ranks"
    ;;
accuracy)
    epochs=3 target=0.85 short=""
    [ -n "${SANITIZE:-}" ] && epochs=1 target=0.75 short="--max-steps 120"
    chorus-run -np 3 chorus-train --model mlp --epochs $epochs $short --mode ps-async --servers 1 \
        --metrics "$d/m.jsonl" > "$d/log" 2>&1
    rc=$?
    cat "$d/log"
    [ $rc = 0 ] || exit 1
    grep -q '"server":0,"mode":"ps-async","server_bytes":[1-9]' "$d/m.jsonl" ||
        { echo "no server line in the metrics"; exit 1; }
    acc=$(sed -n 's/.*done: .* test accuracy \([0-9.]*\).*/\1/p' "$d/log")
    echo "test accuracy $acc after $epochs epochs (target $target)"
    awk -v a="$acc" -v t=$target 'BEGIN { exit !(a >= t) }'
    ;;
bad)
    out=$(chorus-train --mode ps-fast 2>&1)
    echo "$out"
    echo "$out" | grep -q "mode must be allreduce, ps-sync, ps-async or ps-ssp, not 'ps-fast'" || exit 1
    out=$(chorus-run -np 2 chorus-train --mode ps-async --servers 2 2>&1)
    echo "$out"
    echo "$out" | grep -q "2 servers in a job of 2 ranks leaves no worker; use 1..1 servers" || exit 1
    ;;
stop_worker)
    # a stopped worker is lost after CHORUS_HEARTBEAT_TIMEOUT_S; the end's waits on it last
    # CHORUS_TIMEOUT_S; then chorus-run waits --grace before it stops it
    CHORUS_TIMEOUT_S=5 CHORUS_HEARTBEAT_TIMEOUT_S=2 chorus-run --grace 2 -np 3 sh -c "echo \$\$ > $d/pid.\$CHORUS_RANK; exec chorus-train --mode ps-async --servers 1 --no-eval --batch 64 --max-steps 60 --log-every 1" \
        > "$d/stopped.log" 2>&1 &
    run=$!
    i=0
    until grep -q "^\[1\] .*step [3-9]/" "$d/stopped.log" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 1200 ] || { kill $run; cat "$d/stopped.log"; echo "the run never got to step 3"; exit 1; }
        sleep 0.05
    done
    victim=$(cat "$d/pid.1")
    kill -STOP "$victim"
    wait $run
    rc=$?
    grep -v "step [0-9]*/\|^\[.\] \(memory\|per rank\)" "$d/stopped.log" | tail -5
    [ $rc = 0 ] || { echo "exit $rc, not 0: the job goes on without a stopped worker"; exit 1; }
    grep -q "^chorus-run: rank 1 (pid $victim) is stopped (SIGSTOP?) and every other rank has ended; stopping it: the job finished without it (a parameter-server worker whose loss the job tolerates)$" "$d/stopped.log" ||
        { echo "chorus-run did not name the stopped worker"; exit 1; }
    grep -q "^chorus-run: the job finished without rank 1 (pid $victim)" "$d/stopped.log" ||
        { echo "the summary does not name the stopped worker"; exit 1; }
    kill -0 "$victim" 2> /dev/null && { echo "the stopped worker is left"; exit 1; }
    echo "a stopped worker: the job finished without it and named it"
    ;;
stop_server)
    # the workers find the stopped server after CHORUS_HEARTBEAT_TIMEOUT_S seconds of silence
    for m in ps-async ps-ssp; do
        # the previous mode's log and pids must not be read as this run's
        rm -f "$d/stopped.log" "$d"/pid.*
        CHORUS_HEARTBEAT_TIMEOUT_S=2 chorus-run -np 3 sh -c "echo \$\$ > $d/pid.\$CHORUS_RANK; exec chorus-train --mode $m --servers 1 --no-eval --batch 64 --log-every 1" \
            > "$d/stopped.log" 2>&1 &
        run=$!
        i=0
        until grep -q "step [3-9]/" "$d/stopped.log" 2>/dev/null; do
            i=$((i + 1))
            [ $i -lt 1200 ] || { kill $run; cat "$d/stopped.log"; echo "the run never got to step 3"; exit 1; }
            sleep 0.05
        done
        server=$(cat "$d/pid.0")
        kill -STOP "$server"
        wait $run
        rc=$?
        grep -v "^\[.\] \(epoch\|memory\|per rank\)" "$d/stopped.log" | tail -6
        [ $rc != 0 ] || { echo "$m: chorus-run exited 0 without its server"; exit 1; }
        grep -q "^chorus-run: rank 0 (pid $server) stopped responding (it was stopped, SIGSTOP?) and was killed by signal 15 (Terminated); it failed first$" "$d/stopped.log" ||
            { echo "$m: chorus-run did not name the stopped server"; exit 1; }
        grep -q "the job finished without" "$d/stopped.log" &&
            { echo "$m: the job was said to have finished without its workers"; exit 1; }
        echo "$m: the stopped server is named and the job ends"
    done
    ;;
kill_server)
    common="--mode ps-sync --servers 1 --no-eval --batch 64 --checkpoint-dir $d/ck --checkpoint-every 10"
    chorus-run -np 3 chorus-train $common --log-every 1 > "$d/killed.log" 2>&1 &
    run=$!
    i=0
    until grep -q "step 2[2-9]/" "$d/killed.log" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 1200 ] || { kill $run; cat "$d/killed.log"; echo "the run never got to step 22"; exit 1; }
        sleep 0.05
    done
    server=""
    for c in $(pgrep -P $run); do
        tr '\0' '\n' < /proc/$c/environ 2>/dev/null | grep -qx CHORUS_RANK=0 && server=$c
    done
    [ -n "$server" ] || { kill $run; echo "no rank 0 under chorus-run $run"; exit 1; }
    kill -9 "$server"
    wait $run
    rc=$?
    tail -6 "$d/killed.log"
    [ $rc != 0 ] || { echo "the job went on without its server"; exit 1; }
    grep -q "exchanging with the parameter servers: .*rank 0" "$d/killed.log" ||
        { echo "no worker named the dead server"; exit 1; }
    chorus-run -np 3 chorus-train $common --resume --max-steps 50 --dump-params "$d/resumed" \
        > "$d/resumed.log" 2>&1 || { cat "$d/resumed.log"; exit 1; }
    grep "resumed" "$d/resumed.log"
    grep -q "servers: resumed their shards of step [1-9]" "$d/resumed.log" || exit 1
    chorus-run -np 3 chorus-train --mode ps-sync --servers 1 --no-eval --batch 64 --max-steps 50 \
        --dump-params "$d/straight" > "$d/straight.log" 2>&1 || { cat "$d/straight.log"; exit 1; }
    cmp "$d/resumed.0" "$d/straight.0" || { echo "the resumed run ended elsewhere"; exit 1; }
    echo "resumed after the server was killed: parameters identical to an uninterrupted run"
    ;;
kill_worker)
    # ps-async, 1 server and 3 workers; worker 2 (rank 3) is killed mid-run: the server goes on
    # without it and the other workers make all their steps; worker 0 evaluates and reports;
    # chorus-run lets the job finish (the workers told it that the job tolerates their loss),
    # exits 0 and names the lost worker; the server's line prints without CHORUS_DEBUG
    chorus-run -np 4 chorus-train --mode ps-async --servers 1 --batch 96 \
        --max-steps 150 --log-every 1 > "$d/log" 2>&1 &
    run=$!
    i=0
    until grep -q "step 2[0-9]/" "$d/log" 2>/dev/null; do
        i=$((i + 1))
        [ $i -lt 1200 ] || { kill $run; cat "$d/log"; echo "the run never got to step 20"; exit 1; }
        sleep 0.05
    done
    victim=""
    for c in $(pgrep -P $run); do
        tr '\0' '\n' < /proc/$c/environ 2>/dev/null | grep -qx CHORUS_RANK=3 && victim=$c
    done
    [ -n "$victim" ] || { kill $run; echo "no rank 3 under chorus-run $run"; exit 1; }
    kill -9 "$victim"
    wait $run
    rc=$?
    grep -v "step [0-9]*/" "$d/log"
    [ $rc = 0 ] || { echo "chorus-run: exit $rc, not 0: the job went on without the lost worker"; exit 1; }
    grep -q "^chorus-run: rank 3 (pid $victim) was killed by signal 9 (Killed); the job goes on without it (it declared that the job tolerates its loss: a parameter-server worker in async or ssp mode)$" "$d/log" ||
        { echo "chorus-run did not say at once that the job goes on without rank 3"; exit 1; }
    grep -q "^chorus-run: the job finished without rank 3 (pid $victim), which was killed by signal 9 (Killed) [0-9.]* s after the start" "$d/log" ||
        { echo "chorus-run's summary does not name the lost worker"; exit 1; }
    grep -q "worker 2 (rank 3) is lost.*going on without it" "$d/log" ||
        { echo "the server did not say it went on without the lost worker"; exit 1; }
    grep -q "^\[1\] done: 150 steps, test accuracy" "$d/log" ||
        { echo "worker 0 did not finish its 150 steps"; exit 1; }
    ;;
damaged_shards)
    common="--mode ps-sync --servers 1 --no-eval --batch 64 --log-every 1000"
    ck="--checkpoint-dir $d/ck --checkpoint-every 2"
    chorus-run -np 3 chorus-train $common $ck --max-steps 6 > "$d/first.log" 2>&1 ||
        { cat "$d/first.log"; exit 1; }
    shard=$(ls "$d"/ck/ps-shard-0-of-1-at-6.*.ckpt) || { ls "$d/ck"; exit 1; }
    printf 'X' | dd of="$shard" bs=1 seek=100 conv=notrunc 2>/dev/null
    chorus-run -np 3 chorus-train $common $ck --resume --max-steps 8 --dump-params "$d/resumed" \
        > "$d/resumed.log" 2>&1
    rc=$?
    cat "$d/resumed.log"
    [ $rc = 0 ] || { echo "the resume failed"; exit 1; }
    grep -q "^\[0\] .*server 0: no shard of step 6: .*ps-shard-0-of-1-at-6\.[0-9]*\.ckpt: payload checksum mismatch" "$d/resumed.log" ||
        { echo "the server did not say what is wrong with its shard"; exit 1; }
    grep -q "chorus-train: chorus_ps_load: server 0 could not load its shard of step 6 in $d/ck (the server's own message says why); resuming from step 4 instead, the newest older step whose shards and trainer checkpoint are all intact" "$d/resumed.log" ||
        { echo "no word of the fallback to step 4"; exit 1; }
    grep -q "servers: resumed their shards of step 4 from $d/ck" "$d/resumed.log" || exit 1
    chorus-run -np 3 chorus-train $common --max-steps 8 --dump-params "$d/straight" \
        > "$d/straight.log" 2>&1 || { cat "$d/straight.log"; exit 1; }
    cmp "$d/resumed.0" "$d/straight.0" || { echo "the resumed run ended elsewhere"; exit 1; }
    # no intact older step either: refused, saying both what failed and why nothing is left
    shard=$(ls "$d"/ck/ps-shard-0-of-1-at-8.*.ckpt) || { ls "$d/ck"; exit 1; }
    printf 'X' | dd of="$shard" bs=1 seek=100 conv=notrunc 2>/dev/null
    rm -f "$d"/ck/ps-shard-0-of-1-at-6.*.ckpt "$d"/ck/ps-shard-0-of-1-at-4.*.ckpt
    out=$(chorus-run -np 3 chorus-train $common $ck --resume --max-steps 10 2>&1)
    rc=$?
    echo "$out"
    [ $rc != 0 ] || { echo "resumed without intact shards"; exit 1; }
    echo "$out" | grep -q "cannot resume: chorus_ps_load: server 0 could not load its shard of step 8 .*; no older step has both its shards and its trainer checkpoint intact" ||
        { echo "no reason for the refusal"; exit 1; }
    echo "damaged shards of step 6: resumed from step 4, parameters identical to an uninterrupted run"
    ;;
time_limit)
    # the schedule spans the budget: the rate starts at --lr and has nearly vanished at the end;
    # the allreduce ranks take the same rate every step (identical parameters)
    for mode in allreduce ps-async; do
        np=2 servers=""
        [ $mode = allreduce ] || np=3 servers="--servers 1"
        chorus-run -np $np chorus-train --mode $mode $servers --batch 64 --time-limit 1.5 \
            --metrics "$d/$mode.jsonl" --dump-params "$d/$mode" > "$d/$mode.log" 2>&1 ||
            { cat "$d/$mode.log"; exit 1; }
        grep "after .* s: test loss" "$d/$mode.log" || { cat "$d/$mode.log"; exit 1; }
        first=$(head -1 "$d/$mode.jsonl" | sed 's/.*"lr":\([0-9.e-]*\).*/\1/')
        last=$(grep '"lr"' "$d/$mode.jsonl" | tail -1 | sed 's/.*"lr":\([0-9.e-]*\).*/\1/')
        echo "$mode: learning rate $first at the first step, $last at the last"
        awk -v f="$first" -v l="$last" 'BEGIN { exit !(f > 0.099 && l < 0.1 * f) }' ||
            { echo "$mode: the schedule does not span the time budget"; exit 1; }
    done
    cmp "$d/allreduce.0" "$d/allreduce.1" || { echo "allreduce ranks differ"; exit 1; }
    ;;
*) echo "usage: ps_train.sh equal W K OPTIM | accuracy | bad | kill_server | kill_worker | damaged_shards | time_limit"; exit 2 ;;
esac
