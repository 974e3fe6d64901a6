# ranks.sh - helpers for test scripts that act on the ranks of a running chorus-run job
# (sourced).

# wait_line FILE PATTERN: waits (at most 60 s) until FILE has a line matching PATTERN;
# returns 1 when it never does.
wait_line() {
    _i=0
    until grep -q "$2" "$1" 2>/dev/null; do
        _i=$((_i + 1))
        [ $_i -lt 1200 ] || return 1
        sleep 0.05
    done
}

# rank_pid RUN RANK: prints the pid of rank RANK among the children of chorus-run RUN (its
# CHORUS_RANK), nothing when there is none.
rank_pid() {
    for _c in $(pgrep -P "$1"); do
        tr '\0' '\n' < /proc/$_c/environ 2>/dev/null | grep -qx "CHORUS_RANK=$2" && echo "$_c"
    done
}
