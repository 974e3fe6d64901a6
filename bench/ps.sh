#!/bin/sh
# ps.sh - allreduce against the parameter-server modes on one model, in one invocation:
# chorus-train --model MODEL (mlp) on Fashion-MNIST, 2 workers (allreduce: 2 ranks; ps-*: 1
# server and 2 workers, 3 ranks), global batch BATCH (256), each run stopped after a fixed time
# (--time-limit) and then evaluated on the test set. Every mode runs with all workers equal
# (each capped at half a core by a CPU cgroup: cgroup v2 cpu.max, else v1 cpu.cfs_quota_us)
# and with the last worker at half that speed (a quarter of a core); SLOWS="1" runs only the
# latter. Parameter-server runs take one more process, the server, which is not capped: on a
# machine of two cores the workers' caps leave it the rest.
# For each time in TIMES the table gives samples/s (all workers) and the test accuracy (means
# of REPEAT runs); "time to TARGET" is where the accuracy first reached TARGET, interpolated
# linearly between the two times around it ("<= T s" when the first time already had it).
# The learning-rate schedule of each run spans its --time-limit.
#
#   sudo sh bench/ps.sh        BUILD=build TIMES="3 6 9 12" TARGET=0.87 STALENESS=2 \
#                              MODES="allreduce ps-sync ps-async ps-ssp" PS_ARGS="" REPEAT=1 \
#                              MODEL=mlp BATCH=256 SLOWS="0 1"
#
# Needs root for the cgroups (without it, only the equal runs are made, and it says so). The
# machine may be shared: the load average is printed with the table.
set -u
BUILD=${BUILD:-build}
TIMES=${TIMES:-"3 6 9 12"}
TARGET=${TARGET:-0.87}
STALENESS=${STALENESS:-2}
MODES=${MODES:-"allreduce ps-sync ps-async ps-ssp"}
MODEL=${MODEL:-mlp}
SLOWS=${SLOWS:-"0 1"}  # 0: all workers equal, 1: the last at half speed
BATCH=${BATCH:-256}
REPEAT=${REPEAT:-1}  # runs per cell; the table gives their means
PS_ARGS=${PS_ARGS:-}  # more chorus-train options for the ps-* runs (e.g. --momentum 0.5)
RUN=$BUILD/bin/chorus-run
TRAIN=$BUILD/bin/chorus-train
OUT=$(mktemp -d "${TMPDIR:-/tmp}/ps-bench.XXXXXX")
trap 'cleanup' EXIT INT TERM
[ -x "$TRAIN" ] || { echo "ps.sh: build first (make trainer): $TRAIN is missing" >&2; exit 1; }

# CPU cgroups: JOB holds every rank with a large share of the CPU, so that other load on a
# shared machine does not decide the speeds; inside it each worker has its own group capped at
# half a core (w0, w1), or a quarter for the slowed worker (w1): every worker gets the same
# CPU whatever the mode, and the server (ps-*) takes what is left, as on a machine of its own.
JOB=""
if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
    mkdir "/sys/fs/cgroup/chorus-ps-bench-$$" 2>/dev/null; then
    JOB=/sys/fs/cgroup/chorus-ps-bench-$$ V=2
    echo "+cpu" > "$JOB/cgroup.subtree_control" 2>/dev/null
    echo 10000 > "$JOB/cpu.weight"
elif mkdir "/sys/fs/cgroup/cpu/chorus-ps-bench-$$" 2>/dev/null; then
    JOB=/sys/fs/cgroup/cpu/chorus-ps-bench-$$ V=1
    echo 10240 > "$JOB/cpu.shares"
fi
# cap GROUP MICROSECONDS: at most that much CPU per 100 ms.
cap() {
    if [ $V = 2 ]; then echo "$2 100000" > "$JOB/$1/cpu.max"; else
        echo 100000 > "$JOB/$1/cpu.cfs_period_us" && echo "$2" > "$JOB/$1/cpu.cfs_quota_us"; fi
}
if [ -n "$JOB" ] && mkdir "$JOB/w0" "$JOB/w1" && cap w0 50000 && cap w1 50000; then
    HOW="cgroup v$V: each worker capped at 50 ms of CPU per 100 ms, the slowed one at 25 ms"
else
    JOB="" HOW=""
    echo "ps.sh: cannot make CPU cgroups (not root, or no cpu controller): equal runs only, at the machine's mercy" >&2
