"""Application programs (E5): sequences of loops generated to match the loop statistics AV21 publishes.

Three codes (CloverLeaf, MPDATA, LB3D) are published as their sequential time, the
number of distinct loops, the share of time in loops, the min/avg/max loop time and the
number and total time of loops under 1 ms. Four Ligra kernels on the Twitter graph (BFS,
BC, CC, PR) are published as their fine-grain loops: how many, how many under 0.1 ms,
min/avg/max, and the program's and the loops' total time under Cilk and the hybrid
scheduler on 48 threads.

How the figures are read (the reading that makes each table's numbers agree):

- Codes: "loops" are distinct loops, each with one time per execution; min/avg/max are
  over the distinct loops. For CloverLeaf and LB3D every loop runs once per time step:
  T_seq x share / (loops x avg) gives 56.8 and 997 steps, and LB3D's 1000 steps make its
  one loop under 1 ms (45.11 us) exactly its published 45.11 ms. MPDATA cannot be read so:
  its loops under 1 ms take 17.93 s, so they run over 17,930 times, while T_seq x share /
  avg allows 916 executions in all. So in MPDATA loops run different numbers of times: the
  753.84 ms loop once (a set-up), then per time step the 3 other loops of 1 ms or more
  once and the 32 short ones 10 times (an inner iteration); 207 steps make every published
  figure hold. The loops of a time step run back to back (CloverLeaf's kernels are called
  one after another), and the sequential code outside loops (time-step control, halo and
  boundary handling, output) runs once per time step, before the step's first loop
  (MPDATA: before its 3 long loops, after the set-up loop; its inner iterations follow
  each other directly).
- Ligra: the published loop times were measured under Cilk on 48 threads (count x avg is
  the published Cilk fine time for every kernel), so the generator draws such times T and
  gives each loop the sequential work W whose Cilk time that is, by the E1 model of Cilk on
  that machine: T = min(W, d + W / S) with d = 68.8 us (Cilk's published burden) and S the
  machine's Cilk peak on 48 threads, the sum of the workers' speeds over the one-core clock's
  by its machine file (48 x 3.0 / 3.2 GHz = 45; E1's plateau of 28 is its benchmark's
  instrumentation, not the machine's), i.e. W = T up to d S / (S - 1), else S (T - d). Every
  loop runs once. The rest of the program (Cilk total - Cilk fine: edge maps with nested
  parallelism, which AV21's scheduler leaves to Cilk) is parallel Cilk code: 8 equal coarse
  loops (class ``coarse``, ``Loop.fine_grain`` False, so ``cilk-fg`` runs them as Cilk
  loops) whose Cilk times by the same conversion add up to it, each before an evenly spaced
  fine-grain loop. A kernel has no sequential code.

Loop times inside a class (under/over the threshold) are lognormal draws scaled to the
class's total and clipped to the published min and max, which one loop each takes
exactly. A loop of W ns has round(W / 250 ns) iterations (1 to ``max_iterations``), whose
costs are lognormal with coefficient of variation ``cv``: near-equal rows of a structured
grid (CloverLeaf, LB3D: 0.02), cells of an unstructured mesh (MPDATA: 0.3), blocks of
vertices of a power-law graph (Ligra: 0.5). Loop names are ``CLASS/app.k``: class
``fine`` (under the threshold; for a kernel, every fine-grain loop), ``coarse``, or ``once``
(MPDATA's set-up loop); sweeps sum loop times per class.

``scale`` shortens the program without changing its loops: the codes run
max(1, round(steps x scale)) time steps; a Ligra kernel keeps max(2, round(loops x scale))
fine-grain loops, evenly spaced in the order of their times (the shortest and longest
kept), in program order, and max(1, round(8 x scale)) coarse loops between them. Defaults simulate in seconds: one CloverLeaf or MPDATA step, 50 LB3D steps,
whole Ligra kernels.

A Ligra kernel's loops touch its data (``data=1``, ``ligra_footprints``): the per-vertex arrays
of its code in Ligra and the Twitter graph's edges, at the graph's full size, their memory time
on top of the converted work. The codes' loops touch no modeled data.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field

import numpy as np

from ..errors import SimschedError
from ..footprint import Footprint, Gather
from ..loop import Loop
from ..machine import load_machine
from ..spec import Param
from . import Workload
from .program import data_name, data_params

# The E1 model of Cilk on the 48-core Xeon E7 that converts a Ligra loop's published time to its work:
# Cilk's published burden, and the machine and thread count AV21 measured the kernels on.
CILK_BURDEN_NS = 68.8e3
LIGRA_MACHINE = "xeon-e7-4860v2"
LIGRA_THREADS = 48
ITERATION_NS = 250.0  # the work of one iteration, for the iteration count of a loop
# How a code's time outside its loops runs (the ``outside`` parameter): AV21 publishes only its share.
OUTSIDE = ("serial", "parallel")


@dataclass(frozen=True)
class Published:
    """One row of AV21's E5 tables (times in us unless the name says s)."""

    kind: str                 # "code" or "graph"
    loops: int                # distinct loops (codes); loop executions (graph)
    min_us: float
    avg_us: float
    max_us: float
    fine: int                 # loops under the threshold: 1 ms (codes), 0.1 ms (graph)
    t_seq_s: float = 0.0      # codes
    in_loops_pct: float = 0.0
    fine_s: float = 0.0       # codes: time in loops under 1 ms
    cilk_total_s: float = 0.0  # graph, 48 threads
    cilk_fine_s: float = 0.0
    hybrid_total_s: float = 0.0
    hybrid_fine_s: float = 0.0

    @property
    def threshold_us(self) -> float:
        return 1000.0 if self.kind == "code" else 100.0


