#!/bin/sh
# test_under_load.sh - `make test` on a machine whose every core is busy with other work, as
# a user's or a CI machine often is: LOAD busy loops (default: one per core, nproc) run beside
# ROUNDS rounds of `$MAKE test` (default 1). Each round's summary is printed with the load
# average at its end; a failed round's logs are kept in $BUILD/test-logs-round-N/ (the next
# round rewrites $BUILD/test-logs/). The busy loops are killed on every way out (end, error,
# Ctrl-C, SIGTERM). Exit status 0 when every round passed. `make test-under-load` runs it.
set -u
BUILD=${BUILD:-build}
MAKE=${MAKE:-make}
ROUNDS=${ROUNDS:-1}
LOAD=${LOAD:-$(nproc)}
# positive NAME VALUE: exits with a message unless VALUE is a positive integer
positive() {
    case "$2" in '' | *[!0-9]* | 0) echo "test-under-load: $1 must be a positive integer, not '$2'" >&2; exit 2 ;; esac
}
positive ROUNDS "$ROUNDS"
positive LOAD "$LOAD"

# The busy loops and the running make test are this script's background jobs, so a signal
# interrupts its wait at once and the trap stops them (a foreground command would delay it).
loops=""
run=""
stop() {
    [ -n "$run" ] && kill "$run" 2> /dev/null
    for p in $loops; do kill "$p" 2> /dev/null; done
    for p in $loops; do wait "$p" 2> /dev/null; done
    loops=""
}
trap stop EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

i=0
while [ $i -lt "$LOAD" ]; do
    sh -c 'while :; do :; done' &
    loops="$loops $!"
    i=$((i + 1))
done
echo "test-under-load: $LOAD busy loops (pids$loops) beside $ROUNDS round(s) of make test"

failed=0
summary=""
r=1
while [ $r -le "$ROUNDS" ]; do
    echo "== round $r of $ROUNDS (load average $(cut -d' ' -f1-3 /proc/loadavg))"
    out=$BUILD/test-under-load.out
    mkdir -p "$BUILD"
    : > "$out" # made before tail starts on it
    t0=$(date +%s)
    $MAKE --no-print-directory test > "$out" 2>&1 &
    run=$!
    tail -n +1 -f --pid="$run" "$out" &
    show=$!
    wait "$run"
    rc=$?
    run=""
    wait "$show"
    line="round $r: $(grep -E '^[0-9]+ passed, [0-9]+ failed' "$out" | tail -n 1)"
    [ "$line" = "round $r: " ] && line="round $r: make test exited $rc before its summary"
    line="$line; $(($(date +%s) - t0)) s, load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
    if [ $rc != 0 ]; then
        failed=$((failed + 1))
        line="$line; FAILED:$(sed -n 's/^failed://p' "$out" | tail -n 1)"
        rm -rf "$BUILD/test-logs-round-$r"
        [ -d "$BUILD/test-logs" ] && cp -a "$BUILD/test-logs" "$BUILD/test-logs-round-$r" &&
            line="$line (logs in $BUILD/test-logs-round-$r/)"
    fi
    summary="$summary
$line"
    r=$((r + 1))
done
echo "== make test under $LOAD busy loops:$summary"
[ $failed = 0 ] || { echo "test-under-load: $failed of $ROUNDS round(s) failed"; exit 1; }
echo "test-under-load: all $ROUNDS round(s) passed"
