"""The one runtime of the Python front ends: libchorus's engine (include/chorus/engine.h).

Every process set (the global one included) has an engine started over its communicator.
Every collective of chorus and chorus.torch is enqueued on it by name from the calling thread
(backward hooks included); the engine thread agrees with the other ranks which names are
ready, checks that they agree on kind, dtype, count, op and root, fuses ready allreduces and
runs them. Waiting releases the GIL (ctypes does).

The collectives are written once here for NumPy arrays and torch tensors: a front end passes
an adapter that tells how to see an array as memory (buf), allocate one (empty), scale one in
place (scale_) and copy one into another (copy_). The arrays handed in are CPU, contiguous,
of a libchorus dtype (the front ends stage and convert the others). What Horovod has and the
engine does not have as one call is built from engine ops:
  * alltoall with splits: an allgather of every rank's splits, then one alltoall of blocks
    padded to the largest one, unpacked;
  * reducescatter of a first dimension that does not divide by the ranks: an allreduce of the
    whole tensor (the engine compares its exact size), of which each rank keeps its rows;
  * prescale/postscale on integer tensors (the engine scales floats only): done around it.
"""

import ctypes
import functools
import itertools
import zlib

import numpy as np

from . import _timeline
from ._lib import lib, raise_for, check, DTYPE, OP, RESULT_NAMES

_P = ctypes.c_void_p
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [_P]
_libc.free.restype = None

_MISMATCH = RESULT_NAMES.index("CHORUS_ERR_MISMATCH")
FLOAT_CODES = {DTYPE[n] for n in ("float16", "bfloat16", "float32", "float64")}
OPTS_VERSION = 1  # CHORUS_ENGINE_OPTS_VERSION


# ---- ctypes mirrors of the option structs -------------------------------------------------

def _versioned(fields, size_fn):
    """The struct's fields, led by (size, version) when the library says its structs start
    with them (it exports size_fn then)."""
    if hasattr(lib, size_fn):
        return [("size", ctypes.c_size_t), ("version", ctypes.c_uint)] + fields
    return fields


class _Stats(ctypes.Structure):
    _fields_ = [("cycles", ctypes.c_uint64), ("coord_rounds", ctypes.c_uint64),
                ("tensors", ctypes.c_uint64), ("cache_hits", ctypes.c_uint64),
                ("fused_batches", ctypes.c_uint64), ("bytes_reduced", ctypes.c_uint64),
                ("thread_cpu_s", ctypes.c_double)]


class EngineOpts(ctypes.Structure):
    """chorus_engine_opts."""
    _fields_ = _versioned(
        [("cycle_time_ms", ctypes.c_double), ("fusion_threshold", ctypes.c_size_t),
         ("cache_capacity", ctypes.c_int), ("stall_warn_s", ctypes.c_double),
         ("stall_shutdown_s", ctypes.c_double), ("idle_ms", ctypes.c_double),
         ("timeline", ctypes.c_char_p), ("compressor", _P), ("desync_s", ctypes.c_double)],
        "chorus_engine_opts_size")


class TensorOpts(ctypes.Structure):
    """chorus_engine_tensor_opts."""
    _fields_ = _versioned(
        [("prescale", ctypes.c_double), ("postscale", ctypes.c_double), ("compressor", _P),
         ("no_compression", ctypes.c_int), ("callback", _P), ("callback_arg", _P),
         ("shape_tag", ctypes.c_uint64)],
        "chorus_engine_tensor_opts_size")


def _check_layout():
    """The mirrors must have the library's sizes (when it tells them)."""
    for cls, fn in ((EngineOpts, "chorus_engine_opts_size"),
                    (TensorOpts, "chorus_engine_tensor_opts_size")):
        if hasattr(lib, fn):
            f = getattr(lib, fn)
            f.restype, f.argtypes = ctypes.c_size_t, []
            if f() != ctypes.sizeof(cls):
                raise ImportError("chorus: %s is %d bytes in libchorus but %d in this package; "
                                  "the package and the library are from different versions"
                                  % (cls.__doc__.strip(" ."), f(), ctypes.sizeof(cls)))


