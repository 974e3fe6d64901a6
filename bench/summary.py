#!/usr/bin/python3
"""summary: the cells of bench/summary.sh's runs, their file, the check against the previous
run, and docs/PERFORMANCE.md's summary section.

  summary.py --out DIR --repeat R --tsv FILE [--tol 15] [--write 0|1] [--doc FILE]
             [--command CMD] [--wall S] [--params TEXT]
  summary.py --compare OLD.tsv NEW.tsv [--tol 15]

DIR holds the raw outputs summary.sh leaves (chorus-bench and bench/mpi_allreduce sweeps,
train_compare.sh result lines, chorus-train metrics, membw, topology). Every cell is the median
of its rounds, with min, max and spread = (max - min) / median in per cent. A ratio is taken
within each round (its two runs ran one after the other) and the median of those is reported.
The cells are written to --tsv; the newest earlier .tsv in the same folder (by name: UTC
stamps) of the same host and knobs (else the newest, with a note) is compared cell by cell, and each median is said to be within --tol per cent
of the earlier one or not. --write 1 replaces the text between the bench-summary markers of
--doc with the host, the command and the table.
"""
import argparse
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchtab  # noqa: E402  (bench/benchtab.py parses the sweeps)

BEGIN = "<!-- bench-summary:begin -->"
END = "<!-- bench-summary:end -->"
MIB = 1 << 20
SHM_SIZES = [(4, "4 B"), (MIB, "1 MiB"), (16 * MIB, "16 MiB"), (64 * MIB, "64 MiB")]
TCP_SIZES = [(4, "4 B"), (16 * MIB, "16 MiB"), (64 * MIB, "64 MiB")]
BOUND_SIZES = (16 * MIB, 64 * MIB)  # beyond the caches: the memory bound means something


class Cell:
    def __init__(self, key, unit, better, values):
        self.key, self.unit, self.better = key, unit, better
        self.values = values  # one per round, None where that run failed

    def ok(self):
        return [v for v in self.values if v is not None]

    def stats(self):
        v = self.ok()
        if not v:
            return None
        med = statistics.median(v)
        spread = 100.0 * (max(v) - min(v)) / med if med else 0.0
        return med, min(v), max(v), spread


def sweep(out, name, r):
    rows = {}
    for part in ("small", "big"):
        rows.update(benchtab.parse_output(f"{out}/{name}.{part}.{r}.txt"))
    return rows


def div(a, b):
    return a / b if a is not None and b else None


def train_results(path):
    res = {}
    try:
        for line in open(path):
            f = line.split()
            if len(f) == 2:
                v = float(f[1])
                res[f[0]] = v if v > 0 else None
    except (OSError, ValueError):
        pass
    return res


def steps_seconds(path):
    """Training seconds of all steps in rank 0's chorus-train metrics, and the last shares."""
    total, n, shares = 0.0, 0, None
    try:
        for line in open(path):
            if not line.startswith('{"step"'):
                continue
            r = json.loads(line)
            total += r["step_s"]
            n += 1
            if "ranks" in r:
                shares = [k.get("share") for k in r["ranks"]]
    except (OSError, ValueError, KeyError):
        return None, None
    return (total if n else None), shares


