"""Horovod's environment variables reach libchorus's configuration (the rows they mean) when
the CHORUS_* ones are not set. Set here before the library reads its configuration, as a job
launched with them would have them. Run with 2 ranks."""

import ctypes
import os
import subprocess
import tempfile

import pytest

TIMELINE = os.path.join(tempfile.gettempdir(),
                        "chorus-hvd-env-%s.json" % os.environ.get("CHORUS_JOB_ID", os.getpid()))
HOROVOD = {"HOROVOD_FUSION_THRESHOLD": "1048576", "HOROVOD_CYCLE_TIME": "7",
           "HOROVOD_CACHE_CAPACITY": "16", "HOROVOD_STALL_CHECK_TIME_SECONDS": "9",
           "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "30", "HOROVOD_TIMELINE": TIMELINE}
for k in ("CHORUS_FUSION_THRESHOLD", "CHORUS_CYCLE_TIME_MS", "CHORUS_CACHE_CAPACITY",
          "CHORUS_STALL_WARN_S", "CHORUS_STALL_SHUTDOWN_S", "CHORUS_TIMELINE"):
    os.environ.pop(k, None)
os.environ.update(HOROVOD)

import torch  # noqa: E402

import chorus.torch as hvd  # noqa: E402
from chorus import _engine  # noqa: E402
from chorus._lib import lib  # noqa: E402

hvd.init()
R = hvd.rank()


def test_engine_options_come_from_horovod_variables():
    o = _engine.EngineOpts()
    lib.chorus_engine_opts_init(ctypes.byref(o))
    assert o.fusion_threshold == 1048576
    assert o.cycle_time_ms == 7.0
    assert o.cache_capacity == 16
    assert o.stall_warn_s == 9.0
    assert o.stall_shutdown_s == 30.0
    assert o.timeline.decode() == TIMELINE


def test_timeline_written_by_rank_0():
    hvd.allreduce(torch.ones(4), name="hvd.env.traced")
    hvd.shutdown()  # closes the timeline
    try:
        if R == 0:
            with open(TIMELINE) as f:
                assert "hvd.env.traced" in f.read()
    finally:
        hvd.init()
        hvd.barrier()
        if R == 0 and os.path.exists(TIMELINE):
            os.unlink(TIMELINE)


def test_bad_horovod_value_is_named():
    if R != 0:
        return
    env = dict(os.environ, HOROVOD_CYCLE_TIME="fast")
    for k in list(env):
        if k.startswith("CHORUS_") or k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(k)
    p = subprocess.run(["chorus-run", "-np", "1", "true"], env=env, capture_output=True,
                       text=True, timeout=30)
    assert p.returncode != 0
    assert "HOROVOD_CYCLE_TIME=fast" in p.stderr, p.stderr


def _fresh_opts(field, **env):
    """repr of the engine option field as a new process with env added sees it."""
    code = ("import ctypes, chorus._engine as e; from chorus._lib import lib; "
            "o = e.EngineOpts(); lib.chorus_engine_opts_init(ctypes.byref(o)); "
            "print(repr(o.%s))" % field)
    python = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "python")
    env = dict(os.environ, **env)
    env["PYTHONPATH"] = python + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("HOROVOD_STALL_CHECK_TIME_SECONDS", None)
    out = subprocess.run(["/usr/bin/python3", "-c", code], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


@pytest.mark.parametrize("var", ["HOROVOD_STALL_CHECK_DISABLE"])
def test_stall_check_disable(var):
    if R != 0:
        return
    assert _fresh_opts("stall_warn_s", **{var: "1"}) == "0.0"


def test_timeline_dynamic_starts_none():
    # Horovod: HOROVOD_TIMELINE=DYNAMIC means no timeline until start_timeline(file), not a
    # file named DYNAMIC
    if R != 0:
        return
    assert _fresh_opts("timeline", HOROVOD_TIMELINE="DYNAMIC") == "None"
    assert _fresh_opts("timeline", HOROVOD_TIMELINE="t.json") == "b't.json'"
