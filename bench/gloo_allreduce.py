#!/usr/bin/python3
"""gloo_allreduce: Gloo (through torch.distributed, CPU tensors) baseline for chorus-bench.

Same method and output as bench/mpi_allreduce.c, so the tables line up:
  for each size S from -b to -e, multiplied by -f each step (bytes, float32, sum):
    W warm-up calls, then N timed calls, each preceded by a barrier; the per-iteration times
    of all ranks are reduced with MAX once after the loop; the reported time is the median;
    algbw = S / time, busbw = algbw * (2(n-1)/n allreduce, (n-1)/n allgather/alltoall,
    1 broadcast), GB = 1e9. Results are checked in a separate untimed pass with
    integer-valued floats (exact sums). Gloo's allreduce works in place, so the timed
    allreduce reduces a buffer of zeros in place (no extra copy is timed).
  N = clamp(2^30 / S, 10, 1000), W = clamp(N / 10, 2, 20) unless -n / -w are given; the
  warm-up (with the same barriers) times one iteration and N is cut to fit about -T seconds
  (default 2) per size, never below 10.

Ranks are started by this script itself (no torchrun: torch 1.13's launcher crashes here
unless given --redirects/--tee): the parent picks a free port on 127.0.0.1, sets RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT in each child's environment and runs this file again.
Children run with OMP_NUM_THREADS=1 and GLOO_SOCKET_IFNAME=lo unless those are already set.

  /usr/bin/python3 bench/gloo_allreduce.py -np 2 -b 4 -e 64M -f 4 [-c allreduce|bcast|
                                                                    allgather|alltoall]
Output: '#' header lines, then rows  size count time_us algbw_GBps busbw_GBps.
Exit status 1 if a result was wrong. Gloo in torch 1.13 has no reduce_scatter.
--backend chorus measures the same calls on the "chorus" backend (chorus.torch.distributed;
bench/torchdist.sh puts the two side by side).
"""
import argparse
import os
import socket
import subprocess
import sys
import time

COLLS = ("allreduce", "bcast", "allgather", "alltoall")


def parse_size(s):
    mult = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    t = s.strip().lower().rstrip("b")
    if t and t[-1] in mult:
        return int(float(t[:-1]) * mult[t[-1]])
    return int(float(t))


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-np", type=int, default=2, help="number of ranks to start (default 2)")
    p.add_argument("-c", default="allreduce", choices=COLLS + ("broadcast",))
    p.add_argument("-b", type=parse_size, default=4, help="smallest size in bytes (K/M/G)")
    p.add_argument("-e", type=parse_size, default=64 << 20, help="largest size in bytes")
    p.add_argument("-f", type=float, default=4.0, help="size multiplier per step")
    p.add_argument("-n", type=int, default=0, help="timed iterations (0: by size)")
    p.add_argument("-w", type=int, default=0, help="warm-up iterations (0: by size)")
    p.add_argument("-T", type=float, default=2.0, help="about this many seconds per size "
                   "at most, when iterations are by size (default 2)")
    p.add_argument("-k", type=int, default=1, help="0 skips the result check")
    p.add_argument("-d", default="float32", choices=("float32", "float"))
    p.add_argument("-o", default="sum", choices=("sum",))
    p.add_argument("--backend", default="gloo", choices=("gloo", "chorus"),
                   help="torch.distributed backend (chorus: chorus.torch.distributed)")
    a = p.parse_args(argv)
    if a.c == "broadcast":
        a.c = "bcast"
    if a.b < 4 or a.e < a.b or a.f <= 1.0 or a.np < 1 or a.T <= 0:
        p.error("need 4 <= -b <= -e, -f > 1, -np >= 1, -T > 0")
    return a


def clamp(v, lo, hi):
    return max(lo, min(hi, v))


def default_iters(nbytes):
    return clamp((1 << 30) // nbytes, 10, 1000)


def launch(args, argv):
    """Parent: start args.np copies of this script as ranks; return the worst exit status."""
    import importlib.util
    if importlib.util.find_spec("torch") is None:
        print(f"gloo_allreduce: {sys.executable} has no torch; run it with the Python that has "
              "(Debian: apt-get install python3-torch, then /usr/bin/python3)", file=sys.stderr)
        return 2
    with socket.socket() as s:  # a free port; tiny race with other users, fine for a bench
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(args.np):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(args.np), LOCAL_RANK=str(r),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("GLOO_SOCKET_IFNAME", "lo")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv,
                                      env=env))
    status = 0
    try:
        for p in procs:
            status = max(status, p.wait())
    except KeyboardInterrupt:
        for p in procs:
            p.kill()
        raise
    return status


def bus_factor(coll, n):
    return {"allreduce": 2.0 * (n - 1) / n, "bcast": 1.0}.get(coll, (n - 1) / n)


