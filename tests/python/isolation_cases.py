"""Cases for tests/python/pyrun_isolation.sh (not collected by default): a test that fails on
one rank while the other waits in a collective, one that hangs, and after each a test that
must still pass."""

import time

import torch

import chorus.torch as hvd

hvd.init()
R = hvd.rank()


def test_fails_on_rank_1_while_rank_0_waits():
    if R == 1:
        assert False, "rank 1 fails here on purpose"
    hvd.allreduce(torch.ones(2), name="isolation.only.rank0")


def test_runs_after_a_failure():
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [2.0, 2.0]


def test_hangs():
    time.sleep(3600)


def test_runs_after_a_hang():
    assert hvd.allreduce(torch.ones(2), op=hvd.Sum).tolist() == [2.0, 2.0]