def collect(out, repeat):
    rounds = range(1, repeat + 1)
    bound_bw = None
    if os.path.exists(f"{out}/membw.txt"):
        bound_bw, _ = benchtab.membw_sum(f"{out}/membw.txt")
    bound = bound_bw * (2 - 1) / 2 ** 2 if bound_bw else None  # busbw at P=2
    cells = []
    for part, sizes in (("shm", SHM_SIZES), ("tcp", TCP_SIZES)):
        ch = [sweep(out, f"{part}.chorus", r) for r in rounds]
        om = [sweep(out, f"{part}.ompi", r) for r in rounds]
        if not any(ch) and not any(om):
            continue
        for size, _ in sizes:
            ct = [c.get(size, (None, None))[0] for c in ch]
            ot = [o.get(size, (None, None))[0] for o in om]
            cells.append(Cell(f"{part}.{size}.chorus_us", "us", "lower", ct))
            cells.append(Cell(f"{part}.{size}.ompi_us", "us", "lower", ot))
            cells.append(Cell(f"{part}.{size}.speedup", "x", "higher",
                              [div(o, c) for c, o in zip(ct, ot)]))
            if part == "shm" and size in BOUND_SIZES and bound:
                bw = [c.get(size, (None, None))[1] for c in ch]
                cells.append(Cell(f"shm.{size}.pct_bound", "%", "higher",
                                  [100.0 * b / bound if b is not None else None for b in bw]))
    tr = [train_results(f"{out}/train.{r}.results") for r in rounds]
    if any(tr):
        for name in ("chorus_2_fused", "chorus_2_engine", "chorus_1_half", "chorus_1", "ddp_2",
                     "plain_2t", "plain_2t_tuned"):
            if any(name in t for t in tr):  # plain_2t (as installed) only with TORCH_DEFAULT=1
                cells.append(Cell(f"train.{name}", "samples/s", "higher",
                                  [t.get(name) for t in tr]))
        best_plain = [max([v for v in (t.get("plain_2t"), t.get("plain_2t_tuned")) if v] or [0])
                      or None for t in tr]
        cells.append(Cell("train.plain_2t_best", "samples/s", "higher", best_plain))
        # the default gradient synchronisation (fused) and the engine's (--grad-sync engine)
        for sync, sfx in (("fused", ""), ("engine", ".engine")):
            if not any(f"chorus_2_{sync}" in t for t in tr):
                continue
            c2 = [t.get(f"chorus_2_{sync}") for t in tr]
            cells.append(Cell(f"train.vs_ddp{sfx}", "x", "higher",
                              [div(c, t.get("ddp_2")) for c, t in zip(c2, tr)]))
            cells.append(Cell(f"train.vs_plain_2t{sfx}", "x", "higher",
                              [div(c, p) for c, p in zip(c2, best_plain)]))
            cells.append(Cell(f"train.efficiency_per_rank_batch{sfx}", "", "higher",
                              [div(c, 2 * t["chorus_1_half"]) if t.get("chorus_1_half") else None
                               for c, t in zip(c2, tr)]))
            cells.append(Cell(f"train.efficiency_global_batch{sfx}", "", "higher",
                              [div(c, 2 * t["chorus_1"]) if t.get("chorus_1") else None
                               for c, t in zip(c2, tr)]))
    for model in ("mlp", "cnn"):
        for case in ("busy", "equal"):
            t = {p: [steps_seconds(f"{out}/bal.{model}.{case}.{p}.{r}.jsonl")[0] for r in rounds]
                 for p in ("static", "dynamic")}
            if not any(t["static"] + t["dynamic"]):
                continue
            for p in ("static", "dynamic"):
                cells.append(Cell(f"balance.{model}.{case}.{p}_s", "s", "lower", t[p]))
            cells.append(Cell(f"balance.{model}.{case}.speedup", "x", "higher",
                              [div(s, d) for s, d in zip(t["static"], t["dynamic"])]))
            if case == "busy":
                sh = [steps_seconds(f"{out}/bal.{model}.busy.dynamic.{r}.jsonl")[1] for r in rounds]
                cells.append(Cell(f"balance.{model}.busy.rank1_share", "%", "none",
                                  [100.0 * s[1] / sum(s) if s and all(s) else None for s in sh]))
    return cells, bound_bw


def write_tsv(path, cells, header):
    with open(path, "w") as f:
        for h in header:
            f.write(f"# {h}\n")
        f.write("cell\tunit\tbetter\tmedian\tmin\tmax\tspread_pct\tn\truns\n")
        for c in cells:
            s = c.stats()
            runs = ",".join("-" if v is None else f"{v:.6g}" for v in c.values)
            if s:
                f.write(f"{c.key}\t{c.unit}\t{c.better}\t{s[0]:.6g}\t{s[1]:.6g}\t{s[2]:.6g}\t"
                        f"{s[3]:.1f}\t{len(c.ok())}\t{runs}\n")
            else:
                f.write(f"{c.key}\t{c.unit}\t{c.better}\t-\t-\t-\t-\t0\t{runs}\n")


