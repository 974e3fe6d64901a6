"""Shared set-up for the Python tests. Most files run under `chorus-run -np N python3 -m
pytest`: every rank runs the same tests in the same order, so each test is a collective.
The package is imported from the source tree (python/) and the library from $BUILD."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))
os.environ.setdefault("CHORUS_LIB", os.path.join(BUILD, "lib", "libchorus.so"))


# ---- one test at a time, with a deadline, without cascading ---------------------------------
# tests/python/pyrun.py runs a test file as one job (one chorus-run of pytest: torch starts
# once) and sets PYRUN_LOG. Then every test runs under a deadline (a watchdog ends
# the job naming the test and printing every thread's stack), its start and outcome are
# written to the log (rank 0's), and after every test the ranks compare what they ran and how
# it went: when a test failed on some rank, every rank starts the runtime afresh before the
# next test, so a failure cannot leave pending operations or name counters behind. A job that
# ends inside a test (deadline, crash) is started again by pyrun.py with the tests left.

import faulthandler  # noqa: E402
import threading  # noqa: E402

import pytest  # noqa: E402

_LOG = os.environ.get("PYRUN_LOG")
_RANK = int(os.environ.get("CHORUS_RANK", "0"))
_DEADLINE = float(os.environ.get("PYRUN_TEST_TIMEOUT_S", "60"))
_count = [0]


def _log(line):
    if _LOG and _RANK == 0:
        with open(_LOG, "a") as f:
            f.write(line + "\n")


def pytest_collection_finish(session):
    for item in session.items:
        _log("collected " + item.nodeid)


def _expire(nodeid):
    # pytest holds stderr while a test runs: the report goes to a file pyrun.py prints
    with open("%s.expired.%d" % (_LOG, _RANK), "w") as f:
        f.write("pyrun: rank %d: test %s still running after %g s (--test-timeout); ending "
                "this job. Its threads:\n" % (_RANK, nodeid, _DEADLINE))
        f.flush()
        faulthandler.dump_traceback(file=f, all_threads=True)
    os._exit(3)


def _agree(index, failed):
    """True when every rank ran test `index` and it passed everywhere; otherwise the runtime is
    started afresh on every rank. The comparison is retried while it ends in a mismatch: a
    rank that failed early reaches it while another still waits inside the test, until the
    engine ends that wait as desynchronised and that rank arrives too. Restarting only once
    every rank knows keeps a shutdown from cutting into another rank's pending op."""
    core = sys.modules.get("chorus._core")
    if core is None or not core.is_initialized() or core.S.world.size == 1:
        return not failed
    from chorus import _engine, _lib
    seen, why = None, None
    for _ in range(5):
        try:
            seen = _engine.allgather_i64(core.S.global_set.engine, [index, int(failed)],
                                         "pyrun.after.%d" % index)
            break
        except _lib.ChorusMismatchError as e:
            why = e
        except Exception as e:  # noqa: BLE001 - reported, then the runtime restarts
            why = e
            break
    ok = (seen is not None and not seen[:, 1].any() and
          len(set(int(i) for i in seen[:, 0])) == 1)
    if seen is None:
        sys.stderr.write("pyrun: ranks could not compare test %d: %s\n" % (index, why))
    if not ok:
        core.shutdown()
        core.init()
    return ok


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not _LOG:
        yield
        return
    _count[0] += 1
    _log("start " + item.nodeid)
    timer = threading.Timer(_DEADLINE, _expire, args=(item.nodeid,))
    timer.daemon = True
    timer.start()
    item._chorus_failed = False
    try:
        yield
    finally:
        timer.cancel()
    _agree(_count[0], item._chorus_failed)
    _log(("fail " if item._chorus_failed else "pass ") + item.nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed and _LOG:
        # shown now: a later test may end the job before pytest's summary
        item._chorus_failed = True
        sys.stderr.write("pyrun: %s failed on rank %d (%s):\n%s\n"
                         % (item.nodeid, _RANK, rep.when, rep.longreprtext))
