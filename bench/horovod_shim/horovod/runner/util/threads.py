"""in_thread as horovod.runner.util.threads has it (a test helper imports it)."""

import threading


def in_thread(target, args=(), name=None, daemon=True, silent=False):
    """Starts target(*args) in a daemon thread and returns the thread. silent: exceptions
    are swallowed instead of printed."""
    def run():
        try:
            target(*args)
        except BaseException:  # noqa: B902 - a silent thread reports nothing
            if not silent:
                raise
    t = threading.Thread(target=run if silent else target, args=() if silent else args,
                         name=name, daemon=daemon)
    t.start()
    return t
