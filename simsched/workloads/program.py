"""Workloads that are programs of several loops, each loop's costs computed from one data structure."""

from __future__ import annotations

import itertools

import numpy as np

from ..loop import Loop
from ..spec import Param
from . import Workload

# Each draw of an application's data gets data set names of its own: two workloads of one program,
# or two draws of one, never pass for the same data.
_DRAWS = itertools.count()


def data_params(placement: str, placements: tuple[str, ...]) -> dict[str, Param]:
    """An application's data parameters: whether its iterations touch the data it derives from its input, and
    where that data's pages live (``placement``: what the published code does)."""
    return {"data": Param("data", int, 1, lambda v: v in (0, 1), "0 or 1",
                          help="1: iterations touch their data (where the machine describes its memory "
                               "hierarchy); 0: compute only"),
            "placement": Param("placement", str, placement, choices=placements,
                               help="home NUMA node of the data: " + ", ".join(placements))}


def data_name(what: str) -> str:
    """A data set name for one draw of an application's data (``what`` says whose)."""
    return f"{what} #{next(_DRAWS)}"


class ProgramWorkload(Workload):
    """A sequence of loops (``loop_costs``); ``costs`` and ``generate`` give the program's first loop."""

    TOUCHES_DATA = False

    def loop_costs(self, rng: np.random.Generator) -> list[np.ndarray]:
        """Each loop's iteration costs in ns, in program order."""
        raise NotImplementedError

    def generate(self, rng):
        return self.loop_costs(rng)[0]

    def loops(self, rng):
        return self.program(self.loop_costs(rng))

    def program(self, costs: list[np.ndarray], footprints: list | None = None) -> list[Loop]:
        """The loops of these costs and footprints (none: no data), in program order."""
        footprints = footprints or [None] * len(costs)
        # Loops of the very same costs share one Loop object, as matmul's steps do.
        if all(c is costs[0] for c in costs) and all(f is footprints[0] for f in footprints):
            return [Loop(costs[0], data=footprints[0])] * len(costs)
        return [Loop(c, data=f) for c, f in zip(costs, footprints)]
