"""chorus.torch over the training runtime (include/chorus/engine.h), when libchorus has it.

init() starts one engine over the world communicator (a collective) unless CHORUS_PY_ENGINE=0
or the library was built without the engine. Allreduce, broadcast, allgather, join and
barrier on the global process set then go through it: the op is enqueued by name from the
calling thread (backward hooks included), the engine thread negotiates which names are ready
on every rank, fuses ready allreduces and runs them; synchronize() waits on the C handle with
the GIL released. Other ops and other process sets use the ordered executor (chorus._core)
on the world communicator, which the engine leaves free.
"""

import ctypes
import os

import torch

from .. import _core, _timeline
from .._lib import lib, raise_for, check, DTYPE

_P = ctypes.c_void_p
_libc = ctypes.CDLL(None)
_libc.free.argtypes = [_P]
_libc.free.restype = None


class _Stats(ctypes.Structure):
    _fields_ = [("cycles", ctypes.c_uint64), ("coord_rounds", ctypes.c_uint64),
                ("tensors", ctypes.c_uint64), ("cache_hits", ctypes.c_uint64),
                ("fused_batches", ctypes.c_uint64), ("bytes_reduced", ctypes.c_uint64),
                ("thread_cpu_s", ctypes.c_double)]


class _EngineOpts(ctypes.Structure):
    """chorus_engine_opts (include/chorus/engine.h)."""
    _fields_ = [("size", ctypes.c_size_t), ("version", ctypes.c_uint),
                ("cycle_time_ms", ctypes.c_double), ("fusion_threshold", ctypes.c_size_t),
                ("cache_capacity", ctypes.c_int), ("stall_warn_s", ctypes.c_double),
                ("stall_shutdown_s", ctypes.c_double), ("idle_ms", ctypes.c_double),
                ("timeline", ctypes.c_char_p), ("compressor", ctypes.c_void_p)]


class _TensorOpts(ctypes.Structure):
    """chorus_engine_tensor_opts (include/chorus/engine.h)."""
    _fields_ = [("size", ctypes.c_size_t), ("version", ctypes.c_uint),
                ("prescale", ctypes.c_double), ("postscale", ctypes.c_double),
                ("compressor", _P), ("no_compression", ctypes.c_int),
                ("callback", _P), ("callback_arg", _P)]


# CHORUS_ENGINE_OPTS_VERSION: the library refuses option structs of another size or version.
_OPTS_VERSION = 2


def available():
    return hasattr(lib, "chorus_engine_start") and hasattr(lib, "chorus_engine_allreduce")


def _protos():
    c = ctypes
    pp = c.POINTER(_P)
    sz = c.c_size_t
    topts = c.POINTER(_TensorOpts)
    table = [
        ("chorus_engine_opts_init", None, [c.POINTER(_EngineOpts)]),
        ("chorus_engine_opts_size", sz, []),
        ("chorus_engine_tensor_opts_size", sz, []),
        ("chorus_engine_start", c.c_int, [_P, c.POINTER(_EngineOpts), pp]),
        ("chorus_engine_shutdown", c.c_int, [_P]),
        ("chorus_engine_last_error", c.c_char_p, [_P]),
        ("chorus_engine_allreduce", c.c_int,
         [_P, c.c_char_p, _P, _P, sz, c.c_int, c.c_int, topts, pp]),
        ("chorus_engine_broadcast", c.c_int, [_P, c.c_char_p, _P, sz, c.c_int, c.c_int, topts, pp]),
        ("chorus_engine_allgather", c.c_int, [_P, c.c_char_p, _P, sz, sz, c.c_int, topts, pp]),
        ("chorus_engine_wait", c.c_int, [_P]),
        ("chorus_engine_poll", c.c_int, [_P]),
        ("chorus_engine_handle_error", c.c_char_p, [_P]),
        ("chorus_engine_take_output", _P, [_P, c.POINTER(sz)]),
        ("chorus_engine_release", None, [_P]),
        ("chorus_engine_join", c.c_int, [_P, c.POINTER(c.c_int)]),
        ("chorus_engine_barrier", c.c_int, [_P]),
        ("chorus_compressor_fp16", _P, []),
        ("chorus_engine_get_stats", c.c_int, [_P, c.POINTER(_Stats)]),
    ]
    for name, res, args in table:
        f = getattr(lib, name)
        f.restype, f.argtypes = res, args
    for struct, fn in ((_EngineOpts, lib.chorus_engine_opts_size),
                       (_TensorOpts, lib.chorus_engine_tensor_opts_size)):
        if ctypes.sizeof(struct) != fn():
            raise RuntimeError("chorus: %s mirrors %d bytes but libchorus has %d; the Python "
                               "package and the library do not match" %
                               (struct.__name__, ctypes.sizeof(struct), fn()))


