#!/bin/sh
# chorus-train --tensorboard DIR: the job's curves in DIR (rank 0) and each rank's own in
# DIR/rank<k>, every record read back byte by byte by tests/scripts/tb_read.py (both masked
# CRC32Cs, the protobuf Event/Summary decode, the tags, one value per step), the loss equal to
# the --metrics file's; CHORUS_TENSORBOARD=DIR without the option writes the same scalars
# through the runtime's per-rank files; a directory that cannot be created stops the run,
# naming it (--tensorboard before training, CHORUS_TENSORBOARD at its first scalar).
set -u
fail() { echo "FAILED: $*"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/train_tensorboard.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
py=/usr/bin/python3
read_tb="$py tests/scripts/tb_read.py"
steps=4
common="--model mlp --batch 400 --max-steps $steps --log-every 1000 --seed 3"
job_tags=train/loss,train/accuracy,train/learning_rate,train/samples_per_s
rank_tags=rank/samples_per_s,comm/time_s,comm/bytes_sent,comm/compression_ratio
one() { # the one event file in $1
    set -- "$1"/events.out.tfevents.*
    [ $# = 1 ] && [ -f "$1" ] || fail "one event file expected: $*"
    echo "$1"
}

out=$(chorus-run -np 2 chorus-train $common --no-eval --tensorboard "$dir/tb" --metrics "$dir/m.json" 2>&1) ||
    { echo "$out"; fail "run with --tensorboard"; }
case $(basename "$(one "$dir/tb")") in
events.out.tfevents.[0-9]*.*.[0-9]*) ;;
*) fail "event file name $(one "$dir/tb")" ;;
esac
job=$($read_tb "$(one "$dir/tb")" --tags $job_tags --steps $steps --min 16) || { echo "$job"; fail "job file"; }
echo "$job"
for r in 0 1; do
    mine=$($read_tb "$(one "$dir/tb/rank$r")" --tags $rank_tags --steps $steps --min 16) ||
        { echo "$mine"; fail "rank $r file"; }
    echo "$mine"
    # the MLP's 535818 float32 gradients, uncompressed
    echo "$mine" | grep -q "comm/bytes_sent 1:2.14327e+06 2:2.14327e+06 3:2.14327e+06 4:2.14327e+06$" ||
        fail "rank $r bytes sent"
    echo "$mine" | grep -q "comm/compression_ratio 1:1 2:1 3:1 4:1$" || fail "rank $r compression ratio"
done
# the loss in the event file is the loss of the metrics file
$py - "$(one "$dir/tb")" "$dir/m.json" <<'PY' || fail "loss differs from --metrics"
import json, sys
sys.path.insert(0, "tests/scripts")
import tb_read
tb = {ev["step"]: ev["values"][0]["simple_value"] for ev in tb_read.read(sys.argv[1])
      if ev["values"][0]["tag"] == "train/loss"}
m = {r["step"]: r["loss"] for r in map(json.loads, open(sys.argv[2])) if "step" in r}
assert sorted(tb) == sorted(m) and all(abs(tb[s] - m[s]) < 1e-5 * max(1, abs(m[s])) for s in m), (tb, m)
print("train/loss matches --metrics at steps", sorted(m))
PY

# a parameter server with float16 pushes: worker 0 (rank 1) writes the job's curves, each
# worker's file has the bytes it pushed, half the float32 gradient (compression ratio 2)
out=$(chorus-run -np 3 --servers 1 chorus-train $common --no-eval --mode ps-sync --ps-grad-dtype float16 \
    --tensorboard "$dir/ps" 2>&1) || { echo "$out"; fail "ps run"; }
$read_tb "$(one "$dir/ps")" --tags $job_tags --steps $steps || fail "ps job file"
for r in 1 2; do
    mine=$($read_tb "$(one "$dir/ps/rank$r")" --tags $rank_tags --steps $steps) || fail "ps rank $r file"
    echo "$mine" | grep -q "comm/bytes_sent 1:1.07164e+06 2:1.07164e+06 3:1.07164e+06 4:1.07164e+06$" &&
        echo "$mine" | grep -q "comm/compression_ratio 1:2 2:2 3:2 4:2$" || { echo "$mine"; fail "ps rank $r bytes"; }
done
[ -e "$dir/ps/rank0" ] && fail "the server wrote training scalars"

# through the runtime: rank 0's file has the job's and its own scalars, rank 1's its own; with
# --time-limit (not reached) the one evaluation at the end adds test/accuracy and test/loss
out=$(CHORUS_TENSORBOARD="$dir/env" chorus-run -np 2 chorus-train $common --time-limit 600 2>&1) ||
    { echo "$out"; fail "run with CHORUS_TENSORBOARD"; }
got=$($read_tb "$(one "$dir/env/rank0")" --tags $job_tags,$rank_tags,test/accuracy,test/loss) ||
    { echo "$got"; fail "runtime file of rank 0"; }
echo "$got"
echo "$got" | grep -q "train/loss 1:[0-9.]* 2:[0-9.]* 3:[0-9.]* 4:[0-9.]*$" && echo "$got" | grep -q "test/accuracy 4:0\.[0-9]*$" ||
    fail "runtime file of rank 0: steps"
$read_tb "$(one "$dir/env/rank1")" --tags $rank_tags --steps $steps || fail "runtime file of rank 1"
[ -z "$(ls "$dir/env" | grep -v '^rank[01]$')" ] || fail "unexpected files in $dir/env: $(ls "$dir/env")"

# a directory that cannot be created
: >"$dir/file"
out=$(chorus-train $common --no-eval --tensorboard "$dir/file/tb" 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] && echo "$out" | grep -q "chorus-train\[0\]: --tensorboard $dir/file/tb: cannot create the TensorBoard directory $dir/file/tb: Not a directory$" ||
    fail "unwritable --tensorboard directory"
echo "$out" | grep -q "done:" && fail "it trained without its TensorBoard files"
out=$(CHORUS_TENSORBOARD="$dir/file/env" chorus-train $common --no-eval 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] && echo "$out" | grep -q "chorus-train\[0\]: CHORUS_TENSORBOARD: cannot create the TensorBoard directory $dir/file/env/rank0: Not a directory$" ||
    fail "unwritable CHORUS_TENSORBOARD directory"
echo "train_tensorboard: ok"
