"""A lab's own components in one module: a machine file registered by name, and a workload.

``ring-16`` is the machine file beside this module, loadable by name once the module is
imported (``register_machine``). ``spikes`` is a loop of cheap iterations with a few expensive
ones at random places: each iteration costs ``heavy_ns`` with probability ``p``, else
``light_ns``, drawn from the run's generator.

    simsched run --plugin docs/examples/ring_lab.py --machine ring-16 --threads 16 \\
        --scheduler omp-dynamic:chunk=8 --workload spikes:n=50000,p=0.01
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from simsched.errors import SimschedError
from simsched.machine import register_machine
from simsched.spec import Param
from simsched.workloads import Workload

register_machine("ring-16", Path(__file__).with_name("ring-16.toml"))


class Spikes(Workload):
    """Cheap iterations and, at random places, rare expensive ones: heavy_ns with probability p."""

    name = "spikes"
    summary = "light_ns iterations, each heavy_ns instead with probability p, at random places"
    REUSABLE = True  # its loops depend on its parameters and the generator alone
    PARAMS = {
        "n": Param("n", int, 1000, lambda v: v >= 1, ">= 1", help="number of iterations"),
        "light_ns": Param("light_ns", float, 200.0, lambda v: v >= 0, ">= 0",
                          help="cost of a cheap iteration"),
        "heavy_ns": Param("heavy_ns", float, 50_000.0, lambda v: v >= 0, ">= 0",
                          help="cost of an expensive iteration"),
        "p": Param("p", float, 0.01, lambda v: 0 <= v <= 1, "in [0, 1]",
                   help="probability that an iteration is expensive"),
    }

    def check(self):
        if self.params["heavy_ns"] < self.params["light_ns"]:
            raise SimschedError(f"workload spikes: heavy_ns ({self.params['heavy_ns']}) must be >= light_ns "
                                f"({self.params['light_ns']})")

    def generate(self, rng: np.random.Generator) -> np.ndarray:
        p = self.params
        return np.where(rng.random(p["n"]) < p["p"], p["heavy_ns"], p["light_ns"])
