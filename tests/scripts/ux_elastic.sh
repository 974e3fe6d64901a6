#!/bin/sh
# chorus-run --elastic and a failure that repeats: a replacement that fails as the worker
# before it did (same status, same last line on stderr) ends the replacing, instead of every
# --max-restarts going to replacements that crash the same way; the messages say so without
# contradicting each other. A failure that differs each time still gets its replacements.
set -u
fail() { echo "FAILED: $*"; exit 1; }

out=$(chorus-run --elastic -np 2 --max-restarts 5 sh -c 'echo "starting"; echo "error: bad setting in the config" >&2; exit 4' 2>&1); rc=$?
echo "$out"
[ $rc = 4 ] || fail "repeating failure: exit $rc, expected 4"
echo "$out" | grep -q "^chorus-run: elastic: replacement worker [23] failed as worker [0-3] did (exited with status 4, last line 'error: bad setting in the config'); the failure repeats, so no more replacements are started$" || fail "the repeat was not recognised"
[ "$(echo "$out" | grep -c 'started worker')" -le 2 ] || fail "replacements went on after the failure repeated"
echo "$out" | grep -q "0 workers left" && fail "'0 workers left' (the job does not go on)"
[ "$(echo "$out" | tail -1)" = "chorus-run: elastic: no worker is left; stopping (a replacement failed as the worker before it did)" ] || fail "last line"

out=$(chorus-run --elastic -np 1 --max-restarts 2 sh -c 'echo "failed in worker $CHORUS_WORKER_ID" >&2; exit 3' 2>&1); rc=$?
echo "$out"
[ $rc = 3 ] || fail "differing failures: exit $rc, expected 3"
[ "$(echo "$out" | grep -c 'started worker [0-9]* (pid [0-9]*) to replace a failed one')" = 2 ] || fail "differing failures did not use --max-restarts 2"
echo "$out" | grep -q "failure repeats" && fail "differing failures were taken for a repeat"
echo "$out" | grep -q "; no worker is left: replacing the failed ones$" || fail "no line saying replacements start"
[ "$(echo "$out" | tail -1)" = "chorus-run: elastic: no worker is left; stopping (--max-restarts 2 reached)" ] || fail "last line"

# Workers that end together are reaped one at a time: the report of the first must not count
# the other, already ended, as a worker left. The launcher is stopped while both workers end,
# so both have ended (unreaped) when it looks.
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
chorus-run --elastic -np 2 --max-restarts 0 sh -c "echo \$\$ > $d/pid.\$CHORUS_WORKER_ID; while [ ! -e $d/go ]; do sleep 0.05; done; exit 5" > "$d/out" 2>&1 &
run=$!
i=0
while [ ! -s "$d/pid.0" ] || [ ! -s "$d/pid.1" ]; do
    kill -0 $run 2>/dev/null || { cat "$d/out"; fail "the job ended before both workers started"; }
    sleep 0.05
done
kill -STOP $run
touch "$d/go"
for w in 0 1; do # a worker has ended when it is a zombie (its parent, the launcher, is stopped)
    pid=$(cat "$d/pid.$w")
    while [ "$(sed 's/.*) \(.\).*/\1/' /proc/"$pid"/stat 2>/dev/null)" != Z ]; do sleep 0.05; done
done
kill -CONT $run
wait $run; rc=$?
out=$(cat "$d/out")
echo "$out"
[ $rc = 5 ] || fail "workers ending together: exit $rc, expected 5"
echo "$out" | grep -q "worker left\|workers left" && fail "a worker was counted as left after it ended"
[ "$(echo "$out" | tail -1)" = "chorus-run: elastic: no worker is left; stopping (--max-restarts 0 reached)" ] || fail "workers ending together: last line"
echo "ok: a repeating elastic failure; workers that end together"
