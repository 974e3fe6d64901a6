#!/bin/sh
# The config as a user meets it: a malformed CHORUS_* value stops chorus-run before any rank
# starts, with one line naming the variable and the value; a variable that is set is logged at
# INFO by every rank ("CHORUS_TIMEOUT_S=20 (set)"), a secret by its length only.
set -u
fail() { echo "FAILED: $*"; exit 1; }

out=$(CHORUS_TIMEOUT_S=abc chorus-run -np 2 sh -c 'echo started' 2>&1); rc=$?
echo "$out"
[ $rc = 2 ] || fail "malformed value: exit $rc, expected 2"
[ "$(echo "$out" | wc -l)" = 1 ] || fail "malformed value: expected one line"
echo "$out" | grep -q "^chorus-run: invalid environment: CHORUS_TIMEOUT_S=abc is not a positive number (above 0, e.g. 30 or 2.5)$" ||
    fail "malformed value message"

out=$(CHORUS_ALGO_ALLREDUCE=fastest chorus-run -np 2 sh -c 'echo started' 2>&1); rc=$?
echo "$out"
[ $rc = 2 ] && echo "$out" | grep -q "CHORUS_ALGO_ALLREDUCE=fastest is not an algorithm of allreduce; valid: .*direct_ring" ||
    fail "unknown algorithm name"

# The ranks check too (a launcher that does not): chorus_init fails naming the variable.
out=$(CHORUS_DEBUG=INFO chorus-run -np 2 sh -c 'CHORUS_SHM_CHUNK=-1 exec "$0"' \
    "$BUILD/tests/mp/invalid_args" 2>&1); rc=$?
echo "$out"
[ $rc != 0 ] || fail "a rank with a malformed value must fail"
echo "$out" | grep -q "invalid environment: CHORUS_SHM_CHUNK=-1 is not a size in bytes" ||
    fail "chorus_init message"

out=$(CHORUS_DEBUG=INFO CHORUS_DEBUG_SUBSYS=INIT CHORUS_TIMEOUT_S=20 chorus-run -np 2 \
    "$BUILD/tests/mp/invalid_args" 2>&1); rc=$?
echo "$out" | grep '(set)'
[ $rc = 0 ] || fail "run with INFO logging: exit $rc"
[ "$(echo "$out" | grep -c 'CHORUS INFO CHORUS_TIMEOUT_S=20 (set)')" -ge 2 ] ||
    fail "each rank logs the variables that are set"
echo "$out" | grep -q 'CHORUS_SECRET=(64 bytes, not shown) (set)' || fail "secret logged by length"
echo "$out" | grep -q 'CHORUS_SECRET=[0-9a-f]' && fail "the secret itself was logged"
echo "config_env: ok"
