#!/bin/bash
# The test runner: every test is one line of a tests/list/*.list file,
#     <name> <timeout-seconds> <command...>
# run from the repository root in its own process group with a timeout. $BUILD is the build
# directory (build/ or build-<sanitizer>/). Arguments select tests whose name contains them.
# The timeout only catches a hang: it is several times what the test takes on a machine busy
# with other work (`make test-under-load`); the deadlines a test checks come from what it
# waits for (CHORUS_TIMEOUT_S, set to 20 s below), never from how fast the machine is.
#
# CHORUS_TEST_JOBS runs that many tests at once (default 1; `make test` sets 2). Most tests
# spend their time waiting (for a timeout to expire, a peer to be declared lost, processes to
# start), so two at a time on two cores shortens the run without starving either. A list file
# whose first line is "#@ alone" has its tests run with nothing else beside them: tests that
# measure or that load every core. Results print in the order tests finish; the summary and
# the exit status cover them all.
#
# Python is $TEST_PYTHON in the list lines (default Debian's /usr/bin/python3), so one list
# runs on another Python and torch too (make check-torch2: a venv with torch from PyPI).
# TEST_LISTS names the list files to read (default all), TEST_SKIP test names not to run
# there, TEST_LOGDIR where the logs go (default $BUILD/test-logs), TEST_TIMEOUT_SCALE a whole
# number every timeout is multiplied by (default 1: for an interpreter slower to start).
BUILD=${BUILD:-build}
export BUILD
export TEST_PYTHON=${TEST_PYTHON:-/usr/bin/python3}
export CHORUS_TIMEOUT_S=${CHORUS_TIMEOUT_S:-20}
export PATH="$PWD/$BUILD/bin:$PATH"
jobs=${CHORUS_TEST_JOBS:-1}
case "$jobs" in '' | *[!0-9]* | 0) echo "run.sh: CHORUS_TEST_JOBS must be a positive integer, not '$jobs'" >&2; exit 2 ;; esac
scale=${TEST_TIMEOUT_SCALE:-1}
case "$scale" in '' | *[!0-9]* | 0) echo "run.sh: TEST_TIMEOUT_SCALE must be a positive integer, not '$scale'" >&2; exit 2 ;; esac
logdir=${TEST_LOGDIR:-$BUILD/test-logs}
mkdir -p "$logdir"
pass=0; fail=0; failed=""
start=$(date +%s)
tmp=$(mktemp)
for list in ${TEST_LISTS:-tests/list/*.list}; do
    [ -e "$list" ] || continue
    alone=0
    head -n 1 "$list" | grep -q '^#@ alone' && alone=1
    grep -v '^[[:space:]]*#' "$list" | grep -v '^[[:space:]]*$' | sed "s/^/$alone /"
done > "$tmp"

# The tests now running: parallel arrays of pid, name, timeout and start time.
run_pid=(); run_name=(); run_tmo=(); run_t0=()

# report NAME TIMEOUT T0 RC: prints one result line (and a failed test's last lines).
report() {
    local dt
    dt=$(awk "BEGIN{print $(date +%s.%N) - $3}")
    if [ "$4" = 0 ]; then
        pass=$((pass + 1)); printf 'PASS  %-40s %6.1fs\n' "$1" "$dt"
    else
        fail=$((fail + 1)); failed="$failed $1"
        [ "$4" = 124 ] && why="timed out after ${2}s" || why="exit $4"
        printf 'FAIL  %-40s %6.1fs  (%s)\n' "$1" "$dt" "$why"
        tail -n 30 "$logdir/$1.log" | sed 's/^/    | /'
    fi
}

# reap LIMIT: waits until fewer than LIMIT tests run, reporting each one that ends.
reap() {
    local i rc np nn nt n0
    while [ ${#run_pid[@]} -ge "$1" ] && [ ${#run_pid[@]} -gt 0 ]; do
        np=(); nn=(); nt=(); n0=()
        for i in "${!run_pid[@]}"; do
            if kill -0 "${run_pid[$i]}" 2> /dev/null; then
                np+=("${run_pid[$i]}"); nn+=("${run_name[$i]}"); nt+=("${run_tmo[$i]}"); n0+=("${run_t0[$i]}")
            else
                wait "${run_pid[$i]}"
                rc=$?
                report "${run_name[$i]}" "${run_tmo[$i]}" "${run_t0[$i]}" "$rc"
            fi
        done
        run_pid=("${np[@]}"); run_name=("${nn[@]}"); run_tmo=("${nt[@]}"); run_t0=("${n0[@]}")
        [ ${#run_pid[@]} -ge "$1" ] && sleep 0.1
    done
}

while read -r alone name tmo cmd; do
    if [ $# -gt 0 ]; then
        sel=0
        for pat in "$@"; do case "$name" in *"$pat"*) sel=1 ;; esac; done
        [ $sel = 1 ] || continue
    fi
    # Under a sanitizer the C library is checked by the C tests; the Python ones would load a
    # sanitized libchorus.so into an interpreter built without it, which cannot work.
    case " ${TEST_SKIP:-} " in *" $name "*) printf 'SKIP  %-40s (TEST_SKIP)\n' "$name"; continue ;; esac
    if [ -n "${SANITIZE:-}" ]; then
        case "$name" in py_*) printf 'SKIP  %-40s (Python tests run in the plain build)\n' "$name"; continue ;; esac
    fi
    tmo=$((tmo * scale))
    if [ "$alone" = 1 ]; then reap 1; else reap "$jobs"; fi
    t0=$(date +%s.%N)
    timeout -k 5 "$tmo" sh -c "$cmd" > "$logdir/$name.log" 2>&1 < /dev/null &
    run_pid+=("$!"); run_name+=("$name"); run_tmo+=("$tmo"); run_t0+=("$t0")
    [ "$alone" = 1 ] && reap 1
done < "$tmp"
reap 1
rm -f "$tmp"
echo "----"
echo "$pass passed, $fail failed in $(( $(date +%s) - start ))s (logs in $logdir/)"
[ $fail = 0 ] || { echo "failed:$failed"; exit 1; }
