"""Collectives on framework arrays (NumPy or PyTorch), written once for both.

A front end passes an adapter that tells how to see an array as memory (Buf), allocate a new
one, scale one in place and copy one into another; these functions run on the ordered
executor (see _core) and move the data with libchorus through the arrays' own pointers.

Each collective starts with check(): an allgather of a fixed record of what every rank is
about to do. It serves three purposes:
  * ranks that disagree (shape, dtype, op, root, collective) all raise ChorusMismatchError
    and no data moves;
  * ranks learn the others' first dimensions (allgather with different row counts);
  * a rank that called join() sees what the others are doing and takes part with zeros.
"""

import ctypes
import zlib

import numpy as np

from . import _core
from ._core import c_op, rs_rows, HostBuf
from ._lib import ChorusMismatchError, DTYPE, OP

OP_AVG, OP_SUM = OP["avg"], OP["sum"]


class Buf:
    """A contiguous array seen as memory: address, elements, chorus dtype, name, shape."""

    __slots__ = ("ptr", "numel", "code", "dname", "shape", "isz")

    def __init__(self, ptr, numel, code, dname, shape, isz):
        self.ptr, self.numel, self.code, self.dname = ptr, numel, code, dname
        self.shape, self.isz = tuple(int(d) for d in shape), isz

    @property
    def nbytes(self):
        return self.numel * self.isz

    def row_elems(self):
        n = 1
        for d in self.shape[1:]:
            n *= d
        return n


# ---- the record and the check ------------------------------------------------------------

KINDS = ["allreduce", "allgather", "broadcast", "alltoall", "reducescatter", "barrier",
         "join"]
K_ALLREDUCE, K_ALLGATHER, K_BROADCAST, K_ALLTOALL, K_REDUCESCATTER, K_BARRIER, K_JOIN = range(7)
DTYPE_NAMES = _core.DTYPE_NAMES
_NDIMS = 6  # leading dims recorded exactly; the rest are compared through a hash
# columns of the record
C_KIND, C_DTYPE, C_OP, C_ROOT, C_NDIM, C_DIM0 = 0, 1, 2, 3, 4, 5
C_TAILHASH, C_NAME, C_EXTRA, C_NUMEL, C_CODE, C_ROW, C_ISZ = 11, 12, 13, 14, 15, 16, 17
_REC = 18


def _crc(s):
    return zlib.crc32(s.encode()) & 0x7FFFFFFF if s else 0


def record(kind, b=None, op=0, root=0, name=None, extra=0):
    r = [0] * _REC
    r[C_KIND] = kind
    r[C_NAME] = _crc(name)
    r[C_OP], r[C_ROOT], r[C_EXTRA] = int(op), int(root), int(extra)
    if b is not None:
        r[C_DTYPE] = DTYPE_NAMES.index(b.dname) if b.dname in DTYPE_NAMES else len(DTYPE_NAMES) - 1
        r[C_NDIM] = len(b.shape)
        for i in range(_NDIMS):
            r[C_DIM0 + i] = b.shape[i] if i < len(b.shape) else -1
        r[C_TAILHASH] = _crc(repr(b.shape[1:]))
        r[C_NUMEL] = b.numel
        r[C_CODE] = b.code
        r[C_ROW] = b.row_elems()
        r[C_ISZ] = b.isz
    return r


def _fmt_shape(row):
    nd = int(row[C_NDIM])
    dims = [str(int(row[C_DIM0 + i])) for i in range(min(nd, _NDIMS))]
    if nd > _NDIMS:
        dims.append("...")
    return "(" + ", ".join(dims) + ("," if nd == 1 else "") + ")"


