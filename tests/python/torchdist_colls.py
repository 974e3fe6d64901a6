"""Every torch.distributed call on the "chorus" backend against a serial reference.

Run as every rank of a job (chorus-run -np N, or RANK/WORLD_SIZE/MASTER_* set). Each rank
makes every rank's inputs from a seed (rank, call), so it can compute what a serial program
would get and compare. Uneven splits, groups that leave ranks out, asynchronous handles and
futures, object collectives and point-to-point are covered. Prints "torchdist colls: N checks
passed on R ranks" on success; raises (and so exits non-zero) at the first difference.
"""
import datetime
import functools
import operator
import sys

import torch
import torch.distributed as dist

import chorus.torch.distributed  # noqa: F401  registers "chorus"

checks = 0


def data(rank, call, shape, dtype=torch.float32):
    g = torch.Generator().manual_seed(1000 * rank + call)
    if dtype.is_floating_point:
        return torch.randn(shape, generator=g, dtype=torch.float64).to(dtype)
    return torch.randint(-50, 50, shape, generator=g, dtype=torch.int64).to(dtype)


def same(got, want, what):
    global checks
    checks += 1
    if isinstance(got, torch.Tensor):
        ok = got.dtype == want.dtype and got.shape == want.shape and torch.allclose(
            got.double(), want.double(), rtol=1e-5, atol=1e-6)
    else:
        ok = got == want
    if not ok:
        raise AssertionError("rank %d: %s: got %s, want %s" % (dist.get_rank(), what, got, want))


def serial_reduce(xs, op):
    out = xs[0].clone()
    for x in xs[1:]:
        if op == dist.ReduceOp.SUM:
            out = out + x
        elif op == dist.ReduceOp.PRODUCT:
            out = out * x
        elif op == dist.ReduceOp.MIN:
            out = torch.minimum(out, x)
        elif op == dist.ReduceOp.MAX:
            out = torch.maximum(out, x)
    return out


