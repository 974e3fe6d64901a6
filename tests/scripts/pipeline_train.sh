#!/bin/sh
# pipeline_train.sh - chorus-train --pipeline-stages with real ranks.
#   equal SCHED   2 stages x 4 micro-batches (gpipe or 1f1b) end with the same parameters,
#                 to the bit, as one rank with --accum 4: every stage adds its micro-batch
#                 gradients in micro-batch order, as the unsplit run does; gpipe holds 4
#                 micro-batches in flight on each stage, 1f1b 2 on stage 0 and 1 on stage 1
#   grid          4 ranks = 2 pipelines x 2 stages end, to the bit, as 2 ranks of data
#                 parallelism with --accum 4 (a stage's gradients are summed over its 2
#                 replicas only); rank 0 prints every rank's memory and bubble lines and the
#                 metrics end with the {"memory":[...]} line
#   ckpt          2 stages with AdamW checkpoint halfway (rank 0 writes the whole model's
#                 parameters and optimizer state, gathered from the stages); resuming in the
#                 pipeline, or on one rank with --accum 4, ends with the parameters of one
#                 rank never stopped
#   kill          3 stages; the middle stage's rank is killed mid-run: both neighbours fail
#                 naming it
#   accuracy      chorus-run -np 2 chorus-train --model mlp --epochs 3 --pipeline-stages 2
#                 --microbatches 4 reaches a test accuracy of at least 0.85 (under a
#                 sanitizer: 150 steps, at least 0.75)
#   bad           options that do not fit get clear messages
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
. tests/scripts/ranks.sh
d=$(mktemp -d)
run=""
trap '[ -n "$run" ] && kill "$run" 2>/dev/null; rm -rf "$d"' EXIT INT TERM
steps=12
[ -n "${SANITIZE:-}" ] && steps=4
common="--max-steps $steps --no-eval --batch 96 --seed 7"
same() { # same REF OUT RANKS...: every rank's dump equals REF
    ref=$1 out=$2
    shift 2
    for r in "$@"; do
        cmp "$ref" "$out.$r" || { echo "rank $r: parameters differ from $ref"; exit 1; }
    done
}
case "$1" in
equal)
    chorus-run -np 1 chorus-train $common --accum 4 --dump-params "$d/ref" > "$d/ref.log" 2>&1 ||
        { cat "$d/ref.log"; exit 1; }
    chorus-run -np 2 chorus-train $common --pipeline-stages 2 --microbatches 4 --schedule "$2" \
        --dump-params "$d/pp" > "$d/pp.log" 2>&1 || { cat "$d/pp.log"; exit 1; }
    cat "$d/pp.log"
    same "$d/ref.0" "$d/pp" 0 1
    # activations held: gpipe all 4 micro-batches on both stages; 1f1b p - stage
    # (one is "1 micro-batch")
    if [ "$2" = gpipe ]; then in0="4 micro-batches" in1="4 micro-batches"; else in0="2 micro-batches" in1="1 micro-batch"; fi
    grep -q "bubble rank 0 (stage 0, .*at most $in0 in flight" "$d/pp.log" &&
        grep -q "bubble rank 1 (stage 1, .*at most $in1 in flight" "$d/pp.log" ||
        { echo "not $in0 and $in1 in flight"; exit 1; }
    echo "$2, 2 stages x 4 micro-batches: parameters identical to one rank with --accum 4"
    ;;
grid)
    chorus-run -np 2 chorus-train $common --accum 4 --dump-params "$d/ref" > "$d/ref.log" 2>&1 ||
        { cat "$d/ref.log"; exit 1; }
    chorus-run -np 4 chorus-train $common --pipeline-stages 2 --microbatches 4 --schedule gpipe \
        --dump-params "$d/pp" --metrics "$d/m.jsonl" > "$d/pp.log" 2>&1 ||
        { cat "$d/pp.log"; exit 1; }
    cat "$d/pp.log"
    same "$d/ref.0" "$d/pp" 0 1 2 3
    grep -q "pipeline: 2 stages x 2 replicas (4 ranks)" "$d/pp.log" || exit 1
    for r in 0 1 2 3; do
        grep -q "memory rank $r: params [0-9.]* MiB, grads [0-9.]* MiB, optimizer [0-9.]* MiB, activations [0-9.]* MiB (peak [0-9.]* MiB)" "$d/pp.log" ||
            { echo "no memory line for rank $r"; exit 1; }
        grep -q "bubble rank $r (stage $((r % 2)), .*formula (p-1)/(m+p-1) = 20.0%; at most 4 micro-batches in flight" "$d/pp.log" ||
            { echo "no bubble line for rank $r"; exit 1; }
    done
    tail -1 "$d/m.jsonl" | grep -q '^{"memory":\[{"rank":0,"params":[1-9][0-9]*,"grads":[1-9][0-9]*,"optimizer":[1-9][0-9]*,"activations":[1-9][0-9]*,"peak":[1-9][0-9]*},.*{"rank":3,' ||
        { tail -2 "$d/m.jsonl"; echo "no final memory line in the metrics"; exit 1; }
    echo "2 pipelines x 2 stages: parameters identical to 2 ranks of data parallelism with --accum 4"
    ;;
