"""Signals a long command acts on: SIGINT and SIGTERM become :class:`Interrupted`, or wait while a block runs."""

from __future__ import annotations

from contextlib import contextmanager

from .errors import Interrupted


@contextmanager
def signals_held():
    """Hold SIGINT and SIGTERM until the block ends, where a held one takes effect.

    Processes started meanwhile (a Dask cluster's) inherit the held signals, so a Ctrl-C that
    reaches the whole process group stops only this process, which then closes the cluster whole.
    """
    import signal

    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


@contextmanager
def signals_interrupt():
    """Turn the first SIGINT or SIGTERM into :class:`Interrupted` (later ones wait for the clean-up)."""
    import signal
    import threading

    fired: list[int] = []
    if threading.current_thread() is not threading.main_thread():
        yield fired
        return

    def handler(signum, frame):
        if not fired:
            fired.append(signum)
            raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield fired
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
    if fired:  # the handler raised where the exception is swallowed (a __del__, a callback): raise it here
        raise Interrupted(fired[0])
