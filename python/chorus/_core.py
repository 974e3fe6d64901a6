"""The state the Python front ends share: the world communicator, the process sets and the
engine of each (chorus._engine), the reduction ops with Horovod's names.

init() joins the job and starts an engine over the world communicator: the global process
set. add_process_set() splits the world communicator (chorus_comm_split) and starts an engine
over the new one on its members, so the collectives of every process set run on an engine of
their own, independently of the others.
"""

import atexit
import ctypes
import os
import socket
import threading
import zlib

from . import _lib, _engine, _handles
from ._lib import lib, check, ChorusMismatchError

FLOAT_CODES = _engine.FLOAT_CODES

# ---- ops (horovod names) ----------------------------------------------------------------


class _Op(int):
    """A reduction: chorus_op value with a Horovod-style name."""

    def __new__(cls, value, name):
        o = int.__new__(cls, value)
        o._name = name
        o.is_average = name == "Average"
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


def as_op(op, average=None, adasum=False):
    """Normalises op (an _Op, its int, or a name) and horovod's old average= flag. Adasum
    is refused (NotImplementedError, a RuntimeError) unless the caller implements it."""
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
    if o is Adasum and not adasum:
        raise NotImplementedError(
            "chorus: op=Adasum is implemented for allreduce and grouped_allreduce only (as "
            "Horovod); use op=Average (the default) or op=Sum here")
    return o


# ---- communicators -----------------------------------------------------------------------


class Comm:
    """A libchorus communicator (world or split). owned=False: someone else (the elastic
    runtime) finalizes it; release, when set, is called instead when it is finalized here."""

    def __init__(self, ptr, owned=True):
        self.ptr = ptr
        self.owned = owned
        self.release = None
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
            elif self.release is not None:
                self.release()

    def split(self, color, key):
        out = ctypes.c_void_p()
        self.check(lib.chorus_comm_split(self.ptr, color, key, ctypes.byref(out)), "split")
        return Comm(out.value) if out.value else None


# ---- process sets -------------------------------------------------------------------------


class ProcessSet:
    """A subset of the world's ranks with its own communicator (as horovod's ProcessSet).

    Create it with ``ProcessSet([0, 2])`` and register it on every rank with
    add_process_set(), or pass it to init(process_sets=[...]). ``ranks`` are world ranks.
    """

    def __init__(self, ranks=None):
        self.ranks = None if ranks is None else sorted(int(r) for r in ranks)
        self.process_set_id = None
        self.comm = None    # set on members once registered
        self.engine = None  # the engine over comm (members only)

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
        self.sets = {}
        self.next_set_id = 1
        self.cross_rank = 0
        self.cross_size = 1
        self.global_set = ProcessSet()
        self.last_membership = None  # (rank, size, local rank, local size, cross rank, size)
        self.timeline = None
        self.lost = None  # (code, message): a peer of the last world was lost
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
                return  # the job forms inside elastic.run (chorus._elastic)
            if S.lost is not None:
                # The launcher will not start the lost rank again: forming the job would wait
                # for it until the rendezvous timeout.
                code, msg = S.lost
                _lib.raise_for(code, None, "chorus init", "this job lost a rank (%s); it cannot "
                               "form again: restart the job, or run it with chorus-run "
                               "--elastic to have lost workers replaced" % msg)
            p = ctypes.c_void_p()
            check(lib.chorus_init(ctypes.byref(p)), None, "chorus init")
            _adopt(Comm(p.value))
    for ps in process_sets or []:
        add_process_set(ps)


def elastic_pending():
    """True in a worker of `chorus-run --elastic` outside elastic.run(): the communicator only
    exists inside chorus_elastic_run, so init() leaves it to elastic.run()."""
    return _lib.config_get("CHORUS_ELASTIC") == "1" and hasattr(lib, "chorus_elastic_run")


def adopt(comm_ptr):
    """Makes a communicator someone else owns (the elastic runtime's) the world."""
    with S.lock:
        if S.world is not None:
            raise ValueError("chorus: a world communicator already exists")
        _adopt(Comm(comm_ptr, owned=False))


def _adopt(comm):
    S.world = comm
    S.lost = None  # a world formed again (an elastic generation)
    S.global_set.ranks = list(range(S.world.size))
    S.global_set.process_set_id = 0
    S.global_set.comm = S.world
    S.global_set.engine = _start_engine(comm)
    S.sets = {0: S.global_set}
    S.next_set_id = 1
    _compute_cross()
    S.last_membership = (comm.rank, comm.size, comm.local_rank, comm.local_size, S.cross_rank,
                         S.cross_size)


def _start_engine(comm):
    """An engine over comm (a collective over comm). Gradients come already packed into
    buckets by DistributedOptimizer, so a cycle starts as soon as an op is enqueued instead of
    gathering for a cycle time (measured: 1.66x DDP against 1.43x with 2 ms,
    bench/ddp_vs_chorus.sh); CHORUS_CYCLE_TIME_MS (or Horovod's HOROVOD_CYCLE_TIME) still
    overrides."""
    cycle = None if (_lib.config_is_set("CHORUS_CYCLE_TIME_MS") or
                     _lib.config_is_set("HOROVOD_CYCLE_TIME")) else 0.0
    return _engine.Engine(comm.ptr, comm.size, cycle)


