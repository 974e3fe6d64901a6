#!/bin/sh
# chorus-bench as an nccl-tests user meets it: its output is read by a reader that follows
# nccl-tests' layout (size count type redop root, out-of-place time algbw busbw #wrong, in-place
# time algbw busbw #wrong, '# Avg bus bandwidth    : X'); nccl-tests' flags mean the same; --help
# goes to stdout with status 0; a bad option is reported once, by rank 0, not by every rank.
set -u
fail() { echo "FAILED: $*"; exit 1; }
out=${TMPDIR:-/tmp}/bench_nccl_format.$$
trap 'rm -f "$out"' EXIT INT TERM

chorus-run -np 2 chorus-bench -b 1K -e 64K -f 4 -n 3 -w 1 -c 1 -a 3 -d float -o sum >"$out" 2>&1 ||
    { cat "$out"; fail "allreduce run"; }
cat "$out"
python3 - "$out" 2>&1 <<'PY' || fail "the nccl-tests reader rejected the output"
import re, sys
rows, avg = [], None
for line in open(sys.argv[1]):
    line = re.sub(r"^\[\d+\] ", "", line.rstrip("\n"))  # chorus-run's rank prefix
    m = re.match(r"^# Avg bus bandwidth\s+: (\S+)", line)
    if m:
        avg = float(m.group(1))
    if line.startswith("#") or not line.strip():
        continue
    f = line.split()
    # nccl-tests: size count type redop root | time algbw busbw #wrong | time algbw busbw #wrong
    assert len(f) == 13, "expected 13 columns: %r" % line
    size, count, root = int(f[0]), int(f[1]), int(f[4])
    assert f[2] == "float" and f[3] == "sum" and root == -1, line
    assert size == count * 4, line
    for base in (5, 9):
        t, algbw, busbw, wrong = float(f[base]), float(f[base + 1]), float(f[base + 2]), int(f[base + 3])
        assert t > 0 and wrong == 0, line
        assert abs(algbw - size / t / 1e3) <= 0.01 + 0.02 * algbw, line  # time in us, GB/s
        rows.append(busbw)
sizes = 4
assert len(rows) == 2 * sizes, "rows: %d busbw values" % len(rows)
assert avg is not None, "no '# Avg bus bandwidth' line"
assert abs(avg - sum(rows) / len(rows)) <= 0.01 + 0.01 * avg, (avg, rows)
print("nccl-tests reader: %d sizes, avg busbw %.3f" % (sizes, avg))
PY
[ "$(grep -c '^\[0\] #  Rank  [01] Pid  *[0-9]* on  *[^ ]* device CPU$' "$out")" = 2 ] ||
    fail "the '#  Rank N Pid P on HOST' lines"
python3 bench/benchtab.py "chorus=$out" | grep -Eq "^ +64K +[0-9.]+ +[0-9.]+$" || fail "bench/benchtab.py cannot read it"

# broadcast: the root column, and N/A where Chorus has no such call (out-of-place)
chorus-run -np 3 chorus-bench --coll broadcast -r 2 -b 4K -e 4K -n 2 >"$out" 2>&1 ||
    { cat "$out"; fail "broadcast run"; }
cat "$out"
grep -Eq '^\[0\] +4096 +1024 +float +none +2 +N/A +N/A +N/A +N/A +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' "$out" ||
    fail "broadcast row"

# -d all -o all: every type with every op, each row verified
chorus-run -np 2 chorus-bench -b 64 -e 64 -n 1 -w 0 -d all -o all >"$out" 2>&1 ||
    { cat "$out"; fail "-d all -o all"; }
rows=$(grep -Ec '^\[0\] +64 +[0-9]+ +[a-z0-9]+ +(sum|prod|min|max|avg) +-1( +[0-9.]+){3} +0( +[0-9.]+){3} +0$' "$out")
[ "$rows" = 40 ] || { cat "$out"; fail "-d all -o all: $rows verified rows, expected 8 types x 5 ops"; }
for t in int8 uint8 int32 int64 half bfloat16 float double; do
    grep -q "^\[0\] .* $t  *avg " "$out" || fail "-d all: no $t row"
done

out2=$(chorus-bench --help); rc=$?
[ $rc = 0 ] && echo "$out2" | grep -q -- "-c, --check 0|1" || fail "--help on stdout, status 0"

out2=$(chorus-run -np 2 chorus-bench --help 2>&1); rc=$?
[ $rc = 0 ] && [ "$(echo "$out2" | grep -c 'usage: chorus-run -np N chorus-bench')" = 1 ] ||
    fail "--help under chorus-run: printed once, status 0"

chorus-run -np 2 chorus-bench -t 4 >"$out" 2>&1; rc=$?
cat "$out"
[ $rc = 2 ] || fail "-t 4: exit $rc"
# once in the ranks' own output (the launcher's failure summary quotes rank 0's last lines)
[ "$(grep -c '^\[[0-9]*\] chorus-bench: -t 4: one rank per process; start more with chorus-run -np N' "$out")" = 1 ] ||
    fail "the error must be printed once"
chorus-run -np 2 chorus-bench -c allreduce >"$out" 2>&1; rc=$?
cat "$out"
[ $rc = 2 ] && [ "$(grep -c "^\[[0-9]*\] chorus-bench: -c allreduce is not 0 or 1 (check)" "$out")" = 1 ] ||
    fail "-c is nccl-tests' check flag"
# an iteration count over the limit: the limit and why, not "is not >= 1"
out2=$(chorus-bench -n 50000000 2>&1); rc=$?
echo "$out2"
[ $rc = 2 ] && echo "$out2" | grep -q "^chorus-bench: -n 50000000: at most 16777216 timed iterations per size; each one's time is kept (8 bytes) and exchanged between the ranks for the median, 128 MiB at that count$" ||
    fail "-n over the limit"
out2=$(chorus-bench -n 0 2>&1)
echo "$out2" | grep -q "^chorus-bench: -n 0 is not a whole number of iterations, 1 or more$" || fail "-n 0"
echo "bench_nccl_format: ok"
