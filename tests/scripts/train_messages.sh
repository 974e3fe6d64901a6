#!/bin/sh
# chorus-train's refusals as a user meets them: a learning rate that makes the loss non-finite
# stops the run with a message and leaves the metrics file valid JSON (no NaN in it); a
# non-finite --lr, an empty --compress or --dump-params are refused; a resume with another --dropout says what differs; a checkpoint
# directory that cannot be written is refused before training, not at the first save; a
# metrics file that cannot be written (a full disk: /dev/full) stops the run naming it.
set -u
fail() { echo "FAILED: $*"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/train_messages.XXXXXX")
trap 'chmod -R u+w "$dir" 2>/dev/null; rm -rf "$dir"' EXIT INT TERM
common="--model mlp --batch 2000 --max-steps 4 --no-eval --log-every 1000 --seed 3"

out=$(chorus-train $common --lr inf 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] && echo "$out" | grep -q "chorus-train\[0\]: --lr inf: the learning rate must be a finite number$" ||
    fail "--lr inf accepted"

# an empty value where a file name or a compressor is needed: refused, not taken for none
# (--compress '' trained uncompressed, --dump-params '' wrote the hidden file ".0")
for o in "--compress|--compress must be none, fp16, bf16, topk:R, randomk:R or powersgd:N, not ''" \
    "--dump-params|--dump-params needs a file name, not ''"; do
    out=$(cd "$dir" && chorus-train $common "${o%%|*}" "" 2>&1); rc=$?
    echo "$out"
    [ $rc = 1 ] && echo "$out" | grep -qF "chorus-train[0]: ${o#*|}" || fail "${o%%|*} '' accepted"
done
[ -z "$(ls -A "$dir")" ] || fail "a refused run wrote $(ls -A "$dir")"

out=$(chorus-run -np 2 chorus-train $common --lr 1e30 --metrics "$dir/m.json" --checkpoint-dir "$dir/ck" 2>&1); rc=$?
echo "$out"
[ $rc != 0 ] || fail "a diverged run exited 0"
echo "$out" | grep -q "chorus-train\[0\]: step 2: the loss is NaN: training diverged (learning rate 1e+30); stopping before it is written to metrics or checkpoints. Lower --lr" ||
    echo "$out" | grep -q "chorus-train\[0\]: step [0-9]*: the loss is \(NaN\|infinite\): training diverged" ||
    fail "no divergence message"
# once in the ranks' own output (the launcher's failure summary quotes rank 0's last lines)
[ "$(echo "$out" | grep -c "^\[[0-9]*\] .*training diverged")" = 1 ] || fail "the divergence is said once, by rank 0"
python3 -c '
import json, math, sys
rows = [json.loads(l, parse_constant=lambda c: sys.exit("non-JSON constant " + c)) for l in open(sys.argv[1])]
assert rows and all(math.isfinite(r["loss"]) for r in rows), rows
print("metrics: %d valid JSON lines" % len(rows))' "$dir/m.json" || fail "metrics file"
ls "$dir/ck" | grep -q "^train\." && fail "a checkpoint of the diverged model was written"

# resume with another dropout: without it the model has other layers (refused, saying what
# differs); another rate keeps the layers (resumed, with a note)
chorus-train $common --lr 0.05 --dropout 0.2 --checkpoint-dir "$dir/ck2" >/dev/null 2>&1 || fail "first run"
out=$(chorus-train $common --lr 0.05 --dropout 0 --checkpoint-dir "$dir/ck2" --resume 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] && echo "$out" | grep -q "cannot resume: the checkpoints in $dir/ck2 are of a model built with --model mlp --dropout 0.2; this run asks for --model mlp --dropout 0. Resume with the same options" ||
    fail "resume without the dropout layer"
out=$(chorus-train $common --max-steps 5 --lr 0.05 --dropout 0.3 --checkpoint-dir "$dir/ck2" --resume 2>&1); rc=$?
echo "$out"
[ $rc = 0 ] && echo "$out" | grep -q "note: the checkpoints were written with --model mlp --dropout 0.2; this run goes on with --model mlp --dropout 0.3" ||
    fail "resume with another dropout rate"

# an unwritable checkpoint directory, refused before the first step
mkdir "$dir/ro" && chmod a-w "$dir/ro"
if touch "$dir/ro/probe" 2>/dev/null; then
    echo "running as a user who can write anywhere: using a path under a regular file instead"
    : >"$dir/file"
    ro="$dir/file/ck"
else
    ro="$dir/ro/ck"
fi
out=$(chorus-train $common --lr 0.05 --checkpoint-dir "$ro" 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] && echo "$out" | grep -q "cannot write checkpoints to --checkpoint-dir $ro (checked before training)" ||
    fail "unwritable checkpoint directory"
echo "$out" | grep -q "step 1/\|done:" && fail "it trained before refusing"
# --metrics on a full disk: the run fails at the first record, naming the file and the reason
out=$(chorus-train $common --lr 0.05 --metrics /dev/full 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] && echo "$out" | grep -q "chorus-train\[0\]: cannot write metrics to /dev/full: No space left on device$" ||
    fail "--metrics /dev/full"
echo "$out" | grep -q "done:" && fail "it went on to the end with its metrics lost"
echo "train_messages: ok"
