"""Every chorus.torch collective, every CPU dtype, async handles, grouped ops, process sets,
object collectives and the errors of mismatched calls. Run with 2 and 3 ranks."""

import argparse
import fractions

import pytest
import torch

import chorus
import chorus.torch as hvd

hvd.init()
R, N = hvd.rank(), hvd.size()
DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]


def val(r, shape=(3, 4), dtype=torch.float32):
    """A tensor that differs per rank, small enough for every dtype's sum and product."""
    base = torch.arange(torch.Size(shape).numel()).reshape(shape) % 3
    return (base + r + 1).to(dtype)


def test_basics():
    assert 0 <= R < N and N >= 2
    assert hvd.is_initialized()
    assert 0 <= hvd.local_rank() < hvd.local_size()
    assert hvd.cross_size() == 1 and hvd.cross_rank() == 0  # all ranks on this host
    assert hvd.is_homogeneous()
    assert not hvd.mpi_built() and not hvd.nccl_built() and not hvd.cuda_built()
    assert not hvd.gloo_built() and not hvd.ccl_built()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", ["Sum", "Min", "Max", "Product", "Average"])
def test_allreduce_dtypes(dtype, op):
    t = val(R, dtype=dtype)
    got = hvd.allreduce(t, op=getattr(hvd, op))
    ref = torch.stack([val(r, dtype=torch.float64) for r in range(N)])
    want = {"Sum": ref.sum(0), "Min": ref.min(0).values, "Max": ref.max(0).values,
            "Product": ref.prod(0), "Average": ref.mean(0)}[op]
    if op == "Average" and not dtype.is_floating_point:
        want = torch.floor(ref.sum(0) / N)
    assert got.dtype == dtype and got.shape == t.shape
    tol = 0.02 if dtype in (torch.float16, torch.bfloat16) else 1e-6
    assert torch.allclose(got.double(), want, rtol=tol), (got, want)
    assert torch.equal(t, val(R, dtype=dtype))  # out of place: input untouched


def test_allreduce_bool():
    t = torch.tensor([R == 0, False, True])
    assert hvd.allreduce(t, op=hvd.Sum).tolist() == [True, False, True]
    assert hvd.allreduce(t, op=hvd.Min).tolist() == [False, False, True]
    with pytest.raises(TypeError, match="Average is not defined for bool"):
        hvd.allreduce(t)


def test_allreduce_unsupported_dtype():
    with pytest.raises(TypeError, match="complex64 cannot be reduced"):
        hvd.allreduce(torch.zeros(2, dtype=torch.complex64))


