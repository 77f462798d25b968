"""A scheduler in one module: guided self-scheduling with a smallest and a largest chunk.

Each chunk is ceil(R / P) of the R iterations left, but never fewer than ``min`` nor more than
``cap``: the cap keeps the first chunks from being so large that one of them ends the loop
alone, the minimum keeps the last ones from costing a claim per iteration. The chunk table is
computed before the loop (a chunk rule), and workers claim its chunks one fetch-and-add at a
time on a shared counter, as libomp claims a chunk number.

    simsched run --plugin docs/examples/guided_capped.py --machine haswell-e5-2695v3 --threads 28 \\
        --scheduler guided-capped:min=4,cap=64 --workload exp-dec:n=100000
"""

from __future__ import annotations

import math

from simsched.errors import SimschedError
from simsched.schedulers.dls import ChunkRule
from simsched.schedulers.static import BARRIER_PARAM
from simsched.spec import Param


class GuidedCapped(ChunkRule):
    """Guided chunks, ceil(R/P), kept within [min, cap]; claimed by index from a precomputed table."""

    name = "guided-capped"
    summary = "guided self-scheduling, ceil(R/P), with a smallest and a largest chunk"
    # ChunkRule's ``chunk`` (a smallest chunk) is left out: ``min`` is this rule's, and a parameter the rule
    # ignored would be accepted and do nothing.
    PARAMS = {
        "min": Param("min", int, 4, lambda v: v >= 1, ">= 1", help="the smallest chunk (but the last)"),
        "cap": Param("cap", int, 64, lambda v: v >= 1, ">= 1", help="the largest chunk"),
        "barrier": BARRIER_PARAM,
    }

    def __init__(self, **params):
        super().__init__(**params)  # checks each parameter against its Param
        if self.params["min"] > self.params["cap"]:  # and what no single Param can check
            raise SimschedError(f"scheduler {self.name}: min ({self.params['min']}) must not exceed cap "
                                f"({self.params['cap']})")

    def min_chunks(self, n, threads):
        return -(-n // self.params["cap"])  # no chunk is larger than cap

    def bounds(self, n, threads, loop, rng):
        low, cap = self.params["min"], self.params["cap"]
        bounds, start = [0], 0
        while start < n:
            size = min(max(math.ceil((n - start) / threads), low), cap)
            start = min(start + size, n)
            bounds.append(start)
        return bounds
