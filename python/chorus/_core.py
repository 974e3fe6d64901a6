"""The state the Python front ends share: the world communicator, process sets, the ordered
executor that runs collectives, and collectives on raw buffers with a cross-rank check of
their arguments.

Every collective of a rank runs in the order it was issued, one at a time per process: a
blocking call waits for the asynchronous calls issued before it, then runs on the calling
thread; asynchronous calls run on one background thread. So every rank issues the same
sequence of C calls on a communicator, which is what libchorus requires, and a communicator
is never used by two threads at once.

Before moving data, each collective exchanges a small record of what every rank is about to
do (which collective, dtype, shape, op, root, name). If the ranks disagree, every rank raises
ChorusMismatchError naming the ranks and what each passed, and the communicator stays usable;
nothing is summed into garbage and nobody hangs.
"""

import atexit
import collections
import ctypes
import os
import socket
import threading
import zlib

import numpy as np

from . import _lib
from ._lib import lib, check, ChorusMismatchError

# ---- dtypes ------------------------------------------------------------------------------

# Python-level dtype names, in a fixed order shared by every rank (the index travels in the
# check record). The first eight are libchorus dtypes; the rest are converted by front ends.
DTYPE_NAMES = ["int8", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64",
               "int16", "bool", "complex64", "complex128", "other"]
FLOAT_CODES = {_lib.DTYPE[n] for n in ("float16", "bfloat16", "float32", "float64")}

# ---- ops (horovod names) ----------------------------------------------------------------


class _Op(int):
    """A reduction: chorus_op value with a Horovod-style name."""

    def __new__(cls, value, name):
        o = int.__new__(cls, value)
        o._name = name
        return o

    def __repr__(self):
        return self._name

    __str__ = __repr__


Average = _Op(100, "Average")  # sum then divide by the size (float), as horovod.Average
Sum = _Op(_lib.OP["sum"], "Sum")
Adasum = _Op(101, "Adasum")
Min = _Op(_lib.OP["min"], "Min")
Max = _Op(_lib.OP["max"], "Max")
Product = _Op(_lib.OP["prod"], "Product")
_OPS_BY_NAME = {"average": Average, "avg": Average, "mean": Average, "sum": Sum, "min": Min,
                "max": Max, "product": Product, "prod": Product, "adasum": Adasum}


def as_op(op, average=None):
    """Normalises op (an _Op, its int, or a name) and horovod's old average= flag."""
    if average is not None:
        if op is not None:
            raise ValueError("chorus: pass either op= or the deprecated average=, not both")
        return Average if average else Sum
    if op is None:
        return Average
    if isinstance(op, _Op):
        o = op
    elif isinstance(op, str) and op.lower() in _OPS_BY_NAME:
        o = _OPS_BY_NAME[op.lower()]
    else:
        by_val = {int(x): x for x in (Average, Sum, Min, Max, Product, Adasum)}
        if isinstance(op, int) and int(op) in by_val:
            o = by_val[int(op)]
        else:
            raise ValueError("chorus: unknown reduction op %r (use Average, Sum, Min, Max or "
                             "Product)" % (op,))
    if o is Adasum:
        raise NotImplementedError(
            "chorus: op=Adasum is not implemented; use op=Average (the default) or op=Sum")
    return o


# ---- communicators -----------------------------------------------------------------------


