#!/bin/sh
# train_record.sh - what chorus-train checks before its first step, as a user meets it.
#   compress_resume  --compress topk, randomk (engine) and PowerSGD (layer), and fp16, on 2
#                    ranks: 4 steps, then --resume to 8, ends with the parameters of 8 steps
#                    straight, bit for bit (each rank's compressor memory is in the checkpoint);
#                    a rank's missing compressor state and another number of ranks are refused
#   modes_resume     --mode ps-async and ps-ssp with one worker: 4 steps, then --resume to 8,
#                    equals 8 straight, bit for bit (with several workers the servers apply
#                    gradients in arrival order and no two runs repeat: docs/TRAINING.md)
#   fresh_dir        a fresh run into a directory holding another run's checkpoints is refused,
#                    deletes nothing, and --resume then continues the first run
#   resume_refused   --resume with another --batch, or a parameter-server checkpoint with
#                    --mode allreduce, is refused naming the option with both values; another
#                    --seed is noted, and so is another --threads; a longer run (--epochs,
#                    --max-steps) is allowed
#   ranks_disagree   ranks started with different --lr/--batch, --optim/--momentum stop before
#                    the first step naming each option and the ranks' values
#   bad              --servers with --mode allreduce; a damaged record beside the checkpoints
#                    is warned about, naming the file
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
d=$(mktemp -d "${TMPDIR:-/tmp}/train_record.XXXXXX")
trap 'rm -rf "$d"' EXIT INT TERM
fail() { echo "FAILED: $*"; exit 1; }
common="--model mlp --batch 1000 --no-eval --log-every 1000 --lr 0.05 --seed 3"

# expect RC PATTERN CMD...: runs CMD, shows its output, checks the exit status and a line
expect() {
    want=$1 pat=$2
    shift 2
    out=$("$@" 2>&1)
    rc=$?
    echo "$out"
    [ "$rc" = "$want" ] || fail "exit status $rc, expected $want: $*"
    echo "$out" | grep -q -- "$pat" || fail "no line matching '$pat': $*"
}

case "$1" in
compress_resume)
    for case in fused:topk:0.1 engine:randomk:0.1 layer:powersgd:2 fused:fp16; do
        sync=${case%%:*} c=${case#*:} k="$d/$sync-$c"
        run="chorus-run -np 2 chorus-train $common --grad-sync $sync --compress $c"
        $run --max-steps 8 --dump-params "$k.straight" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
        $run --max-steps 4 --checkpoint-dir "$k.ck" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
        $run --max-steps 8 --checkpoint-dir "$k.ck" --resume --dump-params "$k.resumed" \
            > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
        grep -q "resumed from .*step 4" "$d/log" || { cat "$d/log"; fail "$c: did not resume"; }
        for r in 0 1; do
            cmp "$k.straight.$r" "$k.resumed.$r" ||
                fail "--compress $c (--grad-sync $sync): rank $r resumed elsewhere than straight"
        done
        echo "--compress $c (--grad-sync $sync): 4 + 4 resumed steps = 8 straight, bit for bit"
    done
    k="$d/fused-topk:0.1.ck"
    [ "$(ls "$k" | grep -c "^compress-rank0-at-")" = 2 ] ||
        fail "rank 0 keeps other compressor files than those of the two checkpoints: $(ls "$k")"
    expect 1 "cannot resume: -np was 2 in the checkpoint, now 1" \
        chorus-train $common --compress topk:0.1 --max-steps 12 --checkpoint-dir "$k" --resume
    rm "$k"/compress-rank1-at-8.*
    expect 1 "cannot resume: rank 1's compressor state of step 8: no valid checkpoint" \
        chorus-run -np 2 chorus-train $common --compress topk:0.1 --max-steps 12 \
        --checkpoint-dir "$k" --resume
    ;;
modes_resume)
    for m in ps-async ps-ssp; do
        run="chorus-run -np 2 chorus-train $common --mode $m --servers 1"
        $run --max-steps 8 --dump-params "$d/$m.straight" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
        $run --max-steps 4 --checkpoint-dir "$d/$m.ck" > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
        $run --max-steps 8 --checkpoint-dir "$d/$m.ck" --resume --dump-params "$d/$m.resumed" \
            > "$d/log" 2>&1 || { cat "$d/log"; exit 1; }
        grep -q "servers: resumed their shards of step 4" "$d/log" || { cat "$d/log"; fail "$m: did not resume"; }
        cmp "$d/$m.straight.0" "$d/$m.resumed.0" || fail "--mode $m: resumed elsewhere than straight"
        echo "--mode $m, one worker: 4 + 4 resumed steps = 8 straight, bit for bit"
    done
    ;;
