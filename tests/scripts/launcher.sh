#!/bin/sh
# chorus-run's contract: clear errors for a missing or non-executable program, [rank]
# prefixes (and --no-prefix), the failing rank's status and a line naming it, --timeout, and
# SIGINT forwarded to every rank.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; exit 1; }

out=$(chorus-run -np 3 no-such-program-xyz 2>&1); rc=$?
echo "$out"
[ $rc = 127 ] || fail "missing program: exit $rc, expected 127"
[ "$(echo "$out" | wc -l)" = 1 ] || fail "missing program: expected one line, not one per rank"
echo "$out" | grep -q "cannot run 'no-such-program-xyz': command not found" || fail "missing program message"

printf 'echo hi\n' > "$tmp/noexec.sh"
out=$(chorus-run -np 2 "$tmp/noexec.sh" 2>&1); rc=$?
echo "$out"
[ $rc = 127 ] && echo "$out" | grep -q "is not executable" || fail "non-executable program"

out=$(chorus-run -np 2 sh -c 'echo "line from $CHORUS_RANK of $CHORUS_SIZE"' 2>&1)
echo "$out"
echo "$out" | grep -q '^\[1\] line from 1 of 2$' || fail "prefix"
out=$(chorus-run --no-prefix -np 2 sh -c 'echo "plain $CHORUS_RANK"' 2>&1)
echo "$out" | grep -q '^plain 0$' || fail "--no-prefix"

out=$(chorus-run -np 3 --grace 1 sh -c 'if [ $CHORUS_RANK = 1 ]; then exit 7; fi; sleep 30' 2>&1); rc=$?
echo "$out"
[ $rc = 7 ] || fail "failing rank: exit $rc, expected 7"
echo "$out" | grep -q "chorus-run: rank 1 (pid [0-9]*) exited with status 7" || fail "failing rank message"

start=$(date +%s)
out=$(chorus-run -np 2 --timeout 2 sleep 60 2>&1); rc=$?
echo "$out"
[ $rc = 124 ] || fail "--timeout: exit $rc, expected 124"
[ $(( $(date +%s) - start )) -lt 20 ] || fail "--timeout took too long"

# SIGINT reaches every rank: each rank traps it and writes a file
chorus-run -np 2 sh -c "trap 'touch $tmp/int.\$CHORUS_RANK; exit 0' INT; echo ready; while :; do sleep 0.1; done" > "$tmp/log" 2>&1 &
pid=$!
for i in $(seq 50); do [ "$(grep -c ready "$tmp/log")" = 2 ] && break; sleep 0.1; done
kill -INT $pid
wait $pid; rc=$?
cat "$tmp/log"
[ -e "$tmp/int.0" ] && [ -e "$tmp/int.1" ] || fail "SIGINT was not forwarded to every rank"
[ $rc = 130 ] || fail "interrupted job: exit $rc, expected 130"
# pinning: with at least as many CPUs as ranks each rank gets its own block; --bind-to none
# leaves them floating
ncpu=$(nproc)
if [ "$ncpu" -ge 2 ]; then
    out=$(chorus-run -np 2 sh -c 'grep Cpus_allowed_list /proc/self/status' 2>&1)
    echo "$out"
    [ "$(echo "$out" | awk '{print $NF}' | sort -u | wc -l)" = 2 ] || fail "ranks were not pinned to different CPUs"
    out=$(chorus-run --bind-to none -np 2 sh -c 'grep Cpus_allowed_list /proc/self/status' 2>&1)
    [ "$(echo "$out" | awk '{print $NF}' | sort -u | wc -l)" = 1 ] || fail "--bind-to none still pinned"
fi
out=$(chorus-run --bind-to sockets -np 1 true 2>&1); rc=$?
[ $rc = 2 ] && echo "$out" | grep -q "takes core or none" || fail "bad --bind-to value"
echo "launcher ok"