@dataclass(frozen=True)
class Structure:
    """How a code's loops repeat: time steps, repeats of the short loops per step, a set-up loop, cost spread."""

    steps: int = 1
    fine_repeats: int = 1
    setup_max: bool = False    # the longest loop runs once before the steps
    coarse_loops: int = 0      # a Ligra kernel's coarse Cilk loops between its fine-grain loops
    cv: float = 0.02
    scale: float = 1.0         # default scale


PUBLISHED = {
    "cloverleaf": Published("code", 111, 0.95, 2710.0, 46320.0, 69, t_seq_s=17.29, in_loops_pct=98.87, fine_s=0.12),
    "mpdata": Published("code", 36, 0.72, 21290.0, 753840.0, 32, t_seq_s=22.0, in_loops_pct=88.64, fine_s=17.93),
    "lb3d": Published("code", 2, 45.11, 2340.0, 4630.0, 1, t_seq_s=4.92, in_loops_pct=94.85, fine_s=0.04511),
    "bfs": Published("graph", 73, 1.84, 1270.0, 21000.0, 48, cilk_total_s=0.387, cilk_fine_s=0.0928,
                     hybrid_total_s=0.376, hybrid_fine_s=0.0763),
    "bc": Published("graph", 148, 0.77, 2060.0, 27200.0, 33, cilk_total_s=1.59, cilk_fine_s=0.304,
                    hybrid_total_s=1.53, hybrid_fine_s=0.250),
    "cc": Published("graph", 118, 0.44, 1320.0, 21600.0, 93, cilk_total_s=2.13, cilk_fine_s=0.155,
                    hybrid_total_s=2.10, hybrid_fine_s=0.129),
    "pr": Published("graph", 82, 45.9, 11100.0, 19900.0, 17, cilk_total_s=13.7, cilk_fine_s=0.907,
                    hybrid_total_s=13.4, hybrid_fine_s=0.711),
}
CODES = tuple(name for name, pub in PUBLISHED.items() if pub.kind == "code")

STRUCTURE = {
    "cloverleaf": Structure(steps=57, cv=0.02, scale=1 / 57),
    "mpdata": Structure(steps=207, fine_repeats=10, setup_max=True, cv=0.3, scale=1 / 207),
    "lb3d": Structure(steps=1000, cv=0.02, scale=0.05),
    **{name: Structure(cv=0.5, coarse_loops=8) for name in ("bfs", "bc", "cc", "pr")},
}

# The published outcomes at 48 threads, for the report.
PUBLISHED_OUTCOMES = {
    "cloverleaf": "fine-grain over 4% faster than OpenMP",
    "mpdata": "fine-grain up to 22% faster than OpenMP",
    "lb3d": "speedup 34.1 (OpenMP) vs 39.3 (fine-grain)",
}
PUBLISHED_SPEEDUPS = {"lb3d": {"omp-static": 34.1, "fg-tree": 39.3}}

