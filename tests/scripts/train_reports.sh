#!/bin/sh
# train_reports.sh - chorus-train's report lines say what they measure, with the words right.
#   zero       --zero 2 on 2 ranks: the communication line times ZeRO's own reduce-scatter
#              (not nn_dist's averaging, which ZeRO does not use and which read 0.00 ms)
#   recompute  --recompute on the MLP, where every activation is kept anyway, says it changes
#              nothing; on the CNN, where it saves memory, it says nothing of the kind
#   ps         --mode ps-async: the samples/s of the progress and epoch lines are worker 0's
#              own, the done line's the workers' together, and each says so
#   checkpoint a line per checkpoint written, naming its file
#   words      1 data-parallel replica, 1 micro-batch, a 2-stage pipeline's 2 ranks (not "1
#              rank"), a parameter server in a 1-rank job
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT INT TERM
fail() { echo "FAIL: $*"; exit 1; }
run() { # name np args...: runs chorus-train, its output in $d/name.log (shown)
    name=$1 np=$2
    shift 2
    chorus-run -np "$np" chorus-train "$@" > "$d/$name.log" 2>&1 || { cat "$d/$name.log"; fail "$name"; }
    cat "$d/$name.log"
}
common="--max-steps 3 --batch 64 --no-eval --log-every 1000 --seed 5"
case "$1" in
zero)
    run z2 2 $common --zero 2
    grep -q "^\[0\] communication (--zero 2, 2 ranks): reduce-scattering the gradients, layer by layer in the backward pass, took [0-9.]* ms per step$" "$d/z2.log" ||
        fail "no line on ZeRO-2's gradient reduce-scatter"
    grep "reduce-scattering" "$d/z2.log" | grep -q "took 0\.00 ms" && fail "ZeRO-2's reduce-scatter timed as nothing"
    grep -q "averaging the gradients took" "$d/z2.log" && fail "a line on averaging that ZeRO does not do"
    ;;
recompute)
    run mlp 1 $common --model mlp --recompute
    grep -q "^\[0\] chorus-train: --recompute changes nothing for this model: cut into segments of about 3 of its 5 layers, every activation buffer is a segment's output or in the last segment, which are kept anyway; no memory is saved$" "$d/mlp.log" ||
        fail "--recompute on the MLP said nothing"
    run cnn 1 --max-steps 1 --batch 16 --no-eval --model cnn --recompute
    grep -q "changes nothing" "$d/cnn.log" && fail "--recompute on the CNN saves memory"
    ;;
ps)
    run ps 3 --mode ps-async --servers 1 --max-steps 20 --batch 64 --log-every 10 --epochs 1
    grep -q "^\[1\] epoch 1/1 step 10/[0-9]* loss .* samples/s (worker 0 alone) ETA" "$d/ps.log" ||
        fail "progress line: whose samples/s"
    grep -q "^\[1\] epoch 1/1: train loss .* samples/s (worker 0 alone), comm wait" "$d/ps.log" ||
        fail "epoch line: whose samples/s"
    grep -q "^\[1\] done: 20 steps, test accuracy [0-9.]*, [0-9]* samples/s (2 workers together) over" "$d/ps.log" ||
        fail "done line: whose samples/s"
    grep -q "server 0 (ps-async): .* 40 updates; " "$d/ps.log" || fail "server line"
    ;;
checkpoint)
    run ck 2 $common --checkpoint-dir "$d/ck" --checkpoint-every 2
    grep -q "^\[0\] checkpoint step 2 written to $d/ck/train.00000000000000000002.ckpt$" "$d/ck.log" &&
        grep -q "^\[0\] checkpoint step 3 written to $d/ck/train.00000000000000000003.ckpt$" "$d/ck.log" ||
        fail "no line for each checkpoint written"
    [ "$(grep -c "checkpoint step" "$d/ck.log")" = 2 ] || fail "one line per checkpoint, by rank 0"
    ;;
words)
    run grid 2 $common --tensor-parallel 2
    grep -q "chorus-train: 2 ranks = 1 data-parallel replica x 2 tensor-parallel shards$" "$d/grid.log" ||
        fail "1 data-parallel replica"
    run pipe 2 $common --pipeline-stages 2 --microbatches 1
    grep -q "pipeline: 2 stages x 1 replica (2 ranks), 1 micro-batch of up to 64 samples per step" "$d/pipe.log" ||
        fail "1 micro-batch"
    grep -q "chorus-train: mlp, [0-9]* parameters; 2 ranks (1 pipeline replica of 2 stages) x 1 BLAS thread; global batch 64 (64 per replica, " "$d/pipe.log" ||
        fail "a pipeline's 2 ranks called 1 rank"
    out=$(chorus-train $common --mode ps-async 2>&1) && fail "a parameter server in a 1-rank job"
    echo "$out"
    echo "$out" | grep -q "chorus-train\[0\]: --mode ps-async: chorus_ps_create: a job of 1 rank has no room for a parameter server: it needs at least 2 ranks (1 server and 1 worker)$" ||
        fail "1-rank parameter server"
    ;;
*) echo "usage: train_reports.sh zero | recompute | ps | checkpoint | words"; exit 2 ;;
esac
echo "train_reports $1: ok"
