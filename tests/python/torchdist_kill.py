"""A peer killed (or stopped) in the middle of a collective on the "chorus" backend: the
others raise RuntimeError naming it within init_process_group's timeout, instead of hanging.

    python3 torchdist_kill.py NPROC [shm|tcp] [kill|stop]

starts NPROC ranks itself with the plain env:// variables (RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT: no chorus-run, so torch's store carries the rendezvous). The last rank sends
itself SIGKILL (timeout 20 s) or SIGSTOP (timeout 4 s: nothing closes its connections, so only
a deadline can tell) while an all_reduce of 32 MiB is in flight; each other rank prints
"rank R: RuntimeError after S s: <message>" and exits 0 when the error came in time (a kill:
before the timeout; a stop: not before it, and before twice it). The launcher fails if a
survivor hangs (60 s) or exits non-zero, and kills the stopped rank.
"""
import datetime
import os
import signal
import socket
import subprocess
import sys
import threading
import time

MODE = sys.argv[3] if len(sys.argv) > 3 else "kill"
TIMEOUT_S = 20 if MODE == "kill" else 4


def rank_main():
    import torch
    import torch.distributed as dist
    import chorus.torch.distributed  # noqa: F401

    dist.init_process_group("chorus", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    rank, size = dist.get_rank(), dist.get_world_size()
    t = torch.ones(8 << 20)
    dist.all_reduce(t)  # everyone is up
    if rank == size - 1:
        sig = signal.SIGKILL if MODE == "kill" else signal.SIGSTOP
        threading.Timer(0.05, lambda: os.kill(os.getpid(), sig)).start()
        while True:
            dist.all_reduce(t)
    start = time.monotonic()
    try:
        for _ in range(1000):
            dist.all_reduce(t)
    except RuntimeError as e:
        took = time.monotonic() - start
        # one write per line: the ranks share the launcher's stdout
        os.write(1, ("rank %d: RuntimeError after %.1f s: %s\n" % (rank, took, e)).encode())
        in_time = took < TIMEOUT_S if MODE == "kill" else TIMEOUT_S - 0.5 < took < 2 * TIMEOUT_S
        os._exit(0 if in_time else 3)
    print("rank %d: no error" % rank, flush=True)
    os._exit(4)


def launch(nproc, transport, mode):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(nproc):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nproc))
        if transport == "tcp":
            env["CHORUS_SHM"] = "0"
        procs.append(subprocess.Popen([sys.executable, __file__, "rank", transport, mode],
                                      env=env))
    rc = 0
    deadline = time.monotonic() + 60
    for r, p in enumerate(procs[:-1] if mode == "stop" else procs):
        try:
            code = p.wait(timeout=max(1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            print("launcher: rank %d hangs" % r)
            code = "hang"
        if r == nproc - 1 and mode == "kill":
            if code != -signal.SIGKILL:
                print("launcher: rank %d should have been killed, ended with %s" % (r, code))
                rc = 1
        elif code != 0:
            print("launcher: rank %d ended with %s" % (r, code))
            rc = 1
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait()
    return rc


if __name__ == "__main__":
    if sys.argv[1] == "rank":
        rank_main()
    sys.exit(launch(int(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "shm", MODE))