# -- What a Ligra kernel's loops touch (data=1) ------------------------------------------------------------
# The Twitter graph AV21 run the kernels on (41.7M vertices, 1.47G edges): Kwak et al., WWW 2010, exactly.
TWITTER_VERTICES = 41_652_230
TWITTER_EDGES = 1_468_365_182
# Ligra's layout (Shun & Blelloch, PPoPP 2013; ligra/vertex.h, vertexSubset.h and ligra.h of its code):
RECORD_BYTES = 24  # a vertex record (asymmetricVertex): in- and out-neighbour pointers, in- and out-degree
EDGE_BYTES = 4     # an adjacency entry: a 4-byte vertex number (uintE)
FLAG_BYTES = 1     # a dense vertex subset: one bool per vertex of the graph
INDEX_BYTES = 4    # a sparse vertex subset: the members' vertex numbers
DENSE_SHARE = 20   # edgeMap goes dense when a subset's vertices and their out-edges exceed the edges / 20


@dataclass(frozen=True)
class KernelArrays:
    """A Ligra kernel's per-vertex arrays (name, bytes a vertex): those its vertex maps touch at a member of a
    vertex subset, and those an edge map reads at an edge's other end."""

    vertex: tuple[tuple[str, int], ...]
    neighbour: tuple[tuple[str, int], ...]


# From each kernel's code (apps/BFS.C, BC.C, Components.C, PageRank.C of Ligra).
LIGRA_ARRAYS = {
    # Parents (uintE): set at every vertex first, then by the edge map at a reached target (its cond and CAS).
    "bfs": KernelArrays((("Parents", 4),), (("Parents", 4),)),
    # NumPaths and Dependencies (double) and Visited (bool): the vertex maps mark Visited and add to
    # Dependencies from NumPaths' inverse; an edge checks the target's Visited and adds to its NumPaths (or
    # Dependencies).
    "bc": KernelArrays((("NumPaths", 8), ("Dependencies", 8), ("Visited", 1)),
                       (("NumPaths", 8), ("Visited", 1))),
    # IDs and prevIDs (uintE): the vertex map copies IDs to prevIDs; an edge reads the target's IDs, prevIDs.
    "cc": KernelArrays((("IDs", 4), ("prevIDs", 4)), (("IDs", 4), ("prevIDs", 4))),
    # p_curr and p_next (double): the vertex maps and the norm's loop walk both; an edge (pulled in) reads the
    # source's p_curr and its out-degree in its vertex record.
    "pr": KernelArrays((("p_curr", 8), ("p_next", 8)), (("p_curr", 8), ("record", RECORD_BYTES))),
}


@functools.cache
def cilk_peak() -> float:
    """Cilk's peak speedup on 48 threads of the Xeon E7: its workers' speeds summed, by its machine file.

    Sequential work runs at the one-core turbo clock and a worker of a busy socket at the
    all-core one (``Machine.speed_factors``): 48 x 3.0 / 3.2 = 45.
    """
    return float(np.sum(1.0 / load_machine(LIGRA_MACHINE).speed_factors(LIGRA_THREADS)))


def cilk_time_ns(work_ns):
    """A loop's time under Cilk on 48 threads of the Xeon E7 by the E1 model: min(W, d + W / S)."""
    work_ns = np.asarray(work_ns, dtype=float)
    return np.minimum(work_ns, CILK_BURDEN_NS + work_ns / cilk_peak())


def cilk_work_ns(time_ns):
    """The sequential work whose Cilk time (``cilk_time_ns``) is ``time_ns``."""
    time_ns = np.asarray(time_ns, dtype=float)
    peak = cilk_peak()
    return np.where(time_ns <= CILK_BURDEN_NS * peak / (peak - 1), time_ns, peak * (time_ns - CILK_BURDEN_NS))


def _spread(rng: np.random.Generator, k: int, total: float, lo: float, hi: float, pinned=()) -> np.ndarray:
    """``k`` loop times in [lo, hi] adding up to ``total``, the ``pinned`` ones among them (one loop: the total)."""
    if k == 1:
        return np.array([total])
    pinned = [p for p in pinned][: k]
    free = k - len(pinned)
    rest = total - sum(pinned)
    if free == 0:
        return np.array(pinned)
    if not free * lo <= rest <= free * hi:
        raise SimschedError(f"no {free} loop times in [{lo:.4g}, {hi:.4g}] ns add up to {rest:.4g} ns")
    shape = rng.lognormal(0.0, 1.5, free)
    low, high = np.log(lo / shape.max()) - 1, np.log(hi / shape.min()) + 1
    for _ in range(200):  # bisection on the log of the scale: the clipped sum rises with it
        mid = 0.5 * (low + high)
        if np.clip(np.exp(mid) * shape, lo, hi).sum() < rest:
            low = mid
        else:
            high = mid
    times = np.clip(np.exp(0.5 * (low + high)) * shape, lo, hi)
    return np.concatenate((pinned, times))


