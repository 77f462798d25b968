"""Workloads that are programs of several loops, each loop's costs computed from one data structure."""

from __future__ import annotations

import numpy as np

from ..loop import Loop
from . import Workload


class ProgramWorkload(Workload):
    """A sequence of loops (``loop_costs``); ``costs`` and ``generate`` give the program's first loop."""

    TOUCHES_DATA = False

    def loop_costs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Each loop's iteration costs in ns, in program order."""
        raise NotImplementedError

    def generate(self, rng):
        return self.loop_costs(rng)[0]

    def loops(self, rng):
        costs = self.loop_costs(rng)
        # Loops of the very same costs share one Loop object, as matmul's steps do.
        if all(c is costs[0] for c in costs):
            return [Loop(costs[0])] * len(costs)
        return [Loop(c) for c in costs]
