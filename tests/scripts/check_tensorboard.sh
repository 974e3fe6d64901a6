#!/bin/sh
# make check-tensorboard: TensorBoard's own EventAccumulator ($TB_PYTHON: a venv with the PyPI
# tensorboard package) reads the event files of a 2-rank chorus-train run: the job's tags in
# DIR, each rank's in DIR/rank<k>, one value per step, equal to what tests/scripts/tb_read.py
# (make test's reader) reads from the same bytes.
set -u
fail() { echo "FAILED: $*"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/check_tensorboard.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
steps=5
out=$(chorus-run -np 2 chorus-train --model mlp --batch 400 --max-steps $steps --no-eval \
    --log-every 1000 --seed 3 --tensorboard "$dir/tb" 2>&1) || { echo "$out"; fail "chorus-train"; }
"$TB_PYTHON" - "$dir/tb" "$steps" <<'PY' || fail "EventAccumulator"
import glob, os, subprocess, sys
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
root, steps = sys.argv[1], int(sys.argv[2])
want = {root: {"train/loss", "train/accuracy", "train/learning_rate", "train/samples_per_s"}}
for r in (0, 1):
    want[os.path.join(root, "rank%d" % r)] = {"rank/samples_per_s", "comm/time_s",
                                              "comm/bytes_sent", "comm/compression_ratio"}
for d, tags in want.items():
    acc = EventAccumulator(d, size_guidance={"scalars": 0})
    acc.Reload()
    got = set(acc.Tags()["scalars"])
    assert got == tags, (d, got, tags)
    # our reader, over the same file
    f, = glob.glob(os.path.join(d, "events.out.tfevents.*"))
    ours = subprocess.run(["/usr/bin/python3", "tests/scripts/tb_read.py", f, "--steps",
                           str(steps)], check=True, capture_output=True, text=True).stdout
    for tag in sorted(tags):
        ev = acc.Scalars(tag)
        assert [e.step for e in ev] == list(range(1, steps + 1)), (d, tag, ev)
        line = "%s: %s %s" % (f, tag, " ".join("%d:%.6g" % (e.step, e.value) for e in ev))
        assert line in ours.splitlines(), (line, ours)
        print("tensorboard reads %s %s: %s" % (os.path.relpath(d, root), tag,
                                              ", ".join("%.4g" % e.value for e in ev)))
print("check-tensorboard: TensorBoard's EventAccumulator reads every file, tag and step")
PY