@dataclass
class Program:
    """A generated application: its distinct loops, the order they run in, and the full program's counts."""

    app: str
    loops: list[Loop]                      # distinct loops
    order: list[int]                       # indices into ``loops``: the program run
    full_counts: np.ndarray                # executions of each distinct loop in the whole program
    times_ns: np.ndarray = field(default=None)  # each loop's time in the published sense (graph: under Cilk)

    @property
    def counts(self) -> np.ndarray:
        return np.bincount(self.order, minlength=len(self.loops))

    def program(self) -> list[Loop]:
        return [self.loops[i] for i in self.order]

    def class_sequential_ns(self, full: bool = False) -> dict[str, float]:
        """Sequential time of each loop class (``fine``, ``coarse``, ``once``) in the run, or the whole program."""
        counts = self.full_counts if full else self.counts
        out: dict[str, float] = {}
        for loop, count in zip(self.loops, counts):
            cls = loop_class(loop.name)
            out[cls] = out.get(cls, 0.0) + count * loop.total
        return out

    def serial_total_ns(self, full: bool = False) -> float:
        """The sequential code outside loops (each loop's ``serial_ns`` per execution) in the run, or the whole program."""
        counts = self.full_counts if full else self.counts
        return float(sum(loop.serial_ns * count for loop, count in zip(self.loops, counts)))


def loop_class(name: str) -> str:
    """The class part of a loop name ``CLASS/...`` ('' when it has none)."""
    cls, slash, _ = name.partition("/")
    return cls if slash else ""


