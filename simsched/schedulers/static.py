"""OpenMP-style fork-join static scheduling: full fork and join barriers around precomputed blocks."""

from __future__ import annotations

from typing import ClassVar

from ..errors import SimschedError
from ..spec import Param, format_spec
from .barriers import BARRIERS, Views, make_barrier
from .base import ForkJoin, run_block
from .runtimes import RUNTIME_PARAM, RUNTIMES

REDUCTIONS = ("none", "sequential", "tree-barrier")
BARRIER_PARAM = Param("barrier", str, "hyper", choices=BARRIERS,
                      help="barrier algorithm (hyper: Intel's default, branching factor 4)")
# The OpenMP runtime's schedules: without barrier=, the runtime profile's barrier runs.
OMP_BARRIER_PARAM = Param("barrier", str, None, choices=BARRIERS,
                          help="barrier (default: the runtime's, gnu central, llvm and mixed hyper)")


class FullBarriers(ForkJoin):
    """A fork-join loop between full fork and join barriers, with OpenMP's reduction options."""

    @property
    def barrier_kind(self) -> str:
        """The barrier algorithm the fork and the join run."""
        return self.params["barrier"]

    def setup(self, sim) -> None:
        super().setup(sim)
        kind = self.barrier_kind
        reduction = self.params.get("reduction", "none")
        self.barrier = make_barrier(kind, sim)
        if reduction != "none":
            self.views = Views(sim)
        if reduction == "tree-barrier":
            # Intel-style: one more barrier whose join phase combines the views pairwise.
            tree_kind = kind if kind in ("tree", "hyper", "numa") else "tree"
            self.reducer = make_barrier(tree_kind, sim, self.views)

    def fork(self, sim, w):
        yield from self.barrier.full(w)

    def join(self, sim, w):
        yield from self.barrier.full(w)
        reduction = self.params.get("reduction", "none")
        if reduction == "sequential" and w == 0:
            yield from self.views.combine_all(w)
        elif reduction == "tree-barrier":
            yield from self.reducer.full(w)


class OpenMPRuntime:
    """A schedule of an OpenMP runtime: ``runtime=`` names the runtime profile, whose barrier runs unless
    ``barrier=`` names one (mixed into a ``FullBarriers`` scheduler whose PARAMS hold both)."""

    # Profiles that have no such schedule, each with why: refused in one line.
    UNSUPPORTED: ClassVar[dict[str, str]] = {}

    def __init__(self, **params):
        super().__init__(**params)
        runtime = self.params["runtime"]
        if runtime in self.UNSUPPORTED:
            raise SimschedError(f"scheduler {self.name}: runtime={runtime}: {self.UNSUPPORTED[runtime]}")
        self.runtime = RUNTIMES[runtime]

    @property
    def barrier_kind(self) -> str:
        return self.params["barrier"] or self.runtime.barrier

    @property
    def spec(self) -> str:
        # Naming the runtime's own barrier changes nothing: the canonical spec leaves it out.
        changed = {k: v for k, v in self.params.items()
                   if v != self.PARAMS[k].default and not (k == "barrier" and v == self.runtime.barrier)}
        return format_spec(self.name, changed)


class OmpStatic(OpenMPRuntime, FullBarriers):
    """Blocks (or round-robin chunks) per worker between a full fork barrier and a full join barrier."""

    name = "omp-static"
    summary = "OpenMP static: blocks between full fork and join barriers"
    PARAMS = {
        "chunk": Param("chunk", int, 0, lambda v: v >= 0, ">= 0",
                       help="round-robin chunks of this many iterations (0: one near-equal block per worker)"),
        "barrier": OMP_BARRIER_PARAM,
        "reduction": Param("reduction", str, "none", choices=REDUCTIONS,
                           help="sequential: master combines after the join (GCC); "
                                "tree-barrier: an extra combining tree barrier (Intel)"),
        "runtime": RUNTIME_PARAM,
    }

    def min_chunks(self, n, threads):
        chunk = self.params["chunk"]
        # Without a chunk, each worker runs its block, of which min(n, P) are not empty.
        return -(-n // chunk) if chunk else min(n, threads)

    def share(self, sim, w, index):
        n, chunk = sim.loops[index].n, self.params["chunk"]
        if not chunk:
            yield from run_block(sim, w, index)
            return
        ranges = ((lo, min(lo + chunk, n)) for lo in range(w * chunk, n, chunk * sim.threads))
        yield sim.until(sim.run_chunks(w, index, ranges, sim.env.now))
