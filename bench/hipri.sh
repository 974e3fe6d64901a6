# hipri.sh - sourced by bench scripts: median, stats (median and spread of numbers on stdin)
# and hipri (run a command, with HIPRI=1 in a session of its own whose scheduling group has
# nice -19: Linux's autogroups share the CPU between sessions first, so on a machine shared
# with other sessions plain nice helps little; needs root and CONFIG_SCHED_AUTOGROUP).
median() { sort -g | awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]}'; }

# stats LABEL < numbers: one table row "| LABEL | median | min - max | (max-min)/median |"
stats() {
    sort -g | awk -v l="$1" '{v[NR] = $1} END {
        if (!NR) { printf "| %s | (no result) | | |\n", l; exit }
        m = v[int((NR + 1) / 2)]
        printf "| %s | %.0f | %.0f - %.0f | %.1f%% |\n", l, m, v[1], v[NR], 100 * (v[NR] - v[1]) / m }'
}

HIPRI_NOTE=
if [ "${HIPRI:-0}" = 1 ]; then
    if [ -w /proc/self/autogroup ] && command -v setsid > /dev/null; then
        HIPRI_NOTE=" (HIPRI=1: each run in its own session, autogroup nice -19)"
    else
        echo "hipri.sh: HIPRI=1 needs root and autogroups (/proc/self/autogroup); ignored" >&2
        HIPRI=0
    fi
fi
hipri() {
    export HIPRI
    if [ "${HIPRI:-0}" = 1 ]; then
        setsid sh -c 'echo -19 > /proc/self/autogroup; exec "$@"' hipri "$@"
    else
        "$@"
    fi
}