def _protos():
    c = ctypes
    pp = c.POINTER(_P)
    sz = c.c_size_t
    topts = c.POINTER(TensorOpts)
    table = [
        ("chorus_engine_opts_init", None, [c.POINTER(EngineOpts)]),
        ("chorus_engine_start", c.c_int, [_P, c.POINTER(EngineOpts), pp]),
        ("chorus_engine_shutdown", c.c_int, [_P]),
        ("chorus_engine_last_error", c.c_char_p, [_P]),
        ("chorus_engine_allreduce", c.c_int,
         [_P, c.c_char_p, _P, _P, sz, c.c_int, c.c_int, topts, pp]),
        ("chorus_engine_broadcast", c.c_int, [_P, c.c_char_p, _P, sz, c.c_int, c.c_int, topts, pp]),
        ("chorus_engine_allgather", c.c_int, [_P, c.c_char_p, _P, sz, sz, c.c_int, topts, pp]),
        ("chorus_engine_reduce_scatter", c.c_int,
         [_P, c.c_char_p, _P, _P, sz, c.c_int, c.c_int, topts, pp]),
        ("chorus_engine_alltoall", c.c_int, [_P, c.c_char_p, _P, _P, sz, c.c_int, topts, pp]),
        ("chorus_engine_wait", c.c_int, [_P]),
        ("chorus_engine_poll", c.c_int, [_P]),
        ("chorus_engine_handle_error", c.c_char_p, [_P]),
        ("chorus_engine_take_output", _P, [_P, c.POINTER(sz)]),
        ("chorus_engine_output_rows", sz, [_P, c.c_int]),
        ("chorus_engine_release", None, [_P]),
        ("chorus_engine_join", c.c_int, [_P, c.POINTER(c.c_int)]),
        ("chorus_engine_barrier", c.c_int, [_P]),
        ("chorus_engine_hold", c.c_int, [_P]),
        ("chorus_engine_unhold", c.c_int, [_P]),
        ("chorus_compressor_fp16", _P, []),
        ("chorus_compressor_create", c.c_int, [c.c_char_p, sz, c.POINTER(_P)]),
        ("chorus_compressor_set_cols", c.c_int, [_P, c.c_char_p, sz]),
        ("chorus_compressor_residual", c.c_int, [_P, c.c_char_p, c.POINTER(c.c_float), sz]),
        ("chorus_engine_get_stats", c.c_int, [_P, c.POINTER(_Stats)]),
        ("chorus_engine_bucket_plan", c.c_int,
         [c.POINTER(sz), c.c_int, sz, sz, c.POINTER(c.c_int), c.POINTER(c.c_int)]),
    ]
    for name, res, args in table:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args


_protos()
_check_layout()

# Engine compressors by the name a Python compressor gives (its engine_compressor).
COMPRESSORS = {"fp16": lib.chorus_compressor_fp16()}
# Compressors with error feedback made by new_compressor: (pointer -> names whose matrix
# view was set). They live as long as the process: an engine may still use one after the
# Python object that asked for it is gone.
_SHAPED = {}


def new_compressor(spec):
    """A libchorus compressor with error feedback from a spec ("topk:0.01", "powersgd:2");
    raises ValueError with the library's message for a spec it does not know."""
    p = _P()
    r = lib.chorus_compressor_create(spec.encode(), 0, ctypes.byref(p))
    if r != 0 or not p:
        raise ValueError("chorus compression: " + _dec(lib.chorus_last_error(None)))
    _SHAPED[p.value] = set()
    return p.value


def compressor_residual(ptr, name, count):
    """The residual (what was not sent yet) of a tensor, count float32 values, as a list."""
    out = (ctypes.c_float * count)()
    r = lib.chorus_compressor_residual(ptr, name.encode(), out, count)
    if r != 0:
        raise ValueError("chorus compression: " + _dec(lib.chorus_last_error(None)))
    return list(out)


