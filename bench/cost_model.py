#!/usr/bin/env python3
"""cost_model.py - the alpha-beta cost of Chorus's collective algorithms across hosts
(docs/COST_MODEL.md).

A job has h hosts of n ranks each (p = h*n, ranks numbered host by host). A message between
hosts costs alpha + bytes*beta, and a host's link carries its bytes one after another, so a
step in which several of a host's ranks send across hosts costs alpha + (their bytes)*beta.
Between ranks of one host over TCP: alpha_l, beta_l; through shared memory: alpha_s and a
per-byte cost of each shared-memory collective (beta_bc, beta_rs, beta_ag); folding costs gamma
per byte; a rank that sends k messages in one step spends k*o on them. Transfers inside a host
and across its link in the same step overlap.

    cost_model.py fit FILE       alpha and beta from the calibration rows of FILE, then each
                                 measured row against the model's prediction, with the error
    cost_model.py scale [FILE]   the prediction for 1,000 ranks on 8-rank hosts joined by
                                 100 Gbit/s links (with FILE: the measured shared-memory and
                                 fold costs of this machine as a second scenario)

FILE rows (bench/cost_model.sh writes them): "h n coll algo bytes time_us", with algo
"cal_*" for calibration runs.
"""
import math
import sys

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
SEG = 512 * KIB  # CHORUS_TCP_SEGMENT
ONESHOT_MAX = 32 * KIB  # CHORUS_TCP_ONESHOT_MAX
TREE_MAX = 256 * KIB  # CHORUS_BCAST_TREE_MAX
PIECE = 4 * SEG  # a round of the hierarchical allreduce: 4 segments of every slice
BURST = 256 * 1000  # tests/net/cluster.sh shapes with tbf burst 256kb


def log2c(x):
    return max(0, math.ceil(math.log2(x))) if x > 1 else 0


# ---- the model: each function returns seconds for S bytes on h hosts of n ranks -----------


def agree(P, p):
    """TCP broadcasts first agree on the call: dissemination, one header per round."""
    return log2c(p) * P["a"]


def ar_oneshot(P, h, n, S):
    p = h * n
    return P["a"] + (p - 1) * P["o"] + max(n * (p - n) * S * P["b"], (n - 1) * S * P["bl"]) + (p - 1) * S * P["g"]


def ring_steps(P, h, n, piece, steps):
    """steps ring steps of piece bytes: the ring crosses every host boundary, so each step
    waits for a piece to cross a link (or, with one host, a local hop)."""
    per = P["a"] + piece * P["b"] if h > 1 else P["al"] + piece * P["bl"]
    return steps * per


def ar_direct_ring(P, h, n, S):
    p = h * n
    rs = P["a"] + (p - 1) * P["o"] + max(n * (p - n) * S / p * P["b"], (n - 1) * S / p * P["bl"])
    return rs + (p - 1) * S / p * P["g"] + ring_steps(P, h, n, S / p, p - 1)


def ar_ring(P, h, n, S):
    p = h * n
    return 2 * ring_steps(P, h, n, S / p, p - 1) + (p - 1) * S / p * P["g"]


def ar_rd(P, h, n, S):
    """Recursive doubling: round k pairs ranks 2^k apart; a round is local while 2^k < n.
    A world that is no power of two adds a fold-in and a copy-out round."""
    p = h * n
    t = 0.0
    for k in range(int(math.log2(p)) if p & (p - 1) == 0 else log2c(p) - 1):
        d = 1 << k
        t += (P["al"] + S * P["bl"]) if d < n else (P["a"] + n * S * P["b"])
        t += S * P["g"]
    if p & (p - 1):
        t += 2 * (P["a"] + n * S * P["b"])
    return t


def shm_rs(P, n, S):
    return 0.0 if n == 1 else P["as"] + (n - 1) / n * S * P["brs"]


def shm_ag(P, n, S):
    return 0.0 if n == 1 else P["as"] + (n - 1) / n * S * P["bag"]


def shm_bc(P, n, S):
    return 0.0 if n == 1 else P["as"] + S * P["bbc"]


