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
"""

import datetime
import hashlib
import importlib.util
import os
import socket

import torch.distributed as dist

from .._lib import lib_path

__all__ = ["BACKEND"]

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


_register()