class Comm:
    """A libchorus communicator (world or split). owned=False: someone else (the elastic
    runtime) finalizes it."""

    def __init__(self, ptr, owned=True):
        self.ptr = ptr
        self.owned = owned
        self.rank = lib.chorus_rank(ptr)
        self.size = lib.chorus_size(ptr)
        self.local_rank = lib.chorus_local_rank(ptr)
        self.local_size = lib.chorus_local_size(ptr)

    def check(self, code, what):
        check(code, self.ptr, what)

    def finalize(self):
        if self.ptr:
            p, self.ptr = self.ptr, None
            if self.owned:
                lib.chorus_finalize(p)

    # Raw collectives: pointers are ints (addresses), counts in elements.
    def allreduce(self, send, recv, count, dt, op):
        self.check(lib.chorus_allreduce(self.ptr, send, recv, count, dt, op), "allreduce")

    def broadcast(self, buf, count, dt, root):
        self.check(lib.chorus_broadcast(self.ptr, buf, count, dt, root), "broadcast")

    def allgather(self, send, recv, count, dt):
        self.check(lib.chorus_allgather(self.ptr, send, recv, count, dt), "allgather")

    def reduce_scatter(self, send, recv, count, dt, op):
        self.check(lib.chorus_reduce_scatter(self.ptr, send, recv, count, dt, op),
                   "reducescatter")

    def alltoall(self, send, recv, count, dt):
        self.check(lib.chorus_alltoall(self.ptr, send, recv, count, dt), "alltoall")

    def barrier(self):
        self.check(lib.chorus_barrier(self.ptr), "barrier")

    def split(self, color, key):
        out = ctypes.c_void_p()
        self.check(lib.chorus_comm_split(self.ptr, color, key, ctypes.byref(out)), "split")
        return Comm(out.value) if out.value else None

    def allgather_i64(self, values):
        """Allgathers a short list of int64 from every rank: returns an (size, len) array."""
        mine = np.ascontiguousarray(values, dtype=np.int64)
        out = np.empty((self.size, mine.size), dtype=np.int64)
        self.allgather(mine.ctypes.data, out.ctypes.data, mine.size, _lib.DTYPE["int64"])
        return out


# ---- the ordered executor -----------------------------------------------------------------


class Handle:
    """The pending result of an asynchronous collective."""

    __slots__ = ("_done", "_result", "_error", "_post")

    def __init__(self, post=None):
        self._done = threading.Event()
        self._result = None
        self._error = None
        self._post = post  # run on the waiting thread once done: f(result) -> result

    def _finish(self, result=None, error=None):
        self._result, self._error = result, error
        self._done.set()

    def done(self):
        return self._done.is_set()

    def wait(self):
        self._done.wait()
        if self._error is not None:
            raise self._error
        if self._post is not None:
            post, self._post = self._post, None
            self._result = post(self._result)
        return self._result


class Executor:
    """Runs collectives one at a time in the order they were issued (see the module text)."""

    def __init__(self):
        self._cv = threading.Condition()
        self._queue = collections.deque()
        self._busy = False
        self._thread = None
        self._stop = False

    def _worker(self):
        while True:
            with self._cv:
                while not self._queue and not self._stop:
                    self._cv.wait()
                if not self._queue:
                    return
                fn, handle = self._queue.popleft()
                self._busy = True
            try:
                handle._finish(result=fn())
            except BaseException as e:  # handed to whoever waits on the handle
                handle._finish(error=e)
            finally:
                with self._cv:
                    self._busy = False
                    self._cv.notify_all()

    def submit(self, fn, post=None):
        h = Handle(post)
        with self._cv:
            if self._stop:
                raise ValueError("chorus: the runtime is shut down; call init() first")
            self._queue.append((fn, h))
            if self._thread is None:
                self._thread = threading.Thread(target=self._worker, name="chorus-executor",
                                                daemon=True)
                self._thread.start()
            self._cv.notify_all()
        return h

    def run(self, fn):
        """Runs fn on this thread once everything issued before it has finished."""
        with self._cv:
            while self._queue or self._busy:
                self._cv.wait()
            self._busy = True
        try:
            return fn()
        finally:
            with self._cv:
                self._busy = False
                self._cv.notify_all()

    def idle(self):
        with self._cv:
            return not self._queue and not self._busy

    def stop(self):
        with self._cv:
            self._stop = True
            self._cv.notify_all()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()


# ---- process sets -------------------------------------------------------------------------