def worker(args):
    import torch
    import torch.distributed as dist

    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if args.backend == "chorus":
        import chorus.torch.distributed  # noqa: F401  registers the backend
    dist.init_process_group(args.backend, init_method="env://")
    rank, n = dist.get_rank(), dist.get_world_size()
    coll = args.c
    blocked = coll in ("allgather", "alltoall")

    def values(r, idx):  # what rank r contributes at element idx: small exact integers
        return ((idx % 13) + 1).float() * (r + 1)

    def make(count):
        """Buffers for a vector of count floats: (send, recv, recv list or None)."""
        blk = count // n
        idx = torch.arange(count, dtype=torch.int64)
        if coll == "allreduce":
            return values(rank, idx), torch.full((count,), -1.0), None
        if coll == "bcast":
            return (values(0, idx) if rank == 0 else torch.full((count,), -1.0)), None, None
        if coll == "allgather":
            send = values(rank, idx[rank * blk:(rank + 1) * blk])
            recv = torch.full((blk * n,), -1.0)
            return send, recv, list(recv.split(blk))
        # alltoall: block j goes to rank j, encoding (source, destination, index)
        j, i = idx // blk, idx % blk
        return ((rank * n + j) * 16 + i % 16).float(), torch.full((count,), -1.0), None

    def run(send, recv, recv_list):
        if coll == "allreduce":  # Gloo reduces in place: the result lands in recv
            dist.all_reduce(recv, op=dist.ReduceOp.SUM)
        elif coll == "bcast":
            dist.broadcast(send, src=0)
        elif coll == "allgather":
            dist.all_gather(recv_list, send)
        else:
            dist.all_to_all_single(recv, send)

    def wrong_count(count, send, recv):
        blk = count // n
        idx = torch.arange(count, dtype=torch.int64)
        tri = n * (n + 1) // 2
        if coll == "allreduce":
            want, got = ((idx % 13) + 1).float() * tri, recv
        elif coll == "bcast":
            want, got = values(0, idx), send
        elif coll == "allgather":
            want, got = values(idx // blk, idx).float(), recv
        else:
            j, i = idx // blk, idx % blk
            want, got = ((j * n + rank) * 16 + i % 16).float(), recv
        return int((want != got).sum())

    if rank == 0:
        print(f"# gloo_allreduce: {coll}, {n} ranks, float32 sum, torch {torch.__version__} "
              f"{args.backend}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}")
        print("# time = median over iterations of the max over ranks; barrier before each call;"
              f" GB = 1e9; busbw factor {bus_factor(coll, n):.4f}")
        it = str(args.n) if args.n else (f"clamp(2^30/size, 10, 1000) cut to ~{args.T:g}s per "
                                         "size (min 10), warm-up clamp(iters/10, 2, 20)")
        print(f"# iterations {it}, check {'on' if args.k else 'off'}")
        print(f"# {'size':>10} {'count':>12} {'time_us':>12} {'algbw_GBps':>11} "
              f"{'busbw_GBps':>11}", flush=True)

    failed = False
    s = float(args.b)
    while s <= args.e * 1.000001:
        count = int(s) // 4
        s *= args.f
        if blocked:
            count -= count % n
        if count == 0:
            continue
        nbytes = count * 4
        iters = args.n or default_iters(nbytes)
        warmup = args.w or clamp(iters // 10, 2, 20)

        wrong = torch.zeros(1, dtype=torch.int64)
        if args.k:
            send, recv, recv_list = make(count)
            if coll == "allreduce":
                recv.copy_(send)
            run(send, recv, recv_list)
            wrong[0] = wrong_count(count, send, recv)
            dist.all_reduce(wrong, op=dist.ReduceOp.SUM)

        send, recv, recv_list = make(count)
        if coll == "allreduce":
            recv.zero_()  # timed in place on zeros: the values stay 0 however many calls
        w0 = time.perf_counter()
        for _ in range(warmup):
            dist.barrier()
            run(send, recv, recv_list)
        per_iter = torch.tensor([(time.perf_counter() - w0) / warmup], dtype=torch.float64)
        dist.all_reduce(per_iter, op=dist.ReduceOp.MAX)
        if not args.n and float(per_iter) * iters > args.T:
            iters = clamp(int(args.T / float(per_iter)), 10, iters)
        times = torch.zeros(iters, dtype=torch.float64)
        for i in range(iters):
            dist.barrier()
            t0 = time.perf_counter()
            run(send, recv, recv_list)
            times[i] = time.perf_counter() - t0
        dist.all_reduce(times, op=dist.ReduceOp.MAX)

        if rank == 0:
            t = float(times.median()) if iters % 2 else \
                float(times.sort().values[iters // 2 - 1:iters // 2 + 1].mean())
            algbw = nbytes / t / 1e9
            print(f"{nbytes:12d} {count:12d} {t * 1e6:12.2f} {algbw:11.3f} "
                  f"{algbw * bus_factor(coll, n):11.3f}", flush=True)
            if int(wrong[0]):
                print(f"gloo_allreduce: {coll} of {nbytes} bytes: {int(wrong[0])} wrong "
                      "elements", file=sys.stderr, flush=True)
                failed = True
    dist.destroy_process_group()
    return 1 if failed else 0


def main():
    argv = sys.argv[1:]
    args = parse_args(argv)
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ and "MASTER_PORT" in os.environ:
        sys.exit(worker(args))
    sys.exit(launch(args, argv))


if __name__ == "__main__":
    main()
