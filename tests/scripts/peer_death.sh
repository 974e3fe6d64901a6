#!/bin/sh
# A rank is killed mid-allreduce: chorus-run must exit non-zero naming it, and every survivor
# must have reported the dead rank (status 3 from peer_death) well within the timeout.
# With "p2p" as the third argument, the victim dies while the others have point-to-point
# requests posted to it, from it, from any rank and from each other (p2p_nb death): every
# survivor's requests must all end with CHORUS_ERR_PEER_LOST naming it.
set -u
np=$1; victim=$2; bytes=$3
out=$(mktemp)
hb=${CHORUS_HEARTBEAT_S:-1}
if [ "$bytes" = p2p ]; then
    hb=0 # the victim must not read (its watchdog would) once it has left its last call
    prog="$BUILD/tests/mp/p2p_nb death $victim"; reported="p2p requests failed after .*CHORUS_ERR_PEER_LOST.*rank $victim"
else
    prog="$BUILD/tests/mp/peer_death $victim $bytes"; reported="allreduce failed .*rank $victim"
fi
CHORUS_HEARTBEAT_S=$hb CHORUS_TIMEOUT_S=10 timeout 60 chorus-run -np "$np" --grace 15 $prog >"$out" 2>&1
rc=$?
cat "$out"
fail() { echo "FAILED: $*"; rm -f "$out"; exit 1; }
[ $rc = 137 ] || fail "chorus-run exited $rc, expected 137 (the victim's SIGKILL)"
grep -q "chorus-run: rank $victim (pid [0-9]*) was killed by signal 9" "$out" || fail "chorus-run did not name rank $victim"
survivors=$(grep -c "$reported" "$out")
[ "$survivors" = $((np - 1)) ] || fail "$survivors of $((np - 1)) survivors reported the dead rank"
rm -f "$out"
echo "ok: all $((np - 1)) survivors named rank $victim"
