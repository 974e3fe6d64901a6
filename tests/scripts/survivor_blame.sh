#!/bin/sh
# survivor_blame.sh NP VICTIM [TRIALS [SIG]] - kill -9 (or, with SIG STOP, kill -STOP) of one
# rank at a random moment of allreduces
# of changing sizes (tests/fault/survivor_blame): every survivor must fail naming the killed
# rank as the one that failed ("rank V (host h)" over TCP, "rank V (pid p)" over shared memory),
# never another survivor (which would happen if a survivor that
# closed its sockets after learning of the death were taken for dead itself). TRIALS defaults
# to 20; BLAME_TRIALS=50 runs more. Run it over TCP (CHORUS_SHM=0) and shared memory.
# A stopped rank makes no progress: the survivors time out (CHORUS_TIMEOUT_S=3 here) and must
# name it, not a live peer that waits for it too; the script then kills it.
set -u
np=$1; victim=$2; trials=${3:-${BLAME_TRIALS:-20}}; sig=${4:-KILL}
timeout_s=20
[ "$sig" = STOP ] && timeout_s=3
tmp=$(mktemp -d)
runner=
cleanup() { [ -n "$runner" ] && kill -9 "$runner" 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
fail() { echo "FAILED (trial $t): $*"; echo "--- output"; cat "$out"; exit 1; }
t=0
while [ $t -lt "$trials" ]; do
    t=$((t + 1))
    out="$tmp/out.$t"
    : >"$out"
    CHORUS_TIMEOUT_S=$timeout_s chorus-run -np "$np" --grace 15 "$BUILD/tests/fault/survivor_blame" >"$out" 2>&1 &
    runner=$!
    i=0
    while ! grep -q "rank $victim pid [0-9]* running" "$out" && [ $i -lt 200 ]; do sleep 0.05; i=$((i + 1)); done
    pid=$(sed -n "s/.*rank $victim pid \([0-9]*\) running.*/\1/p" "$out")
    [ -n "$pid" ] || fail "rank $victim did not start"
    # a random moment within the first 0.3 s of allreduces
    sleep "0.$(( $(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 300 ))"
    kill -"$sig" "$pid"
    if [ "$sig" = STOP ]; then
        i=0
        while [ "$(grep -c "allreduce of [0-9]* failed" "$out")" -lt $((np - 1)) ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
        kill -9 "$pid"
    fi
    wait "$runner"
    runner=
    n=$(grep -c "allreduce of [0-9]* failed" "$out")
    [ "$n" = $((np - 1)) ] || fail "$n of $((np - 1)) survivors reported a failure"
    grep "allreduce of [0-9]* failed" "$out" | grep -v "rank $victim (\(host\|pid\)" && fail "a survivor did not name rank $victim"
    for s in $(seq 0 $((np - 1))); do
        [ $s = "$victim" ] && continue
        grep "allreduce of [0-9]* failed" "$out" | grep "rank $s (\(host\|pid\)" && fail "a survivor blamed rank $s, which survived"
    done
done
echo "ok: in $trials trials every survivor named rank $victim, and no survivor was blamed"
