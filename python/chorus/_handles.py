"""The one registry of asynchronous operations: integer handles for poll()/synchronize().

An entry is anything with wait() (returns the result or raises) and poll() (True once wait
will not block); chorus._engine.Op is the usual one. The registry keeps the entry (and the
buffers it holds) alive until synchronize() takes it.
"""

import itertools
import threading

from ._lib import ChorusError, HorovodInternalError

_entries = {}
_next = itertools.count(1)
_lock = threading.Lock()


class Done:
    """An operation that is already finished (an empty grouped op): its result is ready."""

    def __init__(self, result):
        self.result = result

    def wait(self):
        return self.result

    def poll(self):
        return True


def register(entry):
    """Stores entry and returns its handle (a positive int)."""
    with _lock:
        h = next(_next)
        _entries[h] = entry
    return h


def poll(handle):
    """True when the operation of handle has finished (synchronize() will not block)."""
    if hasattr(handle, "poll"):  # a handle object (sparse_allreduce_async's)
        return handle.poll()
    with _lock:
        e = _entries.get(handle)
    if e is None:
        raise ValueError("chorus poll: unknown handle %r (already synchronized?)" % (handle,))
    return e.poll()


def synchronize(handle):
    """Waits for the operation of handle and returns its output (None for an unknown or
    already synchronized handle). Raises HorovodInternalError (or a subclass:
    ChorusMismatchError, ChorusPeerLostError, ChorusTimeoutError) when it failed. A handle
    object (sparse_allreduce_async's callable) is waited for the same way."""
    if hasattr(handle, "wait"):
        return handle.wait()
    with _lock:
        e = _entries.pop(handle, None)
    if e is None:
        return None
    try:
        return e.wait()
    except ChorusError:
        raise
    except RuntimeError as err:
        raise HorovodInternalError(str(err)) from err


def clear():
    """Forgets every pending entry (at shutdown: their engine is gone)."""
    with _lock:
        _entries.clear()
