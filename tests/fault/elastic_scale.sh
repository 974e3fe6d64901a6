#!/bin/sh
# elastic_scale.sh CASE - membership changes of an elastic job other than a plain loss:
#   join      host discovery goes from 2 to 3 slots: a third worker joins at a commit, then
#             back to 2: the newest worker is retired at a commit; the job ends with 2 ranks
#             whose parameters equal the serial reference
#   replace   a rank is killed; chorus-run starts a replacement (--max-restarts 1) that takes
#             the state from a survivor and finishes with them
#   min       a rank is killed with --min-np 2 of 2 and no restarts: chorus-run stops the job
#             with a message and a failing status, leaving no process behind
set -u
case=$1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out
fail() { echo "FAILED ($case): $*"; echo "--- output"; cat "$out"; exit 1; }
# wait_for PATTERN COUNT: until COUNT lines of the output match (at most 30 s)
wait_for() {
    i=0
    while [ "$(cat "$out" 2>/dev/null | grep -c -- "$1")" -lt "$2" ] && [ $i -lt 300 ]; do
        sleep 0.1
        i=$((i + 1))
    done
    [ $i -lt 300 ] || fail "timed out waiting for $2 lines like '$1'"
}
pid_of() { sed -n "s/^\[$1\] started worker $1 pid \([0-9]*\)$/\1/p" "$out"; }
tag="fscale-$$"
prog="$BUILD/tests/fault/elastic_sgd"
export CHORUS_HEARTBEAT_TIMEOUT_S=2 CHORUS_HEARTBEAT_S=0.5

case $case in
join)
    # slots N: what the discovery script says from now on; the file is replaced whole
    # (rename), so the script never reads it half written (empty: no slots, retire everyone)
    slots() { echo "localhost:$1" > "$tmp/slots.new" && mv "$tmp/slots.new" "$tmp/slots"; }
    slots 2
    printf '#!/bin/sh\ncat %s\n' "$tmp/slots" > "$tmp/discover.sh"
    chmod +x "$tmp/discover.sh"
    # the workers wait at step 50 until the job has grown to 3 and shrunk back to 2, however
    # long the third worker takes to start on a loaded machine
    chorus-run --elastic --min-np 1 --max-np 3 --host-discovery-script "$tmp/discover.sh" \
        --discovery-interval 0.2 "$prog" --steps 150 --step-ms 20 --dim 300 --hold-at 50 \
        --hold-sizes 3,2 --tag "$tag" >"$out" 2>&1 &
    runner=$!
    wait_for '\] gen 1 size 2' 2
    wait_for '^\[0\] commit' 2
    slots 3
    wait_for '^\[2\] gen [0-9]* size 3 rank 2 step [0-9]* joined$' 1
    slots 2
    wait $runner
    rc=$?
    [ $rc = 0 ] || fail "chorus-run exited $rc"
    step=$(sed -n 's/^\[2\] gen [0-9]* size 3 rank 2 step \([0-9]*\) joined$/\1/p' "$out")
    [ "$step" -gt 0 ] && [ $((step % 5)) = 0 ] || fail "worker 2 joined at step $step, not at a commit"
    grep -q "^\[2\] error: CHORUS_ERR_MEMBERSHIP.*retired" "$out" || fail "worker 2 was not retired"
    [ "$(grep -c '\] final step 150 hash [0-9a-f]* ok$' "$out")" = 2 ] || fail "expected 2 finishers"
    grep -q "^\[2\] final" "$out" && fail "the retired worker finished"
    echo "ok: worker 2 joined at step $step and was retired; workers 0 and 1 match the reference"
    ;;
replace)
    chorus-run --elastic --min-np 2 --max-restarts 1 -np 3 "$prog" --steps 80 --step-ms 20 \
        --dim 300 --tag "$tag" >"$out" 2>&1 &
    runner=$!
    wait_for '\] gen 1 size 3' 3
    wait_for '^\[0\] commit' 1
    kill -9 "$(pid_of 1)"
    wait $runner
    rc=$?
    [ $rc = 0 ] || fail "chorus-run exited $rc"
    grep -q "started worker 3 (pid [0-9]*) to replace a failed one" "$out" || fail "no replacement"
    grep -q '^\[3\] gen [0-9]* size 3 rank 2 step [0-9]* joined$' "$out" || fail "worker 3 did not join"
    [ "$(grep -c '\] final step 80 hash [0-9a-f]* ok$' "$out")" = 3 ] || fail "expected 3 finishers"
    [ "$(sed -n 's/^\[[0-9]*\] final step 80 hash \([0-9a-f]*\) ok$/\1/p' "$out" | sort -u | wc -l)" = 1 ] ||
        fail "finishers disagree"
    echo "ok: worker 3 replaced worker 1; all three match the reference"
    ;;
min)
    chorus-run --elastic --min-np 2 --max-restarts 0 -np 2 "$prog" --steps 200 --step-ms 20 \
        --dim 300 --tag "$tag" >"$out" 2>&1 &
    runner=$!
    wait_for '\] gen 1 size 2' 2
    kill -9 "$(pid_of 1)"
    wait $runner
    rc=$?
    [ $rc != 0 ] || fail "chorus-run exited 0 below --min-np"
    grep -q "chorus-run: elastic: only 1 worker left, fewer than --min-np 2; stopping the job" "$out" ||
        fail "no message about --min-np"
    echo "ok: below --min-np the job stops with status $rc"
    ;;
*) echo "unknown case $case"; exit 2 ;;
esac
sleep 0.2
[ "$(pgrep -f -- "--tag $tag\$" | wc -l)" = 0 ] || fail "processes left behind"
grep "chorus-run:" "$out" | sed 's/^/    /'