def _problem(allr, what_extra="extra"):
    """Why the active (not joined) rows of allr disagree, or None when they agree."""
    active = [i for i in range(len(allr)) if allr[i, C_KIND] != K_JOIN]
    if not active:
        return None
    rows = allr[active]
    kind = int(rows[0, C_KIND])
    ignore_dim0 = kind in (K_ALLGATHER, K_ALLTOALL)

    def same(c):
        return bool((rows[:, c] == rows[0, c]).all())

    def per_rank(fmt):
        return ", ".join("rank %d %s" % (i, fmt(allr[i])) for i in active)

    if not same(C_KIND):
        return "different collectives: " + per_rank(lambda r: "called %s" % KINDS[int(r[0])])
    names = rows[:, C_NAME]
    if not (names == 0).any() and not same(C_NAME):
        return "different tensor names (the collectives were issued in a different order)"
    if not same(C_DTYPE):
        return "different dtypes: " + per_rank(lambda r: "has %s" % DTYPE_NAMES[int(r[1])])
    if not same(C_OP):
        return "different ops: " + per_rank(lambda r: "passed op %d" % int(r[C_OP]))
    if not same(C_ROOT):
        return "different root ranks: " + per_rank(lambda r: "passed root_rank=%d" % int(r[3]))
    cols = [C_NDIM, C_TAILHASH] + list(range(C_DIM0 + 1, C_DIM0 + _NDIMS))
    if not ignore_dim0:
        cols += [C_DIM0, C_NUMEL]
    if not all(same(c) for c in cols):
        return "different shapes: " + per_rank(lambda r: "has %s" % _fmt_shape(r))
    if not same(C_EXTRA):
        return "different %s: " % what_extra + per_rank(lambda r: "passed %d" % int(r[C_EXTRA]))
    joined = [i for i in range(len(allr)) if allr[i, C_KIND] == K_JOIN]
    if joined and kind not in (K_ALLREDUCE, K_ALLGATHER, K_BROADCAST, K_BARRIER):
        return "%s after rank(s) %s called join() (only allreduce, allgather, broadcast and " \
               "barrier may follow a join)" % (KINDS[kind], joined)
    if joined and kind == K_BROADCAST and int(rows[0, C_ROOT]) in joined:
        return "broadcast from root rank %d, which already called join()" % int(rows[0, C_ROOT])
    return None


def check(comm, rec, what, what_extra="extra"):
    """Allgathers rec and raises ChorusMismatchError on every rank when the ranks disagree.
    Returns the gathered (size, _REC) int64 array."""
    if comm.size == 1:
        allr = np.asarray([rec], dtype=np.int64)
    else:
        allr = comm.allgather_i64(rec)
    comm.last_kinds = allr[:, C_KIND].copy()
    why = _problem(allr, what_extra)
    if why:
        raise ChorusMismatchError("chorus %s: ranks disagree on the call, %s" % (what, why),
                                  None, "CHORUS_ERR_MISMATCH")
    return allr


# ---- collectives --------------------------------------------------------------------------


def allreduce(A, comm, src, dst, op, prescale=1.0, postscale=1.0, name=None):
    """dst = op over ranks of src*prescale, times postscale. dst may be src (in place)."""
    b = A.buf(src)
    allr = check(comm, record(K_ALLREDUCE, b, op=c_op(op), name=name), "allreduce")
    cop, postscale = _avg_over_active(allr, c_op(op), postscale, b.code)
    d = b if dst is src else A.buf(dst)
    send = b.ptr
    if prescale != 1.0:
        if dst is not src:
            A.copy_(dst, src)
            send = d.ptr
        A.scale_(dst, prescale)
        send = d.ptr
    comm.allreduce(send, d.ptr, b.numel, b.code, cop)
    if postscale != 1.0:
        A.scale_(dst, postscale)
    elif cop != c_op(op) and b.code not in _core.FLOAT_CODES:
        A.floordiv_(dst, _active(allr))
    return dst


def _active(allr):
    return int((allr[:, C_KIND] != K_JOIN).sum())


def _avg_over_active(allr, cop, postscale, code):
    """With ranks that joined, an average divides by the ranks that contributed: the sum is
    taken and scaled here (floats) or floor-divided by the caller (integers)."""
    n = _active(allr)
    if cop != OP_AVG or n == len(allr):
        return cop, postscale
    if code in _core.FLOAT_CODES:
        return OP_SUM, postscale / n
    return OP_SUM, postscale


def allreduce_fused(A, comm, tensors, op, prescale=1.0, postscale=1.0, name=None):
    """Allreduces a list of arrays in place, packing those of one dtype into one buffer: one
    check and one allreduce per dtype. Each rank must pass the same shapes in the same order."""
    groups = {}
    for t in tensors:
        b = A.buf(t)
        groups.setdefault(b.code, []).append((t, b))
    for code, items in sorted(groups.items()):
        total = sum(b.numel for _, b in items)
        isz = items[0][1].isz
        layout = _crc(repr([b.shape for _, b in items]))
        fused = Buf(0, total, code, items[0][1].dname, (total,), isz)
        allr = check(comm, record(K_ALLREDUCE, fused, op=c_op(op), name=name, extra=layout),
                     "grouped allreduce", "tensor lists")
        cop, post = _avg_over_active(allr, c_op(op), postscale, code)
        if prescale != 1.0:
            for t, _ in items:
                A.scale_(t, prescale)
        if len(items) == 1:
            comm.allreduce(items[0][1].ptr, items[0][1].ptr, total, code, cop)
        else:
            hb = HostBuf(total * isz)
            off = 0
            for _, b in items:
                ctypes.memmove(hb.ptr + off, b.ptr, b.nbytes)
                off += b.nbytes
            comm.allreduce(hb.ptr, hb.ptr, total, code, cop)
            off = 0
            for _, b in items:
                ctypes.memmove(b.ptr, hb.ptr + off, b.nbytes)
                off += b.nbytes
        if post != 1.0:
            for t, _ in items:
                A.scale_(t, post)
        elif cop != c_op(op) and code not in _core.FLOAT_CODES:
            for t, _ in items:
                A.floordiv_(t, _active(allr))
    return tensors


