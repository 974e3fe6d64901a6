"""A Chrome-trace timeline of the operations this process issues from Python.

start(path) opens the file; every operation then writes a complete event ("X") from the
moment it was issued to the moment its result was taken, on a track per operation kind,
with its name. The file is valid JSON once stop() has run (also at exit). Open it in
chrome://tracing or https://ui.perfetto.dev. The engine's own timeline (CHORUS_TIMELINE)
shows what happens below, in the C runtime.
"""

import atexit
import json
import os
import threading
import time

_lock = threading.Lock()
_f = None
_first = True
_pid = 0
_tids = {}


def active():
    return _f is not None


def start(path, rank):
    global _f, _first, _pid
    with _lock:
        if _f is not None:
            raise ValueError("chorus: a timeline is already being written; call "
                             "stop_timeline() first")
        path = path.replace("%r", str(rank))
        d = os.path.dirname(path)
        if d:
            os.makedirs(d, exist_ok=True)
        _f = open(path, "w")
        _f.write("[\n")
        _first, _pid = True, rank
        _emit({"name": "process_name", "ph": "M", "pid": _pid,
               "args": {"name": "rank %d (python)" % rank}})


def _emit(ev):
    global _first
    _f.write(("" if _first else ",\n") + json.dumps(ev))
    _first = False


def begin(kind, name):
    """A token for end(), or None when no timeline is open (the common, free case)."""
    if _f is None:
        return None
    return (kind, name or kind, time.perf_counter_ns())


def end(token):
    if token is None:
        return
    kind, name, t0 = token
    t1 = time.perf_counter_ns()
    with _lock:
        if _f is None:
            return
        tid = _tids.get(kind)
        if tid is None:
            tid = _tids[kind] = len(_tids) + 1
            _emit({"name": "thread_name", "ph": "M", "pid": _pid, "tid": tid,
                   "args": {"name": kind}})
        _emit({"name": name, "cat": kind, "ph": "X", "pid": _pid, "tid": tid,
               "ts": t0 / 1000.0, "dur": (t1 - t0) / 1000.0})


def stop():
    global _f
    with _lock:
        if _f is None:
            return
        _f.write("\n]\n")
        _f.close()
        _f = None
        _tids.clear()


atexit.register(stop)