class App(Workload):
    """A program of loops matching an application's published loop statistics (AV21, E5)."""

    name = "app"
    TOUCHES_DATA = False
    summary = "a program of loops matching published loop statistics: name=" + "|".join(PUBLISHED)
    PARAMS = {
        "name": Param("name", str, "cloverleaf", choices=tuple(PUBLISHED), help="the application"),
        "scale": Param("scale", float, None, lambda v: 0 < v <= 1, "in (0, 1]",
                       help="share of the whole program to run (1: all of it; default: per application)"),
        "cv": Param("cv", float, None, lambda v: v >= 0, ">= 0",
                    help="coefficient of variation of iteration costs (default: per application)"),
        "max_iterations": Param("max_iterations", int, 4096, lambda v: v >= 1, ">= 1",
                                help="most iterations of one loop"),
        "outside": Param("outside", str, "serial", choices=OUTSIDE,
                         help="a code's time outside its loops: serial (the master runs it once a step) or "
                              "parallel (one more loop a step, shared by every worker); AV21 does not say"),
        # A Ligra kernel's vertex and edge data (ligra_footprints); Ligra fills its arrays in parallel loops.
        **data_params("first-touch", ("first-touch", "interleave")),
        # AV21 do not say how often an edge map's reads of its neighbours hit the caches. Read at random places
        # (1), they would make the model's Cilk take 2.5-6.4 times the published kernel times; 0 leaves them in
        # the edge maps' work, which the published times hold.
        "gather": Param("gather", int, 0, lambda v: v in (0, 1), "0 or 1",
                        help="with data: 1, an edge map reads its neighbours' values at random places of "
                             "their arrays; 0, it streams its edges only (the neighbours' reads left in its "
                             "work)"),
    }

    def touches_data(self) -> bool:
        # The codes' loops carry no footprint whatever ``data`` says; the Ligra kernels' do when it is on.
        return PUBLISHED[self.params["name"]].kind == "graph" and bool(self.params["data"])

    def check(self):
        name = self.params["name"]
        if "outside" in self.given and PUBLISHED[name].kind != "code":
            raise SimschedError(f"workload app: outside= is for the codes ({', '.join(CODES)}); {name} "
                                "has no code outside its loops")
        given = [key for key in ("data", "placement", "gather") if key in self.given]
        if given and PUBLISHED[name].kind == "code":
            kernels = ", ".join(app for app in PUBLISHED if app not in CODES)
            raise SimschedError(f"workload app: {'= and '.join(given)}= is for the Ligra kernels "
                                f"({kernels}); {name}'s loops touch no modeled data")
        if not self.params["data"] and ("placement" in self.given or "gather" in self.given):
            raise SimschedError(f"workload app: {'placement' if 'placement' in self.given else 'gather'}= "
                                "describes the kernel's data, which data=0 leaves out")

    def generate(self, rng):
        raise SimschedError("workload app is a program of several loops; it has no single loop's costs")

    def loops(self, rng):
        return self.build(rng).program()

    def build(self, rng: np.random.Generator) -> Program:
        """Draw the program from ``rng``: the distinct loops first, then (for a kernel) which are kept."""
        name = self.params["name"]
        pub, shape = PUBLISHED[name], STRUCTURE[name]
        scale = shape.scale if self.params["scale"] is None else self.params["scale"]
        cv = shape.cv if self.params["cv"] is None else self.params["cv"]
        if pub.kind == "code":
            outside = self.params["outside"]
            times, classes, order, full, serial = _code_program(rng, pub, shape, scale, outside)
            work = times
        else:
            times, classes, order, full, serial = _graph_program(rng, pub, shape, scale)
            work = cilk_work_ns(times)
        # Only a kernel's coarse loops are left unmarked: cilk-fg runs them as Cilk loops (others ignore the mark).
        loops = [Loop(self._costs(rng, w, cv), name=f"{cls}/{name}.{k}", serial_ns=ns,
                      fine_grain=not (pub.kind == "graph" and cls == "coarse"))
                 for k, (w, cls, ns) in enumerate(zip(work, classes, serial))]
        if pub.kind == "graph" and self.params["data"]:
            line = load_machine(LIGRA_MACHINE).hierarchy.line_bytes
            footprints = ligra_footprints(name, loops, self.params["placement"], "data" not in self.given,
                                          line, bool(self.params["gather"]))
            for loop, footprint in zip(loops, footprints):
                loop.data = footprint
        return Program(name, loops, order, full, np.asarray(times))

    def _costs(self, rng, work_ns: float, cv: float) -> np.ndarray:
        """The iteration costs of a loop of ``work_ns``: lognormal with coefficient of variation ``cv``, summing to it."""
        n = int(np.clip(round(work_ns / ITERATION_NS), 1, self.params["max_iterations"]))
        if cv == 0 or n == 1:
            return np.full(n, work_ns / n)
        sigma = np.sqrt(np.log1p(cv * cv))
        costs = rng.lognormal(-sigma * sigma / 2, sigma, n)
        return costs * (work_ns / costs.sum())


def _code_program(rng, pub: Published, shape: Structure, scale: float, outside: str = "serial"):
    """A code's loop times (ns), classes, run order, whole-program counts and serial ns per execution.

    The code outside loops (the published time not in loops, an equal share per time step)
    is ``serial``: run by the master before the step's first loop; or ``parallel``: a loop of
    class ``outside`` of its own at the start of every step, the last distinct loop (drawn
    last, so that the other loops are those of the serial reading).
    """
    threshold = pub.threshold_us * 1e3
    loops_ns = pub.t_seq_s * 1e9 * pub.in_loops_pct / 100
    n_fine, n_coarse = pub.fine, pub.loops - pub.fine
    setup = [pub.max_us * 1e3] if shape.setup_max else []
    fine_step = pub.fine_s * 1e9 / (shape.steps * shape.fine_repeats)
    coarse_step = (loops_ns - pub.fine_s * 1e9 - sum(setup)) / shape.steps
    fine = _spread(rng, n_fine, fine_step, pub.min_us * 1e3, threshold * 0.999, pinned=[pub.min_us * 1e3])
    coarse = _spread(rng, n_coarse - len(setup), coarse_step, threshold, pub.max_us * 1e3,
                     pinned=[] if setup else [pub.max_us * 1e3])
    times = np.concatenate((setup, coarse, fine))
    classes = ["once"] * len(setup) + ["coarse"] * len(coarse) + ["fine"] * len(fine)
    first_coarse, first_fine = len(setup), len(setup) + len(coarse)
    coarse_ids = rng.permutation(np.arange(first_coarse, first_fine))
    fine_ids = rng.permutation(np.arange(first_fine, len(times)))
    if shape.fine_repeats == 1:
        step = list(rng.permutation(np.concatenate((coarse_ids, fine_ids))))
    else:
        step = list(coarse_ids) + list(fine_ids) * shape.fine_repeats
    full = np.array([1] * len(setup) + [shape.steps] * len(coarse) + [shape.steps * shape.fine_repeats] * len(fine))
    outside_ns = pub.t_seq_s * 1e9 * (1 - pub.in_loops_pct / 100) / shape.steps
    serial = np.zeros(len(times))
    if outside == "serial":
        # It runs once per time step, before the step's first loop (which runs once a step).
        serial[step[0]] = outside_ns
    else:
        step = [len(times)] + step
        times, serial = np.append(times, outside_ns), np.append(serial, 0.0)
        classes, full = classes + ["outside"], np.append(full, shape.steps)
    steps = max(1, round(shape.steps * scale))
    order = [int(i) for i in list(range(len(setup))) + step * steps]
    return times, classes, order, full, serial


