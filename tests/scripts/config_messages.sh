#!/bin/sh
# Invalid CHORUS_* values and misspelt names as a user meets them: a value that is not of its
# variable's form stops the job with one line naming the variable, the value and what is
# accepted (never a silent default); an unknown CHORUS_* name is warned about once, with the
# closest known name, whatever CHORUS_DEBUG says; CHORUS_DEBUG takes the level names users
# type, INFO shows the version, TRACE the algorithm of every collective and why.
set -u
fail() { echo "FAILED: $*"; exit 1; }
bench="chorus-bench -b 4K -e 4K -n 1 -w 0"

for v in 0 -5 abc; do
    out=$(CHORUS_TIMEOUT_S=$v chorus-run -np 2 sh -c 'echo started' 2>&1); rc=$?
    echo "$out"
    [ $rc = 2 ] && [ "$out" = "chorus-run: invalid environment: CHORUS_TIMEOUT_S=$v is not a positive number (above 0, e.g. 30 or 2.5)" ] ||
        fail "CHORUS_TIMEOUT_S=$v under chorus-run (exit $rc)"
done
# without a launcher (a world of one): chorus_init refuses it
out=$(CHORUS_TIMEOUT_S=0 $bench 2>&1); rc=$?
echo "$out"
[ $rc = 1 ] && echo "$out" | grep -q "invalid environment: CHORUS_TIMEOUT_S=0 is not a positive number" ||
    fail "chorus_init with CHORUS_TIMEOUT_S=0"
out=$(CHORUS_SHM=maybe chorus-run -np 2 sh -c 'echo started' 2>&1); rc=$?
echo "$out"
[ $rc = 2 ] && echo "$out" | grep -q "CHORUS_SHM=maybe is not a boolean (0/1, true/false, yes/no, on/off)" ||
    fail "CHORUS_SHM=maybe"
out=$(CHORUS_DEBUG=verbose chorus-run -np 2 sh -c 'echo started' 2>&1); rc=$?
echo "$out"
[ $rc = 2 ] && echo "$out" | grep -q "CHORUS_DEBUG=verbose is not one of NONE,OFF,VERSION,ERROR,WARN,INFO,DEBUG,TRACE" ||
    fail "CHORUS_DEBUG=verbose"

# a misspelt name: one warning for the job, the job runs
out=$(CHORUS_TIMOUT_S=20 chorus-run -np 2 $bench 2>&1); rc=$?
echo "$out" | grep -v '^\[0\] [ #]'
[ $rc = 0 ] || fail "misspelt name: exit $rc"
[ "$(echo "$out" | grep -c 'CHORUS WARN CHORUS_TIMOUT_S is not a Chorus variable and is ignored; did you mean CHORUS_TIMEOUT_S?')" = 1 ] ||
    fail "misspelt name under chorus-run: one warning expected"
out=$(CHORUS_SHM_CHUNKS=1M $bench 2>&1); rc=$?
[ $rc = 0 ] && [ "$(echo "$out" | grep -c 'CHORUS_SHM_CHUNKS is not a Chorus variable and is ignored; did you mean CHORUS_SHM_CHUNK?')" = 1 ] ||
    fail "misspelt name without a launcher"

# names of the build, the Python package, the benchmark scripts and the tests are not warned about
out=$(CHORUS_SKIP_DEPS=1 CHORUS_LIB=x CHORUS_ARGS=-n CHORUS_COLS=size=1 CHORUS_TEST_SEED=1 $bench 2>&1) ||
    fail "run with foreign CHORUS_* names"
echo "$out" | grep -q "not a Chorus variable" && fail "a foreign name was warned about"

# levels: INFO shows the version once per rank and no per-collective line; DEBUG/TRACE do
out=$(CHORUS_DEBUG=Info chorus-run -np 2 $bench 2>&1); rc=$?
[ $rc = 0 ] || fail "INFO run: exit $rc"
echo "$out" | grep "version"
[ "$(echo "$out" | grep -c '^\[[01]\] .*:rank [01] CHORUS INFO Chorus version 0\.')" = 2 ] ||
    fail "INFO: the version once per rank"
echo "$out" | grep -q "CHORUS TRACE" && fail "INFO shows TRACE lines"
for level in debug TRACE; do
    out=$(CHORUS_DEBUG=$level CHORUS_DEBUG_SUBSYS=coll chorus-run -np 2 $bench 2>&1); rc=$?
    echo "$out" | grep "of 4096 B" | head -2
    [ $rc = 0 ] || fail "$level run: exit $rc"
    echo "$out" | grep -q "rank 0 CHORUS TRACE allreduce of 4096 B on comm [0-9a-f]* (2 ranks): shm_oneshot (shared memory, every rank reduces all inputs in rank order, chunk by chunk); 2 ranks on one host, 4096 B <= CHORUS_SHM_ONESHOT_MAX (65536)" ||
        fail "CHORUS_DEBUG=$level: the algorithm of each collective and why"
done
out=$(CHORUS_DEBUG=trace CHORUS_DEBUG_SUBSYS=coll CHORUS_SHM=0 chorus-run -np 2 $bench 2>&1)
echo "$out" | grep -q "allreduce of 4096 B on comm [0-9a-f]* (2 ranks): oneshot (TCP.*); no shared memory (CHORUS_SHM=0, not set up yet, or set-up failed), 4096 B <= CHORUS_TCP_ONESHOT_MAX (32768)" ||
    fail "TRACE over TCP: the reason names the threshold"
out=$(CHORUS_DEBUG=trace CHORUS_DEBUG_SUBSYS=coll CHORUS_ALGO_ALLREDUCE=ring CHORUS_SHM=0 chorus-run -np 2 $bench 2>&1)
echo "$out" | grep -q "allreduce of 4096 B on comm [0-9a-f]* (2 ranks): ring (.*); forced by CHORUS_ALGO_ALLREDUCE=ring" ||
    fail "TRACE of a forced algorithm"
out=$(CHORUS_DEBUG=VERSION chorus-run -np 2 $bench 2>&1)
echo "$out" | grep CHORUS
[ "$(echo "$out" | grep 'CHORUS' | grep -vc 'CHORUS INFO Chorus version')" = 0 ] &&
    [ "$(echo "$out" | grep -c '^\[[01]\] .*CHORUS INFO Chorus version')" = 2 ] ||
    fail "CHORUS_DEBUG=VERSION prints the version only"
# a log file that cannot be opened is said, not silently replaced by stderr
out=$(CHORUS_DEBUG=WARN CHORUS_DEBUG_FILE=/nonexistent-dir/chorus.%p.log $bench 2>&1)
echo "$out" | grep "DEBUG_FILE"
echo "$out" | grep -q "CHORUS WARN CHORUS_DEBUG_FILE=/nonexistent-dir/chorus.%p.log: cannot open /nonexistent-dir/chorus.[0-9]*.log: No such file or directory; logging to stderr" ||
    fail "CHORUS_DEBUG_FILE that cannot be opened"
echo "config_messages: ok"