def read_tsv(path):
    head, cells = {}, {}
    for line in open(path):
        line = line.rstrip("\n")
        if line.startswith("# "):
            k, _, v = line[2:].partition(": ")
            head[k] = v
            continue
        f = line.split("\t")
        if len(f) >= 9 and f[0] != "cell" and f[3] != "-":
            cells[f[0]] = float(f[3])
    return head, cells


def compare(old_path, new_path, tol):
    """Prints every cell's median against the earlier file's; returns (within, total)."""
    oh, old = read_tsv(old_path)
    nh, new = read_tsv(new_path)
    print(f"\nAgainst the previous run {os.path.basename(old_path)} (medians; within {tol:g}%?):")
    for k in ("host", "params", "repeat"):
        if oh.get(k) != nh.get(k):
            print(f"  NOTE: {k} differs: before '{oh.get(k)}', now '{nh.get(k)}'")
    within = total = 0
    print(f"  {'cell':<38} {'before':>11} {'now':>11} {'change':>8}  within {tol:g}%")
    for k, v in new.items():
        if k not in old:
            print(f"  {k:<38} {'-':>11} {v:>11.4g} {'':>8}  (new cell)")
            continue
        o = old[k]
        ch = 100.0 * (v - o) / o if o else float("inf")
        ok = abs(ch) <= tol
        total += 1
        within += ok
        print(f"  {k:<38} {o:>11.4g} {v:>11.4g} {ch:>+7.1f}%  {'yes' if ok else 'NO'}")
    print(f"  {within} of {total} cells within {tol:g}% of the previous run")
    return within, total


def scale(med, unit):
    """(divisor, suffix, digits) for a cell's unit, chosen by its median, used for its range too."""
    if unit == "us":
        return (1000.0, " ms", 3) if med >= 1000 else (1.0, " us", 3)
    if unit == "samples/s":
        return 1000.0, "k", None
    return 1.0, {"x": "x", "%": "%", "s": " s"}.get(unit, ""), None


def num(v, div, unit, digits):
    x = v / div
    if digits:  # 3 significant digits, no exponent
        return f"{x:.{max(0, digits - 1 - int(f'{abs(x):e}'.split('e')[1]))}f}" if x else "0"
    return {"samples/s": f"{x:.1f}", "%": f"{x:.0f}"}.get(unit, f"{x:.2f}")


def cell_text(cells, key):
    c = cells.get(key)
    s = c.stats() if c else None
    if not s:
        return "no data"
    med, lo, hi, spread = s
    div, suf, digits = scale(med, c.unit)
    text = num(med, div, c.unit, digits) + suf
    if len(c.ok()) == 1:
        return text
    return f"{text} ({num(lo, div, c.unit, digits)}-{num(hi, div, c.unit, digits)}, {spread:.0f}%)"