class ProcessSet:
    """A subset of the world's ranks with its own communicator (as horovod's ProcessSet).

    Create it with ``ProcessSet([0, 2])`` and register it on every rank with
    add_process_set(), or pass it to init(process_sets=[...]). ``ranks`` are world ranks.
    """

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = None
        self.comm = None  # set on members once registered

    def _need(self):
        if self.process_set_id is None:
            raise ValueError("chorus: this process set is not registered; pass it to "
                             "add_process_set() on every rank first")

    def size(self):
        self._need()
        return len(self.ranks)

    def rank(self):
        """This process's rank within the set, or -1 when it is not a member."""
        self._need()
        return self.comm.rank if self.comm is not None else -1

    def included(self):
        self._need()
        return self.comm is not None

    def __repr__(self):
        return "ProcessSet(process_set_id=%s, ranks=%s)" % (self.process_set_id, self.ranks)


class _State:
    def __init__(self):
        self.world = None
        self.executor = None
        self.sets = {}
        self.next_set_id = 1
        self.cross_rank = 0
        self.cross_size = 1
        self.global_set = ProcessSet()
        self.timeline = None
        self.engine = None
        self.lock = threading.RLock()


S = _State()
global_process_set = S.global_set


def is_initialized():
    return S.world is not None


def init(process_sets=None):
    """Joins the job described by the environment (chorus-run, torchrun-style RANK/WORLD_SIZE/
    MASTER_ADDR/MASTER_PORT, mpirun, srun); without any, a job of one rank. Calling it again
    while initialised does nothing. ``process_sets`` registers ProcessSets (or rank lists)
    right away, on every rank."""
    with S.lock:
        if S.world is None:
            if elastic_pending():
                return  # the job forms inside chorus.torch.elastic.run
            p = ctypes.c_void_p()
            check(lib.chorus_init(ctypes.byref(p)), None, "chorus init")
            _adopt(Comm(p.value))
    for ps in process_sets or []:
        add_process_set(ps)


def elastic_pending():
    """True in a worker of `chorus-run --elastic` outside elastic.run(): the communicator only
    exists inside chorus_elastic_run, so init() leaves it to elastic.run()."""
    return os.environ.get("CHORUS_ELASTIC") == "1" and hasattr(lib, "chorus_elastic_run")


def adopt(comm_ptr):
    """Makes a communicator someone else owns (the elastic runtime's) the world."""
    with S.lock:
        if S.world is not None:
            raise ValueError("chorus: a world communicator already exists")
        _adopt(Comm(comm_ptr, owned=False))


def _adopt(comm):
    S.world = comm
    S.executor = Executor()
    S.global_set.ranks = list(range(S.world.size))
    S.global_set.process_set_id = 0
    S.global_set.comm = S.world
    S.sets = {0: S.global_set}
    S.next_set_id = 1
    _compute_cross()


def _compute_cross():
    """cross_rank/cross_size: the index of this host among the job's hosts and their number
    (hosts ordered by their lowest rank), from one small allgather of host identities."""
    w = S.world
    host = zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF
    if w.size == 1:
        S.cross_rank, S.cross_size = 0, 1
        return
    allh = w.allgather_i64([host, w.local_rank])
    order = list(dict.fromkeys(int(h) for h in allh[:, 0]))
    S.cross_rank, S.cross_size = order.index(host), len(order)


def world():
    if S.world is None:
        if elastic_pending():
            raise ValueError("chorus: under chorus-run --elastic the job forms inside "
                             "chorus.torch.elastic.run(); call this from the training "
                             "function or a reset callback")
        raise ValueError("chorus has not been initialized; call chorus.torch.init() (or "
                         "chorus.init()) first")
    return S.world


def shutdown():
    """Waits for pending collectives, then releases every communicator. Safe to call twice."""
    with S.lock:
        if S.world is None:
            return
        if S.engine is not None:
            try:
                S.engine.close()
            finally:
                S.engine = None
        S.executor.stop()
        for sid, ps in list(S.sets.items()):
            if sid != 0 and ps.comm is not None:
                ps.comm.finalize()
            ps.comm, ps.process_set_id = None, None
        S.sets = {}
        S.world.finalize()
        S.world = None
        S.global_set.ranks = None


