#!/bin/sh
# balance.sh - static against dynamic load balancing in chorus-train, in one invocation:
# --model mlp on Fashion-MNIST, 2 ranks, global batch BATCH, EPOCHS epochs with a test-set
# evaluation after each. Three cases, each run with --balance static and --balance dynamic:
#   equal      both ranks capped at half a core
#   half       rank 1 capped at a quarter of a core, half rank 0's speed
#   slow link  (root, with tests/net/cluster.sh) 2 namespace hosts, one rank each, both capped at
#              half a core; host 2's link shaped to LINK_RATE both ways
# The caps are CPU cgroup quotas (cgroup v2 cpu.max, else v1 cfs quota; the ranks' group has a
# large CPU weight, so other load on a shared machine does not decide their speeds), or without
# cgroups a busy loop pinned on the slowed rank's core (tests/scripts/cpucap.sh; the table says
# which). Reported per run: training seconds per epoch (sum of the steps' times, evaluation
# excluded), final test accuracy, and the training time until the first evaluation at or above
# TARGET; then dynamic's speed-up over static per epoch.
#
#   sudo sh bench/balance.sh        BUILD=build EPOCHS=2 BATCH=512 TARGET=0.84 LINK_RATE=200mbit
set -u
BUILD=${BUILD:-build}
EPOCHS=${EPOCHS:-2}
BATCH=${BATCH:-512}
TARGET=${TARGET:-0.84}
LINK_RATE=${LINK_RATE:-200mbit}
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
COMMON="--model mlp --batch $BATCH --epochs $EPOCHS --log-every 1000000"

# summary LOG METRICS: "s/epoch acc time-to-target" from a run's output and metrics.
summary() {
    python3 - "$1" "$2" "$TARGET" << 'PY'
import json, re, sys
log, metrics, target = open(sys.argv[1]).read(), sys.argv[2], float(sys.argv[3])
per = {}
for line in open(metrics):
    r = json.loads(line)
    if "step_s" in r:
        per[r["epoch"]] = per.get(r["epoch"], 0.0) + r["step_s"]
accs = [float(a) for a in re.findall(r"epoch \d+/\d+: .*\| test loss [0-9.]+ acc ([0-9.]+)", log)]
if not per or not accs:
    print("- - -")
    sys.exit()
t, reach = 0.0, "not reached"
for e, a in enumerate(accs, 1):
    t += per.get(e, 0.0)
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
    cpucap_rank 0 50000 && cpucap_rank 1 50000 || exit 1
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
row() { # CASE POLICY "s/epoch acc reach"
    set -- "$1" "$2" $3
    printf '| %s | %s | %s | %s | %s |\n' "$1" "$2" "$3" "$4" "$5"
    eval "t_$(echo "$1" | tr -c 'a-z\n' _)_$2=$3"
}
speedup() { # CASE
    k=$(echo "$1" | tr -c 'a-z\n' _)
    eval "s=\${t_${k}_static:-} d=\${t_${k}_dynamic:-}"
    [ -n "$s" ] && [ -n "$d" ] && [ "$s" != - ] && [ "$d" != - ] &&
        echo "$1: dynamic is $(echo "$s $d" | awk '{printf "%.2f", $1 / $2}')x static per epoch"
}

echo "chorus-train --model mlp, 2 ranks, global batch $BATCH, $EPOCHS epochs; slowing: $CPUCAP_HOW"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| case | --balance | s per epoch | test acc | s to $TARGET |"
echo "|---|---|---|---|---|"
for p in static dynamic; do row "equal" $p "$(local_run equal-$p $p 50000 50000)"; done
for p in static dynamic; do row "one at half speed" $p "$(local_run half-$p $p 50000 25000)"; done
if link_up; then
    for p in static dynamic; do row "slow link" $p "$(link_run link-$p $p)"; done
else
    echo "| slow link | - | not run (needs root, tc and tests/net/cluster.sh) | | |"
fi
echo
for c in "equal" "one at half speed" "slow link"; do speedup "$c"; done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