def _shape_hint(comp, name, shape):
    """PowerSGD views a tensor of shape (out, ...) as out rows: tell the compressor once."""
    names = _SHAPED.get(comp)
    if names is None or name in names or shape is None or len(shape) < 2:
        return
    names.add(name)
    cols = 1
    for d in shape[1:]:
        cols *= int(d)
    lib.chorus_compressor_set_cols(comp, name.encode(), cols)


def _dec(b):
    return b.decode("utf-8", "replace") if b else ""


def bucket_plan(nbytes, bucket_bytes, first_bucket_bytes=None):
    """chorus_engine_bucket_plan: for items of nbytes (registration order), the bucket of each
    (-1: none) and the number of buckets; bucket 0 holds the last items."""
    n = len(nbytes)
    first = bucket_bytes if first_bucket_bytes is None else first_bucket_bytes
    arr = (ctypes.c_size_t * max(n, 1))(*[int(b) for b in nbytes])
    out = (ctypes.c_int * max(n, 1))()
    nb = ctypes.c_int()
    check(lib.chorus_engine_bucket_plan(arr, n, int(bucket_bytes), int(first), out,
                                        ctypes.byref(nb)), None, "chorus bucket plan")
    return [out[i] for i in range(n)], nb.value


class HostBuf:
    """A temporary host buffer of nbytes (numpy-owned)."""

    def __init__(self, nbytes):
        self.a = np.empty(max(int(nbytes), 1), dtype=np.uint8)
        self.ptr = self.a.ctypes.data


def shape_str(shape):
    return "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"


# ---- operations in flight ------------------------------------------------------------------


class Op:
    """One operation of the front end on an engine: the C handles it enqueued, the buffers
    they use (kept alive), stages to run once the handles end (a stage may enqueue more), and
    functions mapping the result. wait() and poll() are what chorus._handles expects."""

    def __init__(self, engine, what, name, shape=None):
        self.engine, self.what, self.name, self.shape = engine, what, name, shape
        self.handles, self.keep, self.stages, self.posts = [], [], [], []
        self.result = None
        self.error = None  # a failure seen by poll(), raised by wait()
        self.held = False  # the engine holds what this op enqueues (hold/unhold)
        self.tl = _timeline.begin(what, name)

    def hold(self):
        """What this op enqueues next reaches the engine thread together, at unhold()
        (chorus_engine_hold): one negotiation cycle and one fusion for all of it."""
        self.engine.check_call(lib.chorus_engine_hold, "hold")
        self.held = True

    def unhold(self):
        """Hands what was enqueued since hold() to the engine thread (idempotent)."""
        if self.held:
            self.held = False
            self.engine.check_call(lib.chorus_engine_unhold, "unhold")

    def enqueue(self, fn, *args, take=None):
        """Calls chorus_engine_<fn>(engine, *args, &handle) and keeps the handle; take(handle),
        when given, runs once it has ended successfully, before it is released (to take an
        allgather's output). On a refusal the handles already enqueued are waited for (their
        buffers must outlive them) and the error is raised."""
        h = _P()
        r = fn(self.engine.ptr, *args, ctypes.byref(h))
        if r != 0:
            self.unhold()  # what is held must run before it can be waited for
            self._drain()
            _timeline.end(self.tl)
            self.tl = None
            self.engine.fail(r, "chorus %s" % self.what)
        self.handles.append((h.value, take))
        return h.value

    def then(self, stage):
        """stage() runs once every handle enqueued so far has ended successfully."""
        self.stages.append(stage)
        return self

    def map(self, fn):
        """The result becomes fn(result) once everything has ended."""
        self.posts.append(fn)
        return self

    def _drain(self):
        """Waits for and releases every handle; returns the first failure (code, message)."""
        err = None
        for h, _ in self.handles:
            r = lib.chorus_engine_wait(h)
            if r != 0 and err is None:
                err = (r, _dec(lib.chorus_engine_handle_error(h)))
        try:
            if err is None:
                for h, take in self.handles:
                    if take is not None:
                        take(h)
        finally:
            for h, _ in self.handles:
                lib.chorus_engine_release(h)
            self.handles = []
        return err

    def _raise(self, err):
        code, detail = err
        detail = detail or _dec(lib.chorus_engine_last_error(self.engine.ptr)) or None
        if (code == _MISMATCH and detail and ("count" in detail or "shape" in detail)
                and self.shape is not None):
            detail += " (different shapes: this rank has %s)" % shape_str(self.shape)
        raise_for(code, None, "chorus %s" % self.what, detail)

    def _step(self, block):
        """Runs stages while their handles have ended; True once everything has."""
        while True:
            if not block and not all(lib.chorus_engine_poll(h) for h, _ in self.handles):
                return False
            err = self._drain()
            if err is not None:
                self.stages = []
                self._raise(err)
            if not self.stages:
                return True
            self.stages.pop(0)()

    def poll(self):
        if self.error is not None:
            return True
        try:
            return self._step(False)
        except BaseException as e:  # noqa: B902 - raised by wait()
            self.error = e
            return True

    def wait(self):
        try:
            if self.error is not None:
                raise self.error
            self._step(True)
            for f in self.posts:
                self.result = f(self.result)
            self.posts = []
            return self.result
        finally:
            self.keep = []
            _timeline.end(self.tl)
            self.tl = None