atexit.register(shutdown)


def resolve_set(process_set):
    """The ProcessSet for process_set= (None: the global one); raises on non-members."""
    world()
    ps = S.global_set if process_set is None else process_set
    if isinstance(ps, int):
        if ps not in S.sets:
            raise ValueError("chorus: unknown process set id %d" % ps)
        ps = S.sets[ps]
    if not isinstance(ps, ProcessSet):
        raise TypeError("chorus: process_set must be a ProcessSet, got %r" % (ps,))
    ps._need()
    if ps.comm is None:
        raise ValueError("chorus: rank %d is not a member of %r; only its members may call "
                         "collectives on it" % (S.world.rank, ps))
    return ps


def add_process_set(process_set):
    """Registers a process set; a collective over the whole world (every rank calls it, in the
    same order, with the same ranks). Returns the ProcessSet."""
    ps = process_set if isinstance(process_set, ProcessSet) else ProcessSet(process_set)
    w = world()
    if ps.ranks is None or not ps.ranks:
        raise ValueError("chorus: a process set needs a list of ranks")
    if ps.process_set_id is not None:
        raise ValueError("chorus: %r is already registered" % (ps,))
    bad = [r for r in ps.ranks if r < 0 or r >= w.size]
    if bad or len(set(ps.ranks)) != len(ps.ranks):
        raise ValueError("chorus: process set ranks %s must be distinct ranks in [0, %d)"
                         % (ps.ranks, w.size))

    def do():
        # Every rank must name the same ranks: check before splitting.
        crc = zlib.crc32(repr(ps.ranks).encode())
        allc = w.allgather_i64([crc, len(ps.ranks)])
        if len(set(int(c) for c in allc[:, 0])) != 1:
            raise ChorusMismatchError("chorus add_process_set: ranks passed different rank "
                                      "lists (this rank passed %s)" % ps.ranks)
        mine = w.rank in ps.ranks
        return w.split(0 if mine else -1, w.rank)

    comm = S.executor.run(do)
    with S.lock:
        ps.process_set_id = S.next_set_id
        S.next_set_id += 1
        ps.comm = comm
        S.sets[ps.process_set_id] = ps
    return ps


def remove_process_set(process_set):
    """Unregisters a process set (on every rank). The global set cannot be removed."""
    ps = process_set
    if isinstance(ps, int):
        ps = S.sets.get(ps)
    if ps is None or ps.process_set_id is None:
        return False
    if ps.process_set_id == 0:
        raise ValueError("chorus: the global process set cannot be removed")

    def do():
        if ps.comm is not None:
            ps.comm.finalize()

    S.executor.run(do)
    with S.lock:
        S.sets.pop(ps.process_set_id, None)
        ps.comm, ps.process_set_id = None, None
    return True


# ---- buffer collectives ----------------------------------------------------------------
# These run on the executor thread (or the caller under Executor.run). ptr arguments are
# addresses; the caller keeps the memory alive until they return.


def c_op(op):
    """chorus_op for an _Op (Average maps to CHORUS_AVG)."""
    return _lib.OP["avg"] if op is Average else int(op)


def rs_rows(dim0, size, rank):
    """Rows of a reducescatter output on `rank`: the first dim0 % size ranks get one extra."""
    return dim0 // size + (1 if rank < dim0 % size else 0)


class HostBuf:
    """A temporary host buffer of nbytes (numpy-owned)."""

    def __init__(self, nbytes):
        self.a = np.empty(max(int(nbytes), 1), dtype=np.uint8)
        self.ptr = self.a.ctypes.data


def set_engine(engine):
    S.engine = engine


def env_flag(name, default):
    v = os.environ.get(name)
    if v is None or v == "":
        return default
    return v.lower() not in ("0", "false", "no", "off")

