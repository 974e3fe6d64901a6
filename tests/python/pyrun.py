"""Runs one Python test file the way tests/run.sh runs a C test: every test with a deadline,
its outcome on a line of its own, a failure that cannot take the next tests with it.

    python3 tests/python/pyrun.py [-np N] [--test-timeout S] tests/python/test_x.py

With -np N the file runs under `chorus-run -np N` (every rank runs every test, so each test is
a collective). One job runs the whole file, so torch starts once per rank instead of once per
test (about 2 s a process on the CI machine: a job per test would add minutes to `make
test`). Inside the job (tests/python/conftest.py) each test has a deadline, and after each
test the ranks compare outcomes; when one failed anywhere, the runtime is started afresh on
every rank before the next test. When the job ends inside a test (its deadline passed, a rank
crashed or hung), that test is recorded as failed and a new job runs the tests left, so each
test still gets its own verdict. Exits 1 when any test failed.
"""

import argparse
import glob
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run_job(args, log, deselect):
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", args.file]
    for nodeid in deselect:
        cmd += ["--deselect", nodeid]
    if args.np:
        cmd = ["chorus-run", "-np", str(args.np)] + cmd
    env = dict(os.environ, PYRUN_LOG=log,
               PYRUN_TEST_TIMEOUT_S=str(args.test_timeout))
    sys.stdout.flush()
    rc = subprocess.call(cmd, env=env)
    for f in sorted(glob.glob(log + ".expired.*")):  # written by a test past its deadline
        with open(f) as fh:
            sys.stdout.write(fh.read())
        os.unlink(f)
    return rc


def read_log(log):
    collected, state = [], {}
    with open(log) as f:
        for line in f:
            what, _, nodeid = line.rstrip("\n").partition(" ")
            if what == "collected":
                if nodeid not in collected:
                    collected.append(nodeid)
            else:
                state[nodeid] = what
    return collected, state


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-np", type=int, default=0, help="ranks (chorus-run); 0: one process")
    ap.add_argument("--test-timeout", type=float, default=60.0, help="seconds per test")
    ap.add_argument("file")
    args = ap.parse_args()
    fd, log = tempfile.mkstemp(prefix="pyrun.", suffix=".log")
    os.close(fd)
    verdict = {}  # nodeid -> "pass" | "fail" | "fail (...)"
    try:
        jobs = 0
        while True:
            jobs += 1
            rc = run_job(args, log, list(verdict))
            collected, state = read_log(log)
            progressed = False
            for nodeid, what in state.items():
                if nodeid in verdict:
                    continue
                progressed = True
                if what == "start":
                    verdict[nodeid] = "fail (the job ended during it: exit %d)" % rc
                else:
                    verdict[nodeid] = what
            left = [n for n in collected if n not in verdict]
            if not left or rc == 0:
                break
            if not progressed:
                print("pyrun: job %d ended (exit %d) before running a test; giving up on %d "
                      "test(s)" % (jobs, rc, len(left)))
                for n in left:
                    verdict[n] = "fail (not run: the job could not start)"
                break
            print("pyrun: job %d ended (exit %d); running the %d test(s) left in a new job"
                  % (jobs, rc, len(left)))
        if not verdict and rc != 0:
            print("pyrun: %s: the job failed (exit %d) before collecting any test"
                  % (args.file, rc))
            return 1
    finally:
        for f in [log] + glob.glob(log + ".expired.*"):
            os.unlink(f)
    failed = [n for n, v in verdict.items() if v != "pass"]
    for n, v in verdict.items():
        print("%-5s %s%s" % ("PASS" if v == "pass" else "FAIL", n,
                             "" if v in ("pass", "fail") else "  " + v[5:]))
    print("pyrun: %s: %d passed, %d failed (np=%d, %d job%s)"
          % (args.file, len(verdict) - len(failed), len(failed), args.np, jobs,
             "" if jobs == 1 else "s"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
