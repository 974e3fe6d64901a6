"""The parameter server from Python: libchorus's include/chorus/ps.h over ctypes, on torch
tensors or numpy arrays (float32, contiguous, on the CPU).

    import chorus.ps
    ps = chorus.ps.ParameterServer(mode="async", servers=1)   # every rank of the job
    for i, p in enumerate(model.parameters()):
        ps.register(i, p.data)                                 # every rank, same order
    if ps.is_server:
        ps.serve()                                             # until every worker leaves
    else:
        ... loss.backward()
        hs = [ps.push(i, p.grad, lr) for i, p in enumerate(model.parameters())]
        hs += [ps.pull(i, p.data) for i, p in enumerate(model.parameters())]
        for h in hs: h.wait()
    ps.close()

The first ``servers`` ranks of the job serve; the others work. Modes: "sync" (each server
applies one summed gradient per round from every worker), "async" (each push at once), "ssp"
(a pull waits while its worker is more than ``staleness`` pushes ahead of the slowest).
Failures raise the exceptions of chorus (ChorusInvalidArgument, ChorusMismatchError,
ChorusPeerLostError...) with libchorus's message.
"""

import ctypes

from . import _core
from ._lib import DTYPE, ChorusInvalidArgument, lib, raise_for

__all__ = ["ParameterServer", "Handle"]

_c = ctypes
_P = _c.c_void_p
_MODES = {"sync": 0, "async": 1, "ssp": 2}
_OPTIMS = {"sgd": 0, "adamw": 1}
_MAX_WORKERS = 64


class _Opts(_c.Structure):
    _fields_ = [("size", _c.c_size_t), ("version", _c.c_int), ("nservers", _c.c_int),
                ("mode", _c.c_int), ("staleness", _c.c_int), ("optim", _c.c_int),
                ("momentum", _c.c_float), ("nesterov", _c.c_int),
                ("weight_decay", _c.c_float), ("beta1", _c.c_float), ("beta2", _c.c_float),
                ("eps", _c.c_float), ("grad_dtype", _c.c_int), ("clip_norm", _c.c_float)]


class _Stats(_c.Structure):
    _fields_ = [(n, _c.c_uint64) for n in (
        "pushes", "pulls", "bytes_pushed", "bytes_pulled", "updates", "pulls_delayed",
        "max_staleness", "server_bytes")] + [
        ("nworkers", _c.c_int), ("workers_gone", _c.c_int), ("workers_lost", _c.c_int),
        ("worker_bytes_pushed", _c.c_uint64 * _MAX_WORKERS),
        ("worker_bytes_pulled", _c.c_uint64 * _MAX_WORKERS),
        ("clipped", _c.c_uint64), ("last_norm", _c.c_double)]


def _proto(name, res, *args):
    f = getattr(lib, name)
    f.restype = res
    f.argtypes = list(args)
    return f


_proto("chorus_ps_opts_default", None, _c.POINTER(_Opts))
_proto("chorus_ps_create", _c.c_int, _P, _c.POINTER(_Opts), _c.POINTER(_P))
_proto("chorus_ps_register", _c.c_int, _P, _c.c_int, _c.c_size_t, _P)
_proto("chorus_ps_is_server", _c.c_int, _P)
_proto("chorus_ps_worker_index", _c.c_int, _P)
_proto("chorus_ps_num_workers", _c.c_int, _P)
_proto("chorus_ps_num_servers", _c.c_int, _P)
_proto("chorus_ps_push", _c.c_int, _P, _c.c_int, _P, _c.c_size_t, _c.c_float, _c.POINTER(_P))
_proto("chorus_ps_pull", _c.c_int, _P, _c.c_int, _P, _c.c_size_t, _c.POINTER(_P))
_proto("chorus_ps_wait", _c.c_int, _P)
_proto("chorus_ps_serve", _c.c_int, _P)
_proto("chorus_ps_leave", _c.c_int, _P)
_proto("chorus_ps_finalize", _c.c_int, _P)
_proto("chorus_ps_get_stats", None, _P, _c.POINTER(_Stats))
_proto("chorus_ps_last_error", _c.c_char_p, _P)


def _buffer(x, what):
    """(address, element count) of a float32, contiguous CPU torch tensor or numpy array."""
    if hasattr(x, "data_ptr"):  # torch
        import torch
        if x.dtype != torch.float32 or not x.is_contiguous() or x.device.type != "cpu":
            raise ChorusInvalidArgument(
                "%s: a contiguous float32 CPU tensor is needed, not %s %s on %s" % (
                    what, x.dtype, "contiguous" if x.is_contiguous() else "strided", x.device))
        return x.data_ptr(), x.numel()
    import numpy as np
    if not isinstance(x, np.ndarray) or x.dtype != np.float32 or not x.flags.c_contiguous:
        raise ChorusInvalidArgument(
            "%s: a contiguous float32 numpy array or torch tensor is needed, not %r" % (
                what, getattr(x, "dtype", type(x))))
    return x.ctypes.data, x.size