def _graph_program(rng, pub: Published, shape: Structure, scale: float):
    """A Ligra kernel's loop times under Cilk (ns), classes, run order, counts and serial ns per loop.

    The fine-grain loops come first (in program order), then the kernel's coarse Cilk loops,
    each placed before an evenly spaced fine-grain loop.
    """
    threshold = pub.threshold_us * 1e3
    lo, hi = pub.min_us * 1e3, pub.max_us * 1e3
    short = np.concatenate(([lo], np.exp(rng.uniform(np.log(lo), np.log(threshold * 0.999), pub.fine - 1))))
    long_total = pub.loops * pub.avg_us * 1e3 - short.sum()
    long = _spread(rng, pub.loops - pub.fine, long_total, threshold, hi, pinned=[hi])
    times = rng.permutation(np.concatenate((short, long)))
    keep = max(2, round(pub.loops * scale))
    ranks = np.argsort(times, kind="stable")
    fine = sorted(int(ranks[i]) for i in np.unique(np.round(np.linspace(0, pub.loops - 1, keep)).astype(int)))
    # The rest of the kernel: equal coarse loops whose Cilk times add up to Cilk total - Cilk fine.
    rest = (pub.cilk_total_s - pub.cilk_fine_s) * 1e9
    coarse = np.full(shape.coarse_loops, rest / shape.coarse_loops)
    kept = max(1, round(shape.coarse_loops * scale))
    order = _interleave(fine, list(range(pub.loops, pub.loops + kept)))
    times = np.concatenate((times, coarse))
    classes = ["fine"] * pub.loops + ["coarse"] * shape.coarse_loops
    return times, classes, order, np.ones(len(times), dtype=int), np.zeros(len(times))


def _interleave(fine: list[int], coarse: list[int]) -> list[int]:
    """``fine`` in order with the ``coarse`` loops between them, coarse loop j before fine loop (j+1) m / (k+1)."""
    m, k = len(fine), len(coarse)
    at = {int(round((j + 1) * m / (k + 1))): c for j, c in enumerate(coarse)}
    order: list[int] = []
    for position, index in enumerate(fine):
        if position in at:
            order.append(at[position])
        order.append(index)
    return order


