#!/bin/sh
# autotune.sh - CHORUS_AUTOTUNE=1 over real ranks (src/engine/autotune.c).
#   engine NP [VAR=VALUE...]  tests/mp/engine_autotune on NP ranks (results checked every step,
#                    bitwise identical across ranks): rank 0 logs every trial with its step
#                    time, each dimension's candidates with their times and the fastest, and
#                    the choice; every rank then applies exactly the values rank 0 chose
#   forced           with CHORUS_ALGO_ALLREDUCE set the algorithm is not tuned (the choice says
#                    it was forced) and the starting settings' step time is still reported
#   quiet            without CHORUS_DEBUG the choice is still shown, by rank 0 only
#   train            chorus-train --grad-sync engine on 2 ranks tunes and its ranks end with
#                    bitwise identical parameters
#   launcher         chorus-run --autotune (horovodrun's flag), with no CHORUS_AUTOTUNE* in the
#                    environment, tunes as CHORUS_AUTOTUNE=1 does; --autotune-steps-per-sample
#                    and --autotune-warmup-samples set the steps
#   bad              a malformed CHORUS_AUTOTUNE or an out-of-range CHORUS_AUTOTUNE_STEPS or
#                    CHORUS_AUTOTUNE_WARMUP is refused with a message naming it
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
fail() {
    echo "FAIL: $*"
    exit 1
}
export CHORUS_AUTOTUNE_STEPS=1 CHORUS_AUTOTUNE_WARMUP=1

# The values of rank 0's choice line in $1, as "allreduce A, fusion threshold F B, cycle time C ms".
chosen() {
    sed -n 's/.*autotune: chose \(allreduce [^ ,]*\)[^,]*, \(fusion threshold [0-9]* B\), \(cycle time [0-9.]* ms\) after.*/\1, \2, \3/p' "$1"
}

case "$1" in
engine)
    np=$2
    shift 2
    env "$@" CHORUS_AUTOTUNE=1 CHORUS_DEBUG=INFO chorus-run -np "$np" \
        "$BUILD/tests/mp/engine_autotune" 40 > "$d/log" 2>&1 || { cat "$d/log"; fail "run failed"; }
    grep "autotune" "$d/log" | grep -v " (set)$"
    grep -q "^\[0\] .*autotune: trial 1, allreduce algorithm auto: [0-9.]* ms per step" "$d/log" ||
        fail "no first trial line"
    grep -q "^\[0\] .*autotune: fusion threshold: 0 B [0-9.]* ms, 1048576 B [0-9.]* ms, .* is fastest" \
        "$d/log" || fail "no line listing the fusion thresholds with their times"
    grep -q "^\[0\] .*autotune: cycle time: .* ms is fastest" "$d/log" ||
        fail "no line listing the cycle times"
    c=$(chosen "$d/log")
    [ -n "$c" ] || fail "no choice line"
    n=$(grep -c "autotune: chose" "$d/log")
    [ "$n" = 1 ] || fail "$n choice lines, want 1 (rank 0's)"
    r=0
    while [ $r -lt "$np" ]; do
        grep -q "^\[$r\] .*autotune: rank $r applies $c\$" "$d/log" ||
            fail "rank $r does not apply rank 0's choice ($c)"
        r=$((r + 1))
    done
    grep -q "results identical on $np ranks" "$d/log" || fail "no result line"
    echo "every rank applied: $c"
    ;;
forced)
    CHORUS_ALGO_ALLREDUCE=shm_pipelined CHORUS_AUTOTUNE=1 CHORUS_DEBUG=INFO chorus-run -np 2 \
        "$BUILD/tests/mp/engine_autotune" 30 > "$d/log" 2>&1 || { cat "$d/log"; fail "run failed"; }
    grep " autotune: " "$d/log"
    ! grep -q "autotune: trial .*allreduce algorithm" "$d/log" || fail "a forced algorithm was tuned"
    grep -q "^\[0\] .*autotune: chose allreduce shm_pipelined (forced by CHORUS_ALGO_ALLREDUCE), .* against [0-9][0-9.]* ms with the starting settings (allreduce shm_pipelined, fusion threshold 67108864 B, cycle time 2 ms)" \
        "$d/log" || fail "no choice line naming the forced algorithm and the starting settings' time"
    grep -q "^\[1\] .*autotune: rank 1 applies allreduce shm_pipelined, " "$d/log" ||
        fail "rank 1 does not keep the forced algorithm"
    ;;