def collectives(group, members):
    """members: the global ranks of group, in group order."""
    n = len(members)
    me = dist.get_rank(group)
    call = 0

    def inputs(shape, dtype=torch.float32):
        return [data(members[r], call, shape, dtype) for r in range(n)]

    for dtype in (torch.float32, torch.float64, torch.int64, torch.int32):
        for op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MIN,
                   dist.ReduceOp.MAX):
            call += 1
            xs = inputs((7, 3), dtype)
            if op == dist.ReduceOp.PRODUCT and dtype.is_floating_point:
                xs = [x.clamp(-2, 2) for x in xs]
            t = xs[me].clone()
            dist.all_reduce(t, op=op, group=group)
            same(t, serial_reduce(xs, op), "all_reduce %s %s" % (dtype, op))

    call += 1  # a non-contiguous tensor, asynchronously, with its future
    xs = inputs((6, 4))
    base = xs[me].clone()
    t = base.t()
    work = dist.all_reduce(t, group=group, async_op=True)
    fut = work.get_future()
    work.wait()
    same(base, serial_reduce(xs, dist.ReduceOp.SUM), "all_reduce non-contiguous")
    same(fut.wait()[0], serial_reduce(xs, dist.ReduceOp.SUM).t(), "all_reduce future")

    call += 1  # bool: SUM is or
    xs = [x > 0 for x in inputs((9,))]
    t = xs[me].clone()
    dist.all_reduce(t, group=group)
    same(t, torch.stack(xs).any(0), "all_reduce bool")

    for root in range(n):
        call += 1
        xs = inputs((5, 2))
        t = xs[me].clone()
        dist.reduce(t, dst=members[root], op=dist.ReduceOp.MAX, group=group)
        if me == root:
            same(t, serial_reduce(xs, dist.ReduceOp.MAX), "reduce to %d" % root)
        call += 1
        xs = inputs((3, 5), torch.float64)
        t = xs[me].clone()
        dist.broadcast(t, src=members[root], group=group)
        same(t, xs[root], "broadcast from %d" % root)
        call += 1
        xs = inputs((4,))
        outs = [torch.empty(4) for _ in range(n)] if me == root else None
        dist.gather(xs[me], gather_list=outs, dst=members[root], group=group)
        if me == root:
            for r in range(n):
                same(outs[r], xs[r], "gather to %d, from %d" % (root, r))
        call += 1
        blocks = inputs((n, 3))[root]
        out = torch.empty(3)
        dist.scatter(out, scatter_list=list(blocks) if me == root else None,
                     src=members[root], group=group)
        same(out, blocks[me], "scatter from %d" % root)

    call += 1
    xs = inputs((2, 3), torch.int64)
    outs = [torch.empty(2, 3, dtype=torch.int64) for _ in range(n)]
    dist.all_gather(outs, xs[me], group=group)
    for r in range(n):
        same(outs[r], xs[r], "all_gather from %d" % r)
    call += 1
    xs = inputs((3,))
    out = torch.empty(n * 3)
    gather_base = getattr(dist, "all_gather_into_tensor", None) or dist._all_gather_base
    gather_base(out, xs[me], group=group)
    same(out, torch.cat(xs), "all_gather_into_tensor")

    call += 1
    xs = inputs((n, 4))
    out = torch.empty(4)
    dist.reduce_scatter(out, list(xs[me].unbind(0)), group=group)
    same(out, serial_reduce(xs, dist.ReduceOp.SUM)[me], "reduce_scatter")
    call += 1
    xs = inputs((n * 4,))
    out = torch.empty(4)
    rs_base = getattr(dist, "reduce_scatter_tensor", None) or dist._reduce_scatter_base
    rs_base(out, xs[me], op=dist.ReduceOp.MIN, group=group)
    same(out, serial_reduce(xs, dist.ReduceOp.MIN)[me * 4:(me + 1) * 4],
         "reduce_scatter_tensor")

    # all_to_all_single with uneven splits: rank i sends i+j+1 rows of 2 to rank j (rank
    # members[...] numbering inside the group)
    call += 1
    rows = [[i + j + 1 for j in range(n)] for i in range(n)]
    xs = [data(members[i], call, (sum(rows[i]), 2)) for i in range(n)]
    out = torch.empty(sum(rows[i][me] for i in range(n)), 2)
    dist.all_to_all_single(out, xs[me], output_split_sizes=[rows[i][me] for i in range(n)],
                           input_split_sizes=rows[me], group=group)
    want = [xs[i][sum(rows[i][:me]):sum(rows[i][:me + 1])] for i in range(n)]
    same(out, torch.cat(want), "all_to_all_single uneven")
    call += 1  # empty blocks: group rank 0 sends nothing, and an empty tensor everywhere
    rows = [[0 if i == 0 else 2 for j in range(n)] for i in range(n)]
    xs = [data(members[i], call, (sum(rows[i]), 3)) for i in range(n)]
    out = torch.empty(sum(rows[i][me] for i in range(n)), 3)
    dist.all_to_all_single(out, xs[me], [rows[i][me] for i in range(n)], rows[me], group=group)
    same(out, torch.cat([xs[i][2 * me:2 * me + 2] for i in range(1, n)] + [torch.empty(0, 3)]),
         "all_to_all_single with empty blocks")
    t = torch.empty(0)
    dist.all_reduce(t, group=group)
    same(t, torch.empty(0), "all_reduce of nothing")
    call += 1
    xs = inputs((n * 3, 2))
    out = torch.empty(n * 3, 2)
    dist.all_to_all_single(out, xs[me], group=group)
    same(out, torch.cat([xs[i][me * 3:(me + 1) * 3] for i in range(n)]), "all_to_all_single even")
    call += 1  # all_to_all of lists, uneven: rank i sends 2*i+j elements to rank j
    xs = [[data(members[i], call * 100 + j, (2 * i + j,)) for j in range(n)] for i in range(n)]
    outs = [torch.empty(2 * i + me) for i in range(n)]
    dist.all_to_all(outs, xs[me], group=group)
    for i in range(n):
        same(outs[i], xs[i][me], "all_to_all from %d" % i)

    dist.barrier(group=group)

    objs = [{"rank": members[r], "pad": "x" * (10 * r)} for r in range(n)]
    got = [None] * n
    dist.all_gather_object(got, objs[me], group=group)
    same(got, objs, "all_gather_object")
    lst = [objs[0]["pad"], 3] if me == 0 else [None, None]
    dist.broadcast_object_list(lst, src=members[0], group=group)
    same(lst, [objs[0]["pad"], 3], "broadcast_object_list")
    got = [None] * n if me == n - 1 else None
    dist.gather_object(objs[me], got, dst=members[n - 1], group=group)
    if me == n - 1:
        same(got, objs, "gather_object")
    if group is dist.group.WORLD:  # torch 1.13 compares group and global ranks there
        out = [None]
        dist.scatter_object_list(out, objs if me == 0 else None, src=0)
        same(out[0], objs[me], "scatter_object_list")

    # point-to-point around the ring of the group
    if n > 1:
        call += 1
        xs = inputs((3, 3))
        nxt, prv = members[(me + 1) % n], members[(me - 1) % n]
        buf = torch.empty(3, 3)
        sw = dist.isend(xs[me], nxt, group=group, tag=7)
        rw = dist.irecv(buf, prv, group=group, tag=7)
        rw.wait()
        sw.wait()
        same(buf, xs[(me - 1) % n], "isend/irecv ring")
        # a receive that times out stays pending, and the message still arrives later
        buf = torch.empty(2)
        rw = dist.irecv(buf, prv, group=group, tag=9)
        try:
            rw.wait(timeout=datetime.timedelta(milliseconds=100))
        except RuntimeError as e:
            same("recv did not complete within 100 ms" in str(e), True, "recv timeout: %s" % e)
        else:
            raise AssertionError("a receive with no sender did not time out")
        dist.barrier(group=group)
        dist.send(xs[me][0, :2].clone(), nxt, group=group, tag=9)
        rw.wait()
        same(buf, xs[(me - 1) % n][0, :2], "recv after its timeout")
        if me == 0:
            for r in range(1, n):
                buf = torch.empty(2, dtype=torch.int64)
                src = dist.recv(buf, group=group, tag=3)
                same(buf, torch.tensor([src, 3]), "recv from any source")
        else:
            dist.send(torch.tensor([dist.get_rank(), 3]), members[0], group=group, tag=3)


