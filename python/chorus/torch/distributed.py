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

Launchers. Under mpirun, srun or a Kubernetes Indexed Job, which do not set torch's RANK,
WORLD_SIZE, MASTER_ADDR and MASTER_PORT, env:// goes through _env_rendezvous (put in front of
torch's handler on import): the ranks meet through libchorus's reading of the launcher's
variables, rank 0 serves torch's TCPStore, and torchrun's variables but MASTER_PORT are set.
Filling the variables at import instead would need rank 0's address and a free port agreed
before the ranks have met; a creator that ignored the store would leave torch (new_group,
Gloo subgroups) without one. docs/PYTHON.md, "Launchers".

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

import ctypes
import datetime
import hashlib
import importlib.util
import os
import socket
from urllib.parse import parse_qs, urlparse

import torch
import torch.distributed as dist

from .._lib import DTYPE, check, config_is_set, config_set, lib, lib_path, raise_for
from . import divergence as _div

# The module (torch.distributed names its function rendezvous after it).
_rdzv = importlib.import_module("torch.distributed.rendezvous")

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
    if not config_is_set("CHORUS_RANK") and not config_is_set("CHORUS_STORE_ADDR"):
        if rank == 0:
            host = os.environ.get("MASTER_ADDR", "127.0.0.1")
            store.set("chorus/store_addr", "%s:%d" % (host, _free_port()))
        env["CHORUS_STORE_ADDR"] = store.get("chorus/store_addr").decode()
    default_s = _seconds(getattr(dist, "default_pg_timeout", datetime.timedelta(minutes=30)))
    if timeout_s != default_s or not config_is_set("CHORUS_TIMEOUT_S"):
        env["CHORUS_TIMEOUT_S"] = "%g" % max(timeout_s, 1.0)
    return env


def _make_world(store, rank, size, timeout_s):
    """chorus_init with the job's variables given to libchorus for the call (chorus_config_set:
    this process only, the environment untouched)."""
    env = _job_env(store, rank, timeout_s)
    if not config_is_set("CHORUS_RANK"):
        env.update(RANK=str(rank), WORLD_SIZE=str(size))
    try:
        for k, v in env.items():
            config_set(k, v)
        return _extension().ProcessGroupChorus.world(rank, size)
    finally:
        for k in env:
            config_set(k, None)


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


# ---- env:// under mpirun, srun and an Indexed Job -------------------------------------------

# The launchers whose ranks know their place without torch's variables: their variables, as
# libchorus's chorus_init reads them (src/bootstrap/env.c, where the other launchers are).
_LAUNCHERS = (("OMPI_COMM_WORLD_RANK", "mpirun"), ("PMI_RANK", "mpirun (PMI)"),
              ("SLURM_STEP_ID", "srun"), ("JOB_COMPLETION_INDEX", "a Kubernetes Indexed Job"))
_ADDR_LEN = 256
_torch_env_handler = None


def _launcher():
    """The launcher that started this process without torch's variables, or None."""
    for var, name in _LAUNCHERS:
        if os.environ.get(var) and (var != "SLURM_STEP_ID" or os.environ.get("SLURM_PROCID")):
            return name
    return None


def _asked(query, name, var):
    """init_process_group's rank= or world_size= (in the URL's query), else torch's variable."""
    v = parse_qs(query).get(name, [os.environ.get(var)])[0]
    return int(v) if v not in (None, "") else None


def _env_rendezvous(url, timeout=dist.distributed_c10d.default_pg_timeout, **kwargs):
    """torch's env:// handler, unless its variables are missing in a job whose launcher says
    where each rank is: then the ranks meet through libchorus's own rendezvous (as hvd.init()
    does there), rank 0 serves torch's store, and torchrun's variables are set for the rest of
    the program (MASTER_PORT aside)."""
    query = urlparse(url).query
    rank, size = _asked(query, "rank", "RANK"), _asked(query, "world_size", "WORLD_SIZE")
    launcher = _launcher()
    if launcher is None or (rank is not None and size is not None and
                            os.environ.get("MASTER_ADDR") and os.environ.get("MASTER_PORT")):
        return (yield from _torch_env_handler(url, timeout=timeout, **kwargs))
    store, rank, size = _meet(launcher, rank, size, _seconds(timeout))
    yield store, rank, size
    raise RuntimeError("chorus: unable to perform re-rendezvous using env:// under %s" % launcher)