def ar_hier(P, h, n, S):
    """Reduce-scatter over shared memory, each slice of S/n allreduced among its owners (one
    per host; the n slices cross the link at once), allgather over shared memory. Slices up to
    CHORUS_TCP_ONESHOT_MAX: the three steps once, the middle one one-shot. Larger: in rounds of
    a piece of every slice (PIECE bytes each), pipelined: while one piece crosses the link (a
    direct reduce-scatter and a direct allgather among the hosts), the next is reduced and the
    previous copied out over shared memory, so a round costs the slower of the two."""
    s = S / n
    if s <= ONESHOT_MAX:
        inter = P["a"] + (h - 1) * P["o"] + (h - 1) * S * P["b"] + (h - 1) * s * P["g"]
        return shm_rs(P, n, S) + inter + shm_ag(P, n, S)
    rounds = math.ceil(s / PIECE)
    r = S / rounds  # bytes of one round, all slices
    link = 2 * (P["a"] + (h - 1) * P["o"]) + 2 * (h - 1) / h * r * P["b"] + (h - 1) / h * r / n * P["g"]
    shm = shm_rs(P, n, r) + shm_ag(P, n, r)
    return shm_rs(P, n, r) + rounds * max(link, shm) + shm_ag(P, n, r)


def tree_rounds(P, h, n, S):
    """Binomial tree from rank 0 (patterns.h): a rank forwards as soon as it has the data, to
    its children farthest first. A host's link sends one message at a time (its ranks' sends
    across hosts queue on it); a rank's sends inside the host queue on that rank."""
    p = h * n
    below = 1
    while below < p:
        below <<= 1
    got = {0: 0.0}
    link_free = [0.0] * h
    order = [0]
    for v in order:  # parents before children: children have larger numbers
        t = got[v]
        low = below if v == 0 else v & -v
        local_free = t
        m = low >> 1
        while m > 0:
            c = v + m
            if c < p:
                if c // n != v // n:
                    start = max(t, link_free[v // n])
                    link_free[v // n] = start + S * P["b"]
                    got[c] = start + S * P["b"] + P["a"]
                else:
                    local_free += S * P["bl"]
                    got[c] = local_free + P["al"]
                order.append(c)
            m >>= 1
    return max(got.values())


def chain(P, h, n, S):
    """Pipelined chain in rank order, segments of SEG bytes: the first segment passes every
    hop, the others follow at the pace of the slowest hop (one that crosses a link)."""
    p = h * n
    m = max(1, math.ceil(S / SEG))
    s = S / m
    cross, local = h - 1, p - 1 - (h - 1)
    # A link idle until the first segment reaches it sends its token bucket's burst at once
    # (tbf on the test cluster; P["burst"] is 0 for real links): only the first link does not.
    first = P["a"] + s * P["b"]
    later = P["a"] + max(0.0, s - P.get("burst", 0.0)) * P["b"]
    fill = (first + (cross - 1) * later if cross else 0.0) + local * (P["al"] + s * P["bl"])
    return fill + (m - 1) * s * (P["b"] if h > 1 else P["bl"])


def bc_tree(P, h, n, S):
    return agree(P, h * n) + tree_rounds(P, h, n, S)


def bc_chain(P, h, n, S):
    return agree(P, h * n) + chain(P, h, n, S)


def bc_leaders(P, h, S):
    """Among the hosts' lowest ranks (one per host), by Chorus's size rule."""
    return agree(P, h) + (tree_rounds(P, h, 1, S) if S <= TREE_MAX else chain(P, h, 1, S))


def bc_hier(P, h, n, S):
    return shm_bc(P, n, S) + bc_leaders(P, h, S) + shm_bc(P, n, S)


def ag_ring(P, h, n, S):
    p = h * n
    return ring_steps(P, h, n, S / p, p - 1)


def ag_hier(P, h, n, S):
    """Each host gathers its ranks' blocks (S/h) over shared memory, the leaders broadcast each
    host's piece in turn, and each host's lowest rank hands the others' pieces out."""
    p = h * n
    local = 0.0 if n == 1 else P["as"] + (n - 1) * S / p * P["bag"]
    leaders = h * bc_leaders(P, h, S / h)
    out = 0.0 if n == 1 else 2 * P["as"] + (h - 1) / h * S * P["bbc"]
    return local + leaders + out


MODEL = {
    ("allreduce", "oneshot"): ar_oneshot,
    ("allreduce", "direct_ring"): ar_direct_ring,
    ("allreduce", "ring"): ar_ring,
    ("allreduce", "rd"): ar_rd,
    ("allreduce", "hier"): ar_hier,
    ("broadcast", "tree"): bc_tree,
    ("broadcast", "chain"): bc_chain,
    ("broadcast", "hier"): bc_hier,
    ("allgather", "ring"): ag_ring,
    ("allgather", "hier"): ag_hier,
}


def link_bytes(coll, algo, h, n, S):
    """Bytes each host's link carries each way (the most loaded host), for the docs' table."""
    p = h * n
    if coll == "allreduce":
        return {
            "oneshot": n * (p - n) * S,
            "direct_ring": n * (p - n) * S / p + (p - 1) * S / p,
            "ring": 2 * (p - 1) * S / p,
            "hier": (h - 1) * S if S / n <= ONESHOT_MAX else 2 * (h - 1) / h * S,
        }.get(algo)
    return None


# ---- fitting ---------------------------------------------------------------------------------


def read(path):
    rows = []
    for line in open(path):
        f = line.split()
        if len(f) != 6 or line.startswith("#"):
            continue
        h, n, coll, algo, S, us = int(f[0]), int(f[1]), f[2], f[3], int(f[4]), f[5]
        if us in ("failed", "n/a"):
            rows.append((h, n, coll, algo, S, None))
        else:
            rows.append((h, n, coll, algo, S, float(us) * 1e-6))
    return rows


def slope(points):
    """Least-squares line through (x, y): (intercept, slope)."""
    k = len(points)
    mx = sum(x for x, _ in points) / k
    my = sum(y for _, y in points) / k
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx if sxx else my / mx
    return my - b * mx, b


def fit(rows):
    cal = {}
    for h, n, coll, algo, S, t in rows:
        if algo.startswith("cal_") and t is not None:
            cal.setdefault(algo, []).append((S, t))
    need = ("cal_alpha", "cal_beta", "cal_alpha_l", "cal_beta_l", "cal_alpha_s", "cal_shm_bc",
            "cal_shm_rs", "cal_shm_ag")
    missing = [k for k in need if k not in cal]
    if missing:
        sys.exit("cost_model: calibration rows missing: " + " ".join(missing))
    # Each calibration is run more than once: the quickest run of each size is the one least
    # disturbed by the machine's other work.
    for k, pts in cal.items():
        best = {}
        for S, t in pts:
            best[S] = min(t, best.get(S, t))
        cal[k] = sorted(best.items())
    P = {"a": cal["cal_alpha"][0][1], "al": cal["cal_alpha_l"][0][1], "as": cal["cal_alpha_s"][0][1]}
    # A chain of 2 ranks streams its segments: t = agreement + alpha + S*beta.
    P["b"] = max(1e-12, slope(cal["cal_beta"])[1])
    P["bl"] = max(1e-12, slope(cal["cal_beta_l"])[1])
    per = lambda k, frac: max(1e-13, sum((t - P["as"]) / (S * frac) for S, t in cal[k]) / len(cal[k]))
    P["bbc"] = per("cal_shm_bc", 1.0)
    P["brs"] = per("cal_shm_rs", 0.5)  # 2 ranks: each reads and folds half
    P["bag"] = per("cal_shm_ag", 0.5)
    P["g"] = max(0.0, P["brs"] - P["bag"])  # the reduce-scatter's extra over the allgather: folding
    # One-shot on 4 x 2 sends 7 messages per rank where 2 x 1 sends one.
    P["o"] = max(0.0, (cal["cal_o"][0][1] - P["a"]) / 6) if "cal_o" in cal else 0.0
    P["burst"] = BURST
    return P


def show_params(P, out=sys.stdout):
    gbs = lambda b: 1 / b / 1e9
    print("| parameter | value | from |", file=out)
    print("|---|---|---|", file=out)
    print(f"| alpha (between hosts) | {P['a'] * 1e6:.0f} us | allreduce of 8 B, 2 hosts x 1 rank |", file=out)
    print(f"| beta (a host's link) | 1/({gbs(P['b']):.3f} GB/s) | broadcast (chain) 4-16 MiB, 2 hosts x 1 rank |", file=out)
    print(f"| alpha_l, beta_l (TCP in a host) | {P['al'] * 1e6:.0f} us, 1/({gbs(P['bl']):.2f} GB/s) | the same, 2 ranks on one host, CHORUS_SHM=0 |", file=out)
    print(f"| alpha_s (shared memory) | {P['as'] * 1e6:.1f} us | allreduce of 8 B, 2 ranks on one host |", file=out)
    print(f"| beta_bc, beta_rs, beta_ag (shared memory) | 1/({gbs(P['bbc']):.2f}), 1/({gbs(P['brs']):.2f}), 1/({gbs(P['bag']):.2f} GB/s) | broadcast, reduce-scatter, allgather of 16 MiB, 2 ranks on one host |", file=out)
    g = f"1/({gbs(P['g']):.2f} GB/s)" if P["g"] > 0 else "0"
    print(f"| gamma (fold) | {g} | beta_rs - beta_ag |", file=out)
    print(f"| burst of an idle shaped link | {P['burst'] / 1e3:.0f} kB | tbf's burst in tests/net/cluster.sh |", file=out)
    print(f"| o (per message sent in one step) | {P['o'] * 1e6:.1f} us | allreduce of 8 B one-shot, 4 hosts x 2 ranks against 2 x 1 |", file=out)


def cmd_fit(path):
    rows = read(path)
    P = fit(rows)
    show_params(P)
    print()
    print("| hosts x ranks | collective | algorithm | bytes | measured (ms) | model (ms) | error |")
    print("|---|---|---|---|---|---|---|")
    errs = []
    for h, n, coll, algo, S, t in rows:
        if algo.startswith("cal_") or (coll, algo) not in MODEL:
            continue
        m = MODEL[(coll, algo)](P, h, n, S)
        size = f"{S >> 20} MiB" if S >= MIB else f"{S >> 10} KiB"
        if t is None:
            print(f"| {h} x {n} | {coll} | {algo} | {size} | failed | {m * 1e3:.1f} | |")
            continue
        err = (m - t) / t
        errs.append(abs(err))
        print(f"| {h} x {n} | {coll} | {algo} | {size} | {t * 1e3:.1f} | {m * 1e3:.1f} | {100 * err:+.0f}% |")
    if errs:
        errs.sort()
        print()
        print(f"{len(errs)} predictions: median |error| {100 * errs[len(errs) // 2]:.0f}%, "
              f"90th percentile {100 * errs[int(0.9 * (len(errs) - 1))]:.0f}%, "
              f"largest {100 * errs[-1]:.0f}%")


def scenario_100g(shm_gbs, fold_gbs):
    return {"a": 25e-6, "o": 2e-6, "b": 1 / 11.5e9, "al": 10e-6, "bl": 1 / 20e9, "as": 3e-6,
            "bbc": 1 / shm_gbs, "brs": 1 / shm_gbs + 1 / fold_gbs, "bag": 1 / shm_gbs,
            "g": 1 / fold_gbs}


def cmd_scale(path=None):
    h, n = 125, 8
    scen = [("device-class memory within a host (100 GB/s per rank, folds at 200 GB/s)",
             scenario_100g(100e9, 200e9))]
    if path:
        M = fit(read(path))
        here = dict(scenario_100g(1 / M["bbc"], 1 / M["g"] if M["g"] > 0 else 1e12))
        here.update({"as": M["as"], "bbc": M["bbc"], "brs": M["brs"], "bag": M["bag"], "g": M["g"]})
        scen.append(("this machine's shared memory and folding (measured)", here))
    for title, P in scen:
        print(f"\n### 1,000 ranks = {h} hosts x {n}, 100 Gbit/s links; {title}\n")
        print(f"alpha {P['a'] * 1e6:.0f} us, o {P['o'] * 1e6:.0f} us, beta 1/({1 / P['b'] / 1e9:.1f} GB/s) between hosts; "
              f"alpha_l {P['al'] * 1e6:.0f} us, beta_l 1/({1 / P['bl'] / 1e9:.0f} GB/s) TCP in a host; "
              f"alpha_s {P['as'] * 1e6:.0f} us, shared-memory copy 1/({1 / P['bbc'] / 1e9:.0f} GB/s), "
              f"fold {'1/(%.0f GB/s)' % (1 / P['g'] / 1e9) if P['g'] > 0 else '0'}\n")
        for coll, algos in (("allreduce", ("oneshot", "direct_ring", "ring", "rd", "hier")),
                            ("broadcast", ("tree", "chain", "hier")),
                            ("allgather", ("ring", "hier"))):
            print(f"| {coll} | " + " | ".join(algos) + " | picks |")
            print("|---" * (len(algos) + 2) + "|")
            for S in (8, 4 * KIB, 256 * KIB, 4 * MIB, 64 * MIB, 1 * GIB):
                if coll == "allgather" and S < h * n:
                    continue
                ts = {a: MODEL[(coll, a)](P, h, n, S) for a in algos}
                best = min(ts, key=ts.get)
                size = f"{S >> 30} GiB" if S >= GIB else f"{S >> 20} MiB" if S >= MIB else \
                    f"{S >> 10} KiB" if S >= KIB else f"{S} B"
                cells = " | ".join(fmt(ts[a]) for a in algos)
                print(f"| {size} | {cells} | {best} |")
            print()


def fmt(t):
    if t >= 1:
        return f"{t:.2f} s"
    if t >= 1e-3:
        return f"{t * 1e3:.1f} ms"
    return f"{t * 1e6:.0f} us"


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "fit":
        cmd_fit(sys.argv[2])
    elif len(sys.argv) >= 2 and sys.argv[1] == "scale":
        cmd_scale(sys.argv[2] if len(sys.argv) > 2 else None)
    else:
        sys.exit(__doc__)
