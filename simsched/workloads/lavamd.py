"""LavaMD-like molecular dynamics: one iteration per box of a 3-D grid, its work the particle pairs it computes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..errors import SimschedError
from ..footprint import Footprint, Gather
from ..loop import Loop
from ..spec import Param
from . import Workload, _cost
from .program import data_name, data_params

# What a box touches, laid out as Rodinia's LavaMD lays out its data. Of its own: its box record, the header
# (x, y, z, number: 4-byte ints; offset: 8 bytes; nn: a 4-byte int, padded to 8) and one 24-byte entry (x, y, z,
# number, offset) per neighbour, of which it reads the number; and per particle its position (four 8-byte
# doubles: v, x, y, z) and charge (an 8-byte double), read, and its force (four doubles), read and written.
# Of its neighbours': every particle's position and charge, from the arrays all boxes share.
BOX_HEADER_BYTES = 32
NEIGHBOUR_ENTRY_BYTES = 24
PARTICLE_BYTES = 4 * 8 + 8
FORCE_BYTES = 4 * 8


def cube_side(boxes: int) -> int | None:
    """The side d of a d x d x d grid of ``boxes`` boxes, or None when ``boxes`` is not a cube."""
    side = round(boxes ** (1 / 3))
    return next((d for d in (side - 1, side, side + 1) if d >= 1 and d ** 3 == boxes), None)


def neighbourhood_sums(counts: np.ndarray) -> np.ndarray:
    """Per box of a 3-D grid, the particles in it and its up to 26 neighbours (fewer at the grid's faces)."""
    padded = np.pad(counts, 1)
    d0, d1, d2 = counts.shape
    total = np.zeros(counts.shape, dtype=float)
    for dx in range(3):
        for dy in range(3):
            for dz in range(3):
                total += padded[dx:dx + d0, dy:dy + d1, dz:dz + d2]
    return total


class LavaMD(Workload):
    """LavaMD's box loop: box b costs pair_ns x (its particles) x (particles in b and its neighbour boxes).

    The grid is d x d x d boxes (``boxes`` = d^3), numbered (i d + j) d + k as LavaMD does.
    Box b holds Poisson(particles x g_b) particles, g_b a density drawn from a gamma
    distribution of mean 1 and coefficient of variation ``spread`` (0: plain Poisson), so
    that some regions are denser than others. Like LavaMD, a box computes the forces between
    each of its particles and every particle of its own box and of its up to 26 neighbours:
    boxes at a face, an edge or a corner of the grid have 17, 11 or 7 neighbours and do less.
    With ``data=1`` a box touches its record and its particles, and reads its neighbours'
    particles from the arrays all boxes share.
    """

    name = "lavamd"
    summary = "one iteration per box of a d^3 grid: pair_ns x its particles x particles in it and its neighbours"
    TOUCHES_DATA = False  # its data comes from its particles (data=1), not from bytes=
    PARAMS = {"boxes": Param("boxes", int, 512, lambda v: v >= 1, ">= 1",
                             help="boxes of the grid, a cube d^3 (512 = 8 x 8 x 8)"),
              "particles": Param("particles", float, 100.0, lambda v: v > 0, "> 0",
                                 help="mean particles per box"),
              "spread": Param("spread", float, 0.5, lambda v: v >= 0, ">= 0",
                              help="coefficient of variation of the boxes' particle density (0: Poisson counts)"),
              "pair_ns": _cost("pair_ns", 10.0, "cost of one particle-particle interaction"),
              # Rodinia's LavaMD fills its particle arrays in serial loops on the master thread. Off unless asked
              # for (data=1), so that the box loop's recorded times stay its compute.
              **data_params("master", ("master", "first-touch", "interleave"))}
    PARAMS["data"] = replace(PARAMS["data"], default=0)
    DURATION_PARAMS = ("pair_ns",)

    counts: np.ndarray | None = None  # the particles of each box, as the last draw of the costs found them

    def check(self):
        boxes = self.params["boxes"]
        if cube_side(boxes) is None:
            side = max(round(boxes ** (1 / 3)), 1)
            raise SimschedError(f"workload lavamd: boxes={boxes} is not a cube d^3 (e.g. {side ** 3} = "
                                f"{side} x {side} x {side})")

    def particle_counts(self, rng: np.random.Generator) -> np.ndarray:
        """The particles of each box, as a d x d x d array."""
        p = self.params
        d = cube_side(p["boxes"])
        spread = p["spread"]
        density = rng.gamma(1 / spread ** 2, spread ** 2, (d, d, d)) if spread > 0 else np.ones((d, d, d))
        return rng.poisson(p["particles"] * density).astype(float)

    def loop_sizes(self):
        return [(self.params["boxes"], 1)]

    def generate(self, rng):
        self.counts = self.particle_counts(rng)
        return (self.counts * neighbourhood_sums(self.counts)).ravel() * self.params["pair_ns"]

    def loops(self, rng):
        costs = self.costs(rng)
        return [Loop(costs, data=self.box_data(self.counts) if self.params["data"] else None)]

    def box_data(self, counts: np.ndarray) -> Footprint:
        """What each box touches (data=1): its record and particles of its own, its neighbours' particles shared."""
        neighbours = (neighbourhood_sums(np.ones_like(counts)) - 1).ravel().astype(np.int64)
        particles = counts.ravel().astype(np.int64)
        own = BOX_HEADER_BYTES + NEIGHBOUR_ENTRY_BYTES * neighbours + (PARTICLE_BYTES + FORCE_BYTES) * particles
        # A box reads each neighbour particle once from memory: its own particles' loop over it runs in the l1.
        reads = (neighbourhood_sums(counts).ravel() - counts.ravel()).astype(np.int64)
        name = data_name("lavamd")
        return Footprint(own, "stream", self.params["placement"], name,
                         gather=Gather(reads, max(int(particles.sum()), 1) * PARTICLE_BYTES, PARTICLE_BYTES,
                                       f"{name} positions and charges"))
