#!/usr/bin/python3
"""benchtab: join collective benchmark outputs into one side-by-side table.

Used by bench/compare_tcp.sh and bench/compare_shm.sh; handy on its own for saved outputs.

  benchtab.py [--np P] [--membw FILE] [--title T] LABEL=FILE[,FILE...][@COLS] ...

Each input is the stdout of chorus-bench, bench/mpi_allreduce or bench/gloo_allreduce.py (or
nccl-tests). Several files for one label are repeated runs: the table shows, per size, the
median of their times, the busbw that goes with it, and 'spr', the slowest run's time over the
fastest's (how noisy the machine was). The first label is the subject: the ratio columns compare it
with every other label (busbw ratio subject/other: >1 means the subject is faster; time ratio
subject/other: <1 means the subject is faster).

Parsing is deliberately tolerant, so a change of chorus-bench's format is a one-word fix:
  * a data row is a line whose first field is a size: "4096", "4K", "64M", "64MiB";
  * a "[rank] " prefix (chorus-run's) is removed; the lowest rank that printed rows counts;
  * columns are found by name from the last header line before the rows (a line starting with
    '#', or any line whose first field is not a number, that names 'size' and 'busbw'): the
    first column called size/bytes, the first time/time_us/time(us), the first busbw...;
  * without such a header: size is column 1 and time, algbw, busbw are the last three numeric
    fields of the row;
  * @COLS overrides all of that with 1-based columns, e.g. chorus=out.txt@size=1,time=6,busbw=8
    (compare scripts pass $CHORUS_COLS through this way).

--membw FILE takes bench/membw output; the bound is computed from the best 'sum' bandwidth
(c = a + b, bytes read + written): an allreduce of S bytes over P ranks moves at least 2*P*S
bytes, so t_bound = 2*P*S / bw and, as a busbw, bound = bw * (P-1) / P^2. Every label then
also gets a '%bnd' column: its busbw as a percentage of that bound. Sizes that fit in the
caches can beat it; the bound is meaningful for sizes well beyond the last-level cache.
"""
import argparse
import re
import signal
import statistics
import sys

RANK_PREFIX_RE = re.compile(r"^\[(\d+)\]:?\s?")  # chorus-run's "[rank] " line prefix
SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)([kmgt]?)(?:i?b)?$", re.I)
MULT = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(tok):
    m = SIZE_RE.match(tok)
    return int(float(m.group(1)) * MULT[m.group(2).lower()]) if m else None


def is_number(tok):
    try:
        float(tok)
        return True
    except ValueError:
        return False


def header_columns(fields):
    """Column indexes (0-based) named in a header line, or None if it is not a table header."""
    names = [f.lower().lstrip("#") for f in fields]

    def find(pred):
        return next((i for i, n in enumerate(names) if pred(n)), None)

    cols = {
        "size": find(lambda n: n in ("size", "bytes", "size(b)", "size_bytes")),
        "time": find(lambda n: n in ("time", "time_us", "time(us)", "t_us", "usec", "us")),
        "algbw": find(lambda n: n.startswith("algbw")),
        "busbw": find(lambda n: n.startswith("busbw")),
    }
    if cols["size"] is None or cols["busbw"] is None:
        return None
    return cols


def parse_cols_spec(spec):
    cols = {}
    for part in spec.split(","):
        if part.strip():
            k, v = part.split("=")
            cols[k.strip()] = int(v) - 1
    return cols


def parse_output(path, override=None):
    """{size: (time_us, busbw)} from one benchmark output; later rows for a size win.

    Lines may carry a launcher's "[rank] " prefix; then the lowest rank that printed rows is
    the one used (normally rank 0, the only one that prints)."""
    by_rank = {}
    try:
        lines = open(path, errors="replace").read().splitlines()
    except OSError:
        return {}
    for line in lines:
        m = RANK_PREFIX_RE.match(line)
        rank = int(m.group(1)) if m else -1
        by_rank.setdefault(rank, []).append(line[m.end():] if m else line)
    for rank in sorted(by_rank):
        rows = parse_lines(by_rank[rank], override)
        if rows:
            return rows
    return {}


def parse_lines(lines, override):
    rows, cols = {}, None
    for line in lines:
        stripped = line.strip()
        if not stripped:
            continue
        if stripped.startswith("#"):
            fields = stripped.lstrip("#").split()
            h = header_columns(fields)
            cols = h if h else cols
            continue
        fields = stripped.split()
        size = parse_size(fields[0])
        if size is None:
            h = header_columns(fields)
            cols = h if h else cols
            continue
        c = override or cols
        try:
            if c and c.get("time") is not None and c.get("busbw") is not None:
                time_us, busbw = float(fields[c["time"]]), float(fields[c["busbw"]])
                if c.get("size") is not None:
                    size = parse_size(fields[c["size"]])
            else:
                nums = [float(f) for f in fields[1:] if is_number(f)]
                if len(nums) < 3:
                    continue
                time_us, busbw = nums[-3], nums[-1]
        except (IndexError, ValueError, TypeError):
            continue
        if size is not None:
            rows[size] = (time_us, busbw)
    return rows


