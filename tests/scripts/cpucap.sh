# shellcheck shell=sh
# cpucap.sh - slowing chosen ranks of a local job for real, for the load-balancing test and
# benchmark. Sourced, not run:
#
#   cpucap_up NAME          a CPU cgroup NAME-<pid> (v2 cpu.max, else v1 cfs quota) holding a
#                           group per rank r0, r1, ..., with a large CPU weight so that other
#                           load on a shared machine does not decide the ranks' speeds; sets CPUCAP_HOW ("cgroup v2" ...) or,
#                           without cgroups (not root) or with CPUCAP_FORCE_PIN set,
#                           "pinned": see cpucap_rank (with cgroups, in the group of large
#                           weight still, without quotas)
#   cpucap_rank R US        rank R may use US microseconds of CPU per 100 ms (100000: a whole
#                           core); "pinned": a rank below 100000 shares CPU 1 with a busy loop
#                           (about half speed), the others get CPU 0
#   chorus-run -np N sh tests/scripts/cpucap_exec.sh PROGRAM ARGS...
#                           each rank moves itself into its group (or onto its CPU) and runs
#   cpucap_down             removes the groups and stops the busy loop (call on every exit)
CPUCAP_DIR="" CPUCAP_HOW="" CPUCAP_V="" CPUCAP_BUSY="" CPUCAP_PIN=""
export CPUCAP_DIR CPUCAP_PIN_SLOW=""

cpucap_up() {
    if grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null &&
        mkdir "/sys/fs/cgroup/$1-$$" 2>/dev/null; then
        CPUCAP_DIR=/sys/fs/cgroup/$1-$$ CPUCAP_V=2
        echo "+cpu" > "$CPUCAP_DIR/cgroup.subtree_control" 2>/dev/null
        echo 10000 > "$CPUCAP_DIR/cpu.weight"
    elif mkdir "/sys/fs/cgroup/cpu/$1-$$" 2>/dev/null; then
        CPUCAP_DIR=/sys/fs/cgroup/cpu/$1-$$ CPUCAP_V=1
        # the most v1 allows: the group's weight is split over the CPUs its ranks keep busy,
        # and a tenth of it per CPU lost a slowed rank a third of its core to a load of 10
        echo 262144 > "$CPUCAP_DIR/cpu.shares"
    fi
    export CPUCAP_DIR
    if [ -n "$CPUCAP_DIR" ] && [ -z "${CPUCAP_FORCE_PIN:-}" ]; then
        CPUCAP_HOW="cgroup v$CPUCAP_V CPU quota"
    elif command -v taskset > /dev/null && [ "$(nproc)" -ge 2 ]; then
        CPUCAP_PIN=1
        CPUCAP_HOW="pinned: the slowed rank shares CPU 1 with a busy loop${CPUCAP_DIR:+ (in a cgroup v$CPUCAP_V CPU group of large weight, no quota)}"
    else
        return 1
    fi
}

cpucap_rank() {
    g=${CPUCAP_DIR:+$CPUCAP_DIR/r$1}
    [ -z "$g" ] || mkdir -p "$g" || return 1
    if [ -z "$CPUCAP_PIN" ]; then
        # a short period (4 ms) spreads the cap evenly over a step; the kernel wants a quota of
        # at least 1 ms, so small caps get a longer one
        p=4000
        [ $(($2 * p / 100000)) -ge 1000 ] || p=$((100000000 / $2))
        if [ "$CPUCAP_V" = 2 ]; then
            echo "$(($2 * p / 100000)) $p" > "$g/cpu.max"
        else
            echo "$p" > "$g/cpu.cfs_period_us" && echo "$(($2 * p / 100000))" > "$g/cpu.cfs_quota_us"
        fi
        return
    fi
    [ "$2" -ge 100000 ] && return
    CPUCAP_PIN_SLOW="$CPUCAP_PIN_SLOW $1 "
    export CPUCAP_PIN_SLOW
    [ -n "$CPUCAP_BUSY" ] && return
    taskset -c 1 sh -c 'while :; do :; done' &
    CPUCAP_BUSY=$!
    [ -z "$g" ] || echo "$CPUCAP_BUSY" > "$g/cgroup.procs" # with the rank it slows
}

cpucap_down() {
    [ -n "$CPUCAP_BUSY" ] && kill "$CPUCAP_BUSY" 2>/dev/null && wait "$CPUCAP_BUSY" 2>/dev/null
    CPUCAP_BUSY=""
    if [ -n "$CPUCAP_DIR" ]; then
        for g in "$CPUCAP_DIR"/r*; do [ -d "$g" ] && rmdir "$g" 2>/dev/null; done
        rmdir "$CPUCAP_DIR" 2>/dev/null
    fi
    CPUCAP_DIR=""
}
