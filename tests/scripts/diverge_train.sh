#!/bin/sh
# diverge_train.sh - chorus-train --check-divergence with real ranks (the divergence is made
# by --test-perturb, a fault injection for tests only).
#   stop3     3 ranks, rank 1 changed after step 3, checked every 10 steps: every rank stops
#             at step 10 naming the tensor and rank 1 against ranks 0,2 (the majority); with
#             --checkpoint-every 2 the check before each checkpoint stops it at step 4: the
#             checkpoint of step 2 exists, none of step 4 was written
#   stop2     2 ranks, rank 0 changed: no majority, so rank 1 is named against rank 0 (the
#             reference is the lowest rank's group), at the first check after the change
#   same      unperturbed runs end with the same parameters, to the bit, with and without
#             --check-divergence 2 (data parallel with --grad-sync engine, and --zero 1)
#   tp        4 ranks = 2 replicas x 2 shards, rank 3 changed: rank 3 is named against rank 1
#             (its shard's other replica) and ranks 0 and 2 stop too, saying where
#   pipe      4 ranks = 2 pipelines x 2 stages, rank 3 (stage 1) changed: named against rank 1
#   zero      --zero 2, rank 1 changed after the all-gather of a checked step: named
#   bad       options that do not fit get clear messages
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
common="--no-eval --batch 96 --seed 7 --max-steps 12"
# fails RANKS LOG ARGS...: the run must fail; its output goes to LOG
fails() {
    np=$1 log=$2
    shift 2
    if chorus-run -np "$np" chorus-train $common "$@" > "$log" 2>&1; then
        cat "$log"
        echo "the run did not stop"
        exit 1
    fi
}
# says LOG RANK TEXT: rank RANK's stderr line in LOG holds TEXT
says() {
    grep -F "[$2] chorus-train[$2]: $3" "$1" > /dev/null ||
        { cat "$1"; echo "rank $2 did not say: $3"; exit 1; }
}
case "$1" in
stop3)
    fails 3 "$d/log" --check-divergence 10 --test-perturb 1:3:layer2.linear.bias
    cat "$d/log"
    m="weights diverged at step 10: tensor 'layer2.linear.bias' differs on rank 1 from ranks 0,2 (the reference is the largest group of equal ranks; 1 of 6 tensors differ;"
    for r in 0 1 2; do says "$d/log" $r "$m"; done
    # with checkpoints every 2 steps the replicas are also compared before each one: the
    # checkpoint of step 2 is written, the diverged step 4 stops the run before its own
    fails 3 "$d/log2" --check-divergence 10 --test-perturb 1:3:layer2.linear.bias \
        --checkpoint-dir "$d/ck" --checkpoint-every 2
    cat "$d/log2"
    says "$d/log2" 0 "weights diverged at step 4: tensor 'layer2.linear.bias' differs on rank 1 from ranks 0,2"
    grep -q "^\[0\] chorus-train\[0\]: weights diverged at step 4: .*; stopping without a checkpoint of this state$" "$d/log2" || exit 1
    [ -e "$d/ck/train.00000000000000000002.ckpt" ] || { ls "$d/ck"; echo "no checkpoint of step 2"; exit 1; }
    [ ! -e "$d/ck/train.00000000000000000004.ckpt" ] || { echo "the diverged step 4 was checkpointed"; exit 1; }
    echo "3 ranks: stopped at step 10 (or before the checkpoint of step 4) naming layer2.linear.bias and rank 1"
    ;;
stop2)
    fails 2 "$d/log" --check-divergence 4 --test-perturb 0:5
    cat "$d/log"
    m="weights diverged at step 8: tensor 'layer0.linear.weight' differs on rank 1 from rank 0 (no majority: the reference is the group of the lowest rank; 1 of 6 tensors differ;"
    for r in 0 1; do says "$d/log" $r "$m"; done
    echo "2 ranks: rank 1 named against rank 0 at step 8"
    ;;
same)
    for extra in "--grad-sync engine" "--zero 1"; do
        chorus-run -np 2 chorus-train $common $extra --dump-params "$d/off" > "$d/off.log" 2>&1 ||
            { cat "$d/off.log"; exit 1; }
        chorus-run -np 2 chorus-train $common $extra --check-divergence 2 --dump-params "$d/on" \
            > "$d/on.log" 2>&1 || { cat "$d/on.log"; exit 1; }
        for r in 0 1; do
            cmp "$d/off.$r" "$d/on.$r" || { echo "$extra: rank $r's parameters changed"; exit 1; }
        done
        echo "$extra: parameters identical to the bit with --check-divergence 2"
    done
    ;;
tp)
    fails 4 "$d/log" --tensor-parallel 2 --check-divergence 2 --test-perturb 3:3
    cat "$d/log"
    m="weights diverged at step 4: tensor 'layer0.linear.weight' differs on rank 3 from rank 1 (no majority"
    for r in 1 3; do says "$d/log" $r "$m"; done
    for r in 0 2; do
        says "$d/log" $r "weights diverged at step 4 in another group of replicas (world rank 1 names the tensor and the ranks)"
    done
    ;;
pipe)
    fails 4 "$d/log" --pipeline-stages 2 --check-divergence 2 --test-perturb 3:3
    cat "$d/log"
    m="weights diverged at step 4: tensor 'layer2.linear.weight' differs on rank 3 from rank 1 (no majority"
    for r in 1 3; do says "$d/log" $r "$m"; done
    says "$d/log" 0 "weights diverged at step 4 in another group of replicas"
    ;;
zero)
    fails 2 "$d/log" --zero 2 --check-divergence 2 --test-perturb 1:4:layer2.linear.bias
    cat "$d/log"
    for r in 0 1; do
        says "$d/log" $r "weights diverged at step 4: tensor 'layer2.linear.bias' differs on rank 1 from rank 0"
    done
    ;;
bad)
    out=$(chorus-train --check-divergence 5 --mode ps-sync 2>&1) && exit 1
    echo "$out" | grep -qF "chorus-train[0]: --check-divergence works with --mode allreduce, not --mode ps-sync (the parameter servers hold the one copy of the parameters)" ||
        { echo "$out"; exit 1; }
    out=$(chorus-train --check-divergence -1 2>&1) && exit 1
    echo "$out" | grep -qF "bad value '-1' for --check-divergence (see --help)" || { echo "$out"; exit 1; }
    out=$(chorus-train --test-perturb 1 2>&1) && exit 1
    echo "$out" | grep -qF -- "--test-perturb '1': expected RANK:STEP[:TENSOR]" || { echo "$out"; exit 1; }
    out=$(chorus-run -np 1 chorus-train $common --test-perturb 0:1:nope 2>&1) && exit 1
    echo "$out" | grep -qF -- "--test-perturb 0:1:nope: rank 0 has no tensor 'nope'" || { echo "$out"; exit 1; }
    chorus-train --help | grep -q -- "--check-divergence N" || exit 1
    echo "bad options: clear messages"
    ;;
*) echo "usage: $0 stop3|stop2|same|tp|pipe|zero|bad"; exit 2 ;;
esac
