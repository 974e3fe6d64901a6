"""chorus.ps over torch tensors with real ranks (chorus-run -np 3: one server, two workers).
Every rank runs every test; servers serve until the workers leave."""

import pytest
import torch

import chorus
import chorus.ps


def test_sync_push_pull_exact():
    ps = chorus.ps.ParameterServer(mode="sync", servers=1, momentum=0.0)
    w0 = torch.arange(10000, dtype=torch.float32)
    b0 = torch.ones(5)
    ps.register(0, w0)
    ps.register(1, b0)
    if ps.is_server:
        ps.serve()
        st = ps.stats()
        assert st["updates"] == 6 and st["pushes"] == 12
        assert st["worker_bytes_pushed"][0] == st["worker_bytes_pushed"][1] > 0
    else:
        w, b = torch.zeros(10000), torch.zeros(5)
        for step in range(1, 4):
            g = torch.full((10000,), float(ps.worker_index + 1))
            gb = torch.full((5,), 2.0)
            hs = [ps.push(0, g, 0.5), ps.push(1, gb, 0.25), ps.pull(0, w), ps.pull(1, b)]
            for h in hs:
                h.wait()
            # both workers' gradients (1 + 2) summed, lr 0.5, once per round
            assert torch.equal(w, w0 - 0.5 * 3.0 * step)
            assert torch.equal(b, b0 - 0.25 * 4.0 * step)
    ps.close()


def test_errors_are_clear():
    with pytest.raises(chorus.ChorusInvalidArgument, match="mode must be sync, async or ssp"):
        chorus.ps.ParameterServer(mode="fast")
    ps = chorus.ps.ParameterServer(mode="async", servers=1)
    ps.register(3, torch.zeros(8))
    if ps.is_server:
        ps.serve()
    else:
        with pytest.raises(chorus.ChorusInvalidArgument, match="key 4 is not registered"):
            ps.push(4, torch.zeros(8), 0.1)
        with pytest.raises(chorus.ChorusInvalidArgument, match="key 3 holds 8 floats, the call gave 7"):
            ps.pull(3, torch.zeros(7))
        with pytest.raises(chorus.ChorusInvalidArgument, match="contiguous float32 CPU tensor"):
            ps.push(3, torch.zeros(8, dtype=torch.float64), 0.1)
        ps.leave()
        with pytest.raises(chorus.ChorusInvalidArgument, match="has left the parameter server"):
            ps.pull(3, torch.zeros(8))
    ps.close()