# ---- the engine of one communicator ---------------------------------------------------------


class Engine:
    """An engine over one communicator (a collective to start: every rank of comm)."""

    def __init__(self, comm_ptr, size, cycle_time_ms=None):
        e = _P()
        opts = EngineOpts()
        lib.chorus_engine_opts_init(ctypes.byref(opts))
        if cycle_time_ms is not None:
            opts.cycle_time_ms = float(cycle_time_ms)
        check(lib.chorus_engine_start(comm_ptr, ctypes.byref(opts), ctypes.byref(e)), comm_ptr,
              "engine start")
        self.ptr = e.value
        self.size = size
        self._names = itertools.count()
        self._prefix = "noname."
        self._joins = 0

    def auto_name(self, name):
        """The engine keys ops by name. Unnamed ops share one counter per engine whatever
        their kind, so ranks that issue different collectives at the same point collide on a
        name and get a mismatch error (kind differs) instead of waiting for each other. Ranks
        that joined issued fewer ops: every join starts the count again under a new prefix."""
        return name if name else "%s%d" % (self._prefix, next(self._names))

    def close(self):
        """Stops the engine. Returns (code, message) of the error that had stopped it (a lost
        peer, say), or None."""
        if self.ptr:
            p, self.ptr = self.ptr, None
            msg = _dec(lib.chorus_engine_last_error(p))
            r = lib.chorus_engine_shutdown(p)
            return (r, msg) if r != 0 else None
        return None

    def check_call(self, fn, what):
        r = fn(self.ptr)
        if r != 0:
            self.fail(r, "chorus " + what)

    def fail(self, code, what, detail=None):
        raise_for(code, None, what, detail or _dec(lib.chorus_engine_last_error(self.ptr)) or None)

    def stats(self):
        st = _Stats()
        r = lib.chorus_engine_get_stats(self.ptr, ctypes.byref(st))
        if r != 0:
            self.fail(r, "chorus engine_stats")
        return {name: getattr(st, name) for name, _ in _Stats._fields_}

    def join(self):
        last = ctypes.c_int(-1)
        r = lib.chorus_engine_join(self.ptr, ctypes.byref(last))
        self._joins += 1
        self._prefix = "noname.j%d." % self._joins
        self._names = itertools.count()
        if r != 0:
            self.fail(r, "chorus join")
        return last.value

    def barrier(self):
        tl = _timeline.begin("barrier", None)
        try:
            r = lib.chorus_engine_barrier(self.ptr)
            if r != 0:
                self.fail(r, "chorus barrier")
        finally:
            _timeline.end(tl)


def shape_tag(shape):
    """A non-zero 64-bit tag of a shape: the engine compares it across ranks, so tensors
    with equal element counts but different shapes ([17, 1311] and [17, 23, 57]) are a
    mismatch."""
    return _shape_tag(tuple(int(d) for d in shape))


