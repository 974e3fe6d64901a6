#!/bin/sh
# chorus.log_scalar (chorus.torch.log_scalar is the same function; torch is not imported here,
# to keep the test short) under CHORUS_TENSORBOARD=DIR: each rank's
# scalars land in DIR/rank<k>, read back record by record (CRCs, protobuf) with the values that
# rank logged, which differ between ranks; without the variable nothing is written.
set -u
fail() { echo "FAILED: $*"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/py_tensorboard.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
py=/usr/bin/python3
cat >"$dir/log.py" <<'PY'
import chorus, numpy as np
chorus.init()
for step in range(1, 21):
    chorus.log_scalar("train/loss", np.array([1.0 / step + chorus.rank()]), step)
    chorus.log_scalar("rank/value", 10 * chorus.rank() + step, step)
chorus.shutdown()
PY
out=$(CHORUS_TENSORBOARD="$dir/tb" PYTHONPATH=python chorus-run -np 2 $py "$dir/log.py" 2>&1) ||
    { echo "$out"; fail "python run"; }
for r in 0 1; do
    set -- "$dir/tb/rank$r"/events.out.tfevents.*
    [ $# = 1 ] || fail "rank $r: $*"
    got=$($py tests/scripts/tb_read.py "$1" --tags train/loss,rank/value --steps 20 --min 40) ||
        { echo "$got"; fail "rank $r file"; }
    echo "$got"
    echo "$got" | grep -q "train/loss 1:$((1 + r)) 2:$r.5 " || fail "rank $r loss values"
    echo "$got" | grep -q "rank/value 1:$((10 * r + 1)) 2:$((10 * r + 2)) " || fail "rank $r values"
done
out=$(PYTHONPATH=python chorus-run -np 2 $py "$dir/log.py" 2>&1) || { echo "$out"; fail "run without the variable"; }
[ "$(ls "$dir")" = "log.py
tb" ] || fail "files written without CHORUS_TENSORBOARD: $(ls "$dir")"
echo "py_tensorboard: ok"