def maybe_start():
    """Starts the engine at init() when the library has one and CHORUS_PY_ENGINE allows."""
    if _core.S.engine is not None or not available() or not _core.is_initialized():
        return
    if not _core.env_flag("CHORUS_PY_ENGINE", True):
        return
    _protos()
    w = _core.world()
    e = _P()
    opts = _EngineOpts()
    lib.chorus_engine_opts_init(ctypes.byref(opts))
    # DistributedOptimizer already packs gradients into buckets, so the engine starts a cycle
    # as soon as one is enqueued instead of gathering for a cycle time (measured: 1.66x DDP
    # against 1.43x with 2 ms, bench/ddp_vs_chorus.sh); CHORUS_CYCLE_TIME_MS still overrides.
    if "CHORUS_CYCLE_TIME_MS" not in os.environ:
        opts.cycle_time_ms = 0.0
    check(lib.chorus_engine_start(w.ptr, ctypes.byref(opts), ctypes.byref(e)), w.ptr,
          "engine start")
    _core.set_engine(Engine(e.value, w))


def _dec(b):
    return b.decode("utf-8", "replace") if b else ""


class Engine:
    def __init__(self, ptr, world):
        self.ptr, self.world = ptr, world
        self.fp16 = lib.chorus_compressor_fp16()

    def handles(self, ps):
        return ps is _core.S.global_set

    def close(self):
        if self.ptr:
            p, self.ptr = self.ptr, None
            lib.chorus_engine_shutdown(p)

    def _fail(self, code, what, handle=None):
        detail = _dec(lib.chorus_engine_handle_error(handle)) if handle else ""
        if not detail:
            detail = _dec(lib.chorus_engine_last_error(self.ptr))
        raise_for(code, None, what, detail or None)

    def _opts(self, pre=1.0, post=1.0, compressor=None):
        o = _TensorOpts()
        o.size, o.version = ctypes.sizeof(_TensorOpts), _OPTS_VERSION
        o.prescale, o.postscale = float(pre), float(post)
        o.compressor = compressor
        o.no_compression = 0 if compressor else 1
        return o

    def _finish(self, handles, what, keep, sync, finish, name=None):
        """Waits (now when sync, else on synchronize) for the C handles, releases them and
        returns finish(list of handles)."""
        tl = _timeline.begin(what, name)

        def wait():
            err = None
            try:
                for h in handles:
                    r = lib.chorus_engine_wait(h)
                    if r != 0 and err is None:
                        err = (r, h)
                if err is not None:
                    self._fail(err[0], "chorus " + what, err[1])
                return finish(handles)
            finally:
                for h in handles:
                    lib.chorus_engine_release(h)
                handles.clear()
                _timeline.end(tl)

        if sync:
            return wait()

        from . import mpi_ops

        def poll():
            return all(lib.chorus_engine_poll(h) for h in handles)
        return mpi_ops._register(mpi_ops._Pending(wait, poll, keep))

    def _enqueue(self, fn, *args):
        h = _P()
        r = fn(self.ptr, *args, ctypes.byref(h))
        if r != 0:
            self._fail(r, "chorus " + fn.__name__.replace("chorus_engine_", "") + " enqueue")
        return h.value

    def allreduce(self, work, dst, op, pre, post, name, sync, finish, compress=False):
        return self.grouped_allreduce([work], op, pre, post, name, sync,
                                      lambda: finish(), [dst], compress, single=True)

    def grouped_allreduce(self, works, op, pre, post, name, sync, finish, dsts=None,
                          compress=False, single=False):
        from . import mpi_ops
        cop = _core.c_op(op)
        dsts = dsts or works
        handles, keep = [], [works, dsts]
        posts = []
        for i, (w, d) in enumerate(zip(works, dsts)):
            is_float = w.dtype.is_floating_point
            p1, p2 = pre, post
            if not is_float and (pre != 1.0 or post != 1.0):
                # The engine scales floats only; integers are scaled here.
                if w is not d:
                    d.copy_(w)
                    w = d
                mpi_ops.A.scale_(w, pre)
                posts.append((d, post))
                p1 = p2 = 1.0
            opts = self._opts(p1, p2, self.fp16 if compress and is_float else None)
            keep.append(opts)
            nm = name if single else "%s.%d" % (name, i)
            try:
                handles.append(self._enqueue(lib.chorus_engine_allreduce, nm.encode(),
                                             w.data_ptr(), d.data_ptr(), w.numel(),
                                             mpi_ops._CODES[w.dtype], cop, ctypes.byref(opts)))
            except Exception:
                # Ops already enqueued must still end before their buffers go away.
                for h in handles:
                    lib.chorus_engine_wait(h)
                    lib.chorus_engine_release(h)
                raise

        def done(_):
            for d, f in posts:
                mpi_ops.A.scale_(d, f)
            return finish()
        return self._finish(handles, "allreduce", keep, sync, done, name)

    def broadcast(self, work, root, name, sync, finish):
        nbytes = work.numel() * work.element_size()
        h = self._enqueue(lib.chorus_engine_broadcast, name.encode(), work.data_ptr(), nbytes,
                          DTYPE["uint8"], root, None)
        return self._finish([h], "broadcast", [work], sync, lambda _: finish(), name)

    def allgather(self, host, name, sync, post):
        from . import mpi_ops
        code = mpi_ops._CODES.get(host.dtype)
        row = 1
        for d in host.shape[1:]:
            row *= int(d)
        isz = host.element_size()
        if code is None:  # any other dtype travels as bytes
            code, row_count, esz = DTYPE["uint8"], row * isz, 1
        else:
            row_count, esz = row, isz
        h = self._enqueue(lib.chorus_engine_allgather, name.encode(), host.data_ptr(),
                          host.shape[0], row_count, code, None)

        def finish(handles):
            rows = ctypes.c_size_t()
            buf = lib.chorus_engine_take_output(handles[0], ctypes.byref(rows))
            out = torch.empty((rows.value,) + tuple(host.shape[1:]), dtype=host.dtype)
            if buf:
                try:
                    ctypes.memmove(out.data_ptr(), buf, rows.value * row_count * esz)
                finally:
                    _libc.free(buf)
            return post(out)
        return self._finish([h], "allgather", [host], sync, finish, name)

    def stats(self):
        st = _Stats()
        r = lib.chorus_engine_get_stats(self.ptr, ctypes.byref(st))
        if r != 0:
            self._fail(r, "chorus engine_stats")
        return {name: getattr(st, name) for name, _ in _Stats._fields_}

    def join(self):
        last = ctypes.c_int(-1)
        r = lib.chorus_engine_join(self.ptr, ctypes.byref(last))
        if r != 0:
            self._fail(r, "chorus join")
        return last.value

    def barrier(self):
        r = lib.chorus_engine_barrier(self.ptr)
        if r != 0:
            self._fail(r, "chorus barrier")