def test_allreduce_inplace_zero_copy_and_scaling():
    t = val(R)
    ptr = t.data_ptr()
    out = hvd.allreduce_(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert out is t and t.data_ptr() == ptr
    want = sum(val(r) for r in range(N))
    assert torch.allclose(t, want)


def test_integer_scaling_out_of_place():
    # the engine scales floats only: integer tensors are scaled around it, on the output
    t = torch.full((3,), R + 1, dtype=torch.int32)
    out = hvd.allreduce(t, op=hvd.Sum, prescale_factor=2.0, postscale_factor=0.5)
    assert torch.equal(t, torch.full((3,), R + 1, dtype=torch.int32))
    assert torch.equal(out, torch.full((3,), N * (N + 1) // 2, dtype=torch.int32))
    outs = hvd.grouped_allreduce([t, t.to(torch.int64)], op=hvd.Sum, prescale_factor=3.0)
    assert torch.equal(t, torch.full((3,), R + 1, dtype=torch.int32))
    assert all(torch.equal(o, torch.full((3,), 3 * N * (N + 1) // 2, dtype=o.dtype))
               for o in outs)


def test_allreduce_noncontiguous():
    t = val(R, (4, 3)).t()
    with pytest.raises(ValueError, match="contiguous"):
        hvd.allreduce_(t)
    got = hvd.allreduce(t, op=hvd.Sum)  # out of place accepts any layout
    assert torch.allclose(got, sum(val(r, (4, 3)).t() for r in range(N)))


def test_async_handles():
    hs = [hvd.allreduce_async(val(R) * i, op=hvd.Sum, name="a%d" % i) for i in range(4)]
    h2 = hvd.allreduce_async_(val(R), op=hvd.Max)
    res = [hvd.synchronize(h) for h in hs]
    for i, r in enumerate(res):
        assert torch.allclose(r, sum(val(q) * i for q in range(N)))
    assert hvd.poll(h2) in (True, False)
    assert torch.equal(hvd.synchronize(h2), val(N - 1))
    b = val(R)
    hb = hvd.broadcast_async_(b, 0)
    ha = hvd.allgather_async(val(R, (R + 1, 2)))
    assert torch.equal(hvd.synchronize(hb), val(0))
    assert hvd.synchronize(ha).shape == (N * (N + 1) // 2, 2)
    with pytest.raises(ValueError, match="unknown handle"):
        hvd.poll(123456)


@pytest.mark.parametrize("dtype", DTYPES + [torch.bool, torch.complex64], ids=str)
def test_broadcast_allgather_alltoall_dtypes(dtype):
    t = val(R, (N, 2), dtype)
    for root in range(N):
        assert torch.equal(hvd.broadcast(t, root), val(root, (N, 2), dtype))
    g = hvd.allgather(val(R, (R + 1, 2), dtype))
    assert torch.equal(g, torch.cat([val(r, (r + 1, 2), dtype) for r in range(N)]))
    out = hvd.alltoall(t)
    assert torch.equal(out, torch.cat([val(r, (N, 2), dtype)[R:R + 1] for r in range(N)]))


def test_broadcast_inplace():
    t = val(R)
    ptr = t.data_ptr()
    hvd.broadcast_(t, N - 1)
    assert t.data_ptr() == ptr and torch.equal(t, val(N - 1))


def test_alltoall_splits():
    # rank r sends j+1 rows to rank j (first rows first); rows carry (sender, index)
    splits = [j + 1 for j in range(N)]
    rows = sum(splits)
    t = torch.stack([torch.full((2,), float(R)), torch.zeros(2)], 0).repeat(1, 1)
    t = torch.tensor([[R, i] for i in range(rows)], dtype=torch.int64)
    out, recv = hvd.alltoall(t, splits=torch.tensor(splits))
    assert recv.tolist() == [R + 1] * N
    off = sum(splits[:R])
    want = torch.cat([torch.tensor([[r, off + i] for i in range(R + 1)]) for r in range(N)])
    assert torch.equal(out, want)
    with pytest.raises(ValueError, match="splits"):
        hvd.alltoall(t, splits=[1] * N)


@pytest.mark.parametrize("rows", [N * 2, N * 2 + 1])
def test_reducescatter(rows):
    t = val(R, (rows, 3))
    out = hvd.reducescatter(t, op=hvd.Sum)
    full = sum(val(r, (rows, 3)) for r in range(N))
    mine = rows // N + (1 if R < rows % N else 0)
    start = sum(rows // N + (1 if q < rows % N else 0) for q in range(R))
    assert out.shape == (mine, 3)
    assert torch.allclose(out, full[start:start + mine])
    avg = hvd.reducescatter(t)
    assert torch.allclose(avg, full[start:start + mine] / N)


def test_grouped():
    ts = [val(R, (2,)), val(R, (3, 2), torch.float64), val(R, (4,), torch.int32)]
    outs = hvd.grouped_allreduce(ts, op=hvd.Sum)
    for t, o in zip(ts, outs):
        assert o.dtype == t.dtype
        assert torch.equal(o, sum(val(r, t.shape, t.dtype) for r in range(N)))
    h = hvd.grouped_allreduce_async_(ts, op=hvd.Max)
    hvd.synchronize(h)
    assert torch.equal(ts[0], val(N - 1, (2,)))
    g = hvd.grouped_allgather([val(R, (1, 2)), val(R, (R + 1,))])
    assert g[0].shape == (N, 2) and g[1].shape == (N * (N + 1) // 2,)
    rs = hvd.grouped_reducescatter([val(R, (N, 2)), val(R, (N,))], op=hvd.Sum)
    assert torch.equal(rs[1], sum(val(r, (N,)) for r in range(N))[R:R + 1])


def test_grouped_refused_midway():
    """A grouped op reaches the engine whole (held until its last tensor is enqueued); when
    one of its tensors is refused, the ones already enqueued are handed over and end before
    the error is raised: the error names the tensor, nobody hangs, the engine goes on."""
    t = torch.ones(4)
    h = hvd.allreduce_async(t, name="midway.1")  # holds the name of the group's second tensor
    with pytest.raises(chorus.ChorusInvalidArgument, match="cannot enqueue 'midway.1': an op "
                       "with this name is still pending on this rank"):
        hvd.grouped_allreduce([torch.ones(3), torch.ones(5)], name="midway")
    assert torch.equal(hvd.synchronize(h), torch.ones(4))
    outs = hvd.grouped_allreduce([torch.ones(3), torch.ones(5)], name="midway.after",
                                 op=hvd.Sum)
    assert torch.equal(outs[1], torch.full((5,), float(N)))


def test_autograd():
    x = torch.ones(3, requires_grad=True)
    y = hvd.allreduce(x * (R + 1), op=hvd.Average)
    y.sum().backward()
    assert torch.allclose(x.grad, torch.full((3,), float(R + 1)))
    x = torch.ones(R + 1, 2, requires_grad=True)
    # the allgather's gradient is the average of every rank's gradient (as Horovod)
    hvd.allgather(x).sum().backward()
    assert torch.allclose(x.grad, torch.full((R + 1, 2), 1.0))


def test_objects():
    obj = {"rank": R, "t": torch.arange(3) * R, "s": "x" * R}
    got = hvd.broadcast_object(obj, root_rank=N - 1)
    assert got["rank"] == N - 1 and torch.equal(got["t"], torch.arange(3) * (N - 1))
    allo = hvd.allgather_object(obj)
    assert [o["rank"] for o in allo] == list(range(N))
    assert [o["s"] for o in allo] == ["x" * r for r in range(N)]


def test_objects_of_any_class():
    # Horovod pickles any object; torch 2.6 and later unpickle only tensors and plain types
    # unless asked not to, so a Fraction or a Namespace would fail there
    obj = {"f": fractions.Fraction(R + 1, 3), "ns": argparse.Namespace(rank=R)}
    got = hvd.broadcast_object(obj, root_rank=N - 1)
    assert got == {"f": fractions.Fraction(N, 3), "ns": argparse.Namespace(rank=N - 1)}
    allo = hvd.allgather_object(obj["f"])
    assert allo == [fractions.Fraction(r + 1, 3) for r in range(N)]


def test_barrier_and_compression():
    hvd.barrier()
    t = val(R)
    got = hvd.allreduce(t, op=hvd.Sum, compression=hvd.Compression.fp16)
    assert got.dtype == torch.float32
    assert torch.allclose(got, sum(val(r) for r in range(N)))


def test_process_sets():
    even = hvd.add_process_set([r for r in range(N) if r % 2 == 0])
    first = hvd.add_process_set(hvd.ProcessSet([0, 1]))
    assert even.process_set_id != first.process_set_id
    if even.included():
        got = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, process_set=even)
        assert got.item() == sum(r for r in range(N) if r % 2 == 0)
        assert even.rank() == R // 2
    else:
        assert even.rank() == -1
        with pytest.raises(ValueError, match="not a member"):
            hvd.allreduce(torch.zeros(1), process_set=even)
    if first.included():
        h = hvd.allreduce_async(torch.tensor([1.0]), op=hvd.Sum, process_set=first)
        assert hvd.synchronize(h).item() == 2.0
        assert hvd.allgather(torch.tensor([R]), process_set=first).tolist() == [0, 1]
    hvd.barrier()
    assert hvd.remove_process_set(even) and hvd.remove_process_set(first)
    with pytest.raises(ValueError, match="global process set"):
        hvd.remove_process_set(hvd.global_process_set)
    with pytest.raises(ValueError, match="not registered"):
        hvd.allreduce(torch.zeros(1), process_set=hvd.ProcessSet([0]))
    with pytest.raises(ValueError, match="must be distinct ranks"):
        hvd.add_process_set([0, 0])
    with pytest.raises(ValueError, match="must be distinct ranks"):
        hvd.add_process_set([N])


def test_process_sets_run_on_their_own_engines():
    # a process set's ops go to the engine over its split communicator, not the world's
    pair = hvd.add_process_set([0, 1])
    if pair.included():
        before = hvd.engine_stats()["tensors"]
        got = hvd.allreduce(torch.tensor([float(R)]), op=hvd.Sum, process_set=pair)
        assert got.item() == 1.0
        assert hvd.engine_stats(pair)["tensors"] == 1
        assert hvd.engine_stats()["tensors"] == before
    else:
        with pytest.raises(ValueError, match="not a member"):
            hvd.engine_stats(pair)
    hvd.barrier()
    assert hvd.remove_process_set(pair)


def test_mismatched_shapes_raise_everywhere():
    t = torch.zeros(2, 3) if R == 0 else torch.zeros(3, 3)
    with pytest.raises(hvd.ChorusMismatchError,
                       match=r"different shapes: rank 0 has \(2, 3\), rank 1 has \(3, 3\)|"
                             r"count \(elements\) 6 on rank 0 but 9 on rank 1"):
        hvd.allreduce(t)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


@pytest.mark.skipif(hvd.backend() == "engine",
                    reason="the engine compares element counts, not shapes")
def test_mismatched_shapes_same_count_raise_everywhere():
    t = torch.zeros(2, 3) if R == 0 else torch.zeros(3, 2)
    with pytest.raises(hvd.ChorusMismatchError, match=r"different shapes: rank 0 has \(2, 3\)"):
        hvd.allreduce(t)
    # the job goes on: the next collective works on every rank
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


def test_mismatched_counts_raise_everywhere():
    t = torch.zeros(R + 2)
    with pytest.raises(hvd.HorovodInternalError, match="different shapes|count"):
        hvd.synchronize(hvd.allreduce_async(t))
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


def test_reducescatter_different_rows_raise_everywhere():
    # ranks that disagree on dim 0 all get the error (the engine compares the sizes), and
    # the job goes on
    t = torch.zeros(N + 1 + R, 2)
    with pytest.raises(hvd.ChorusMismatchError, match=r"chorus reducescatter: .*disagree"):
        hvd.reducescatter(t, op=hvd.Sum)
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


def test_mismatched_dtypes_raise_everywhere():
    t = torch.zeros(4, dtype=torch.float32 if R == 0 else torch.float64)
    with pytest.raises(hvd.ChorusMismatchError,
                       match="different dtypes: rank 0 has float32|dtype float32 on rank 0 but"):
        hvd.allreduce(t)
    with pytest.raises(hvd.ChorusMismatchError, match="root ranks|root 0 on rank 0 but 1"):
        hvd.broadcast(torch.zeros(2), root_rank=R)
    with pytest.raises(hvd.ChorusMismatchError, match="different ops|op sum on rank 0 but max"):
        hvd.allreduce(torch.zeros(2), op=hvd.Sum if R == 0 else hvd.Max)
    with pytest.raises(hvd.ChorusMismatchError, match="different collectives|operation allreduce on rank 0 but allgather"):
        if R == 0:
            hvd.allreduce(torch.zeros(2))
        else:
            hvd.allgather(torch.zeros(2))
    assert hvd.allreduce(torch.ones(1), op=hvd.Sum).item() == N


def test_bad_arguments():
    with pytest.raises(ValueError, match="root_rank 7 is out of range"):
        hvd.broadcast(torch.zeros(1), root_rank=7)
    with pytest.raises(ValueError, match="at least one dimension"):
        hvd.allgather(torch.tensor(1.0))
    with pytest.raises(TypeError, match="expected a torch.Tensor"):
        hvd.allreduce([1, 2])
    with pytest.raises(NotImplementedError, match="Adasum"):
        hvd.reducescatter(torch.zeros(N), op=hvd.Adasum)  # allreduce only, as Horovod
    with pytest.raises(ValueError, match="unknown reduction op"):
        hvd.allreduce(torch.zeros(1), op="median")


def test_timeline(tmp_path):
    path = str(tmp_path / "tl-%r.json")
    hvd.start_timeline(path)
    with pytest.raises(ValueError, match="already being written"):
        hvd.start_timeline(path)
    hvd.allreduce(torch.ones(4), name="timed")
    hvd.synchronize(hvd.allgather_async(torch.ones(1)))
    hvd.stop_timeline()
    import json
    ev = json.load(open(path.replace("%r", str(R))))
    names = [e["name"] for e in ev if e.get("ph") == "X"]
    assert "timed" in names and len(names) == 2
