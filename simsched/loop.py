"""A parallel loop's iterations as prefix sums of their costs, and the loops nested in its iterations."""

from __future__ import annotations

from typing import Any

import numpy as np

from .errors import SimschedError


class Loop:
    """One parallel loop over iterations [0, n): its costs as prefix sums, so any chunk costs O(1)."""

    def __init__(self, costs: Any, name: str = "", inner: "dict[int, Loop] | None" = None):
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
        if not np.isfinite(self.total):
            raise SimschedError("the iteration costs add up to more than a float can hold")
        self.name = name
        # Loops nested in iterations: iteration i runs its own cost, then the whole loop inner[i].
        self.inner = dict(inner or {})
        for i, loop in self.inner.items():
            if not 0 <= i < self.n:
                raise SimschedError(f"an inner loop is attached to iteration {i}, outside [0, {self.n})")
            if loop.inner:
                raise SimschedError("inner loops nest one level deep")
