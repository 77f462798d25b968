"""A parallel loop's iterations as prefix sums of their costs, and the loops nested in its iterations."""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

import numpy as np

from .errors import SimschedError

# Times are float64 ns. Below 2**53 ns (about 104 days) neighbouring floats are at most 1 ns
# apart, so a few ns of scheduling overhead still count when added to a time; beyond it they
# vanish in rounding and the run would report nothing about the scheduler.
MAX_TOTAL_NS = 2.0 ** 53


def check_total(total: float, what: str) -> None:
    """Raise unless ``total`` ns (``what`` adds up to it) keeps 1 ns resolution in float64 times."""
    if not np.isfinite(total):
        raise SimschedError(f"{what} add up to more than a float can hold")
    if total >= MAX_TOTAL_NS:
        raise SimschedError(f"{what} add up to {total:.4g} ns; the bound is 2**53 ns = {MAX_TOTAL_NS:.4g} ns "
                            "(about 104 days), beyond which float64 times lose 1 ns resolution")


def prefix_sums(costs: np.ndarray) -> np.ndarray:
    """The prefix sums [0, c0, c0 + c1, ...] of a loop's costs: the one way every loop computes them."""
    with np.errstate(over="ignore"):
        return np.concatenate(([0.0], np.cumsum(costs)))


def checked_serial_ns(serial_ns: Any) -> float:
    """``serial_ns`` as a float, refused unless finite and >= 0."""
    value = float(serial_ns)
    if not np.isfinite(value) or value < 0:
        raise SimschedError(f"a loop's serial_ns must be finite and >= 0, got {serial_ns!r}")
    return value


class Loop:
    """One parallel loop over iterations [0, n): its costs as prefix sums, so any chunk costs O(1)."""

    fine_grain = True  # the default mark, for loops built without __init__'s check (a trace's streamed loops)
    # Extra time per ns of work that benchmark instrumentation in its iterations costs with every core of a
    # socket busy (simsched.instrumentation); 0 for every loop but those a workload says are instrumented.
    instrumentation = 0.0

    def __init__(self, costs: Any, name: str = "", inner: "dict[int, Loop] | None" = None, data=None,
                 serial_ns: float = 0.0, fine_grain: bool = True, instrumentation: float = 0.0):
        costs = np.asarray(costs, dtype=float)
        if costs.ndim != 1 or costs.size == 0:
            raise SimschedError("a loop needs a non-empty 1-D array of iteration costs")
        if not np.all(np.isfinite(costs)):
            raise SimschedError("iteration costs must be finite")
        if np.any(costs < 0):
            raise SimschedError("iteration costs must be >= 0")
        self.n = int(costs.size)
        self.prefix = prefix_sums(costs)
        self.total = float(self.prefix[-1])
        check_total(self.total, "the iteration costs")
        self.name = name
        # The sequential code the master runs before the loop starts (the program's part outside loops).
        self.serial_ns = checked_serial_ns(serial_ns)
        # Marked fine-grain: cilk-fg runs it with half-barriers, otherwise as a Cilk loop (others ignore it).
        if not isinstance(fine_grain, (bool, np.bool_)):
            raise SimschedError(f"a loop's fine_grain must be True or False, got {fine_grain!r}")
        self.fine_grain = bool(fine_grain)
        rate = float(instrumentation)
        if not np.isfinite(rate) or rate < 0:
            raise SimschedError(f"a loop's instrumentation must be finite and >= 0, got {instrumentation!r}")
        self.instrumentation = rate
        # The data its iterations touch (a footprint.Footprint), or None: then a chunk costs its compute only.
        self.data = data
        if data is not None and data.bytes.size != self.n:
            raise SimschedError(f"a loop of {self.n} iterations needs {self.n} footprints, got {data.bytes.size}")
        # Loops nested in iterations: iteration i runs its own cost, then the whole loop inner[i].
        self.inner = dict(inner or {})
        for i, loop in self.inner.items():
            if not 0 <= i < self.n:
                raise SimschedError(f"an inner loop is attached to iteration {i}, outside [0, {self.n})")
            if loop.inner:
                raise SimschedError("inner loops nest one level deep")
            if loop.serial_ns:
                raise SimschedError("an inner loop has no serial code of its own: give it to the outer loop")


class Window:
    """The streamed loops whose arrays are in memory: the earliest read go once more than ``budget`` iterations are.

    The ``keep`` most recent stay whatever their size: a program runs at most two loops at
    once, so the loops a run is in are never dropped, and memory stays within ``budget``
    plus a few of the largest loops.
    """

    def __init__(self, budget: int, keep: int = 3):
        self.budget, self.keep = budget, keep
        self.loops: deque[StreamedLoop] = deque()
        self.iterations = 0

    def add(self, loop: "StreamedLoop") -> None:
        self.loops.append(loop)
        self.iterations += loop.n
        while self.iterations > self.budget and len(self.loops) > self.keep:
            old = self.loops.popleft()
            old.held = None
            self.iterations -= old.n


class StreamedLoop(Loop):
    """A loop whose costs (and footprint) stay in their source until used; ``n``, ``total`` and ``serial_ns`` are known.

    ``prefix`` and ``data`` call ``read() -> (costs, footprint or None)`` on first use and
    are kept in ``window``, which drops them again once later loops have been read. The same
    source reads the same arrays every time, so what was dropped and read again never
    changes a run.
    """

    def __init__(self, n: int, total: float, read: Callable[[], tuple], window: Window, name: str = "",
                 serial_ns: float = 0.0, has_data: bool = False, phase: str = ""):
        self.n, self.total, self.name, self.phase = int(n), float(total), name, phase
        check_total(self.total, "the iteration costs")
        self.serial_ns = checked_serial_ns(serial_ns)
        self.has_data = has_data
        self.inner: dict[int, Loop] = {}
        self.read, self.window = read, window
        self.held: tuple | None = None  # (prefix, footprint or None) while in the window

    @property
    def prefix(self) -> np.ndarray:
        return self.arrays()[0]

    @property
    def data(self):
        return self.arrays()[1] if self.has_data else None

    def arrays(self) -> tuple:
        """(prefix sums, footprint or None), read now unless the window holds them."""
        if self.held is None:
            costs, data = self.read()
            self.hold(costs, data)
        return self.held

    def hold(self, costs: np.ndarray, data) -> None:
        """Keep costs just read (by ``read`` or by whoever read them first) in the window."""
        prefix = prefix_sums(costs)
        if prefix.size != self.n + 1 or float(prefix[-1]) != self.total or (data is not None) != self.has_data:
            raise SimschedError(f"loop {self.name or '(unnamed)'}: its source changed since it was first read")
        self.held = (prefix, data)
        self.window.add(self)