def median_rows(runs):
    """Per size: the median time over runs, and the busbw that goes with that time.

    busbw * time is the same in every run of a size (bytes times the bus factor), so the busbw
    is recomputed from the median time instead of being a median of its own, which could pair
    a fast run's busbw with a slow run's time."""
    out = {}
    for size in sorted(set().union(*runs)) if runs else []:
        vals = [r[size] for r in runs if size in r]
        t = statistics.median(v[0] for v in vals)
        k = [bw * tt for tt, bw in vals if bw > 0 and tt > 0]
        bw = statistics.median(k) / t if k and t > 0 else statistics.median(v[1] for v in vals)
        times = [v[0] for v in vals]
        spread = max(times) / min(times) if min(times) > 0 else None
        out[size] = (t, bw, spread)
    return out


def membw_sum(path):
    """Best 'sum' GB/s and a one-line summary of a bench/membw output."""
    best, parts = None, []
    for line in open(path).read().splitlines():
        f = line.split()
        if len(f) == 3 and f[0] in ("copy", "sum") and is_number(f[2]):
            parts.append(f"{f[0]}/{f[1]}t {float(f[2]):.1f}")
            if f[0] == "sum":
                best = max(best or 0.0, float(f[2]))
    return best, ", ".join(parts)


def fmt_size(b):
    for unit, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if b >= m and b % m == 0:
            return f"{b // m}{unit}"
    return str(b)


def fmt(v, spec, width):
    return f"{v:{width}{spec}}" if v is not None else f"{'-':>{width}}"


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under | head
    p = argparse.ArgumentParser(description="join benchmark outputs into one table")
    p.add_argument("--np", type=int, default=2, help="ranks, for the memory bound")
    p.add_argument("--membw", help="bench/membw output: adds the memory bound")
    p.add_argument("--title", help="printed above the table")
    p.add_argument("inputs", nargs="+", metavar="LABEL=FILE[,FILE...][@COLS]")
    a = p.parse_args()

    series = []
    for spec in a.inputs:
        label, _, rest = spec.partition("=")
        files, _, colspec = rest.partition("@")
        override = parse_cols_spec(colspec) if colspec else None
        runs = [parse_output(f, override) for f in files.split(",") if f]
        runs = [r for r in runs if r]
        series.append((label, median_rows(runs), len(runs)))

    bound_bw, bw_note = (None, "")
    if a.membw:
        bound_bw, bw_note = membw_sum(a.membw)
    bound = bound_bw * (a.np - 1) / a.np ** 2 if bound_bw and a.np > 1 else None

    subject, others = series[0], series[1:]
    if a.title:
        print(a.title)
    for label, rows, nruns in series:
        note = f"median of {nruns} runs" if nruns > 1 else ("1 run" if nruns else "NO DATA")
        print(f"#   {label}: {note}")
    if a.membw:
        print(f"#   memory (GB/s): {bw_note}; bound busbw = sum_bw*(P-1)/P^2 = "
              + (f"{bound:.3f} GB/s at P={a.np}" if bound else "n/a"))
    spread = any(n > 1 for _, _, n in series)
    if spread:
        print("#   spr = slowest / fastest run's time for that size (noise between runs)")
    print(f"#   busbw in GB/s (1e9), time in us; bw/X = {subject[0]} busbw / X busbw (>1: "
          f"{subject[0]} faster), t/X = {subject[0]} time / X time (<1: {subject[0]} faster)")

    sizes = sorted(set().union(*[s[1] for s in series]))
    tw = {lab: max(len(lab) + 3, 9) for lab, _, _ in series}  # column widths per label
    rw = {lab: max(len(lab) + 3, 7) for lab, _, _ in others}
    head = [f"{'size':>6}"]
    for label, _, _ in series:
        head.append(f"{label + ' us':>{tw[label]}} {label + ' bw':>{tw[label]}}")
        if spread:
            head.append(f"{'spr':>4}")
        if bound:
            head.append(f"{'%bnd':>4}")
    for label, _, _ in others:
        head.append(f"{'bw/' + label:>{rw[label]}} {'t/' + label:>{rw[label]}}")
    print(" ".join(head))
    for size in sizes:
        row = [f"{fmt_size(size):>6}"]
        for label, rows, _ in series:
            t, bw, spr = rows.get(size, (None, None, None))
            row.append(f"{fmt(t, '.2f', tw[label])} {fmt(bw, '.3f', tw[label])}")
            if spread:
                row.append(fmt(spr, '.1f', 4))
            if bound:
                row.append(fmt(100.0 * bw / bound if bw is not None else None, '.0f', 4))
        st = subject[1].get(size, (None,))[0]
        for label, rows, _ in others:
            ot = rows.get(size, (None,))[0]
            # Same size, same collective: the busbw ratio is the inverse time ratio; taking it
            # from the times avoids the rounding of tiny printed busbws.
            rbw = ot / st if st and ot is not None else None
            rt = st / ot if st is not None and ot else None
            row.append(f"{fmt(rbw, '.2f', rw[label])} {fmt(rt, '.2f', rw[label])}")
        print(" ".join(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