def _compute_cross():
    """cross_rank/cross_size: the index of this host among the job's hosts and their number
    (hosts ordered by their lowest rank), from one small allgather of host identities."""
    w = S.world
    host = zlib.crc32(socket.gethostname().encode()) & 0x7FFFFFFF
    if w.size == 1:
        S.cross_rank, S.cross_size = 0, 1
        return
    allh = _engine.allgather_i64(S.global_set.engine, [host, w.local_rank], "py.hosts")
    order = list(dict.fromkeys(int(h) for h in allh[:, 0]))
    S.cross_rank, S.cross_size = order.index(host), len(order)


_PLAN_VARS = ("HOROVOD_RANK", "HOROVOD_SIZE", "HOROVOD_LOCAL_RANK", "HOROVOD_LOCAL_SIZE",
              "HOROVOD_CROSS_RANK", "HOROVOD_CROSS_SIZE")


def membership():
    """(rank, size, local_rank, local_size, cross_rank, cross_size) of this process: the
    world's. In a worker of `chorus-run --elastic` outside elastic.run(), where Horovod allows
    hvd.size() and hvd.rank() too (to scale a learning rate, to log on rank 0): the
    generation this worker was in last, or before its first one the launcher's plan for it
    (HOROVOD_RANK, HOROVOD_SIZE, ...); inside run() the generation's own."""
    if S.world is not None:
        w = S.world
        return (w.rank, w.size, w.local_rank, w.local_size, S.cross_rank, S.cross_size)
    if elastic_pending():
        if S.last_membership is not None:
            return S.last_membership
        try:
            return tuple(int(os.environ[v]) for v in _PLAN_VARS)
        except (KeyError, ValueError):
            pass
    world()  # raises: not initialised
    return None


def keep_world(release):
    """The world communicator someone else owns stays the world after its owner's loop (the
    last generation of elastic.run()); release() is called once shutdown() has stopped its
    engines."""
    with S.lock:
        S.world.release = release


def world():
    if S.world is None:
        if elastic_pending():
            raise ValueError("chorus: under chorus-run --elastic the job forms inside "
                             "hvd.elastic.run() (chorus.torch.elastic or chorus.tensorflow."
                             "elastic); call this from the training function or a reset "
                             "callback")
        raise ValueError("chorus has not been initialized; call chorus.torch.init() (or "
                         "chorus.init()) first")
    return S.world


def shutdown():
    """Stops the engines (pending collectives end with CHORUS_ERR_ABORTED on every rank), then
    releases every communicator. Safe to call twice."""
    with S.lock:
        if S.world is None:
            return
        for sid, ps in sorted(S.sets.items(), reverse=True):
            _close_set(ps)
            if sid != 0 and ps.comm is not None:
                ps.comm.finalize()
            ps.comm, ps.process_set_id = None, None
        S.sets = {}
        _handles.clear()  # after the engines: their pending ops have ended (aborted)
        S.world.finalize()
        S.world = None
        S.global_set.ranks = None


atexit.register(shutdown)


def set_root(ps, root_rank, what):
    """The rank inside process set ps of root_rank, which is a global rank as in Horovod (in
    the global set the two are the same)."""
    root = int(root_rank)
    if ps is S.global_set or ps.ranks is None:
        return root
    if root not in ps.ranks:
        raise ValueError("chorus %s: root_rank %d is not in the process set (global ranks %s); "
                         "root_rank is a global rank, as in Horovod" % (what, root, ps.ranks))
    return ps.ranks.index(root)


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

    # Every rank must name the same ranks: checked on the world's engine before splitting.
    crc = zlib.crc32(repr(ps.ranks).encode())
    allc = _engine.allgather_i64(S.global_set.engine, [crc, len(ps.ranks)],
                                 "py.add_process_set.%d" % S.next_set_id)
    if len(set(int(c) for c in allc[:, 0])) != 1:
        raise ChorusMismatchError("chorus add_process_set: ranks passed different rank lists "
                                  "(this rank passed %s)" % ps.ranks)
    comm = w.split(0 if w.rank in ps.ranks else -1, w.rank)
    eng = None
    if comm is not None:
        try:
            eng = _start_engine(comm)
        except BaseException:
            comm.finalize()
            raise
    with S.lock:
        ps.process_set_id = S.next_set_id
        S.next_set_id += 1
        ps.comm, ps.engine = comm, eng
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

    _close_set(ps)
    if ps.comm is not None:
        ps.comm.finalize()
    with S.lock:
        S.sets.pop(ps.process_set_id, None)
        ps.comm, ps.process_set_id = None, None
    return True


_PEER_LOST = _lib.RESULT_NAMES.index("CHORUS_ERR_PEER_LOST")


def _close_set(ps):
    """Stops the engine of a process set (agreed with its other members); remembers a lost
    peer for init()."""
    if ps.engine is not None:
        e, ps.engine = ps.engine, None
        err = e.close()
        if err is not None and err[0] == _PEER_LOST:
            S.lost = err


def engine_of(ps):
    """The engine running the collectives of process set ps (resolved, this rank a member)."""
    if ps.engine is None:
        raise ValueError("chorus: the runtime is shut down; call init() first")
    return ps.engine
