#!/bin/sh
# ps.sh - allreduce against the parameter-server modes on one model, in one invocation:
# chorus-train --model mlp on Fashion-MNIST, 2 workers (allreduce: 2 ranks; ps-*: 1 server and
# 2 workers, 3 ranks), global batch 256, each run stopped after a fixed time (--time-limit) and
# then evaluated on the test set. Every mode runs twice: all workers equal, and the last worker
# held to half a core by a CPU cgroup (cgroup v2 cpu.max, else v1 cpu.cfs_quota_us: 50 ms of
# CPU per 100 ms). For each time in TIMES the table gives samples/s (all workers) and the test
# accuracy; "time to TARGET" is the first of TIMES at which the accuracy reached TARGET.
#
#   sudo sh bench/ps.sh        BUILD=build TIMES="4 8" TARGET=0.84 STALENESS=2
#
# Needs root for the cgroup (without it, only the equal runs are made, and it says so). The
# machine may be shared: the load average is printed with the table.
set -u
BUILD=${BUILD:-build}
TIMES=${TIMES:-"4 8"}
TARGET=${TARGET:-0.84}
STALENESS=${STALENESS:-2}
RUN=$BUILD/bin/chorus-run
TRAIN=$BUILD/bin/chorus-train
OUT=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench.XXXXXX")
CG=""
cleanup() {
    [ -n "$CG" ] && rmdir "$CG" 2>/dev/null
    rm -rf "$OUT"
}
trap cleanup EXIT INT TERM
[ -x "$TRAIN" ] || { echo "ps.sh: build first (make trainer): $TRAIN is missing" >&2; exit 1; }

# A cgroup that holds a process to half a core; CG_PROCS is where a pid goes.
if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
    mkdir "/sys/fs/cgroup/chorus-ps-bench-$$" 2>/dev/null; then
    CG=/sys/fs/cgroup/chorus-ps-bench-$$
    echo "50000 100000" > "$CG/cpu.max"
    HOW="cgroup v2 cpu.max 50000 100000"
elif mkdir "/sys/fs/cgroup/cpu/chorus-ps-bench-$$" 2>/dev/null; then
    CG=/sys/fs/cgroup/cpu/chorus-ps-bench-$$
    echo 100000 > "$CG/cpu.cfs_period_us"
    echo 50000 > "$CG/cpu.cfs_quota_us"
    HOW="cgroup v1 cpu.cfs_quota_us 50000 per 100000"
else
    HOW=""
    echo "ps.sh: cannot make a CPU cgroup (not root, or no cpu controller): equal runs only" >&2
fi

# slow_rank RUNPID RANK: moves that rank of the job into the cgroup as soon as it exists.
slow_rank() {
    i=0
    while [ $i -lt 200 ]; do
        for c in $(pgrep -P "$1"); do
            if tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | grep -qx "CHORUS_RANK=$2"; then
                echo "$c" > "$CG/cgroup.procs" && return 0
            fi
        done
        i=$((i + 1))
        sleep 0.02
    done
    echo "ps.sh: rank $2 never started" >&2
    return 1
}

# one MODE SLOW SECONDS: prints "samples/s accuracy".
one() {
    mode=$1 slow=$2 secs=$3
    if [ "$mode" = allreduce ]; then np=2 last=1; else np=3 last=2; fi
    log=$OUT/$mode-$slow-$secs.log
    "$RUN" -np $np "$TRAIN" --model mlp --mode "$mode" --servers 1 --staleness "$STALENESS" \
        --time-limit "$secs" --log-every 1000 > "$log" 2>&1 &
    pid=$!
    [ "$slow" = 1 ] && slow_rank $pid $last
    wait $pid || { echo "ps.sh: $mode failed:" >&2; tail -5 "$log" >&2; echo "- -"; return; }
    sed -n 's/.*done: .* test accuracy \([0-9.]*\), \([0-9]*\) samples\/s.*/\2 \1/p' "$log"
}

echo "chorus-train --model mlp, 2 workers, batch 256; half-speed worker: ${HOW:-none}"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '\n| workers | mode |'
for s in $TIMES; do printf ' %s s: samples/s | %s s: test acc |' "$s" "$s"; done
printf ' time to %s |\n|---|---|' "$TARGET"
for s in $TIMES; do printf -- '---|---|'; done
printf -- '---|\n'
for slow in 0 1; do
    [ $slow = 1 ] && [ -z "$HOW" ] && continue
    for mode in allreduce ps-sync ps-async ps-ssp; do
        label=$mode
        [ $mode = ps-ssp ] && label="ps-ssp (S=$STALENESS)"
        printf '| %s | %s |' "$([ $slow = 1 ] && echo "one at half speed" || echo equal)" "$label"
        reached=""
        for s in $TIMES; do
            set -- $(one $mode $slow "$s")
            printf ' %s | %s |' "$1" "$2"
            if [ -z "$reached" ] && awk -v a="$2" -v t="$TARGET" 'BEGIN { exit !(a + 0 >= t) }'; then
                reached="<= $s s"
            fi
        done
        printf ' %s |\n' "${reached:-not within $(echo $TIMES | awk '{print $NF}') s}"
    done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