ckpt)
    # AdamW, so the optimizer state matters; checkpoints halfway
    c="--no-eval --batch 96 --seed 7 --optim adamw"
    pp="--pipeline-stages 2 --microbatches 4"
    half=$((steps / 2))
    chorus-run -np 1 chorus-train $c --accum 4 --max-steps $steps --dump-params "$d/ref" \
        > "$d/ref.log" 2>&1 || { cat "$d/ref.log"; exit 1; }
    chorus-run -np 2 chorus-train $c $pp --max-steps $half --checkpoint-dir "$d/ck" \
        > "$d/first.log" 2>&1 || { cat "$d/first.log"; exit 1; }
    cp -r "$d/ck" "$d/ck2"
    chorus-run -np 2 chorus-train $c $pp --max-steps $steps --checkpoint-dir "$d/ck" --resume \
        --dump-params "$d/pp" > "$d/pp.log" 2>&1 || { cat "$d/pp.log"; exit 1; }
    grep "resumed from" "$d/pp.log"
    grep -q "resumed from .*: epoch 1, step $half" "$d/pp.log" || exit 1
    same "$d/ref.0" "$d/pp" 0 1
    chorus-run -np 1 chorus-train $c --accum 4 --max-steps $steps --checkpoint-dir "$d/ck2" \
        --resume --dump-params "$d/un" > "$d/un.log" 2>&1 || { cat "$d/un.log"; exit 1; }
    grep -q "resumed from .*: epoch 1, step $half" "$d/un.log" || { cat "$d/un.log"; exit 1; }
    same "$d/ref.0" "$d/un" 0
    echo "a pipeline checkpoint resumes, in a pipeline or on one rank, to the parameters of a run never stopped"
    ;;
kill)
    chorus-run -np 3 chorus-train --no-eval --batch 64 --pipeline-stages 3 --microbatches 4 \
        --log-every 1 > "$d/k.log" 2>&1 &
    run=$!
    wait_line "$d/k.log" "step [5-9]/" || { cat "$d/k.log"; echo "the run never got to step 5"; exit 1; }
    victim=$(rank_pid $run 1)
    [ -n "$victim" ] || { echo "no rank 1 under chorus-run $run"; exit 1; }
    kill -9 "$victim"
    wait $run
    rc=$?
    run=""
    grep -v "step [0-9]*/" "$d/k.log" | tail -5
    [ $rc != 0 ] || { echo "the pipeline went on without its middle stage"; exit 1; }
    # in the schedule: "pipeline stage 0 (rank 0): receiving the gradient of micro-batch 2,
    # stage 1 (rank 1) is gone: ..."; at the end of a step: "pipeline stage 0 (rank 0): ending
    # a step: rank 1 (pid N) was lost ..."; between steps: "allreduce of the counters failed: ...
    # rank 1 (pid N) was lost ..."
    for r in 0 2; do
        grep -q "chorus-train\[$r\]: .*rank 1[ )]" "$d/k.log" ||
            { echo "rank $r did not name the dead stage"; exit 1; }
    done
    echo "the middle stage was killed: both neighbours stopped naming it"
    ;;
accuracy)
    epochs=3 target=0.85 short=""
    [ -n "${SANITIZE:-}" ] && epochs=1 target=0.75 short="--max-steps 150"
    chorus-run -np 2 chorus-train --model mlp --epochs $epochs $short --pipeline-stages 2 \
        --microbatches 4 > "$d/log" 2>&1
    rc=$?
    grep -v "step [0-9]*/" "$d/log"
    [ $rc = 0 ] || exit 1
    # the measured bubble is a share of the training steps (evaluation waits are not in it)
    sed -n 's/.*waited for neighbours \([0-9.]*\)% of the pipeline step.*/\1/p' "$d/log" |
        awk '{ n++; if ($1 >= 100) bad = 1 } END { exit bad || n != 2 }' ||
        { echo "bubble lines missing or above 100%"; exit 1; }
    acc=$(sed -n 's/.*done: .* test accuracy \([0-9.]*\).*/\1/p' "$d/log")
    echo "test accuracy $acc after $epochs epochs (target $target)"
    awk -v a="$acc" -v t=$target 'BEGIN { exit !(a >= t) }'
    ;;
bad)
    expect() { # expect MESSAGE COMMAND...: the command fails with MESSAGE
        msg=$1
        shift
        out=$("$@" 2>&1) && { echo "$out"; echo "succeeded: $*"; exit 1; }
        echo "$out" | grep -qF -- "$msg" || { echo "$out"; echo "no '$msg' from: $*"; exit 1; }
        echo "$msg"
    }
    expect "--schedule must be gpipe or 1f1b, not 'zigzag'" \
        chorus-train --pipeline-stages 2 --schedule zigzag
    expect "--microbatches and --schedule need --pipeline-stages" chorus-train --microbatches 4
    expect "drop --accum" chorus-train --pipeline-stages 2 --accum 2
    expect "--pipeline-stages works with --mode allreduce only" \
        chorus-train --pipeline-stages 2 --mode ps-sync
    expect "--pipeline-stages 2 does not divide the 3 ranks" \
        chorus-run -np 3 chorus-train --pipeline-stages 2 --max-steps 1
    # --microbatches given differently to the two stages: each names the option and both
    # values (not "rank 0 was lost", not a mismatched receive)
    out=$(chorus-run -np 2 sh -c 'exec chorus-train --pipeline-stages 2 --max-steps 1 --no-eval \
        --microbatches $((2 + 2 * CHORUS_RANK))' 2>&1) && { echo "$out"; echo "accepted"; exit 1; }
    echo "$out"
    for r in 0 1; do
        echo "$out" | grep -q "^\[$r\] chorus-train\[$r\]: the ranks disagree on options that change the result (compared before the first step): --microbatches: rank 0 has 2, rank 1 has 4\. Start every rank with the same options$" ||
            { echo "rank $r did not name the --microbatches mismatch"; exit 1; }
    done
    if echo "$out" | grep -q "was lost\|mismatched send/recv"; then
        echo "a rank blamed another"
        exit 1
    fi
    ;;
*) echo "usage: pipeline_train.sh equal gpipe|1f1b | grid | ckpt | kill | accuracy | bad"; exit 2 ;;
esac