@functools.lru_cache(maxsize=4096)
def _shape_tag(shape):
    """shape_tag of a tuple of ints (a training step asks for the same few every time)."""
    return (len(shape) + 1) << 32 | zlib.crc32(repr(shape).encode())


def _opts(op, pre=1.0, post=1.0, compressor=None, shape=None):
    o = _tensor_opts(float(pre), float(post), compressor, shape)
    op.keep.append(o)
    return ctypes.byref(o)


@functools.lru_cache(maxsize=4096)
def _tensor_opts(pre, post, compressor, shape):
    """The TensorOpts of these values, made once (a training step asks for the same ones every
    time; the engine reads them during the enqueue call only, and nothing changes them)."""
    o = TensorOpts()
    if hasattr(o, "size"):
        o.size, o.version = ctypes.sizeof(TensorOpts), OPTS_VERSION
    o.prescale, o.postscale = pre, post
    o.compressor = compressor
    o.no_compression = 0 if compressor else 1
    if shape is not None:
        o.shape_tag = _shape_tag(shape)  # a Buf's shape: already a tuple of ints
    return o


# ---- collectives, written once for every front end -----------------------------------------


class Buf:
    """A CPU contiguous array seen as memory: address, elements, chorus dtype (-1: none),
    shape, element size."""

    __slots__ = ("ptr", "numel", "code", "shape", "isz")

    def __init__(self, ptr, numel, code, shape, isz):
        self.ptr, self.numel, self.code = ptr, numel, code
        self.shape, self.isz = tuple(map(int, shape)), isz

    def row_elems(self):
        n = 1
        for d in self.shape[1:]:
            n *= d
        return n

    def wire(self):
        """(dtype code, elements per row, element size) as it travels: its own dtype, or bytes
        for a dtype libchorus lacks (data-moving ops only)."""
        if self.code >= 0:
            return self.code, self.row_elems(), self.isz
        return DTYPE["uint8"], self.row_elems() * self.isz, 1


def c_op(op):
    """chorus_op for a front end's op (Average is CHORUS_AVG)."""
    return OP["avg"] if getattr(op, "is_average", False) else int(op)


def allreduce(A, E, pairs, op, pre=1.0, post=1.0, name=None, what="allreduce", compressor=None):
    """Reduces every (src, dst) pair over the ranks (dst may be src: in place), as one
    operation: a single pair is named name, several name.0, name.1, ... Returns the Op; its
    result is None."""
    name = E.auto_name(name)
    first = A.buf(pairs[0][0]) if pairs else None
    o = Op(E, what, name, first.shape if first is not None else None)
    cop = c_op(op)
    int_scaled = []
    if len(pairs) > 1:
        o.hold()  # negotiated and fused together, not one tensor per cycle
    try:
        _enqueue_allreduces(A, o, pairs, name, cop, pre, post, compressor, int_scaled)
    finally:
        o.unhold()
    if int_scaled:
        def rescale(res):
            for d in int_scaled:
                A.scale_(d, post)
            return res
        o.map(rescale)
    return o


def _enqueue_allreduces(A, o, pairs, name, cop, pre, post, compressor, int_scaled):
    for i, (src, dst) in enumerate(pairs):
        b = A.buf(src)
        p1, p2 = pre, post
        if b.code not in FLOAT_CODES and (pre != 1.0 or post != 1.0):
            if dst is not src:
                A.copy_(dst, src)
                src = dst
                b = A.buf(src)
            A.scale_(src, pre)
            int_scaled.append(dst)
            p1 = p2 = 1.0
        d = b if dst is src else A.buf(dst)
        comp = compressor if b.code in FLOAT_CODES else None
        o.keep.append((src, dst))
        tname = name if len(pairs) == 1 else "%s.%d" % (name, i)
        if comp:
            _shape_hint(comp, tname, b.shape)
        o.enqueue(lib.chorus_engine_allreduce, tname.encode(), b.ptr, d.ptr, b.numel, b.code, cop,
                  _opts(o, p1, p2, comp, b.shape))


