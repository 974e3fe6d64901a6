"""chorus.torch.distributed: the torch.distributed backend "chorus" over libchorus.

    import chorus.torch.distributed  # registers the backend
    torch.distributed.init_process_group("chorus")  # instead of "gloo"

Then DistributedDataParallel, ZeroRedundancyOptimizer, every collective, send/recv and
new_group work as on Gloo (CPU tensors), on libchorus's shared-memory and TCP transports. The
C++ part (python/csrc/torchdist.cpp, built by `make`) sits beside libchorus.so.

Rendezvous. torch.distributed's store is used for one thing only: rank 0 picks a free port
and publishes "host:port" there; every rank then runs libchorus's own rendezvous
(chorus_init) at that address, served by rank 0. The host is MASTER_ADDR, or 127.0.0.1 when
it is unset, which is right only when every rank is on one host (for a job across hosts with
another init method, set MASTER_ADDR, or CHORUS_STORE_ADDR=host:port on every rank, which is
then used as it is). libchorus's rendezvous is kept because it
does more than exchange addresses: it checks the job identity (two jobs on one port fail
instead of merging), groups ranks by host for shared memory, and authenticates peers
(CHORUS_SECRET); torch's store offers none of that, and libchorus has no way to speak torch's
store protocol. Under chorus-run (CHORUS_RANK set) chorus-run's store is used as it is. The
ranks that init_process_group was given must match the ones libchorus finds, or init fails
saying both.

Timeout. init_process_group's timeout becomes CHORUS_TIMEOUT_S, libchorus's deadline for any
wait on a peer (subgroups inherit it). When the timeout is torch's default (30 minutes) and
CHORUS_TIMEOUT_S is set, CHORUS_TIMEOUT_S wins. A dead peer is found sooner: its closed
connection fails every pending call at once. Errors are RuntimeError with
libchorus's detail, which names the peer.

Weight divergence. check_divergence(module, process_group) compares the module's parameters
and buffers across the group's ranks in one all_gather of 64-bit hashes and raises
chorus.torch.DivergenceError naming the first divergent tensor, the ranks and the step (it
works on any backend's group). For DDP, divergence_hook with a DivergenceHookState(module,
process_group, every=N) does the same every N steps from DDP's communication hook, before the
gradients of the step are averaged (docs/PYTHON.md).
"""

import datetime
import hashlib
import importlib.util
import os
import socket

import torch
import torch.distributed as dist

from .._lib import lib_path
from . import divergence as _div

__all__ = ["BACKEND", "check_divergence", "DivergenceHookState", "divergence_hook"]

BACKEND = "chorus"
_EXT_NAME = "_chorus_torchdist"
_ext = None