fi
cleanup() {
    if [ -n "$JOB" ]; then rmdir "$JOB/w0" "$JOB/w1" "$JOB" 2>/dev/null; fi
    rm -rf "$OUT"
}

# place RUNPID NP NSERVERS: moves each rank of the job into its group as soon as it exists:
# servers into JOB, worker w into JOB/w<w>.
place() {
    left=$2 i=0 seen=" "
    while [ $left -gt 0 ] && [ $i -lt 300 ]; do
        for c in $(pgrep -P "$1"); do
            case "$seen" in *" $c "*) continue ;; esac
            r=$(tr '\0' '\n' < "/proc/$c/environ" 2>/dev/null | sed -n 's/^CHORUS_RANK=//p')
            [ -n "$r" ] || continue
            if [ "$r" -lt "$3" ]; then g=$JOB; else g=$JOB/w$((r - $3)); fi
            echo "$c" > "$g/cgroup.procs"
            seen="$seen$c "
            left=$((left - 1))
        done
        i=$((i + 1))
        sleep 0.01
    done
}

# one MODE SLOW SECONDS: prints "samples/s accuracy", the means of REPEAT runs.
one() {
    i=0 all=""
    while [ $i -lt "$REPEAT" ]; do
        all="$all $(one_run "$@")"
        i=$((i + 1))
    done
    echo "$all" | awk '{ for (i = 1; i < NF; i += 2) { if ($i == "-") { print "- -"; exit }
        s += $i; a += $(i + 1); n++ } printf "%.0f %.4f\n", s / n, a / n }'
}

# one_run MODE SLOW SECONDS: one run; prints "samples/s accuracy".
one_run() {
    mode=$1 slow=$2 secs=$3
    if [ "$mode" = allreduce ]; then np=2 ns=0; else np=3 ns=1; fi
    log=$OUT/$mode-$slow-$secs.log
    "$RUN" -np $np "$TRAIN" --model "$MODEL" --batch "$BATCH" --mode "$mode" --time-limit "$secs" \
        --log-every 1000 $([ "$mode" = allreduce ] || echo "--servers 1 --staleness $STALENESS $PS_ARGS") \
        > "$log" 2>&1 &
    pid=$!
    [ -n "$JOB" ] && place $pid $np $ns
    wait $pid || { echo "ps.sh: $mode failed:" >&2; tail -5 "$log" >&2; echo "- -"; return; }
    sed -n 's/.*done: .* test accuracy \([0-9.]*\), \([0-9]*\) samples\/s.*/\2 \1/p' "$log"
}

echo "chorus-train --model $MODEL, 2 workers, batch $BATCH; half-speed worker: ${HOW:-none}"
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
printf '\n| workers | mode |'
for s in $TIMES; do printf ' %s s: samples/s | %s s: test acc |' "$s" "$s"; done
printf ' time to %s |\n|---|---|' "$TARGET"
for s in $TIMES; do printf -- '---|---|'; done
printf -- '---|\n'
for slow in $SLOWS; do
    [ $slow = 1 ] && [ -z "$HOW" ] && continue
    for mode in $MODES; do
        [ -n "$JOB" ] && cap w1 $([ $slow = 1 ] && echo 25000 || echo 50000)
        label=$mode
        [ $mode = ps-ssp ] && label="ps-ssp (S=$STALENESS)"
        printf '| %s | %s |' "$([ $slow = 1 ] && echo "one at half speed" || echo equal)" "$label"
        reached="" pt="" pa=""
        for s in $TIMES; do
            set -- $(one $mode $slow "$s")
            printf ' %s | %s |' "$1" "$2"
            if [ -z "$reached" ] && awk -v a="$2" -v t="$TARGET" 'BEGIN { exit !(a + 0 >= t) }'; then
                # where the line between the last time below TARGET and this one crosses it
                if [ -n "$pt" ]; then
                    reached="$(awk -v t0="$pt" -v a0="$pa" -v t1="$s" -v a1="$2" -v g="$TARGET" \
                        'BEGIN { printf "%.1f", t0 + (t1 - t0) * (g - a0) / (a1 - a0) }') s"
                else
                    reached="<= $s s"
                fi
            fi
            pt=$s pa=$2
        done
        printf ' %s |\n' "${reached:-not within $(echo $TIMES | awk '{print $NF}') s}"
    done
done
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
