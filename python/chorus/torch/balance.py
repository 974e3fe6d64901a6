"""Speed-proportional batches: BalancedDistributedSampler and the rule that sizes the shares.

Synchronous data parallelism runs at the speed of its slowest rank. Here the global batch of
a step (global_batch_size samples, fixed) is cut into one contiguous range per rank whose size
follows that rank's measured speed, so every rank finishes its part at about the same time.
DistributedOptimizer(..., sampler=sampler) then weights each rank's gradient by the samples it
took (n_i / n), so a step is still exactly the step of the whole global batch.

The rule (balanced_shares; chorus-train --balance dynamic applies the same one, see
docs/LOAD_BALANCING.md):
  1. t_i, rank i's compute time per sample, is measured over the steps since the last
     re-balance and smoothed: T_i = 0.5 * t_i + 0.5 * T_i (the first measurement is taken as
     it is). Every rank allgathers the t_i, so all ranks hold the same T.
  2. The speed of rank i is s_i = 1 / T_i; its exact part is q_i = G * s_i / (s_0 + ... +
     s_{n-1}) (sums in rank order, in IEEE double).
  3. share_i = floor(q_i); the G - sum(share) samples left go one each to the ranks with the
     largest fractional parts q_i - floor(q_i), ties to the lower rank.
  4. While a rank has 0, one sample is taken from the largest share (ties: the lower rank)
     and given to the lowest rank with 0. So every share is >= 1 and they sum to G.
The arithmetic is deterministic, so every rank computes the same shares from the same
allgathered values without further agreement.
"""

import contextlib
import math
import time

import torch

from .. import _core
from . import mpi_ops

__all__ = ["BalancedDistributedSampler", "balanced_shares"]

_WHO = "chorus BalancedDistributedSampler"


def balanced_shares(seconds_per_sample, total):
    """Integer shares of `total` samples proportional to the speeds 1/seconds_per_sample[i],
    each at least 1, summing exactly to total (the rule in this module's text).

    seconds_per_sample: one positive finite number per rank. total: an int >= the number of
    ranks. Returns a list of ints. Raises ValueError on a non-positive or non-finite time or
    a total smaller than the number of ranks."""
    t = [float(x) for x in seconds_per_sample]
    n = len(t)
    if n == 0:
        raise ValueError("chorus balanced_shares: no ranks")
    if total < n:
        raise ValueError("chorus balanced_shares: %d samples cannot give each of %d ranks one"
                         % (total, n))
    for i, x in enumerate(t):
        if not (math.isfinite(x) and x > 0):
            raise ValueError("chorus balanced_shares: rank %d's time per sample is %r; it must "
                             "be positive and finite" % (i, x))
    return _split(total, [1.0 / x for x in t])


def _split(total, speeds):
    """Largest-remainder split of total proportional to speeds, then a minimum of 1 each."""
    s = 0.0
    for x in speeds:
        s += x
    exact = [total * x / s for x in speeds]
    shares = [int(math.floor(q)) for q in exact]
    left = total - sum(shares)
    by_fraction = sorted(range(len(shares)), key=lambda i: (-(exact[i] - shares[i]), i))
    for i in by_fraction[:left]:
        shares[i] += 1
    for i in range(len(shares)):
        if shares[i] == 0:
            big = max(range(len(shares)), key=lambda j: (shares[j], -j))
            shares[big] -= 1
            shares[i] = 1
    return shares


def _even(total, n):
    return _split(total, [1.0] * n)


