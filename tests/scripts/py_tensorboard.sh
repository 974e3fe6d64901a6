#!/bin/sh
# TensorBoard from Python under CHORUS_TENSORBOARD=DIR: a chorus.torch DistributedOptimizer
# (Compression.fp16) logs comm/time_s, comm/bytes_sent and comm/compression_ratio each step by
# itself, hvd.log_scalar a loss tensor, chorus.log_scalar a value that differs per rank; each
# rank's file, DIR/rank<k>, read back record by record (CRCs, protobuf) has those values.
# Without the variable nothing is written.
set -u
fail() { echo "FAILED: $*"; exit 1; }
dir=$(mktemp -d "${TMPDIR:-/tmp}/py_tensorboard.XXXXXX")
trap 'rm -rf "$dir"' EXIT INT TERM
py=/usr/bin/python3
cat >"$dir/train.py" <<'PY'
import chorus, chorus.torch as hvd, torch
hvd.init()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(20, 50), torch.nn.ReLU(), torch.nn.Linear(50, 2))
opt = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1),
                               named_parameters=model.named_parameters(),
                               compression=hvd.Compression.fp16)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
x, y = torch.randn(64, 20), torch.randint(0, 2, (64,))
for step in range(1, 6):
    opt.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    opt.step()
    hvd.log_scalar("train/loss", loss, step)
    chorus.log_scalar("rank/value", 10 * hvd.rank() + step, step)
hvd.shutdown()
PY
out=$(CHORUS_TENSORBOARD="$dir/tb" PYTHONPATH=python chorus-run -np 2 $py "$dir/train.py" 2>&1) ||
    { echo "$out"; fail "python run"; }
for r in 0 1; do
    set -- "$dir/tb/rank$r"/events.out.tfevents.*
    [ $# = 1 ] || fail "rank $r: $*"
    got=$($py tests/scripts/tb_read.py "$1" --tags train/loss,rank/value,comm/time_s,comm/bytes_sent,comm/compression_ratio --steps 5 --min 25) ||
        { echo "$got"; fail "rank $r file"; }
    echo "$got"
    # 1152 float32 parameters sent as float16
    echo "$got" | grep -q "comm/bytes_sent 1:2304 2:2304 3:2304 4:2304 5:2304$" || fail "rank $r bytes sent"
    echo "$got" | grep -q "comm/compression_ratio 1:2 2:2 3:2 4:2 5:2$" || fail "rank $r compression ratio"
    echo "$got" | grep -q "rank/value 1:$((10 * r + 1)) 2:$((10 * r + 2)) " || fail "rank $r values"
done
# the same loss on both ranks (the same model after each averaged step)
l0=$($py tests/scripts/tb_read.py "$dir"/tb/rank0/events.* | grep -o "train/loss .*")
l1=$($py tests/scripts/tb_read.py "$dir"/tb/rank1/events.* | grep -o "train/loss .*")
[ -n "$l0" ] && [ "$l0" = "$l1" ] || fail "losses differ: $l0 / $l1"

cat >"$dir/plain.py" <<'PY'
import chorus
chorus.init()
chorus.log_scalar("x", 1.0, 1)
chorus.shutdown()
PY
out=$(PYTHONPATH=python chorus-run -np 2 $py "$dir/plain.py" 2>&1) || { echo "$out"; fail "run without the variable"; }
[ "$(ls "$dir")" = "plain.py
tb
train.py" ] || fail "files written without CHORUS_TENSORBOARD: $(ls "$dir")"
echo "py_tensorboard: ok"
