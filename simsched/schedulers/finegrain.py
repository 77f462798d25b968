"""Fine-grain static scheduling with half-barriers (Arif & Vandierendonck): release to start, join to end."""

from __future__ import annotations

from ..spec import Param
from .barriers import Views, make_barrier
from .base import ForkJoin, run_block


class FineGrain(ForkJoin):
    """Static blocks started by a release half-barrier and ended by a join half-barrier that merges reductions."""

    barrier_kind = "numa"
    full_barriers = False
    PARAMS = {
        "reduction": Param("reduction", str, "none", choices=("none", "merged"),
                           help="merged: P-1 combines folded into the join half-barrier"),
    }

    def setup(self, sim) -> None:
        super().setup(sim)
        if self.params["reduction"] == "merged":
            self.views = Views(sim)
        self.barrier = make_barrier(self.barrier_kind, sim, self.views)

    def fork(self, sim, w):
        if self.full_barriers:
            yield from self.barrier.full(w)
        else:
            yield from self.barrier.release(w)

    def join(self, sim, w):
        if self.full_barriers:
            yield from self.barrier.full(w)
        else:
            yield from self.barrier.join(w)

    def min_chunks(self, n, threads):
        return min(n, threads)  # each worker's block, if not empty

    def share(self, sim, w, index):
        yield from run_block(sim, w, index)


class FineGrainTree(FineGrain):
    name = "fg-tree"
    summary = "fine-grain static: NUMA-aware tree half-barriers"


class FineGrainCentral(FineGrain):
    name = "fg-central"
    summary = "fine-grain static: centralized half-barriers"
    barrier_kind = "central"


class FineGrainTreeFull(FineGrain):
    name = "fg-tree-full"
    summary = "fine-grain static with full tree barriers (ablation)"
    full_barriers = True
