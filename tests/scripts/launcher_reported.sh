#!/bin/sh
# launcher_reported.sh - a rank whose call failed and that was stopped before it printed its
# error (tests/fault/survivor_blame silent: it waits without a word) still has its error
# shown: the library reported it on the status pipe, and chorus-run prints it under the rank's
# "stopped:" line. Rank 1 is killed (-9) while the ranks allreduce; rank 0 loses it, says
# nothing, and is stopped by chorus-run after --grace 1. Arguments: more for survivor_blame
# (`large`: 64 MiB calls, where the kill most likely lands in a single-copy transfer).
set -u
BUILD=${BUILD:-build}
PATH=$BUILD/bin:$PATH
tmp=$(mktemp -d)
runner=
cleanup() { [ -n "$runner" ] && kill -9 "$runner" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
out=$tmp/out
chorus-run -np 2 --grace 1 "$BUILD/tests/fault/survivor_blame" silent "$@" >"$out" 2>&1 &
runner=$!
# both ranks running (the list's limit bounds this wait)
while ! grep -q "rank 1 pid [0-9]* running" "$out" || ! grep -q "rank 0 pid [0-9]* running" "$out"; do
    kill -0 "$runner" 2>/dev/null || { cat "$out"; echo "chorus-run ended before both ranks ran"; exit 1; }
    sleep 0.05
done
pid=$(sed -n 's/.*rank 1 pid \([0-9]*\) running.*/\1/p' "$out")
kill -9 "$pid"
wait "$runner"
rc=$?
runner=
cat "$out"
[ "$rc" != 0 ] || { echo "chorus-run exited 0"; exit 1; }
grep -q "allreduce of [0-9]* failed" "$out" && { echo "the silent rank printed its error"; exit 1; }
grep -q "^chorus-run: stopped: rank 0 (pid [0-9]*) was killed by signal 15 (Terminated) after it lost rank 1 (CHORUS_ERR_PEER_LOST)$" "$out" ||
    { echo "rank 0 was not reported stopped after losing rank 1"; exit 1; }
grep -q "^chorus-run: rank 0 had reported CHORUS_ERR_PEER_LOST: rank 1 (\(host\|pid\) [^)]*) .*lost" "$out" ||
    { echo "rank 0's reported error, naming rank 1, was not shown"; exit 1; }
echo "ok: the error rank 0 reported is shown though rank 0 never printed it"
