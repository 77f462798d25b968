"""BinLPT: workload-aware chunks assigned longest-processing-time first, then chunk self-scheduling."""

from __future__ import annotations

import heapq
import math

import numpy as np

from ..spec import Param
from .base import STEALING_COUNTERS
from .selfsched import claim_by_index
from .static import BARRIER_PARAM, FullBarriers


def cut(estimate: np.ndarray, most: int) -> list[int]:
    """Boundaries of at most ``most`` contiguous chunks of near-equal load, from prefix sums ``estimate``.

    Chunk j ends at the first iteration whose prefix reaches j/most of the total, so a
    heavy iteration that spans several targets closes one chunk, not several.
    """
    n = estimate.size - 1
    targets = estimate[-1] * np.arange(1, most) / most
    cuts = np.searchsorted(estimate, targets, side="left")
    return np.unique(np.concatenate(([0], cuts, [n]))).tolist()


def lpt(bounds: list[int], estimate: np.ndarray, threads: int) -> list[list[tuple[int, int]]]:
    """Per-thread chunk queues: chunks by estimated load descending, each to the least-loaded thread so far.

    Ties go to the lower chunk and the lower thread; each queue keeps the order its
    chunks were dealt (heaviest first).
    """
    loads = np.diff(estimate[bounds])
    heap = [(0.0, q) for q in range(threads)]
    queues: list[list[tuple[int, int]]] = [[] for _ in range(threads)]
    for c in np.argsort(-loads, kind="stable").tolist():
        load, q = heap[0]
        heapq.heapreplace(heap, (load + float(loads[c]), q))
        queues[q].append((bounds[c], bounds[c + 1]))
    return queues


def plan_cycles(n: int, most: int, chunks: int, threads: int) -> int:
    """Operations of the master's plan for a loop of ``n`` iterations cut into ``chunks`` (of at most
    ``most``) and dealt to ``threads`` queues, one cycle each.

    Reading the n estimates into running sums is a load and an add each; the cut is a binary search of
    those sums for each of the most - 1 boundaries; the sort of the chunks by load is C log2 C
    comparisons; the deal is one heap operation per chunk over the P queues' loads, log2 P comparisons.
    """
    def log2(x):
        return math.ceil(math.log2(x)) if x > 1 else 0

    return n + (most - 1) * log2(n + 1) + chunks * log2(chunks) + chunks * log2(threads)


def cycle_ns(sim, worker: int) -> float:
    """One cycle of ``worker``'s core in this run, in ns: the clock sequential work is measured at, slowed as
    the machine slows that worker's work in this run (its clock and throughput, its socket's cores busy)."""
    clock = sim.machine.data["clock"]
    return sim.slowdown[worker] / clock.get("turbo_max_ghz", clock["base_ghz"])


class BinLPT(FullBarriers):
    """Chunks of near-equal estimated load dealt longest-first to per-thread queues, shared when one empties.

    The master computes the chunks and queues (the plan) after it publishes the loop and
    before the fork barrier releases the others, charged by its operation count
    (``plan_cycles``) at its core's clock. Each queue's next-chunk index lives on a line homed
    on its thread's core: the owner claims with a fetch-and-add on it, and a thread
    whose queue is empty does the same on the other queues, visiting them in a fixed
    order starting after itself; a claim past a queue's end means it is empty.
    """

    COUNTERS = STEALING_COUNTERS

    name = "binlpt"
    summary = "BinLPT: estimated-load chunks dealt longest-first to per-thread queues, then shared"
    PARAMS = {
        # 384 = 8 chunks per thread on the 48-thread machine (assumed; the BinLPT papers tune it per loop).
        "chunks": Param("chunks", int, 384, lambda v: v >= 1, ">= 1", help="maximum number of chunks K"),
        "estimate_noise": Param("estimate_noise", float, 0.0, lambda v: 0 <= v <= 10, "from 0 to 10",
                                help="sigma of a lognormal factor on each iteration's load estimate "
                                     "(0: estimates are the true costs)"),
        "barrier": BARRIER_PARAM,
    }

    def oracle(self) -> str:
        if self.params["estimate_noise"]:
            return ""
        return "each iteration's exact cost (estimate_noise= makes its estimates noisy)"

    def prepare(self, sim, index):
        loop = sim.loops[index]
        estimate = loop.prefix
        sigma = self.params["estimate_noise"]
        if sigma:
            factors = sim.rng.lognormal(0.0, sigma, loop.n)
            estimate = np.concatenate(([0.0], np.cumsum(np.diff(loop.prefix) * factors)))
        most = min(self.params["chunks"], loop.n)
        bounds = cut(estimate, most)
        self.queues = lpt(bounds, estimate, sim.threads)
        self.index = [sim.memory.line(f"loop[{index}].queue[{q}]", 0, home=q) for q in range(sim.threads)]
        # The plan's time is its operation count at about a cycle each: what a pipelined core sustains for a
        # compare-and-branch, or for a load from a sequential stream feeding an add (the sort's mispredicted
        # branches would add to it; they are left out, so the plan's cost is a lower bound).
        self.plan_ns = plan_cycles(loop.n, most, len(bounds) - 1, sim.threads) * cycle_ns(sim, 0)

    def fork(self, sim, w):
        if w == 0:
            # Everyone else waits at the fork barrier until the master has the plan.
            now = sim.env.now
            end = now + self.plan_ns if sim.noise is None else sim.noise.charge(0, now, self.plan_ns)
            yield sim.wait(0, "schedule", end)
        yield from super().fork(sim, w)

    def share(self, sim, w, index):
        threads, counters = sim.threads, sim.counters
        for q in ((w + d) % threads for d in range(threads)):
            taken = yield from claim_by_index(sim, w, index, self.index[q], self.queues[q])
            if q != w:
                # Claims on another thread's queue are steals; the last one found it empty.
                counters["steals"] += taken
                counters["steal_attempts"] += taken + 1
