#!/bin/sh
# balance.sh - static against dynamic load balancing in chorus-train, in one invocation:
# --model MODEL on Fashion-MNIST, 2 ranks, global batch BATCH, EPOCHS epochs, a test-set
# evaluation every EVAL_EVERY steps and after each epoch. Three cases, each run with
# --balance static and --balance dynamic:
#   equal      both ranks capped at CAP_FAST (microseconds of CPU per 100 ms: 100000 = a core)
#   half       rank 1 capped at CAP_SLOW, half of rank 0's CAP_FAST
#   slow link  (root, with tests/net/cluster.sh) 2 namespace hosts, one rank each, both capped at
#              CAP_FAST; host 2's link shaped to LINK_RATE both ways
# The caps are CPU cgroup quotas (cgroup v2 cpu.max, else v1 cfs quota, period 4 ms; the ranks'
# group has a large CPU weight, so other load on a shared machine does not decide their
# speeds), or without cgroups a busy loop pinned on the slowed rank's core
# (tests/scripts/cpucap.sh; the output says which). Reported per run: training seconds per
# epoch (sum of the steps' times, evaluations excluded), final test accuracy, and the training
# time until the first evaluation at or above TARGET; then dynamic's speed-up over static.
#
# The default is the CNN: over 100 ms of compute per step, so that the scheduler's time slices
# (a capped or shared core runs in slices of 1-4 ms) are small against a step. The MLP's
# steps at its default batch of 256 are 3-6 ms, about one slice: the busy loop's slice then
# falls into every step, inside the slow rank's compute under the even split but in the
# allreduce (both ranks waiting) once the shares are balanced, which eats the gain. Give it
# steps of many slices (docs/PERFORMANCE.md has both):
#   sudo sh bench/balance.sh        MODEL=mlp EPOCHS=4 BATCH=2048 EVAL_EVERY=0 SLOW=busy
#                                   CASES="equal half"
#
# Every case runs REPEAT times, static and dynamic in turn; the table gives the run with the
# median time per epoch and the range over the runs (a shared 2-core machine's noise is
# several per cent from run to run).
#
# MODEL=gpt trains the GPT (its tiny preset, on the fortune databases, docs/TRAINING.md) for
# STEPS steps of BATCH windows with no evaluation instead, and reports per run the training
# seconds of the steps, tokens per second and the final shares. SLOW=busy slows rank 1 by a
# busy loop sharing its core (rank 0 alone on the other) even where cgroups exist; its equal
# case leaves both ranks free:
#   sudo sh bench/balance.sh        MODEL=gpt STEPS=80 BATCH=32 SLOW=busy CASES="equal half"
#
#   sudo sh bench/balance.sh        BUILD=build MODEL=cnn EPOCHS=1 BATCH=256 EVAL_EVERY=47
#                                   TARGET=0.84 CAP_FAST=100000 CAP_SLOW=50000 REPEAT=3
#                                   LINK_RATE=200mbit CASES="equal half link" TRAIN_ARGS=
#                                   SLOW=quota STEPS=80 (gpt)
set -u
BUILD=${BUILD:-build}
MODEL=${MODEL:-cnn}
EPOCHS=${EPOCHS:-1}
GPT=""
[ "$MODEL" = gpt ] && GPT=1
BATCH=${BATCH:-$([ -n "$GPT" ] && echo 32 || echo 256)}
STEPS=${STEPS:-80}
[ "${SLOW:-quota}" = busy ] && CPUCAP_FORCE_PIN=1
EVAL_EVERY=${EVAL_EVERY:-47}
CAP_FAST=${CAP_FAST:-100000}
CAP_SLOW=${CAP_SLOW:-50000}
TARGET=${TARGET:-0.84}
LINK_RATE=${LINK_RATE:-200mbit}
REPEAT=${REPEAT:-3}
CASES=${CASES:-"equal half link"}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT" || exit 1
RUN=$BUILD/bin/chorus-run
TRAIN=$BUILD/bin/chorus-train
[ -x "$TRAIN" ] || { echo "balance.sh: build first (make trainer): $TRAIN is missing" >&2; exit 1; }
OUT=$(mktemp -d "${TMPDIR:-/tmp}/balance-bench.XXXXXX")
. tests/scripts/cpucap.sh
CLUSTER=""
trap 'cpucap_down; [ -z "$CLUSTER" ] || tests/net/cluster.sh down "$CLUSTER"; rm -rf "$OUT"' EXIT
trap 'exit 1' INT TERM HUP
cpucap_up chorus-balance-bench || { echo "balance.sh: cannot slow a rank (no cgroup, no taskset)" >&2; exit 1; }
COMMON="--model $MODEL --batch $BATCH --epochs $EPOCHS --eval-every $EVAL_EVERY --log-every 1000000 ${TRAIN_ARGS:-}"
[ -n "$GPT" ] && COMMON="--model gpt --batch $BATCH --max-steps $STEPS --no-eval --sample 0 --log-every 1000000 ${TRAIN_ARGS:-}"