def errors():
    """The bitwise ops run on integers and raise on floats, naming the op (as Gloo does)."""
    n, me = dist.get_world_size(), dist.get_rank()
    t = torch.tensor([1 << me, 7, me], dtype=torch.int32)
    dist.all_reduce(t, op=dist.ReduceOp.BOR)
    same(t, torch.tensor([(1 << n) - 1, 7, functools.reduce(operator.or_, range(n))],
                         dtype=torch.int32), "BOR on int32")
    t = torch.ones(2, dtype=torch.float32)
    try:
        dist.all_reduce(t, op=dist.ReduceOp.BAND)
    except RuntimeError as e:
        same("ReduceOp.BAND needs an integer or bool tensor, got Float" in str(e), True,
             "BAND on float32 raises: %s" % e)
    else:
        raise AssertionError("all_reduce with BAND on float32 did not raise")
    for op, want in ((dist.ReduceOp.AVG, "ReduceOp.AVG needs a floating-point tensor, got Long"),
                     (dist._make_nccl_premul_sum(2.0),
                      "ReduceOp.PREMUL_SUM needs a floating-point tensor, got Long")):
        try:
            dist.all_reduce(torch.ones(2, dtype=torch.int64), op=op)
        except RuntimeError as e:
            same(want in str(e), True, "%s raises: %s" % (want.split()[0], e))
        else:
            raise AssertionError("all_reduce with %s on int64 did not raise" % want.split()[0])
    t = torch.full((3,), float(me + 1))
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    same(t, torch.full((3,), n * (n + 1) / 4.0), "PREMUL_SUM by 0.5")


def main():
    dist.init_process_group("chorus")
    rank, size = dist.get_rank(), dist.get_world_size()
    same(dist.get_backend(), "chorus", "get_backend")
    collectives(dist.group.WORLD, list(range(size)))
    errors()
    # groups: every rank but 0, then the even ranks, then the world again
    for members in ([r for r in range(size) if r != 0] or [0], list(range(0, size, 2)),
                    list(range(size))):
        g = dist.new_group(members)
        if rank in members:
            collectives(g, members)
    if hasattr(dist, "split_group"):  # torch >= 2.8: splits of the world, ranks in given order
        parts = [list(range(size - 1, 0, -1)) or [0], [0]] if size > 1 else [[0]]
        g = dist.split_group(split_ranks=parts)
        mine = next(p for p in parts if rank in p)
        if g is not None and g != dist.GroupMember.NON_GROUP_MEMBER:
            same(dist.get_rank(g), mine.index(rank), "rank in the split")
            t = torch.tensor([float(rank)])
            dist.all_reduce(t, group=g)
            same(t, torch.tensor([float(sum(mine))]), "all_reduce in the split")
    dist.barrier()
    dist.destroy_process_group()
    print("torchdist colls: %d checks passed on rank %d of %d" % (checks, rank, size))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
