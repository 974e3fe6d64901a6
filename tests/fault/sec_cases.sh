#!/bin/sh
# sec_cases.sh - a secured job seen from its ranks: a rank without the secret or with a wrong
# one cannot join (a clear CHORUS_ERR_AUTH, the job fails, chorus-run logs the refusal);
# torchrun-style launches work unauthenticated (logged at INFO) and authenticated when
# CHORUS_SECRET is exported to every rank.
set -u
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAILED: $*"; echo "--- output"; cat "$tmp/out"; exit 1; }
prog="$BUILD/tests/fault/elastic_sgd --steps 5 --step-ms 0 --dim 10"

# 1. rank 1 has no secret
CHORUS_TIMEOUT_S=4 chorus-run -np 2 --grace 10 sh -c \
    "if [ \$CHORUS_RANK = 1 ]; then unset CHORUS_SECRET; fi; exec $prog" >"$tmp/out" 2>&1
[ $? != 0 ] || fail "a rank without the secret joined"
grep -q "^\[1\] error: CHORUS_ERR_AUTH.*requires authentication and CHORUS_SECRET is not set here" "$tmp/out" ||
    fail "rank 1 did not say why it could not join"
grep -q "store: dropped client .*before authenticating" "$tmp/out" || fail "chorus-run did not log the refusal"
echo "ok: a rank without CHORUS_SECRET is refused"

# 2. rank 1 has a wrong secret
CHORUS_TIMEOUT_S=4 chorus-run -np 2 --grace 10 sh -c \
    "if [ \$CHORUS_RANK = 1 ]; then export CHORUS_SECRET=wrong-secret-wrong-secret; fi; exec $prog" >"$tmp/out" 2>&1
[ $? != 0 ] || fail "a rank with a wrong secret joined"
grep -q "^\[1\] error: CHORUS_ERR_AUTH.*could not prove that it holds the job secret" "$tmp/out" ||
    fail "rank 1 did not say why it could not join"
echo "ok: a rank with a wrong CHORUS_SECRET is refused"

# 3. torchrun-style environment, no secret: works, and says so at INFO
# MASTER_PORT is chosen here, as a user would; another process may hold it (a port of the
# kernel's ephemeral range, taken by some other connection): then a new one, at most 5 times.
port=$((20000 + $$ % 10000))
run2() {
    for _ in 1 2 3 4 5; do
        for r in 0 1; do
            env RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
                MASTER_PORT=$port CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=BOOT CHORUS_TIMEOUT_S=20 \
                "$@" $prog >"$tmp/r$r" 2>&1 &
        done
        wait %1 && wait %2 && return 0
        grep -q "cannot listen on 127.0.0.1:$port: Address already in use" "$tmp/r0" || return 1
        port=$((port + 7))
    done
    return 1
}
unset CHORUS_SECRET
run2 env || { cat "$tmp/r0" "$tmp/r1" > "$tmp/out"; fail "unauthenticated torchrun-style job failed"; }
cat "$tmp/r0" "$tmp/r1" > "$tmp/out"
[ "$(grep -c 'final step 5 hash [0-9a-f]* ok' "$tmp/out")" = 2 ] || fail "wrong results"
grep -q "CHORUS_SECRET is not set: this job is unauthenticated" "$tmp/r0" || fail "no INFO line about it"
echo "ok: without CHORUS_SECRET a torchrun-style job runs and logs that it is unauthenticated"

# 4. the same with a secret exported by hand
port=$((port + 1))
run2 env CHORUS_SECRET=0123456789abcdef0123456789abcdef ||
    { cat "$tmp/r0" "$tmp/r1" > "$tmp/out"; fail "authenticated torchrun-style job failed"; }
cat "$tmp/r0" "$tmp/r1" > "$tmp/out"
[ "$(grep -c 'final step 5 hash [0-9a-f]* ok' "$tmp/out")" = 2 ] || fail "wrong results"
grep -q "unauthenticated" "$tmp/out" && fail "claims to be unauthenticated with a secret"
echo "ok: with CHORUS_SECRET exported by hand a torchrun-style job is authenticated"