def table(cells, params):
    c = {x.key: x for x in cells}
    t = ["| np=2 | Chorus | baseline | ratio, per round |", "|---|---|---|---|"]
    for part, sizes, name, base in (
            ("shm", SHM_SIZES, "shared memory", "Open MPI vader"),
            ("tcp", TCP_SIZES, "TCP loopback (`CHORUS_SHM=0`)", "Open MPI btl tcp")):
        for size, label in sizes:
            if f"{part}.{size}.chorus_us" not in c:
                continue
            ratio = cell_text(c, f"{part}.{size}.speedup")
            if f"shm.{size}.pct_bound" in c and part == "shm":
                ratio += f"; Chorus at {cell_text(c, f'shm.{size}.pct_bound')} of the memory bound"
            t.append(f"| allreduce {label}, {name} | {cell_text(c, f'{part}.{size}.chorus_us')} | "
                     f"{base} {cell_text(c, f'{part}.{size}.ompi_us')} | {ratio} |")
    plain = "PyTorch, one process, 2 intra-op threads, `OMP_WAIT_POLICY=PASSIVE`"
    if "train.plain_2t" in c:
        plain = (f"PyTorch, one process, 2 intra-op threads, the better each round of as "
                 f"installed ({cell_text(c, 'train.plain_2t')}) and `OMP_WAIT_POLICY=PASSIVE`"
                 f" ({cell_text(c, 'train.plain_2t_tuned')}):")
    for sync, sfx, how in (("fused", "", "chorus-train"),
                           ("engine", ".engine", "chorus-train `--grad-sync engine`")):
        if f"train.chorus_2_{sync}" not in c:
            continue
        ch = f"{how} {cell_text(c, f'train.chorus_2_{sync}')}"
        t.append(f"| MLP training, 2 ranks x 1 thread, samples/s | {ch} | PyTorch DDP (gloo) 2 "
                 f"ranks {cell_text(c, 'train.ddp_2')} | {cell_text(c, f'train.vs_ddp{sfx}')} |")
        t.append(f"| MLP training, 2 cores, samples/s | {ch} | {plain} "
                 f"{cell_text(c, 'train.plain_2t_best')} | "
                 f"{cell_text(c, f'train.vs_plain_2t{sfx}')} |")
        t.append(f"| MLP scaling efficiency of {how}, 2 ranks / (2 x 1 rank) | "
                 f"{cell_text(c, f'train.efficiency_per_rank_batch{sfx}')} with 128 samples per "
                 f"rank (1 rank: {cell_text(c, 'train.chorus_1_half')} at batch 128) | "
                 f"{cell_text(c, f'train.efficiency_global_batch{sfx}')} with the global batch "
                 f"256 (1 rank: {cell_text(c, 'train.chorus_1')} at batch 256) | |")
    steps = dict(p.split("=") for p in params.split())
    for model in ("mlp", "cnn"):
        n = steps.get(f"BAL_{model.upper()}_STEPS", "?")
        b = steps.get(f"BAL_{model.upper()}_BATCH", "?")
        for case, what in (("busy", "rank 1's core shared with a busy loop"),
                           ("equal", "equal ranks, one core each")):
            k = f"balance.{model}.{case}"
            if f"{k}.static_s" not in c:
                continue
            extra = ""
            if case == "busy":
                extra = f"; rank 1's final share {cell_text(c, k + '.rank1_share')}"
            t.append(f"| {model.upper()}, {what}: training s for {n} steps of {b} | "
                     f"`--balance dynamic` {cell_text(c, k + '.dynamic_s')}{extra} | "
                     f"`--balance static` {cell_text(c, k + '.static_s')} | "
                     f"{cell_text(c, k + '.speedup')} |")
    return t


def host_fingerprint(topology):
    keep = [l[2:] for l in topology if l.startswith(("# cpu:", "# cache", "# numa:"))]
    return " / ".join(keep)


def main():
    p = argparse.ArgumentParser(description="bench/summary.sh's cells, check and docs")
    p.add_argument("--out")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--tsv")
    p.add_argument("--tol", type=float, default=15.0)
    p.add_argument("--write", type=int, default=0)
    p.add_argument("--doc")
    p.add_argument("--command", default="make bench-summary")
    p.add_argument("--wall", default="?")
    p.add_argument("--params", default="")
    p.add_argument("--compare", nargs=2, metavar=("OLD", "NEW"))
    a = p.parse_args()
    if a.compare:
        compare(a.compare[0], a.compare[1], a.tol)
        return 0

    cells, bound_bw = collect(a.out, a.repeat)
    topology = open(f"{a.out}/topology.txt").read().splitlines()
    load_b = open(f"{a.out}/load.before").read().strip()
    load_a = open(f"{a.out}/load.after").read().strip()
    commit = next((l.split(": ", 1)[1] for l in topology if l.startswith("# commit:")), "?")
    stamp = os.path.basename(a.tsv)[:-4]
    header = [f"bench-summary: {stamp}", f"host: {host_fingerprint(topology)}",
              f"params: {a.params}", f"repeat: {a.repeat}", f"commit: {commit}",
              f"load: {load_b} before, {load_a} after", f"wall_s: {a.wall}"]
    write_tsv(a.tsv, cells, header)

    rows = table(cells, a.params)
    print("\n".join(topology))
    print(f"# load before {load_b}, after {load_a}; {a.wall} s of measuring; REPEAT={a.repeat}")
    print("\n".join(rows))
    missing = [x.key for x in cells if len(x.ok()) < a.repeat]
    if missing:
        print(f"\nFAILED runs: cells with fewer than {a.repeat} values: {', '.join(missing)}")

    earlier = sorted(f for f in glob.glob(os.path.join(os.path.dirname(a.tsv), "*.tsv"))
                     if os.path.basename(f) < os.path.basename(a.tsv))
    repro = None
    if earlier:
        # the newest earlier run of the same host and knobs, else the newest (with a note)
        same = [f for f in earlier
                if all(read_tsv(f)[0].get(k) == read_tsv(a.tsv)[0].get(k) for k in ("host", "params"))]
        prev = (same or earlier)[-1]
        within, total = compare(prev, a.tsv, a.tol)
        ph = read_tsv(prev)[0]
        repro = (f"Against the previous run on this host ({os.path.basename(prev)[:-4]}, commit "
                 f"{ph.get('commit', '?')}{'' if same else ', other knobs or host'}): "
                 f"{within} of {total} cells within {a.tol:g}% of its medians.")
    else:
        print(f"\nNo earlier run in {os.path.dirname(a.tsv)} to compare with: run it again to "
              f"check that every cell reproduces within {a.tol:g}%.")

    if a.write:
        write_doc(a, topology, rows, commit, stamp, load_b, load_a, repro)
    return 1 if missing else 0


