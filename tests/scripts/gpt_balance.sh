#!/bin/sh
# gpt_balance.sh - load balancing on --model gpt with real ranks, on real text (a few of
# Debian's fortune databases) and a tiny shape of the GPT.
#   shares    the weighted step is the even step: --balance-shares 12,4 (2 ranks, a global batch
#             of 16 windows, 6 steps) ends with the parameters of the even 8/8 split up to the
#             order of the float sums (largest difference below 1e-5), with --grad-sync fused,
#             with --grad-sync engine and --accum 2, with --zero 1 and with --zero 3; the ranks
#             stay bitwise identical; 8 steps straight = 4 + --resume 4, to the bit
#   dynamic   rank 1 given half a core, rank 0 a whole one, for real (cgroup CPU quotas, else
#             a busy loop on rank 1's core: tests/scripts/cpucap.sh): --balance dynamic moves the shares
#             toward rank 0 (no timing asserts: the direction of the shares the balancer
#             reports); a --resume from its checkpoint takes the shares back and its steps are
#             those, to the bit, of the same resume with the shares fixed by --balance-shares
#   refused   what balancing does not combine with on the GPT is refused with the reason
set -u
PATH=${BUILD:-build}/bin:$PATH
d=$(mktemp -d)
. tests/scripts/cpucap.sh
trap 'cpucap_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM
. tests/scripts/gpt_text.sh # fail, $d/text, run
tiny="--model gpt --data $d/text --layers 2 --d-model 32 --heads 4 --context 16 --batch 16 --seed 4 --no-eval --sample 0"
last_shares() { # metrics file: the shares of its last gathered step, "a b "
    grep '"ranks"' "$1" | tail -1 | grep -o '"share":[0-9]*' | cut -d: -f2 | tr '\n' ' '
}
close() { # a b: the largest difference of rank 0's parameters of runs a and b is below 1e-5
    python3 - "$d/$1.0" "$d/$2.0" "$1 against $2" << 'PY'
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
diff = max(abs(x - y) for x, y in zip(a, b))
print("%s: %d parameters (up to %.2f), largest difference %.3g" % (sys.argv[3], len(a), max(map(abs, a)), diff))
sys.exit(0 if len(a) == len(b) and len(a) > 0 and diff < 1e-5 else 1)
PY
}
case "$1" in
shares)
    for c in "fused:--grad-sync fused" "engine:--grad-sync engine --accum 2" "z1:--zero 1" "z3:--zero 3"; do
        n=${c%%:*} args=${c#*:}
        # shellcheck disable=SC2086
        run $n.even $tiny --max-steps 6 $args --dump-params "$d/$n.even"
        # shellcheck disable=SC2086
        run $n.fixed $tiny --max-steps 6 $args --balance-shares 12,4 --log-every 2 \
            --metrics "$d/$n.jsonl" --dump-params "$d/$n.fixed"
        grep -q "load balancing: fixed shares 12 4 of each global batch" "$d/$n.fixed.log" ||
            { cat "$d/$n.fixed.log"; fail "$n: no line on the fixed shares"; }
        [ "$(last_shares "$d/$n.jsonl")" = "12 4 " ] || fail "$n: the shares were not 12 and 4"
        cmp "$d/$n.fixed.0" "$d/$n.fixed.1" || fail "$n: the ranks' parameters differ"
        close $n.even $n.fixed || fail "$args: the shares 12/4 leave the even step"
    done
    cat "$d/engine.fixed.log"
    grep -q "per rank over the run: rank 0 .* windows/s, share 12; rank 1 .* windows/s, share 4" \
        "$d/engine.fixed.log" || fail "no per-rank line in windows"
    bal="--balance-shares 12,4 --checkpoint-dir $d/ck --checkpoint-every 4"
    run straight $tiny --max-steps 8 --balance-shares 12,4 --dump-params "$d/straight"
    run half $tiny --max-steps 4 $bal
    run rest $tiny --max-steps 8 $bal --resume --dump-params "$d/rest"
    for r in 0 1; do cmp "$d/straight.$r" "$d/rest.$r" || fail "rank $r: the resumed run differs"; done
    echo "--balance-shares 12,4: 8 steps straight = 4 steps + --resume 4 steps, to the bit"
    ;;
dynamic)
    cpucap_up chorus-gpt-balance-test || fail "cannot slow a rank here (no cgroup, no taskset)"
    cpucap_rank 0 100000 && cpucap_rank 1 50000 || exit 1
    echo "slowing rank 1: $CPUCAP_HOW"
    small="--model gpt --data $d/text --layers 2 --d-model 64 --heads 4 --context 32 --batch 32 --seed 4 --no-eval --sample 0"
    ck="--checkpoint-dir $d/ck --checkpoint-every 10"
    chorus-run -np 2 sh tests/scripts/cpucap_exec.sh chorus-train $small --balance dynamic \
        --balance-every 5 --log-every 5 --max-steps 30 $ck --metrics "$d/m.jsonl" > "$d/dyn.log" 2>&1 ||
        { cat "$d/dyn.log"; fail "the slowed run"; }
    cpucap_down
    cat "$d/dyn.log"
    grep -q "load balancing: dynamic, each rank's share of the global batch of 32 follows its measured speed (re-balanced every 5 steps, at least 4 windows each)" "$d/dyn.log" ||
        fail "no line on the balancing"
    grep -q "per rank over the run: rank 0 .* windows/s, share [0-9]*; rank 1 .* windows/s, share [0-9]*" "$d/dyn.log" ||
        fail "no per-rank line"
    shares=$(last_shares "$d/m.jsonl")
    s0=${shares%% *} s1=$(echo "$shares" | cut -d' ' -f2)
    echo "final shares: rank 0 $s0, rank 1 $s1 of 32 (rank 1 at half a core, rank 0 a whole one)"
    [ $((s0 + s1)) = 32 ] && [ "$s0" -gt "$s1" ] || fail "the shares did not move toward the fast rank 0"
    # The shares saved with step 30, taken back by a resume (no re-balancing in its 4 steps:
    # --log-every and --balance-every beyond them), against the same resume with them fixed.
    more="--max-steps 34 --checkpoint-dir $d/ck --resume --log-every 100 --balance-every 100"
    cp -r "$d/ck" "$d/ck2"
    run resumed $small $more --balance dynamic --dump-params "$d/resumed"
    cat "$d/resumed.log"
    grep -q "load balancing: resumed the shares $s0 $s1 of step 30" "$d/resumed.log" ||
        fail "the shares of step 30 ($s0 $s1) were not resumed"
    rm -rf "$d/ck" && mv "$d/ck2" "$d/ck"
    run fixed $small $more --balance-shares "$s0,$s1" --dump-params "$d/fixed"
    for r in 0 1; do cmp "$d/resumed.$r" "$d/fixed.$r" || fail "rank $r: the resumed shares were not the ones used"; done
    echo "--resume with --balance dynamic: shares $s0 $s1 taken back, the steps those of --balance-shares $s0,$s1 to the bit"
    ;;
refused)
    for c in "--tensor-parallel 2:--balance dynamic does not combine with --tensor-parallel: the shards of a replica" \
        "--pipeline-stages 2:--balance-shares does not combine with --pipeline-stages: the stages of a pipeline take the same micro-batches" \
        "--zero 2:--balance dynamic does not combine with --zero 2 and 3: the gradient's reduce-scatter" \
        "--zero 3:--balance dynamic does not combine with --zero 2 and 3"; do
        args=${c%%:*} msg=${c#*:}
        b="--balance dynamic"
        case $msg in *balance-shares*) b="--balance-shares 8,8" ;; esac
        # shellcheck disable=SC2086
        out=$(chorus-run -np 2 chorus-train $tiny --max-steps 1 $args $b 2>&1) && fail "$args $b was not refused"
        echo "$out" | grep -qF -- "--model gpt: $msg" || { echo "$out"; fail "$args $b: expected '$msg'"; }
        echo "refused $args $b: $(echo "$out" | grep -F -- "--model gpt:" | head -1)"
    done
    ;;
*) fail "unknown case $1" ;;
esac
echo "gpt_balance $1: ok"