class Handle:
    """A push or pull in flight; wait() completes it (the buffer must live until then)."""

    def __init__(self, ps, ptr, buf):
        self._ps, self._ptr, self._buf = ps, ptr, buf

    def wait(self):
        if self._ptr is not None:
            p, self._ptr = self._ptr, None
            self._ps._check(lib.chorus_ps_wait(p), "wait")
            self._buf = None


class ParameterServer:
    """This rank's side of a parameter server over the job's world communicator (chorus.init()
    is called when it has not been). Every argument must be the same on every rank."""

    def __init__(self, mode="sync", servers=1, staleness=2, optimizer="sgd", momentum=0.9,
                 nesterov=True, weight_decay=0.0, betas=(0.9, 0.999), eps=1e-8,
                 grad_dtype="float32", clip_norm=0.0):
        if mode not in _MODES:
            raise ChorusInvalidArgument("chorus.ps: mode must be sync, async or ssp, not %r"
                                        % (mode,))
        if optimizer not in _OPTIMS:
            raise ChorusInvalidArgument("chorus.ps: optimizer must be sgd or adamw, not %r"
                                        % (optimizer,))
        if grad_dtype not in DTYPE:
            raise ChorusInvalidArgument("chorus.ps: unknown grad_dtype %r" % (grad_dtype,))
        if not _core.is_initialized():
            _core.init()
        o = _Opts()
        lib.chorus_ps_opts_default(_c.byref(o))
        o.nservers, o.mode, o.staleness = servers, _MODES[mode], staleness
        o.optim, o.momentum, o.nesterov = _OPTIMS[optimizer], momentum, int(bool(nesterov))
        o.weight_decay, o.beta1, o.beta2, o.eps = weight_decay, betas[0], betas[1], eps
        o.grad_dtype = DTYPE[grad_dtype]
        o.clip_norm = clip_norm  # sync: each round's summed gradient cut to this norm (0: off)
        out = _P()
        rc = lib.chorus_ps_create(_core.S.world.ptr, _c.byref(o), _c.byref(out))
        if rc != 0:
            raise_for(rc, what="chorus.ps", detail=_text(lib.chorus_ps_last_error(None)))
        self._ptr = out.value
        self.mode = mode
        self.is_server = bool(lib.chorus_ps_is_server(self._ptr))
        self.worker_index = lib.chorus_ps_worker_index(self._ptr)
        self.num_workers = lib.chorus_ps_num_workers(self._ptr)
        self.num_servers = lib.chorus_ps_num_servers(self._ptr)

    def _check(self, rc, what):
        if rc != 0:
            raise_for(rc, what="chorus.ps." + what,
                      detail=_text(lib.chorus_ps_last_error(self._ptr)))

    def register(self, key, init):
        """Collective over the job: key (an int >= 0) holds init's float32 values (the servers'
        starting point)."""
        addr, n = _buffer(init, "chorus.ps.register")
        self._check(lib.chorus_ps_register(self._ptr, key, n, addr), "register")

    def push(self, key, grad, lr):
        """Worker: starts pushing grad for key, applied by the servers with learning rate lr."""
        addr, n = _buffer(grad, "chorus.ps.push")
        h = _P()
        self._check(lib.chorus_ps_push(self._ptr, key, addr, n, float(lr), _c.byref(h)), "push")
        return Handle(self, h.value, grad)

    def pull(self, key, out):
        """Worker: starts pulling key's parameters into out."""
        addr, n = _buffer(out, "chorus.ps.pull")
        h = _P()
        self._check(lib.chorus_ps_pull(self._ptr, key, addr, n, _c.byref(h)), "pull")
        return Handle(self, h.value, out)

    def serve(self):
        """Server: answers the workers until every one has left."""
        self._check(lib.chorus_ps_serve(self._ptr), "serve")

    def leave(self):
        """Worker: done; rounds and the staleness bound go on without it."""
        self._check(lib.chorus_ps_leave(self._ptr), "leave")

    def stats(self):
        """This rank's counters as a dict (servers: per worker traffic too)."""
        s = _Stats()
        lib.chorus_ps_get_stats(self._ptr, _c.byref(s))
        d = {f: getattr(s, f) for f, _ in _Stats._fields_[:11]}
        d["worker_bytes_pushed"] = list(s.worker_bytes_pushed[:s.nworkers])
        d["worker_bytes_pulled"] = list(s.worker_bytes_pulled[:s.nworkers])
        d["clipped"], d["last_norm"] = s.clipped, s.last_norm
        return d

    def close(self):
        """Leaves (workers) and frees this side of the server; the world stays."""
        if self._ptr:
            p, self._ptr = self._ptr, None
            rc = lib.chorus_ps_finalize(p)
            if rc != 0:
                raise_for(rc, what="chorus.ps.close", detail=_text(lib.chorus_ps_last_error(None)))


def _text(b):
    return b.decode("utf-8", "replace") if b else ""