def broadcast(A, comm, x, root, name=None):
    """x (on every rank) becomes root's x, in place."""
    b = A.buf(x)
    if not 0 <= root < comm.size:
        raise ValueError("chorus broadcast: root_rank %d is out of range for %d ranks"
                         % (root, comm.size))
    check(comm, record(K_BROADCAST, b, root=root, name=name), "broadcast")
    comm.broadcast(b.ptr, b.nbytes, DTYPE["uint8"], root)
    return x


def allgather(A, comm, x, name=None):
    """Concatenation along dim 0 of every rank's x; dim 0 may differ between ranks."""
    b = A.buf(x)
    if not b.shape:
        raise ValueError("chorus allgather: the tensor needs at least one dimension (got a "
                         "scalar); reshape it to (1,)")
    allr = check(comm, record(K_ALLGATHER, b, name=name), "allgather")
    rows = [0 if r[C_KIND] == K_JOIN else int(r[C_DIM0]) for r in allr]
    row = b.row_elems()
    out = A.empty((sum(rows),) + b.shape[1:], x)
    o = A.buf(out)
    _gather_rows(comm, b.ptr, o.ptr, rows, row * b.isz)
    return out


def _gather_rows(comm, src, dst, rows, row_bytes):
    """Allgather of rows[r] rows of row_bytes from each rank r, packed in rank order at dst."""
    n, me = len(rows), comm.rank
    if row_bytes == 0 or sum(rows) == 0:
        return
    if len(set(rows)) == 1:
        comm.allgather(src, dst, rows[0] * row_bytes, DTYPE["uint8"])
        return
    m = max(rows)
    blk = m * row_bytes
    pad = HostBuf(blk * n)
    send = pad.ptr + me * blk
    if rows[me]:
        ctypes.memmove(send, src, rows[me] * row_bytes)
    comm.allgather(send, pad.ptr, blk, DTYPE["uint8"])
    off = 0
    for r in range(n):
        ctypes.memmove(dst + off, pad.ptr + r * blk, rows[r] * row_bytes)
        off += rows[r] * row_bytes