def ligra_footprints(app: str, loops: list[Loop], placement: str = "first-touch", optional: bool = False,
                     line: int = 64, gather: bool = False) -> list[Footprint]:
    """The data each loop of a Ligra kernel touches on the Twitter graph, at its full size.

    Every loop does the same work per vertex or edge it visits: the kernel's longest
    fine-grain loop (the published max) visits every vertex once, which sets it. A loop of n
    iterations splits the vertices into n equal ranges, iteration j taking range j, so loops
    of as many iterations (every loop at ``max_iterations``) touch the same lines in the same
    iterations: they name one data set. A fine-grain loop of work W visits the share
    f = W / W_max of the vertices, spread over the graph (a frontier): in each range f of
    them, and of each of the kernel's vertex arrays the lines holding one. Its subset is
    dense (edgeMap's rule: members and their out-edges over the edges / 20), a bool per
    vertex walked in order (``stream``), or sparse, the members' numbers, whose lines are
    independent misses (``stride``). A coarse loop (edge maps) streams its sources' records and
    out-edges, W / (work per visit) edges in all, and (``gather``) reads the neighbour arrays at
    random places at each. ``optional``: footprints the workload gives unasked; ``line``: the
    bytes of a cache line of the machine the kernels ran on.
    """
    arrays = LIGRA_ARRAYS[app]
    vertices, edges = TWITTER_VERTICES, TWITTER_EDGES
    per_visit = float(cilk_work_ns(PUBLISHED[app].max_us * 1e3)) / vertices
    name = data_name(app)
    neighbour_bytes = sum(size for _, size in arrays.neighbour)
    element = math.ceil(neighbour_bytes / len(arrays.neighbour))
    footprints = []
    for loop in loops:
        n = loop.n
        if loop_class(loop.name) == "coarse":
            visits = loop.total / per_visit / n  # edges an iteration visits
            own = round(visits / (edges / vertices) * RECORD_BYTES + visits * EDGE_BYTES)
            reads = np.full(n, round(visits * len(arrays.neighbour)), dtype=np.int64)
            neighbours = (Gather(reads, vertices * neighbour_bytes, element, f"{name} neighbours")
                          if gather else None)
            footprints.append(Footprint(np.full(n, own, dtype=np.int64), "stream", placement,
                                        f"{name} edges/{n}", gather=neighbours, optional=optional))
            continue
        share = min(1.0, loop.total / (per_visit * vertices))
        span = vertices / n  # the vertices of an iteration's range
        lines = sum(span * size / line * -math.expm1(line / size * math.log1p(-share)) if share < 1
                    else span * size / line for _, size in arrays.vertex)
        dense = share * (vertices + edges) > edges / DENSE_SHARE
        subset = span * FLAG_BYTES if dense else share * span * INDEX_BYTES
        own = round(lines * line + subset)
        footprints.append(Footprint(np.full(n, own, dtype=np.int64), "stream" if dense else "stride",
                                    placement, f"{name} vertices/{n}", optional=optional))
    return footprints


def app_statistics(program: Program, full: bool = True) -> dict[str, float]:
    """The published table's columns for the generated program (``full``: the whole program, else the run).

    Codes: t_seq_s, loops (distinct), in_loops_pct, min_us, avg_us, max_us, fine (under
    1 ms), fine_s. Kernels: loops (executions), fine (under 0.1 ms), min_us, avg_us,
    max_us (times under Cilk on 48 threads), cilk_fine_s (their sum) and cilk_total_s (with
    the rest of the program).
    """
    pub = PUBLISHED[program.app]
    counts = program.full_counts if full else program.counts
    fine = np.array([loop_class(loop.name) == "fine" for loop in program.loops])
    # A code's parallel code outside loops is a loop of the model's, not one of the published table's.
    outside = np.array([loop_class(loop.name) == "outside" for loop in program.loops])
    # A kernel's table covers its fine-grain loops alone; a code's, all of its loops.
    present = (counts > 0) & (fine if pub.kind == "graph" else ~outside)
    times = np.asarray(program.times_ns)[present]
    work = np.array([loop.total for loop in program.loops])
    # Time outside the published loops: the serial code, or the parallel code's loops.
    rest = program.serial_total_ns(full) + float((work * counts)[outside].sum())
    stats = {"loops": int(present.sum()), "min_us": times.min() / 1e3, "avg_us": times.mean() / 1e3,
             "max_us": times.max() / 1e3, "fine": int((times < pub.threshold_us * 1e3).sum())}
    if pub.kind == "code":
        in_loops = float((work * counts)[~outside].sum())
        stats.update(t_seq_s=(in_loops + rest) / 1e9, in_loops_pct=100 * in_loops / (in_loops + rest),
                     fine_s=float((work * counts)[fine].sum()) / 1e9)
    else:
        cilk = np.asarray(program.times_ns) * counts
        stats.update(cilk_fine_s=float(cilk[fine].sum()) / 1e9, cilk_total_s=(float(cilk.sum()) + rest) / 1e9)
    return stats


def published_statistics(app: str) -> dict[str, float]:
    """The published columns ``app_statistics`` reproduces."""
    pub = PUBLISHED[app]
    stats = {"loops": pub.loops, "min_us": pub.min_us, "avg_us": pub.avg_us, "max_us": pub.max_us, "fine": pub.fine}
    if pub.kind == "code":
        stats.update(t_seq_s=pub.t_seq_s, in_loops_pct=pub.in_loops_pct, fine_s=pub.fine_s)
    else:
        stats.update(cilk_fine_s=pub.cilk_fine_s, cilk_total_s=pub.cilk_total_s)
    return stats