def _meet(launcher, want_rank, want_size, timeout_s):
    """Forms a libchorus communicator from the launcher's variables, has rank 0 serve a
    TCPStore on a free port and broadcast its address (or why it could not), and closes the
    communicator. Returns (store, rank, size)."""
    what = "chorus: init_process_group under %s" % launcher
    deadline = not config_is_set("CHORUS_TIMEOUT_S")
    comm = ctypes.c_void_p()
    try:
        if deadline:
            config_set("CHORUS_TIMEOUT_S", "%g" % max(timeout_s, 1.0))
        check(lib.chorus_init(ctypes.byref(comm)), None, what)
    finally:
        if deadline:
            config_set("CHORUS_TIMEOUT_S", None)
    try:
        rank, size = lib.chorus_rank(comm), lib.chorus_size(comm)
        local_rank, local_size = lib.chorus_local_rank(comm), lib.chorus_local_size(comm)
        store, addr = None, ctypes.create_string_buffer(_ADDR_LEN)
        if rank == 0:
            try:
                host = "127.0.0.1" if local_size == size else _host_address()
                store = _tcp_store(host, 0, size, True, timeout_s)
                addr.value = ("%s:%d" % (host, store.port)).encode()
            except Exception as e:  # said to every rank, so that none waits for the store
                addr.value = ("!%s" % e).encode()[:_ADDR_LEN - 1]
        check(lib.chorus_broadcast(comm, addr, _ADDR_LEN, DTYPE["uint8"], 0), comm, what)
        text = addr.value.decode()
        if text.startswith("!"):
            raise RuntimeError("%s: rank 0 could not serve torch.distributed's store: %s"
                               % (what, text[1:]))
        host, port = text.rsplit(":", 1)
        if store is None:
            store = _tcp_store(host, int(port), size, False, timeout_s)
    finally:
        lib.chorus_finalize(comm)
    for asked, got, name in ((want_rank, rank, "rank"), (want_size, size, "world size")):
        if asked is not None and asked != got:
            raise ValueError("%s: init_process_group was given %s %d, but the launcher says %d"
                             % (what, name, asked, got))
    # torchrun's variables for the program, MASTER_PORT aside: torch's store holds that port,
    # where a later chorus_init (hvd.init()) would otherwise try to serve its own store.
    # MASTER_ADDR is where the backend's rank 0 serves libchorus's store (_job_env).
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size), LOCAL_RANK=str(local_rank),
                      LOCAL_WORLD_SIZE=str(local_size), MASTER_ADDR=host)
    return store, rank, size


def _host_address():
    buf = ctypes.create_string_buffer(64)
    code = lib.chorus_host_address(buf, len(buf))
    if code:
        raise_for(code, None, "chorus_host_address")
    return buf.value.decode()


def _tcp_store(host, port, size, is_master, timeout_s):
    return dist.TCPStore(host, port, size, is_master, datetime.timedelta(seconds=timeout_s),
                         wait_for_workers=False)


def _hook_env_rendezvous():
    """Puts _env_rendezvous in front of torch's env:// handler (torch offers no way to replace
    a handler: register_rendezvous_handler refuses a scheme it has)."""
    global _torch_env_handler
    handlers = _rdzv._rendezvous_handlers
    if handlers.get("env") is not _env_rendezvous:
        _torch_env_handler = handlers["env"]
        handlers["env"] = _env_rendezvous


lib.chorus_broadcast.restype = ctypes.c_int
lib.chorus_broadcast.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                 ctypes.c_int]
lib.chorus_host_address.restype = ctypes.c_int
lib.chorus_host_address.argtypes = [ctypes.c_char_p, ctypes.c_size_t]


def _register():
    _extension()  # a missing build fails the import, saying how to get it
    _hook_env_rendezvous()
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
