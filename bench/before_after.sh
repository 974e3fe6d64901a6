#!/bin/sh
# before_after.sh - one table for a change that should not change speed: the shared-memory
# allreduce (as compare_shm.sh runs it), the TCP allreduce (CHORUS_SHM=0, as compare_tcp.sh)
# and the trainer (chorus-train's MLP at 2 ranks, as train_compare.sh), each run on two builds,
# interleaved round by round in one invocation (the machine is shared: compare the numbers of
# one run, never numbers of different runs).
#
#   sh bench/before_after.sh BEFORE_BUILD AFTER_BUILD
#        REPEAT=5 MIN=1M MAX=64M FACTOR=4 NP=2 STEPS=200 WARMUP=20 BATCH=256
#
# A build is a folder with bin/chorus-run, bin/chorus-bench and bin/chorus-train (`make
# trainer` of a checkout, e.g. `git archive <commit> | tar -x -C /tmp/old && make -C /tmp/old
# trainer`, then /tmp/old/build). Collective cells are the median time over REPEAT runs with
# 'spr' (slowest run over fastest) from bench/benchtab.py; ratio after/before < 1 is faster.
# Trainer cells are samples/s, the median of REPEAT runs with their min-max.
set -u
[ $# = 2 ] || { echo "usage: before_after.sh BEFORE_BUILD AFTER_BUILD" >&2; exit 2; }
HERE=$(cd "$(dirname "$0")" && pwd)
A=$(cd "$1" && pwd) || exit 2
B=$(cd "$2" && pwd) || exit 2
REPEAT=${REPEAT:-5}
MIN=${MIN:-1M}
MAX=${MAX:-64M}
FACTOR=${FACTOR:-4}
NP=${NP:-2}
STEPS=${STEPS:-200}
WARMUP=${WARMUP:-20}
BATCH=${BATCH:-256}
PYTHON=${PYTHON:-/usr/bin/python3}
for b in "$A" "$B"; do
    for t in chorus-run chorus-bench chorus-train; do
        [ -x "$b/bin/$t" ] || { echo "before_after: $b/bin/$t is missing (make trainer)" >&2; exit 1; }
    done
done
OUT=$(mktemp -d "${TMPDIR:-/tmp}/before-after.XXXXXX")
trap 'rm -rf "$OUT"' EXIT
FAILED=0
load() { cut -d' ' -f1-3 /proc/loadavg; }

# coll BUILD NAME [VAR=value...]: one allreduce sweep into $OUT/NAME.
coll() {
    _b=$1 _n=$2
    shift 2
    env "$@" "$_b/bin/chorus-run" -np "$NP" -- "$_b/bin/chorus-bench" --coll allreduce -a 3 \
        -d float32 -o sum -b "$MIN" -e "$MAX" -f "$FACTOR" > "$OUT/$_n" 2> "$OUT/$_n.err" ||
        { echo "before_after: $_n failed:" >&2; tail -n 5 "$OUT/$_n.err" >&2; FAILED=1; }
}

# train BUILD NAME: samples/s of steps WARMUP+1 .. WARMUP+STEPS, appended to $OUT/NAME.
train() {
    _m=$OUT/metrics.jsonl
    rm -f "$_m"
    if "$1/bin/chorus-run" -np "$NP" "$1/bin/chorus-train" --model mlp --batch "$BATCH" --epochs 1 \
        --threads 1 --no-eval --max-steps $((WARMUP + STEPS)) --grad-sync fused \
        --log-every 1000000 --metrics "$_m" > "$OUT/train.log" 2>&1; then
        "$PYTHON" -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if "\"step\"" in l][int(sys.argv[2]):]
print("%.0f" % (sum(r["samples_per_s"] * r["step_s"] for r in rows) / sum(r["step_s"] for r in rows)))
' "$_m" "$WARMUP" >> "$OUT/$2"
    else
        echo "before_after: chorus-train failed:" >&2
        tail -n 5 "$OUT/train.log" >&2
        FAILED=1
    fi
}

echo "before_after: before $A, after $B; $REPEAT rounds, interleaved; np=$NP"
echo "machine: $(nproc) cores, $(sed -n 's/^model name[^:]*: *//p' /proc/cpuinfo | head -n 1)"
for c in /sys/devices/system/cpu/cpu[0-9]*/cache/index[0-9]*; do
    [ -r "$c/shared_cpu_list" ] || continue
    echo "  L$(cat "$c/level") $(cat "$c/type") $(cat "$c/size"): cpus $(cat "$c/shared_cpu_list")"
done | sort -u
echo "load average before: $(load)"
r=1
while [ $r -le "$REPEAT" ]; do
    for side in before after; do
        b=$A
        [ $side = after ] && b=$B
        coll "$b" "shm.$side.$r"
        coll "$b" "tcp.$side.$r" CHORUS_SHM=0
        train "$b" "train.$side"
    done
    echo "round $r of $REPEAT done (load average $(load))"
    r=$((r + 1))
done

files() { _f=""; i=1; while [ $i -le "$REPEAT" ]; do _f="$_f${_f:+,}$OUT/$1.$i"; i=$((i + 1)); done; echo "$_f"; }
for t in shm tcp; do
    echo
    echo "== allreduce over $t, float32 sum, $NP ranks (time in us)"
    "$PYTHON" "$HERE/benchtab.py" --np "$NP" "after=$(files "$t.after")" "before=$(files "$t.before")" ||
        FAILED=1
done
echo
echo "== chorus-train MLP 784-512-256-10, $NP ranks, --grad-sync fused, global batch $BATCH (samples/s)"
"$PYTHON" - "$OUT/train.before" "$OUT/train.after" << 'EOF'
import statistics, sys
def cell(path):
    try:
        v = [float(x) for x in open(path).read().split()]
    except OSError:
        return None, "-"
    if not v:
        return None, "-"
    m = statistics.median(v)
    return m, "%.0f (%.0f-%.0f, n=%d)" % (m, min(v), max(v), len(v))
b, bs = cell(sys.argv[1])
a, as_ = cell(sys.argv[2])
print("before: %s\nafter:  %s" % (bs, as_))
if a and b:
    print("after/before: %.3f" % (a / b))
EOF
echo "load average after: $(load)"
exit $FAILED
