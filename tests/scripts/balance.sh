#!/bin/sh
# balance.sh - chorus-train's per-rank monitoring and load balancing with real ranks.
#   converge  2 ranks, rank 1 given half the CPU of rank 0 for real (cgroup CPU quotas, else
#             a busy loop pinned on its core: tests/scripts/cpucap.sh): with --balance dynamic
#             rank 0's share of the global batch converges to about 2/3 (within 0.56..0.78),
#             and the progress line names rank 1 as compute-bound
#   equal     the weighted step is the even step: static and --balance-shares 100,28 (2 ranks,
#             global batch 128, 12 steps) end with the same parameters up to the order of the
#             float sums (largest difference below 1e-5; about 2e-7 is seen, parameters up
#             to 0.43), and the ranks stay bitwise identical
#   resume    the shares are saved with the checkpoints and a resume takes them back; a job of
#             another size starts from even shares and says why
#   straggler --mode ps-sync with 2 workers, worker 1 at a tenth of worker 0's CPU: worker 0
#             reports the exchanges that took longer than --straggler-timeout and why; the
#             option is refused with allreduce, whose progress line names slow ranks
#   bad       bad --balance values get clear messages
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d)
. tests/scripts/cpucap.sh
trap 'cpucap_down; rm -rf "$d"' EXIT
trap 'exit 1' INT TERM
steps=40
[ -n "${SANITIZE:-}" ] && steps=30
# last_shares FILE: the shares of the last gathered step of a metrics file, "a b"
last_shares() {
    grep '"ranks"' "$1" | tail -1 | grep -o '"share":[0-9]*' | cut -d: -f2 | tr '\n' ' '
}
case "$1" in
converge)
    cpucap_up chorus-balance-test || { echo "cannot slow a rank here (no cgroup, no taskset)"; exit 1; }
    cpucap_rank 0 50000 && cpucap_rank 1 25000 || exit 1
    echo "slowing rank 1: $CPUCAP_HOW"
    chorus-run -np 2 sh tests/scripts/cpucap_exec.sh chorus-train --balance dynamic \
        --balance-every 10 --log-every 10 --max-steps $steps --no-eval --batch 512 \
        --metrics "$d/m.jsonl" > "$d/log" 2>&1
    rc=$?
    cat "$d/log"
    [ $rc = 0 ] || exit 1
    set -- $(last_shares "$d/m.jsonl")
    echo "final shares: rank 0 $1, rank 1 $2 of 512 (a speed ratio of 2:1 gives 341:171)"
    awk -v a="$1" -v b="$2" 'BEGIN { f = a / (a + b); exit !(a + b == 512 && f >= 0.56 && f <= 0.78) }' ||
        { echo "rank 0's share did not converge to about 2/3"; exit 1; }
    grep -q "rank 1 is [0-9.]*x slower than the median: compute-bound" "$d/log" ||
        { echo "the slowed rank was not named"; exit 1; }
    ;;
equal)
    common="--max-steps 12 --no-eval --batch 128 --seed 7"
    chorus-run -np 2 chorus-train $common --dump-params "$d/st" > "$d/st.log" 2>&1 ||
        { cat "$d/st.log"; exit 1; }
    chorus-run -np 2 chorus-train $common --balance-shares 100,28 --log-every 4 \
        --metrics "$d/m.jsonl" --dump-params "$d/dy" > "$d/dy.log" 2>&1 || { cat "$d/dy.log"; exit 1; }
    cat "$d/dy.log"
    [ "$(last_shares "$d/m.jsonl")" = "100 28 " ] || { echo "the shares were not 100 and 28"; exit 1; }
    cmp "$d/dy.0" "$d/dy.1" || { echo "the ranks' parameters differ"; exit 1; }
    python3 - "$d/st.0" "$d/dy.0" <<'PY' || exit 1
import array, sys
a, b = array.array("f"), array.array("f")
a.frombytes(open(sys.argv[1], "rb").read())
b.frombytes(open(sys.argv[2], "rb").read())
diff = max(abs(x - y) for x, y in zip(a, b))
print("static vs shares 100/28: %d parameters, largest difference %.3g" % (len(a), diff))
sys.exit(0 if len(a) == len(b) and len(a) > 0 and diff < 1e-5 else 1)
PY
    ;;
resume)
    common="--no-eval --batch 128 --balance dynamic --balance-every 5 --log-every 5"
    chorus-run -np 2 chorus-train $common --max-steps 20 --checkpoint-dir "$d/ck" \
        --checkpoint-every 10 --metrics "$d/m1.jsonl" > "$d/1.log" 2>&1 || { cat "$d/1.log"; exit 1; }
    saved=$(last_shares "$d/m1.jsonl")
    chorus-run -np 2 chorus-train $common --max-steps 25 --checkpoint-dir "$d/ck" --resume \
        > "$d/2.log" 2>&1 || { cat "$d/2.log"; exit 1; }
    cat "$d/2.log"
    # shellcheck disable=SC2086
    grep -q "load balancing: resumed the shares $(echo $saved) of step 20" "$d/2.log" ||
        { echo "the shares of step 20 ($saved) were not resumed"; exit 1; }
    chorus-run -np 3 chorus-train $common --max-steps 25 --checkpoint-dir "$d/ck" --resume \
        > "$d/3.log" 2>&1 || { cat "$d/3.log"; exit 1; }
    cat "$d/3.log"
    grep -q "load balancing: the shares of step [0-9]* are for 2 ranks, this job has 3: starting from even shares" "$d/3.log" ||
        exit 1
    ;;
straggler)
    cpucap_up chorus-balance-test || { echo "cannot slow a rank here (no cgroup, no taskset)"; exit 1; }
    cpucap_rank 1 50000 && cpucap_rank 2 5000 || exit 1
    echo "slowing worker 1 (rank 2): $CPUCAP_HOW"
    chorus-run -np 3 sh tests/scripts/cpucap_exec.sh chorus-train --mode ps-sync --servers 1 \
        --straggler-timeout 0.08 --log-every 5 --max-steps 12 --no-eval --batch 256 > "$d/log" 2>&1
    rc=$?
    cat "$d/log"
    [ $rc = 0 ] || exit 1
    grep -q "worker 0: step [0-9]*: waited [0-9.]* s for the parameter servers, over --straggler-timeout 0.08.*--mode ps-sync: the servers apply a step once every worker has pushed it: a slower worker" "$d/log" ||
        { echo "the fast worker did not report waiting for the slow one"; exit 1; }
    out=$(chorus-train --straggler-timeout 1 2>&1)
    echo "$out"
    echo "$out" | grep -q "straggler-timeout is for --mode ps-sync, ps-async and ps-ssp" || exit 1
    ;;
bad)
    out=$(chorus-train --balance fast 2>&1)
    echo "$out"
    echo "$out" | grep -q "balance must be static or dynamic, not 'fast'" || exit 1
    out=$(chorus-run -np 3 chorus-train --balance dynamic --mode ps-sync 2>&1)
    echo "$out"
    echo "$out" | grep -q "balance dynamic works with --mode allreduce only" || exit 1
    out=$(chorus-run -np 2 chorus-train --balance-shares 100,20 --batch 128 2>&1)
    echo "$out"
    echo "$out" | grep -q "shares sum to 120, not to the global batch 128" || exit 1
    out=$(chorus-run -np 3 chorus-train --balance dynamic --batch 2 2>&1)
    echo "$out"
    echo "$out" | grep -q "needs a global batch of at least one sample per rank" || exit 1
    ;;
*)
    echo "usage: balance.sh converge|equal|resume|straggler|bad" >&2
    exit 2
    ;;
esac