def broadcast(A, E, x, root, size, name=None, what="broadcast"):
    """x (on every rank) becomes root's x, in place. Returns the Op (result x)."""
    if not 0 <= int(root) < size:
        raise ValueError("chorus %s: root_rank %d is out of range for %d rank%s"
                         % (what, root, size, "" if size == 1 else "s"))
    b = A.buf(x)
    name = E.auto_name(name)
    o = Op(E, what, name, b.shape)
    code, row, _ = b.wire()
    o.keep.append(x)
    count = row * b.shape[0] if b.shape else row
    o.enqueue(lib.chorus_engine_broadcast, name.encode(), b.ptr, count, code, int(root),
              _opts(o, shape=b.shape))
    o.result = x
    return o


def take_rows(h, dst_ptr, row_bytes):
    """Copies a finished allgather's output into dst_ptr; returns the rows."""
    rows = ctypes.c_size_t()
    buf = lib.chorus_engine_take_output(h, ctypes.byref(rows))
    if buf:
        try:
            ctypes.memmove(dst_ptr, buf, rows.value * row_bytes)
        finally:
            _libc.free(buf)
    return rows.value


def allgather(A, E, xs, name=None, what="allgather"):
    """Concatenation along dim 0 of every rank's x (dim 0 may differ), for each x of xs
    (named name, or name.0, name.1, ... for several). The Op's result is the list."""
    for x in xs:
        if not A.buf(x).shape:
            raise ValueError("chorus %s: the tensor needs at least one dimension (got a "
                             "scalar); reshape it to (1,)" % what)
    name = E.auto_name(name)
    o = Op(E, what, name)
    o.result = [None] * len(xs)
    for i, x in enumerate(xs):
        b = A.buf(x)
        code, row, esz = b.wire()

        def take(h, i=i, x=x, b=b, row=row, esz=esz):
            rows = lib.chorus_engine_output_rows
            total = sum(rows(h, r) for r in range(E.size))
            out = A.empty((total,) + b.shape[1:], x)
            take_rows(h, A.buf(out).ptr, row * esz)
            o.result[i] = out
        o.keep.append(x)
        o.enqueue(lib.chorus_engine_allgather,
                  (name if len(xs) == 1 else "%s.%d" % (name, i)).encode(), b.ptr, b.shape[0],
                  row, code, None, take=take)
    return o


