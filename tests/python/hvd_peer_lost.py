"""A rank that dies in the middle of a Horovod-style sequence: every later call on the other
rank raises HorovodInternalError (ChorusPeerLostError) naming the dead rank and the tensor,
at once, and a new init() fails with an error instead of waiting. Run with chorus-run -np 2."""

import os
import sys
import time

import torch

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(REPO, "python"))
os.environ.setdefault("CHORUS_LIB", os.path.join(REPO, os.environ.get("BUILD", "build"), "lib",
                                                 "libchorus.so"))
import chorus.torch as hvd  # noqa: E402

hvd.init()
R = hvd.rank()
x = torch.ones(16, 4, requires_grad=True)
g = hvd.allgather(x[:R + 1], name="lost.gather")
g.sum().backward()
hvd.allreduce(torch.ones(8), name="lost.warmup")
if R == 1:
    os._exit(0)  # dies mid-sequence, without a word
t0 = time.time()
for i in range(3):
    name = "lost.after.%d" % i
    try:
        hvd.allreduce(torch.ones(8), name=name)
        sys.exit("rank 0: allreduce %s after rank 1 died did not raise" % name)
    except hvd.HorovodInternalError as e:
        msg = str(e)
        print("rank 0 got: %s: %s" % (type(e).__name__, msg), flush=True)
        assert isinstance(e, hvd.ChorusPeerLostError), type(e)
        assert "rank 1" in msg and "lost" in msg, msg
        assert "cannot connect" not in msg, msg
        if i == 0:
            assert name in msg, msg
hvd.shutdown()
try:
    hvd.init()
    sys.exit("rank 0: init() with rank 1 dead did not raise")
except RuntimeError as e:
    print("rank 0: init() after the loss: %s: %s" % (type(e).__name__, e), flush=True)
print("rank 0: errors in %.1f s" % (time.time() - t0), flush=True)