# summary LOG METRICS: "s/epoch acc time-to-target" from a run's output and metrics; for the
# GPT "s tokens/s shares" (the steps' training seconds, tokens/s, the last shares a,b).
summary() {
    [ -n "$GPT" ] && {
        python3 - "$1" "$2" << 'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[2]) if l.startswith('{"step"')]
tok = re.findall(r"gpt: ([0-9]+) tokens/s over", open(sys.argv[1]).read())
shares = [r for r in rows if "ranks" in r]
if not rows or not tok:
    print("- - -")
    sys.exit()
last = ",".join(str(k["share"]) for k in shares[-1]["ranks"]) if shares else "even"
print("%.2f %s %s" % (sum(r["step_s"] for r in rows), tok[-1], last))
PY
        return
    }
    python3 - "$1" "$2" "$TARGET" << 'PY'
import json, re, sys
log, metrics, target = open(sys.argv[1]).read(), sys.argv[2], float(sys.argv[3])
per, evals = {}, []
for line in open(metrics):
    r = json.loads(line)
    if "step_s" in r:
        per[r["epoch"]] = per.get(r["epoch"], 0.0) + r["step_s"]
    if "train_s" in r and "test_acc" in r:  # --eval-every: training time so far
        evals.append((r["train_s"], r["test_acc"]))
accs = [float(a) for a in re.findall(r"epoch \d+/\d+: .*\| test loss [0-9.]+ acc ([0-9.]+)", log)]
if not per or not accs:
    print("- - -")
    sys.exit()
t = 0.0
for e, a in enumerate(accs, 1):  # the end-of-epoch evaluations, at the steps' time so far
    t += per.get(e, 0.0)
    evals.append((t, a))
reach = "not reached"
for t, a in sorted(evals):
    if a >= target:
        reach = "%.1f" % t
        break
print("%.2f %.4f %s" % (sum(per.values()) / len(per), accs[-1], reach))
PY
}

# local_run NAME POLICY CAP0 CAP1: both ranks on this host.
local_run() {
    cpucap_rank 0 "$3" && cpucap_rank 1 "$4" || exit 1
    "$RUN" -np 2 sh tests/scripts/cpucap_exec.sh "$TRAIN" $COMMON --balance "$2" \
        --metrics "$OUT/$1.jsonl" > "$OUT/$1.log" 2>&1 || { tail -5 "$OUT/$1.log" >&2; }
    summary "$OUT/$1.log" "$OUT/$1.jsonl"
}

# link_run NAME POLICY: one rank on each of two namespace hosts, host 2 behind LINK_RATE. Each
# rank joins its CPU group before `ip netns exec` (which mounts a sysfs of its own).
link_run() {
    cpucap_rank 0 "$CAP_FAST" && cpucap_rank 1 "$CAP_FAST" || exit 1
    pids=""
    for r in 0 1; do
        ns=$H1
        [ $r = 1 ] && ns=$H2
        sh -c '[ -z "$0" ] || echo $$ > "$0/cgroup.procs" || exit 1; exec "$@"' \
            "${CPUCAP_DIR:+$CPUCAP_DIR/r$r}" ip netns exec "$ns" env RANK=$r WORLD_SIZE=2 \
            MASTER_ADDR="$A1" MASTER_PORT=29611 CHORUS_JOB_ID="balance-$1-$$" \
            "$TRAIN" $COMMON --balance "$2" $([ $r = 0 ] && echo "--metrics $OUT/$1.jsonl") \
            > "$OUT/$1.log.$r" 2>&1 &
        pids="$pids $!"
    done
    for p in $pids; do wait "$p" || tail -5 "$OUT/$1.log.0" >&2; done
    summary "$OUT/$1.log.0" "$OUT/$1.jsonl"
}

# A cluster of 2 namespace hosts whose host 2 sends and receives at LINK_RATE (tbf on its end
# of the link and on the switch's). Sets H1, H2 and A1; returns 1 where it cannot (not root).
link_up() {
    [ "$(id -u)" = 0 ] && command -v tc > /dev/null || return 1
    hosts=$(tests/net/cluster.sh up "bal$$" 2 2> "$OUT/cluster.err") || return 1
    CLUSTER="bal$$"
    H1=$(echo "$hosts" | sed -n 1p) H2=$(echo "$hosts" | sed -n 2p)
    A1=$(ip -n "$H1" -4 -o addr show dev eth0 | sed -n 's/.* inet \([0-9.]*\).*/\1/p')
    sw=$(echo "$H2" | sed 's/-h2$/-sw/')
    ip netns exec "$H2" tc qdisc replace dev eth0 root tbf rate "$LINK_RATE" burst 64kb latency 50ms &&
        ip netns exec "$sw" tc qdisc replace dev p2 root tbf rate "$LINK_RATE" burst 64kb latency 50ms
}
# report CASE...: the table (per case and policy, the run with the median s/epoch among the
# REPEAT runs, and their range) and each case's speed-up of dynamic over static (the medians',
# and the range of the ratios of the runs taken in turn), from $OUT/res.CASE.POLICY.
report() {
    python3 - "$OUT" "$LINK" "$([ -n "$GPT" ] && echo "over $STEPS steps" || echo "per epoch")" "$@" << 'PY'
import statistics, sys
out, link, per, cases = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
label = {"equal": "equal", "half": "one at half speed", "link": "slow link"}
def runs(case, policy):  # each finished run: [s/epoch, acc, reach...], by s/epoch
    try:
        rows = [l.split() for l in open("%s/res.%s.%s" % (out, case, policy))]
    except OSError:
        return []
    return [r for r in rows if r and r[0] != "-"]
for c in cases:
    if c == "link" and not link:
        print("| slow link | - | not run (needs root, tc and tests/net/cluster.sh) | | | |")
        continue
    for p in ("static", "dynamic"):
        r = sorted(runs(c, p), key=lambda x: float(x[0]))
        if not r:
            print("| %s | %s | - | - | - | - |" % (label[c], p))
            continue
        m = r[(len(r) - 1) // 2]
        span = "%s-%s" % (r[0][0], r[-1][0]) if len(r) > 1 else "-"
        print("| %s | %s | %s | %s | %s | %s |" % (label[c], p, m[0], span, m[1], " ".join(m[2:])))
print()
for c in cases:
    s = [float(x[0]) for x in runs(c, "static")]
    d = [float(x[0]) for x in runs(c, "dynamic")]
    if s and d:
        pairs = sorted(a / b for a, b in zip(s, d))
        print("%s: dynamic is %.2fx static %s (medians; run by run %.2f-%.2fx over %d pairs)"
              % (label[c], statistics.median(s) / statistics.median(d), per, pairs[0], pairs[-1],
                 len(pairs)))
PY
}

echo "chorus-train --model $MODEL, 2 ranks, global batch $BATCH, $([ -n "$GPT" ] && echo "$STEPS steps" || echo "$EPOCHS epochs"), caps $CAP_FAST/$CAP_SLOW, $REPEAT runs per cell" \
    "(static and dynamic taken in turn); slowing: $CPUCAP_HOW"
BUILD=$BUILD sh bench/topology.sh # CPUs, caches and who shares them, memory bandwidth, BLAS
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
LINK=""
case " $CASES " in *" link "*) link_up && LINK=1 ;; esac
for c in $CASES; do
    i=1
    while [ "$i" -le "$REPEAT" ]; do
        for p in static dynamic; do
            case $c in
            equal) local_run "equal-$p" $p "$CAP_FAST" "$CAP_FAST" ;;
            half) local_run "half-$p" $p "$CAP_FAST" "$CAP_SLOW" ;;
            link) [ -n "$LINK" ] && link_run "link-$p" $p ;;
            esac >> "$OUT/res.$c.$p"
        done
        i=$((i + 1))
    done
done
echo
if [ -n "$GPT" ]; then
    echo "| case | --balance | s for $STEPS steps (median) | s (range) | tokens/s | final shares |"
else
    echo "| case | --balance | s per epoch (median) | s per epoch (range) | test acc | s to $TARGET |"
fi
echo "|---|---|---|---|---|---|"
report $CASES
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