fresh_dir)
    chorus-train $common --max-steps 12 --checkpoint-every 6 --checkpoint-dir "$d/ck" \
        > "$d/a.log" 2>&1 || { cat "$d/a.log"; exit 1; }
    before=$(ls "$d/ck")
    expect 1 "chorus-train\[0\]: --checkpoint-dir $d/ck already holds checkpoints of a run (newest $d/ck/train.00000000000000000012.ckpt, step 12); a new run there would mix its checkpoints with them and delete them. Continue that run with --resume, use another --checkpoint-dir, or remove those checkpoints first" \
        chorus-run -np 2 chorus-train $common --seed 4 --max-steps 8 --checkpoint-every 4 \
        --checkpoint-dir "$d/ck"
    echo "$out" | grep -q "step 1/\|done:" && fail "it trained before refusing"
    [ "$(ls "$d/ck")" = "$before" ] || fail "the directory changed: $(ls "$d/ck")"
    expect 0 "resumed from $d/ck/train.00000000000000000012.ckpt: epoch 1, step 12" \
        chorus-train $common --max-steps 14 --checkpoint-dir "$d/ck" --resume
    ;;
resume_refused)
    chorus-train $common --max-steps 4 --checkpoint-dir "$d/ck" > "$d/a.log" 2>&1 ||
        { cat "$d/a.log"; exit 1; }
    expect 1 "chorus-train\[0\]: cannot resume: --batch was 1000 in the checkpoint, now 500; --lr was 0.05 in the checkpoint, now 0.1. These change the result" \
        chorus-train $common --batch 500 --lr 0.1 --max-steps 8 --checkpoint-dir "$d/ck" --resume
    expect 0 "note: --seed 9 is not used: the run goes on with the checkpoint's 3; --threads was 1 in the checkpoint, now 2: floating-point sums run in another order" \
        chorus-train $common --seed 9 --threads 2 --max-steps 6 --checkpoint-dir "$d/ck" --resume
    expect 0 "resumed from .*step 6" \
        chorus-train $common --epochs 12 --max-steps 8 --checkpoint-dir "$d/ck" --resume
    chorus-run -np 2 chorus-train $common --mode ps-sync --servers 1 --max-steps 4 \
        --checkpoint-dir "$d/ps" > "$d/ps.log" 2>&1 || { cat "$d/ps.log"; exit 1; }
    expect 1 "cannot resume: --mode was ps-sync in the checkpoint, now allreduce" \
        chorus-train $common --max-steps 8 --checkpoint-dir "$d/ps" --resume
    ;;
ranks_disagree)
    expect 1 "the ranks disagree on options that change the result (compared before the first step): --batch: rank 0 has 1000, rank 1 has 500; --lr: rank 0 has 0.05, rank 1 has 0.1. Start every rank with the same options" \
        chorus-run -np 2 sh -c 'if [ "$CHORUS_RANK" = 1 ]; then x="--batch 500 --lr 0.1"; fi; exec chorus-train '"$common"' --max-steps 4 $x'
    echo "$out" | grep -q "step 1/\|done:" && fail "it trained before refusing"
    expect 1 "--momentum: rank 0 has 0.9, rank 1 has 0.5" \
        chorus-run -np 2 sh -c 'if [ "$CHORUS_RANK" = 1 ]; then x="--momentum 0.5"; fi; exec chorus-train '"$common"' --max-steps 4 $x'
    expect 1 "--optim: rank 0 has sgd, rank 1 has adamw" \
        chorus-run -np 2 sh -c 'if [ "$CHORUS_RANK" = 1 ]; then x="--optim adamw"; fi; exec chorus-train '"$common"' --max-steps 4 $x'
    ;;
bad)
    expect 1 "chorus-train\[0\]: --servers is for --mode ps-sync, ps-async and ps-ssp (the parameter servers); with --mode allreduce every rank trains and there is no server" \
        chorus-train $common --servers 8 --max-steps 1
    chorus-train $common --max-steps 4 --checkpoint-dir "$d/ck" > "$d/a.log" 2>&1 ||
        { cat "$d/a.log"; exit 1; }
    printf '\125' | dd of="$d/ck/config.00000000000000000000.ckpt" bs=1 seek=60 conv=notrunc 2>/dev/null
    expect 0 "chorus-train: warning: .*skipped damaged checkpoint $d/ck/config.00000000000000000000.ckpt: payload checksum mismatch.*cannot be compared with this one" \
        chorus-train $common --max-steps 6 --checkpoint-dir "$d/ck" --resume
    printf '\125' | dd of="$d/ck/model.00000000000000000000.ckpt" bs=1 seek=50 conv=notrunc 2>/dev/null
    expect 0 "chorus-train: warning: .*skipped damaged checkpoint $d/ck/model.00000000000000000000.ckpt: .*cannot be compared with this one" \
        chorus-train $common --max-steps 8 --checkpoint-dir "$d/ck" --resume
    ;;
*) fail "unknown case '$1'" ;;
esac
echo "train_record $1: ok"
