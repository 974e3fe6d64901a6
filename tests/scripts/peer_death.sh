#!/bin/sh
# A rank is killed mid-allreduce: chorus-run must exit non-zero naming it, and every survivor
# must have reported the dead rank (status 3 from peer_death) well within the timeout.
set -u
np=$1; victim=$2; bytes=$3
out=$(mktemp)
CHORUS_TIMEOUT_S=10 timeout 60 chorus-run -np "$np" --grace 15 "$BUILD/tests/mp/peer_death" "$victim" "$bytes" >"$out" 2>&1
rc=$?
cat "$out"
fail() { echo "FAILED: $*"; rm -f "$out"; exit 1; }
[ $rc = 137 ] || fail "chorus-run exited $rc, expected 137 (the victim's SIGKILL)"
grep -q "chorus-run: rank $victim (pid [0-9]*) was killed by signal 9" "$out" || fail "chorus-run did not name rank $victim"
survivors=$(grep -c "allreduce failed .*rank $victim" "$out")
[ "$survivors" = $((np - 1)) ] || fail "$survivors of $((np - 1)) survivors reported the dead rank"
rm -f "$out"
echo "ok: all $((np - 1)) survivors named rank $victim"