def alltoall(A, E, x, splits, size, rank, name=None, what="alltoall"):
    """Sends splits[j] rows of x (in order) to rank j. The Op's result is (received rows in
    rank order, list of rows received from each rank)."""
    b = A.buf(x)
    n, me = size, rank
    if not b.shape:
        raise ValueError("chorus %s: the tensor needs at least one dimension" % what)
    d0 = b.shape[0]
    if splits is None:
        # Equal parts of this rank's rows (as Horovod): dim 0 may differ from rank to rank, so
        # the counts are exchanged as for explicit splits.
        if d0 % n:
            raise ValueError("chorus %s: dim 0 (%d) is not divisible by the number of ranks "
                             "(%d); pass splits=" % (what, d0, n))
        splits = [d0 // n] * n
    splits = [int(s) for s in splits]
    if len(splits) != n or any(s < 0 for s in splits) or sum(splits) != d0:
        raise ValueError("chorus %s: splits %s must be %d non-negative row counts summing to "
                         "dim 0 (%d)" % (what, splits, n, d0))
    name = E.auto_name(name)
    code, row, esz = b.wire()
    rb = row * esz
    o = Op(E, what, name, b.shape)
    o.keep.append(x)
    mine = np.asarray(splits, dtype=np.int64)
    o.keep.append(mine)
    mat = np.zeros((n, n), dtype=np.int64)
    o.enqueue(lib.chorus_engine_allgather, (name + ".splits").encode(), mine.ctypes.data, 1, n,
              DTYPE["int64"], None, take=lambda h: take_rows(h, mat.ctypes.data, n * 8))

    def exchange():
        recv = [int(mat[j, me]) for j in range(n)]
        out = A.empty((sum(recv),) + b.shape[1:], x)
        o.keep.append(out)
        o.result = (out, recv)
        m = int(mat.max())
        if rb == 0 or m == 0:
            return
        blk = m * rb
        sbuf, rbuf = HostBuf(blk * n), HostBuf(blk * n)
        o.keep.extend([sbuf, rbuf])
        off = 0
        for j in range(n):
            ctypes.memmove(sbuf.ptr + j * blk, b.ptr + off, splits[j] * rb)
            off += splits[j] * rb
        o.enqueue(lib.chorus_engine_alltoall, name.encode(), sbuf.ptr, rbuf.ptr, n * m * row,
                  code, None)

        def unpack():
            dst, off = A.buf(out).ptr, 0
            for j in range(n):
                ctypes.memmove(dst + off, rbuf.ptr + j * blk, recv[j] * rb)
                off += recv[j] * rb
        o.then(unpack)
    o.then(exchange)
    return o


def rs_rows(dim0, size, rank):
    """Rows of a reducescatter output on `rank`: the first dim0 % size ranks get one extra."""
    return dim0 // size + (1 if rank < dim0 % size else 0)


def reducescatter(A, E, x, op, size, rank, pre=1.0, post=1.0, name=None, what="reducescatter"):
    """Reduces x over the ranks and gives rank r its share of dim 0: dim0 // size rows, one
    more for the first dim0 % size ranks (as Horovod). The Op's result is the share."""
    b = A.buf(x)
    if not b.shape:
        raise ValueError("chorus %s: the tensor needs at least one dimension" % what)
    d0, row = b.shape[0], b.row_elems()
    rows = [rs_rows(d0, size, r) for r in range(size)]
    start = sum(rows[:rank])
    out = A.empty((rows[rank],) + b.shape[1:], x)
    name = E.auto_name(name)
    o = Op(E, what, name, b.shape)
    cop = c_op(op)
    src, p1, p2 = x, pre, post
    if b.code not in FLOAT_CODES and (pre != 1.0 or post != 1.0):
        src = A.empty(b.shape, x)
        A.copy_(src, x)
        A.scale_(src, pre)
        p1 = p2 = 1.0
        o.map(lambda res: (A.scale_(out, post), res)[1])
    s = A.buf(src)
    o.keep.extend([x, src, out])
    o.result = out
    if d0 % size == 0:
        # the shape is compared across ranks, not only the element count (as Horovod)
        o.enqueue(lib.chorus_engine_reduce_scatter, name.encode(), s.ptr, A.buf(out).ptr,
                  d0 * row, b.code, cop, _opts(o, p1, p2, shape=b.shape))
        return o
    # Uneven rows: the engine splits elements, not rows; reduce the whole tensor (its exact
    # size is compared across ranks) and keep this rank's rows.
    full = A.empty(b.shape, x)
    o.keep.append(full)
    o.enqueue(lib.chorus_engine_allreduce, name.encode(), s.ptr, A.buf(full).ptr, d0 * row,
              b.code, cop, _opts(o, p1, p2, shape=b.shape))

    def keep_mine():
        rb = row * b.isz
        if rows[rank] and rb:
            ctypes.memmove(A.buf(out).ptr, A.buf(full).ptr + start * rb, rows[rank] * rb)
    o.then(keep_mine)
    return o


def allgather_i64(E, values, name):
    """Every rank's short list of int64 (the same length everywhere), as a (size, len) array;
    blocking."""
    mine = np.ascontiguousarray(values, dtype=np.int64)
    out = np.zeros((E.size, mine.size), dtype=np.int64)
    o = Op(E, "allgather", name)
    o.keep.extend([mine, out])
    o.enqueue(lib.chorus_engine_allgather, name.encode(), mine.ctypes.data, 1, mine.size,
              DTYPE["int64"], None, take=lambda h: take_rows(h, out.ctypes.data, mine.nbytes))
    o.wait()
    return out
