#!/bin/sh
# pyrun.py keeps one test's failure out of the next ones: a test failing on one rank while the
# other waits in a collective, and a test that hangs past its deadline, are each reported
# failed, and the tests after them pass.
out=$(mktemp)
trap 'rm -f "$out"' EXIT INT TERM
CHORUS_DESYNC_S=1 /usr/bin/python3 tests/python/pyrun.py -np 2 --test-timeout 8 \
    tests/python/isolation_cases.py > "$out" 2>&1
rc=$?
cat "$out"
fail=0
expect() { grep -q "$1" "$out" || { echo "pyrun_isolation: missing: $1"; fail=1; }; }
expect '^FAIL  tests/python/isolation_cases.py::test_fails_on_rank_1_while_rank_0_waits$'
expect '^PASS  tests/python/isolation_cases.py::test_runs_after_a_failure'
expect '^FAIL  tests/python/isolation_cases.py::test_hangs  (the job ended during it'
expect '^PASS  tests/python/isolation_cases.py::test_runs_after_a_hang'
expect 'still running after 8 s'
expect 'ranks desynchronised'
[ $rc = 1 ] || { echo "pyrun_isolation: pyrun.py exited $rc, not 1"; fail=1; }
exit $fail