def alltoall(A, comm, x, splits=None, name=None):
    """Sends splits[j] rows of x (in order) to rank j; returns (received rows concatenated in
    rank order, list of rows received from each rank)."""
    b = A.buf(x)
    n, me = comm.size, comm.rank
    if not b.shape:
        raise ValueError("chorus alltoall: the tensor needs at least one dimension")
    d0 = b.shape[0]
    if splits is None:
        if d0 % n:
            raise ValueError("chorus alltoall: dim 0 (%d) is not divisible by the number of "
                             "ranks (%d); pass splits=" % (d0, n))
        splits = [d0 // n] * n
    splits = [int(s) for s in (splits.tolist() if hasattr(splits, "tolist") else splits)]
    if len(splits) != n or any(s < 0 for s in splits) or sum(splits) != d0:
        raise ValueError("chorus alltoall: splits %s must be %d non-negative row counts "
                         "summing to dim 0 (%d)" % (splits, n, d0))
    check(comm, record(K_ALLTOALL, b, name=name), "alltoall")
    mat = comm.allgather_i64(splits) if n > 1 else np.asarray([splits], dtype=np.int64)
    recv = [int(mat[j, me]) for j in range(n)]
    row_bytes = b.row_elems() * b.isz
    out = A.empty((sum(recv),) + b.shape[1:], x)
    o = A.buf(out)
    if row_bytes == 0:
        return out, recv
    m = int(mat.max())
    if (mat == m).all():
        if m:
            comm.alltoall(b.ptr, o.ptr, m * row_bytes, DTYPE["uint8"])
        return out, recv
    blk = m * row_bytes
    sbuf, rbuf = HostBuf(blk * n), HostBuf(blk * n)
    off = 0
    for j in range(n):
        ctypes.memmove(sbuf.ptr + j * blk, b.ptr + off, splits[j] * row_bytes)
        off += splits[j] * row_bytes
    if m:
        comm.alltoall(sbuf.ptr, rbuf.ptr, blk, DTYPE["uint8"])
    off = 0
    for j in range(n):
        ctypes.memmove(o.ptr + off, rbuf.ptr + j * blk, recv[j] * row_bytes)
        off += recv[j] * row_bytes
    return out, recv


def reducescatter(A, comm, x, op, prescale=1.0, postscale=1.0, name=None):
    """Reduces x over ranks and gives rank r its share of dim 0: dim0 // size rows, one more
    for the first dim0 % size ranks (as Horovod)."""
    b = A.buf(x)
    n, me = comm.size, comm.rank
    if not b.shape:
        raise ValueError("chorus reducescatter: the tensor needs at least one dimension")
    check(comm, record(K_REDUCESCATTER, b, op=c_op(op), name=name), "reducescatter")
    d0 = b.shape[0]
    rows = [rs_rows(d0, n, r) for r in range(n)]
    out = A.empty((rows[me],) + b.shape[1:], x)
    o = A.buf(out)
    row = b.row_elems()
    src = x
    if prescale != 1.0:
        src = A.empty(b.shape, x)
        A.copy_(src, x)
        A.scale_(src, prescale)
    s = A.buf(src)
    if row == 0 or d0 == 0:
        return out
    if d0 % n == 0:
        comm.reduce_scatter(s.ptr, o.ptr, rows[0] * row, b.code, c_op(op))
    else:
        m = rows[0]
        rb = row * b.isz
        pad = HostBuf(m * rb * n)
        pad.a[:] = 0
        off = 0
        for r in range(n):
            ctypes.memmove(pad.ptr + r * m * rb, s.ptr + off, rows[r] * rb)
            off += rows[r] * rb
        tmp = HostBuf(m * rb)
        comm.reduce_scatter(pad.ptr, tmp.ptr, m * row, b.code, c_op(op))
        if rows[me]:
            ctypes.memmove(o.ptr, tmp.ptr, rows[me] * rb)
    if postscale != 1.0:
        A.scale_(out, postscale)
    return out


def barrier(comm):
    check(comm, record(K_BARRIER), "barrier")
    comm.barrier()


def join(comm):
    """Marks this rank as out of data and takes part, with zeros, in the allreduces (and
    allgathers, broadcasts, barriers) of the ranks still working, until every rank has
    joined. Returns the highest rank among the last ones to join."""
    prev = getattr(comm, "last_kinds", None)
    while True:
        allr = comm.allgather_i64(record(K_JOIN)) if comm.size > 1 else \
            np.asarray([record(K_JOIN)], dtype=np.int64)
        kinds = allr[:, C_KIND]
        if (kinds == K_JOIN).all():
            comm.last_kinds = None
            last = [i for i in range(comm.size) if prev is None or prev[i] != K_JOIN]
            return max(last) if last else comm.size - 1
        comm.last_kinds = prev = kinds.copy()
        if _problem(allr):
            continue  # the working ranks raise; nothing moves
        r = allr[[i for i in range(comm.size) if kinds[i] != K_JOIN][0]]
        kind, code = int(r[C_KIND]), int(r[C_CODE])
        if kind == K_ALLREDUCE:
            isz = int(r[C_ISZ])
            hb = HostBuf(int(r[C_NUMEL]) * isz)
            hb.a[:] = 0
            op = int(r[C_OP])
            comm.allreduce(hb.ptr, hb.ptr, int(r[C_NUMEL]), code, OP_SUM if op == OP_AVG else op)
        elif kind == K_ALLGATHER:
            rows = [0 if q[C_KIND] == K_JOIN else int(q[C_DIM0]) for q in allr]
            rb = int(r[C_ROW]) * int(r[C_ISZ])
            hb = HostBuf(sum(rows) * rb)
            _gather_rows(comm, 0, hb.ptr, rows, rb)
        elif kind == K_BROADCAST:
            nb = int(r[C_NUMEL]) * int(r[C_ISZ])
            hb = HostBuf(nb)
            comm.broadcast(hb.ptr, nb, DTYPE["uint8"], int(r[C_ROOT]))
        elif kind == K_BARRIER:
            comm.barrier()