class BalancedDistributedSampler(torch.utils.data.Sampler):
    """Hands each rank its range of every global batch, sized by per-rank shares.

    A batch sampler: DataLoader(dataset, batch_sampler=sampler). Each epoch the dataset's
    indices are put in one order (a permutation seeded by seed + epoch when shuffle, as
    torch's DistributedSampler), and cut into global batches of global_batch_size samples in
    that order; rank r takes the range of a global batch that starts after the shares of ranks
    0..r-1 and holds shares[r] samples. Every index of an epoch is thus served exactly once,
    to one rank, whatever the shares and however often they change. An iteration goes on
    from where the last one stopped (the position is in state_dict()), so once an epoch is
    done, iterating again gives nothing until set_epoch() (as horovod's ElasticSampler).
    The last global batch holds what is left: with drop_last it is dropped when short;
    otherwise it is split by the same rule in proportion to the current shares, and a
    remainder too small to give every rank one sample joins the batch before it.

    The shares start even. update(shares) sets them (identically on every rank);
    measure() / record() take this rank's compute time, and rebalance() (a collective,
    called by record() every rebalance_every steps) allgathers the times per sample, smooths
    them and recomputes the shares (balanced_shares). New shares apply from the next batch
    the sampler hands out.

    The sampler assumes each batch is trained as soon as it is handed out: a DataLoader
    without workers (num_workers=0, the default), or iterating the sampler directly. Workers
    fetch batches ahead, and then the weight DistributedOptimizer(sampler=) reads, the
    default samples of record() and the position in state_dict() would be those of a later
    batch: with workers, weight with set_local_samples(len(x), total) and checkpoint at
    epoch ends.

    dataset: anything with len(). global_batch_size: samples per step over all ranks (>= the
    number of ranks). num_replicas, rank: default chorus.torch's size() and rank(), read
    afresh each time (so an elastic job that changes size re-balances; under
    `chorus-run --elastic` the sampler can be made before the job forms). shuffle, seed,
    drop_last: as DistributedSampler. rebalance_every: steps between re-balances (0: only when
    rebalance() is called). alpha: the smoothing weight of a new measurement. clock: what
    measure() reads, wall time by default (a rank slowed by a competing process is slow);
    time.thread_time counts only this thread's own CPU time.
    """

    def __init__(self, dataset, global_batch_size, num_replicas=None, rank=None, shuffle=True,
                 seed=0, drop_last=False, rebalance_every=20, alpha=0.5,
                 clock=time.perf_counter):
        if (num_replicas is None) != (rank is None):
            raise ValueError("%s: give both num_replicas and rank, or neither" % _WHO)
        if num_replicas is None and not (_core.is_initialized() or _core.elastic_pending()):
            raise ValueError("%s: call chorus.torch.init() first, or pass num_replicas and "
                             "rank" % _WHO)
        if num_replicas is not None and not 0 <= rank < num_replicas:
            raise ValueError("%s: rank %d is not in [0, %d)" % (_WHO, rank, num_replicas))
        if not 0.0 < alpha <= 1.0:
            raise ValueError("%s: alpha %r is not in (0, 1]" % (_WHO, alpha))
        self.dataset = dataset
        self.global_batch_size = int(global_batch_size)
        self._fixed = None if num_replicas is None else (int(num_replicas), int(rank))
        self.shuffle, self.seed, self.drop_last = shuffle, int(seed), drop_last
        self.rebalance_every, self.alpha = int(rebalance_every), float(alpha)
        self.clock = clock
        self.epoch = 0
        self.cursor = 0           # samples of this epoch's order already handed out (all ranks)
        self.shares = []
        self.seconds_per_sample = None  # the smoothed T_i, once measured
        self.seconds_by_worker = {}     # the same by worker (rank, or elastic worker id)
        self.worker_id = None           # () -> this rank's worker id; None: the rank
        self.rebalances = 0
        self.last_batch = None    # (this rank's samples, the global batch's) of the last batch
        self._spent, self._samples, self._steps = 0.0, 0, 0
        if self._fixed or _core.is_initialized():  # else in an elastic job, once it forms
            self._check_world()

    # ---- who we are ---------------------------------------------------------------------
    @property
    def num_replicas(self):
        return self._fixed[0] if self._fixed else mpi_ops.size()

    @property
    def rank(self):
        return self._fixed[1] if self._fixed else mpi_ops.rank()

    def _check_world(self):
        """Even shares when the number of ranks is not the one the shares were made for
        (first use, a checkpoint of another size, an elastic membership change): the times
        by rank belong to a numbering that no longer exists (those by worker stay, for
        adopt_workers())."""
        n = self.num_replicas
        if not self.drop_last and len(self.dataset) < n:
            raise ValueError("%s: the dataset has %d samples, fewer than the %d ranks"
                             % (_WHO, len(self.dataset), n))
        if self.global_batch_size < n:
            raise ValueError("%s: global_batch_size %d is smaller than the %d ranks; every "
                             "rank needs at least one sample per step"
                             % (_WHO, self.global_batch_size, n))
        if len(self.shares) != n:
            self.shares = _even(self.global_batch_size, n)
            self.seconds_per_sample = None
            if self.worker_id is None:  # keyed by rank: as stale as the rest
                self.seconds_by_worker = {}
            self._spent, self._samples, self._steps = 0.0, 0, 0

    # ---- the data -------------------------------------------------------------------------
    def set_epoch(self, epoch):
        """Starts epoch `epoch` (its own order when shuffle) from its first sample."""
        self.epoch = int(epoch)
        self.cursor = 0

    def _order(self):
        n = len(self.dataset)
        if not self.shuffle:
            return list(range(n))
        g = torch.Generator()
        g.manual_seed(self.seed + self.epoch)
        return torch.randperm(n, generator=g).tolist()

    def _step_size(self, rest):
        """Samples in the next global batch when `rest` are left; 0 when the epoch ends."""
        G, n = self.global_batch_size, self.num_replicas
        if rest < G:
            return 0 if self.drop_last or rest == 0 else rest
        if not self.drop_last and 0 < rest - G < n:
            return rest  # a remainder too small for one sample per rank joins this batch
        return G

    def __iter__(self):
        self._check_world()
        order = self._order()
        while True:
            take = self._step_size(len(order) - self.cursor)
            if take == 0:
                return
            shares = self.shares if take == self.global_batch_size else _split(take,
                                                                               self.shares)
            r = self.rank
            start = self.cursor + sum(shares[:r])
            batch = order[start:start + shares[r]]
            self.cursor += take
            self.last_batch = (len(batch), take)
            yield batch

    def __len__(self):
        """Batches (steps) left in this epoch."""
        rest = len(self.dataset) - self.cursor
        steps = 0
        while True:
            take = self._step_size(rest)
            if take == 0:
                return steps
            rest -= take
            steps += 1

    def batch_weight(self):
        """n_i / n for the last batch handed out: this rank's samples over the global batch's
        (the weight DistributedOptimizer gives this rank's gradient). None before the first."""
        if self.last_batch is None:
            return None
        mine, total = self.last_batch
        return mine / total

    # ---- the shares -----------------------------------------------------------------------
    def update(self, shares):
        """Sets the shares (one int >= 1 per rank, summing to global_batch_size). Every rank
        must pass the same list; they apply from the next batch."""
        shares = [int(s) for s in shares]
        if len(shares) != self.num_replicas:
            raise ValueError("%s: %d shares for %d ranks" % (_WHO, len(shares),
                                                            self.num_replicas))
        if sum(shares) != self.global_batch_size or min(shares) < 1:
            raise ValueError("%s: shares %s must each be >= 1 and sum to the global batch "
                             "size %d" % (_WHO, shares, self.global_batch_size))
        self.shares = shares

    @contextlib.contextmanager
    def measure(self, samples=None):
        """Times the block (this rank's forward and backward of the batch, not the optimizer
        step, which waits for the other ranks) and record()s it."""
        t0 = self.clock()
        yield
        self.record(self.clock() - t0, samples)

    def record(self, seconds, samples=None):
        """Adds `seconds` of compute on `samples` samples (default: this rank's last batch)
        to the current measurement. Every rebalance_every-th call ends with rebalance(), a
        collective: every rank must call record() once per step."""
        if samples is None:
            samples = self.last_batch[0] if self.last_batch else 0
        self._spent += float(seconds)
        self._samples += int(samples)
        self._steps += 1
        if self.rebalance_every > 0 and self._steps % self.rebalance_every == 0:
            self.rebalance()

    def rebalance(self):
        """A collective: allgathers every rank's compute time per sample since the last
        re-balance, smooths it and recomputes the shares (the module's rule). A rank that
        measured nothing keeps its smoothed time; the shares stay as they are until every
        rank has one. Returns the shares."""
        self._check_world()
        mine = self._spent / self._samples if self._samples > 0 and self._spent > 0 else 0.0
        me = self.rank if self.worker_id is None else self.worker_id()
        got = mpi_ops.allgather(torch.tensor([[mine, me]], dtype=torch.float64)).tolist()
        self.rebalances += 1
        self._spent, self._samples = 0.0, 0
        smooth = []
        for t, w in got:
            prev = self.seconds_by_worker.get(int(w))
            if not (math.isfinite(t) and t > 0):
                smooth.append(prev)
            elif prev is None:
                smooth.append(t)
            else:
                smooth.append(self.alpha * t + (1.0 - self.alpha) * prev)
            if smooth[-1] is not None:
                self.seconds_by_worker[int(w)] = smooth[-1]
        self.seconds_per_sample = smooth
        if all(x is not None for x in smooth):
            self.shares = balanced_shares(smooth, self.global_batch_size)
        return list(self.shares)

    def adopt_workers(self, workers):
        """Shares for these workers (one id per rank, in rank order, the same list on every
        rank) from the times measured for them so far, so that a new set of ranks starts
        balanced: a worker not measured yet counts at the mean time of the others; with
        none measured the shares stay even. Used by chorus.torch.elastic after a membership
        change."""
        self._check_world()
        known = [self.seconds_by_worker.get(int(w)) for w in workers]
        got = [t for t in known if t is not None]
        if len(workers) != self.num_replicas or not got:
            return list(self.shares)
        mean = sum(got) / len(got)
        self.seconds_per_sample = [mean if t is None else t for t in known]
        self.shares = balanced_shares(self.seconds_per_sample, self.global_batch_size)
        return list(self.shares)

    # ---- checkpoints ----------------------------------------------------------------------
    def state_dict(self):
        """The epoch, the position in it, the shares and the smoothed times, by rank and by
        worker (plain Python values: torch.save or json can write them)."""
        return {"epoch": self.epoch, "cursor": self.cursor, "seed": self.seed,
                "global_batch_size": self.global_batch_size, "shares": list(self.shares),
                "seconds_per_sample": (None if self.seconds_per_sample is None
                                       else list(self.seconds_per_sample)),
                "seconds_by_worker": sorted([w, t] for w, t in self.seconds_by_worker.items()),
                "rebalances": self.rebalances}

    def load_state_dict(self, state):
        """Resumes from state_dict(): the same epoch, position and shares. With another
        number of ranks the shares start even for the new ranks (see _check_world; an
        elastic job then calls adopt_workers())."""
        if int(state["global_batch_size"]) != self.global_batch_size:
            raise ValueError("%s: the checkpoint's global batch size is %d, this sampler's %d; "
                             "the position in the epoch would not mean the same samples"
                             % (_WHO, state["global_batch_size"], self.global_batch_size))
        self.epoch, self.cursor = int(state["epoch"]), int(state["cursor"])
        self.seed = int(state["seed"])
        self.shares = list(state["shares"])
        t = state["seconds_per_sample"]
        self.seconds_per_sample = None if t is None else list(t)
        self.seconds_by_worker = {int(w): float(t) for w, t in state["seconds_by_worker"]}
        self.rebalances = int(state["rebalances"])
        self._spent, self._samples, self._steps = 0.0, 0, 0
        self.last_batch = None
        self._check_world()
