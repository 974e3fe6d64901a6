"""The NumPy API (import chorus): collectives on numpy arrays in place through their data
pointers, dtype conversions, uneven allgather/alltoall/reducescatter, join, objects."""

import numpy as np
import pytest

import chorus

chorus.init()
R, N = chorus.rank(), chorus.size()


def test_allreduce_in_place_uses_the_array_memory():
    a = np.arange(6, dtype=np.float32).reshape(2, 3) + R
    ptr = a.ctypes.data
    out = chorus.allreduce_(a, op=chorus.Sum)
    assert out is a and a.ctypes.data == ptr
    assert np.array_equal(a, sum(np.arange(6, dtype=np.float32).reshape(2, 3) + r
                                 for r in range(N)))


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.int64,
                                   np.float16, np.float32, np.float64])
def test_dtypes(dtype):
    a = (np.arange(5) % 3 + R + 1).astype(dtype)
    ref = np.stack([(np.arange(5) % 3 + r + 1) for r in range(N)]).astype(np.float64)
    assert np.array_equal(chorus.allreduce(a, op=chorus.Sum), ref.sum(0).astype(dtype))
    assert np.array_equal(chorus.allreduce(a, op="max"), ref.max(0).astype(dtype))
    assert chorus.allreduce(a, op=chorus.Sum).dtype == dtype
    assert np.array_equal(chorus.broadcast(a, 0), ref[0].astype(dtype))


def test_bool_and_unsupported():
    a = np.array([R == 0, False])
    assert chorus.allreduce(a, op=chorus.Sum).tolist() == [True, False]
    with pytest.raises(TypeError, match="not supported"):
        chorus.allreduce(np.zeros(2, dtype=np.complex64))
    with pytest.raises(ValueError, match="C-contiguous"):
        chorus.allreduce_(np.zeros((4, 4))[:, 1])
    with pytest.raises(TypeError, match="numpy.ndarray"):
        chorus.allreduce_([1.0])


def test_uneven():
    g = chorus.allgather(np.full((R + 1, 2), R, dtype=np.int32))
    assert g.shape == (N * (N + 1) // 2, 2)
    assert [int(x) for x in g[:, 0]] == [r for r in range(N) for _ in range(r + 1)]
    out, recv = chorus.alltoall(np.arange(N + 1) + 100 * R, splits=[2] + [1] * (N - 1))
    assert recv.tolist() == [2 if R == 0 else 1] * N
    want = [100 * r + i for r in range(N) for i in ([0, 1] if R == 0 else [R + 1])]
    assert out.tolist() == want
    rs = chorus.reducescatter(np.ones((N + 1, 2)), op=chorus.Sum)
    assert rs.shape == ((2 if R == 0 else 1), 2) and (rs == N).all()


def test_grouped_objects_barrier_join():
    outs = chorus.grouped_allreduce([np.ones(3) * R, np.ones(2, dtype=np.int64)], op=chorus.Sum)
    assert (outs[0] == sum(range(N))).all() and (outs[1] == N).all()
    assert chorus.broadcast_object({"r": R}, root_rank=1) == {"r": 1}
    assert chorus.allgather_object(R * "a") == [r * "a" for r in range(N)]
    chorus.barrier()
    # uneven work, then join: the ranks that joined count as zeros in the average (Horovod)
    for step in range(R + 1):
        got = chorus.allreduce(np.array([1.0 + step]))
        assert got[0] == (1.0 + step) * (N - step) / N
    assert chorus.join() == N - 1


def test_mismatch():
    with pytest.raises(chorus.ChorusMismatchError, match="different shapes"):
        chorus.allreduce(np.zeros(R + 1))
    assert chorus.allreduce(np.ones(1), op=chorus.Sum)[0] == N