def write_doc(a, topology, rows, commit, stamp, load_b, load_a, repro):
    text = open(a.doc).read()
    i, j = text.find(BEGIN), text.find(END)
    if i < 0 or j < i:
        sys.exit(f"summary: {a.doc} has no {BEGIN} ... {END} section to rewrite")
    when = f"{stamp[0:4]}-{stamp[4:6]}-{stamp[6:8]} {stamp[9:11]}:{stamp[11:13]} UTC"
    ncpu = os.cpu_count() or 1
    busiest = max(float(load_b.split()[0]), float(load_a.split()[0]))
    # the run's own processes count: 2 ranks, and beside them a busy loop in the balance rows
    if busiest > ncpu + 1:
        load_note = (f"The 1-minute load average reached {busiest:g} on {ncpu} CPUs, more than "
                     "the run's own 2 ranks and busy loop: other work shared the machine, and "
                     "these numbers measure that too; regenerate on a quiet machine before "
                     "quoting them.")
    else:
        load_note = (f"The 1-minute load average stayed at or below {busiest:g} on {ncpu} CPUs, "
                     "the run's own 2 ranks (and busy loop, in the balance rows) included.")
    body = [
        BEGIN,
        "## Summary (np=2, regenerated by `make bench-summary` on the host below)",
        "",
        "Regenerate it on your machine with `make bench-summary` (bench/README.md: the knobs;",
        "`WRITE=0` measures and checks without touching this file). Each cell is the median",
        f"of {a.repeat} runs taken round by round (every row once per round, so that noise",
        "hits all rows alike), then (min-max over the runs, (max - min) / median). A ratio is",
        "taken within each round, between the two runs that ran one after the other, and its",
        "median and range are reported; speed-ups are > 1 where Chorus (or `--balance",
        "dynamic`) is faster. Numbers measured on other hosts are in the next table, labelled",
        "with their host.",
        "",
        "The host (`bench/topology.sh`; caches: each instance and the CPUs that share it):",
        "",
        "```",
        *topology,
        f"# load average {load_b} before, {load_a} after (1, 5, 15 min)",
        "```",
        "",
        f"Measured {when}, commit {commit}: `{a.command}` ({a.wall} s of measuring; {a.params}).",
        load_note,
        *([repro] if repro else []),
        "",
        *rows,
        "",
        "Allreduce: float32 sum, chorus-bench against bench/mpi_allreduce (the slowest rank's",
        "time, median over iterations); the memory bound is bench/membw's best `sum` bandwidth",
        "B: busbw <= B (P-1)/P^2. Training: the MLP 784-512-256-10 on Fashion-MNIST, global",
        "batch 256, one BLAS thread per rank (bench/train_compare.sh). Load balancing: the",
        "training seconds of all steps (the shares start even and follow the measured speed",
        "every 10 steps); the busy loop and rank 1 pinned to CPU 1, rank 0 to CPU 0.",
        END,
    ]
    text = text[:i] + "\n".join(body) + text[j + len(END):]
    with open(a.doc, "w") as f:
        f.write(text)
    print(f"\nsummary: rewrote the summary section of {a.doc}")


if __name__ == "__main__":
    sys.exit(main())
