"""The compiled native runtime: whether it is built, the CPUs its threads take, its arguments' bounds."""

from __future__ import annotations

import os

import numpy as np

from ..errors import SimschedError

try:
    from . import _native
except ImportError:  # built without a C compiler: the simulator works, native mode says it is missing
    _native = None

DEFAULT_TIMEOUT_S = 60.0
MAX_REPEAT = 1_000_000
INT32 = 2**31 - 1


def _check_integer(name: str, value, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
        raise SimschedError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def _check_timeout(timeout_s) -> float:
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
        raise SimschedError(f"timeout must be a finite number of seconds > 0, got {timeout_s!r}")
    return float(timeout_s)


def available() -> bool:
    """Whether the native runtime was built."""
    return _native is not None


def require() -> None:
    """Raise a one-line error unless the native runtime was built."""
    if _native is None:
        raise SimschedError("native mode is not built: reinstall simsched on a machine with a C compiler "
                            "(pip install .)")


def cores() -> list[int]:
    """The CPUs this process may run on."""
    return sorted(os.sched_getaffinity(0))


def check_threads(threads: int) -> list[int]:
    """The CPUs for ``threads`` workers; refuses more workers than CPUs (oversubscribed spinning is meaningless)."""
    cpus = cores()
    if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)) or threads < 1:
        raise SimschedError(f"threads must be an integer >= 1, got {threads!r}")
    if threads > len(cpus):
        raise SimschedError(f"threads={threads} exceeds the {len(cpus)} CPU(s) available here: spinning threads "
                            "must not share a CPU")
    return cpus[:threads]
