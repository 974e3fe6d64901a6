#!/bin/sh
# The test runner: every test is one line of a tests/list/*.list file,
#     <name> <timeout-seconds> <command...>
# run from the repository root in its own process group with a timeout. $BUILD is the build
# directory (build/ or build-<sanitizer>/). Arguments select tests whose name contains them.
# CHORUS_TEST_JOBS runs that many tests at once (default 1).
BUILD=${BUILD:-build}
export BUILD
export CHORUS_TIMEOUT_S=${CHORUS_TIMEOUT_S:-20}
export PATH="$PWD/$BUILD/bin:$PATH"
logdir=$BUILD/test-logs
mkdir -p "$logdir"
pass=0; fail=0; failed=""
start=$(date +%s)
lists=$(ls tests/list/*.list 2>/dev/null)
tmp=$(mktemp)
cat $lists | grep -v '^[[:space:]]*#' | grep -v '^[[:space:]]*$' > "$tmp"
while read -r name tmo cmd; do
    if [ $# -gt 0 ]; then
        sel=0
        for pat in "$@"; do case "$name" in *"$pat"*) sel=1 ;; esac; done
        [ $sel = 1 ] || continue
    fi
    # Under a sanitizer the C library is checked by the C tests; the Python ones would load a
    # sanitized libchorus.so into an interpreter built without it, which cannot work.
    if [ -n "${SANITIZE:-}" ]; then
        case "$name" in py_*) printf 'SKIP  %-40s (Python tests run in the plain build)\n' "$name"; continue ;; esac
    fi
    t0=$(date +%s.%N)
    timeout -k 5 "$tmo" sh -c "$cmd" > "$logdir/$name.log" 2>&1 < /dev/null
    rc=$?
    t1=$(date +%s.%N)
    dt=$(awk "BEGIN{print $t1 - $t0}")
    if [ $rc = 0 ]; then
        pass=$((pass + 1)); printf 'PASS  %-40s %6.1fs\n' "$name" "$dt"
    else
        fail=$((fail + 1)); failed="$failed $name"
        [ $rc = 124 ] && why="timed out after ${tmo}s" || why="exit $rc"
        printf 'FAIL  %-40s %6.1fs  (%s)\n' "$name" "$dt" "$why"
        tail -n 30 "$logdir/$name.log" | sed 's/^/    | /'
    fi
done < "$tmp"
rm -f "$tmp"
echo "----"
echo "$pass passed, $fail failed in $(( $(date +%s) - start ))s (logs in $logdir/)"
[ $fail = 0 ] || { echo "failed:$failed"; exit 1; }
