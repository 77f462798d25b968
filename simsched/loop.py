"""A parallel loop's iterations as prefix sums of their costs, and the loops nested in its iterations."""

from __future__ import annotations

from typing import Any

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


class Loop:
    """One parallel loop over iterations [0, n): its costs as prefix sums, so any chunk costs O(1)."""

    def __init__(self, costs: Any, name: str = "", inner: "dict[int, Loop] | None" = None, data=None,
                 serial_ns: float = 0.0, fine_grain: bool = True):
        costs = np.asarray(costs, dtype=float)
        if costs.ndim != 1 or costs.size == 0:
            raise SimschedError("a loop needs a non-empty 1-D array of iteration costs")
        if not np.all(np.isfinite(costs)):
            raise SimschedError("iteration costs must be finite")
        if np.any(costs < 0):
            raise SimschedError("iteration costs must be >= 0")
        self.n = int(costs.size)
        with np.errstate(over="ignore"):
            self.prefix = np.concatenate(([0.0], np.cumsum(costs)))
        self.total = float(self.prefix[-1])
        check_total(self.total, "the iteration costs")
        self.name = name
        # The sequential code the master runs before the loop starts (the program's part outside loops).
        serial_ns = float(serial_ns)
        if not np.isfinite(serial_ns) or serial_ns < 0:
            raise SimschedError(f"a loop's serial_ns must be finite and >= 0, got {serial_ns!r}")
        self.serial_ns = serial_ns
        # Marked fine-grain: cilk-fg runs it with half-barriers, otherwise as a Cilk loop (others ignore it).
        if not isinstance(fine_grain, (bool, np.bool_)):
            raise SimschedError(f"a loop's fine_grain must be True or False, got {fine_grain!r}")
        self.fine_grain = bool(fine_grain)
        # The data its iterations touch (a locality.Footprint), or None: then a chunk costs its compute only.
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