quiet)
    CHORUS_AUTOTUNE=1 chorus-run -np 2 "$BUILD/tests/mp/engine_autotune" 40 > "$d/log" 2>&1 ||
        { cat "$d/log"; fail "run failed"; }
    cat "$d/log"
    grep -q "^\[0\] CHORUS rank 0: autotune: chose allreduce .* against .* with the starting settings" \
        "$d/log" || fail "the choice is not shown at the default log level"
    [ "$(grep -c ' autotune: ' "$d/log")" = 1 ] || fail "more than the one choice line"
    ;;
train)
    steps=40
    [ -n "${SANITIZE:-}" ] && steps=32
    CHORUS_AUTOTUNE=1 chorus-run -np 2 chorus-train --model mlp --batch 128 --max-steps $steps \
        --no-eval --seed 3 --grad-sync engine --dump-params "$d/p" > "$d/log" 2>&1 ||
        { cat "$d/log"; fail "training failed"; }
    grep "autotune" "$d/log"
    [ -n "$(chosen "$d/log")" ] || fail "no choice line from chorus-train"
    cmp "$d/p.0" "$d/p.1" || fail "the ranks' parameters differ"
    echo "chorus-train --grad-sync engine tuned; ranks bitwise identical"
    ;;
launcher)
    env -u CHORUS_AUTOTUNE -u CHORUS_AUTOTUNE_STEPS -u CHORUS_AUTOTUNE_WARMUP -u HOROVOD_AUTOTUNE \
        CHORUS_DEBUG=INFO chorus-run -np 2 --autotune --autotune-steps-per-sample 1 \
        --autotune-warmup-samples 1 "$BUILD/tests/mp/engine_autotune" 40 > "$d/log" 2>&1 ||
        { cat "$d/log"; fail "run failed"; }
    grep " autotune: " "$d/log" | grep -v " (set)$"
    grep -q "^\[0\] .*CHORUS_AUTOTUNE_STEPS=1 (set)$" "$d/log" ||
        fail "--autotune-steps-per-sample 1 did not reach the ranks"
    grep -q "^\[0\] .*CHORUS_AUTOTUNE_WARMUP=1 (set)$" "$d/log" ||
        fail "--autotune-warmup-samples 1 did not reach the ranks"
    c=$(chosen "$d/log")
    [ -n "$c" ] || fail "no choice line: --autotune did not turn the autotuner on"
    grep -q "^\[1\] .*autotune: rank 1 applies $c\$" "$d/log" ||
        fail "rank 1 does not apply rank 0's choice ($c)"
    grep -q "results identical on 2 ranks" "$d/log" || fail "no result line"
    echo "chorus-run --autotune: every rank applied $c"
    ;;
bad)
    out=$(CHORUS_AUTOTUNE=maybe chorus-run -np 2 "$BUILD/tests/mp/engine_autotune" 3 2>&1)
    rc=$?
    echo "$out"
    [ $rc != 0 ] || fail "CHORUS_AUTOTUNE=maybe accepted"
    echo "$out" | grep -q "invalid environment: CHORUS_AUTOTUNE=maybe is not a boolean" ||
        fail "no message for CHORUS_AUTOTUNE=maybe"
    out=$(CHORUS_AUTOTUNE=1 CHORUS_AUTOTUNE_STEPS=0 chorus-run -np 2 \
        "$BUILD/tests/mp/engine_autotune" 3 2>&1)
    rc=$?
    echo "$out"
    [ $rc != 0 ] || fail "CHORUS_AUTOTUNE_STEPS=0 accepted"
    echo "$out" | grep -q "CHORUS_AUTOTUNE_STEPS=0: the measured steps per candidate must be 1 to 100" ||
        fail "no message for CHORUS_AUTOTUNE_STEPS=0"
    out=$(CHORUS_AUTOTUNE=1 CHORUS_AUTOTUNE_WARMUP=5000 chorus-run -np 2 chorus-train \
        --model mlp --max-steps 2 --no-eval --grad-sync engine 2>&1)
    rc=$?
    echo "$out"
    [ $rc != 0 ] || fail "CHORUS_AUTOTUNE_WARMUP=5000 accepted"
    echo "$out" | grep -q "CHORUS_AUTOTUNE_WARMUP=5000: the warm-up steps must be 0 to 1000" ||
        fail "chorus-train does not name CHORUS_AUTOTUNE_WARMUP=5000"
    ;;
*)
    fail "usage: autotune.sh engine NP [VAR=VALUE...]|forced|quiet|train|launcher|bad"
    ;;
esac