def _extension():
    global _ext
    if _ext is None:
        path = os.path.join(os.path.dirname(os.path.realpath(lib_path)), _EXT_NAME + ".so")
        if not os.path.exists(path):
            raise ImportError(
                "chorus.torch.distributed: %s is missing (next to %s): the backend is built "
                "by `make` when PyTorch's C++ headers are installed (Debian: libtorch-dev)"
                % (os.path.basename(path), lib_path))
        spec = importlib.util.spec_from_file_location(_EXT_NAME, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        _ext = mod
    return _ext


def _seconds(timeout):
    if isinstance(timeout, datetime.timedelta):
        return timeout.total_seconds()
    return float(timeout)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def _job_env(store, rank, timeout_s):
    """The variables chorus_init reads, beyond the process's own: where to meet (unless
    chorus-run already says) and the deadline."""
    env = {}
    if "CHORUS_RANK" not in os.environ and not os.environ.get("CHORUS_STORE_ADDR"):
        if rank == 0:
            host = os.environ.get("MASTER_ADDR", "127.0.0.1")
            store.set("chorus/store_addr", "%s:%d" % (host, _free_port()))
        env["CHORUS_STORE_ADDR"] = store.get("chorus/store_addr").decode()
    default_s = _seconds(getattr(dist, "default_pg_timeout", datetime.timedelta(minutes=30)))
    if timeout_s != default_s or not os.environ.get("CHORUS_TIMEOUT_S"):
        env["CHORUS_TIMEOUT_S"] = "%g" % max(timeout_s, 1.0)
    return env


def _make_world(store, rank, size, timeout_s):
    env = _job_env(store, rank, timeout_s)
    if "CHORUS_RANK" not in os.environ:
        env.update(RANK=str(rank), WORLD_SIZE=str(size))
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        return _extension().ProcessGroupChorus.world(rank, size)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _world_backend():
    """The default group's chorus backend, whose communicator subgroups are made from (looked
    up, not kept, so that destroy_process_group frees it)."""
    cls = _extension().ProcessGroupChorus
    try:
        pg = dist.distributed_c10d._get_default_group()
    except RuntimeError:
        pg = None
    if pg is not None and not isinstance(pg, cls) and hasattr(pg, "_get_backend"):
        import torch  # torch 2.x: the group holds a backend per device
        try:
            pg = pg._get_backend(torch.device("cpu"))
        except RuntimeError:
            pg = None
    if not isinstance(pg, cls):
        raise RuntimeError("chorus: new_group(backend=\"chorus\") needs the default group on the "
                           "chorus backend: init_process_group(\"chorus\")")
    return pg


def _create(opts, pg_options=None):
    """torch.distributed's creator (extended API): the default group runs chorus_init; a
    subgroup is made by its members from the default group's communicator."""
    ranks = list(opts.global_ranks_in_group)
    if not ranks:
        return _make_world(opts.store, opts.group_rank, opts.group_size, _seconds(opts.timeout))
    tag = int.from_bytes(hashlib.sha1(str(opts.group_id).encode()).digest()[:8], "little")
    return _world_backend().new_group(ranks, tag)


def _register():
    _extension()  # a missing build fails the import, saying how to get it
    if hasattr(dist.Backend, BACKEND.upper()):
        return
    try:  # torch 2.x: the devices the backend serves
        dist.Backend.register_backend(BACKEND, _create, extended_api=True, devices=["cpu"])
    except TypeError:
        dist.Backend.register_backend(BACKEND, _create, extended_api=True)


def check_divergence(module, process_group=None, step=None):
    """Compares every parameter and buffer of module (or a dict / (name, tensor) pairs) across
    the ranks of process_group (default: the world) in one all_gather of 64-bit hashes of the
    bytes. Returns when every rank holds the same bytes; otherwise raises, on every rank,
    chorus.torch.DivergenceError naming the first divergent tensor, the (global) ranks outside
    the reference group and step (default: how many times this process checked so far). A
    collective over the group."""
    named = _div.named_tensors(module, "check_divergence")
    step = _div.next_step(step)
    row = _div.divergence_row(named, dist.get_rank())
    rows = [torch.zeros_like(row) for _ in range(dist.get_world_size(process_group))]
    dist.all_gather(rows, row, group=process_group)
    _div.raise_if_diverged(torch.cat(rows), named, step)


class DivergenceHookState:
    """State of divergence_hook: the module to check (the one DDP wraps, or the DDP module
    itself), the process group DDP averages over (None: the world) and every (a check every
    that many optimizer steps; 0: never). steps counts the backward passes seen."""

    def __init__(self, module, process_group=None, every=100):
        if int(every) < 0:
            raise ValueError("DivergenceHookState: every must be >= 0 (0: never)")
        self.module = module
        self.process_group = process_group
        self.every = int(every)
        self.steps = 0


def divergence_hook(state, bucket):
    """A DDP communication hook (ddp.register_comm_hook(DivergenceHookState(...),
    divergence_hook)): averages each gradient bucket as torch's default_hooks.allreduce_hook
    does (divided by the group's size, then summed), and, at the last bucket of every state.every-th backward pass,
    first runs check_divergence(state.module, state.process_group, step) on the parameters as
    the previous optimizer step left them (step = the backward passes before this one). A
    divergence raises from loss.backward() with DivergenceError's message."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    if bucket.is_last():
        done, state.steps = state.steps, state.steps + 1
        if state.every and done and done % state.every == 0:
            check_divergence(state.module, state.process_group, step=done)
    return default_hooks.allreduce_hook(state.process_group, bucket)


_register()
