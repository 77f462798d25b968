"""Dynamic loop self-scheduling by chunk rules: fsc, mfsc, fac, tfss, fiss, viss, rnd and pls.

Each technique is a rule for the sizes of successive chunks. As for ``tss`` and ``fac2``,
the master computes the loop's whole chunk table when it sets the loop up (counted in its
loop set-up cost) and the workers claim chunk indices with one fetch-and-add each on one
shared line, so what a technique costs is what its chunk count makes the claims cost.
"""

from __future__ import annotations

import math

import numpy as np

from ..errors import SimschedError
from ..spec import Param
from .selfsched import CHUNK_PARAM, IndexedChunks, batched_bounds
from .static import BARRIER_PARAM


def cost_moments(loop) -> tuple[float, float]:
    """The mean and (population) standard deviation of ``loop``'s iteration costs in ns."""
    costs = np.diff(loop.prefix)
    return float(costs.mean()), float(costs.std())


def claim_ns(sim) -> float:
    """What one claim costs in the model when nobody else claims: the atomic, the chunk's dispatch, and the
    counter line's transfer from its last claimer (averaged over the pairs of the run's workers; none for P = 1)."""
    return sim.costs["atomic"] + sim.costs["chunk"] + sim.memory.mean_transfer()


def _optional(name: str, rule: str, check, help: str) -> Param:
    return Param(name, float, None, check, rule, help=help)


class ChunkRule(IndexedChunks):
    """A chunk table from a published chunk rule, claimed by index (the parameters every rule has)."""

    PARAMS = {"chunk": CHUNK_PARAM, "barrier": BARRIER_PARAM}


class FixedSizeChunking(ChunkRule):
    """Fixed-size chunking (Kruskal & Weiss 1985): k = ((sqrt(2) N h) / (sigma P sqrt(ln P)))^(2/3).

    h is the overhead of one claim in ns, sigma the standard deviation of an iteration's time.
    By default sigma is the loop's own (its profile is known beforehand, as FAC and BinLPT
    assume) and h is the modeled claim as :func:`claim_ns` prices it: one atomic plus the
    chunk's dispatch plus the mean transfer of the counter line between two of the run's
    workers. k is truncated to an integer (as LB4OMP's kmp_sch_fsc) and kept within
    [chunk, ceil(N/P)]: no chunk larger than a worker's share. With sigma = 0 or P = 1
    (ln P = 0) the formula is unbounded, and k is ceil(N/P).
    """

    name = "fsc"
    summary = "fixed-size chunking: Kruskal and Weiss's optimal fixed chunk from h and sigma"
    PARAMS = {**ChunkRule.PARAMS,
              "h": _optional("h", ">= 0", lambda v: v >= 0,
                             "overhead of one claim in ns (default: the modeled claim's cost)"),
              "sigma": _optional("sigma", ">= 0", lambda v: v >= 0,
                                 "standard deviation of an iteration's time in ns (default: the loop's)")}
    # The claim's cost when h is not given: modeled, set by ``setup`` for each run (natively: measured).
    claim_ns: float | None = None

    def setup(self, sim) -> None:
        super().setup(sim)
        self.claim_ns = claim_ns(sim)

    def oracle(self) -> str:
        return "" if self.params["sigma"] is not None else "the loop's exact cost deviation (sigma= sets it)"

    def min_chunks(self, n, threads):
        return -(-n // max(self.params["chunk"], -(-n // threads)))  # k is at most max(chunk, ceil(N/P))

    def chunk_size(self, n: int, threads: int, loop) -> int:
        """The fixed chunk size for ``loop``."""
        h = self.params["h"] if self.params["h"] is not None else self.claim_ns
        sigma = self.params["sigma"] if self.params["sigma"] is not None else cost_moments(loop)[1]
        most = math.ceil(n / threads)
        if threads == 1 or sigma == 0:
            k = most
        else:
            k = min(most, math.floor((math.sqrt(2) * n * h / (sigma * threads * math.sqrt(math.log(threads))))
                                     ** (2 / 3)))
        return max(self.params["chunk"], k)

    def bounds(self, n, threads, loop, rng):
        k = self.chunk_size(n, threads, loop)
        return batched_bounds(n, 1, lambda left, chunk: k)


class ModifiedFixedSizeChunking(ChunkRule):
    """Modified FSC (LB4OMP's kmp_sch_mfsc): the fixed chunk that gives as many chunks as factoring (fac2) does.

    With T = ceil(N/P), factoring makes about P log2(T) chunks, so k = T ln 2 / ln T; LB4OMP
    rounds it as floor(0.55 + T ln 2 / ln T), and so does this. k is at least ``chunk``; T = 1 gives 1.
    """

    name = "mfsc"
    summary = "modified fixed-size chunking: a fixed chunk giving as many chunks as factoring"

    def min_chunks(self, n, threads):
        return -(-n // self.chunk_size(n, threads))

    def chunk_size(self, n: int, threads: int) -> int:
        """The fixed chunk size for a loop of ``n`` iterations."""
        t = math.ceil(n / threads)
        k = 1 if t <= 1 else math.floor(0.55 + t * math.log(2) / math.log(t))
        return max(self.params["chunk"], k)

    def bounds(self, n, threads, loop, rng):
        k = self.chunk_size(n, threads)
        return batched_bounds(n, 1, lambda left, chunk: k)


class KnownVarianceFactoring(ChunkRule):
    """Factoring (Hummel, Schonberg & Flynn 1992) with known mean mu and standard deviation sigma.

    Batch j hands out P chunks of ceil(R_j / (x_j P)), R_j the iterations left when it
    starts, b_j = P sigma / (2 sqrt(R_j) mu), and x_0 = 1 + b_0^2 + b_0 sqrt(b_0^2 + 2) for
    the first batch, x_j = 2 + b_j^2 + b_j sqrt(b_j^2 + 4) after it (LB4OMP's kmp_sch_fac
    computes the same). Chunks are at least ``chunk``. mu and sigma default to the loop's
    own; a loop of zero-cost iterations has b = 0. With sigma = 0 the first batch is N/P
    each, which ends the loop.
    """

    name = "fac"
    summary = "factoring: batches of P chunks of R/(x P), x from the loop's mean and deviation"
    PARAMS = {**ChunkRule.PARAMS,
              "mu": _optional("mu", "> 0", lambda v: v > 0, "mean iteration time in ns (default: the loop's)"),
              "sigma": _optional("sigma", ">= 0", lambda v: v >= 0,
                                 "standard deviation of an iteration's time in ns (default: the loop's)")}

    def oracle(self) -> str:
        unset = (self.params["mu"] is None, self.params["sigma"] is None)
        given = {(True, True): "mean and deviation (mu= and sigma= set them)",
                 (True, False): "mean (mu= sets it)", (False, True): "deviation (sigma= sets it)"}.get(unset)
        return f"the loop's exact cost {given}" if given else ""

    def min_chunks(self, n, threads):
        return -(-n // max(self.params["chunk"], -(-n // threads)))  # x >= 1: no chunk over max(k, ceil(N/P))

    def bounds(self, n, threads, loop, rng):
        mu, sigma = self.params["mu"], self.params["sigma"]
        if mu is None or sigma is None:
            mean, deviation = cost_moments(loop)
            mu = mean if mu is None else mu
            sigma = deviation if sigma is None else sigma
        factor = threads * sigma / (2 * mu) if mu > 0 else 0.0

        def size(left, batch):
            b = factor / math.sqrt(left)
            x = 1 + b * b + b * math.sqrt(b * b + 2) if batch == 0 else 2 + b * b + b * math.sqrt(b * b + 4)
            return max(self.params["chunk"], math.ceil(left / (x * threads)))

        return batched_bounds(n, threads, size)


class TrapezoidFactoring(ChunkRule):
    """Trapezoid factoring self-scheduling (Chronopoulos et al. 2001): batches of P equal chunks, each the mean
    of the next P sizes of trapezoid self-scheduling.

    TSS's sizes are f - i d with f = ceil(N/2P), C = ceil(2N/(f+1)) steps and d = (f-1)/(C-1),
    so batch j's chunk is ceil(f - (jP + (P-1)/2) d), computed in exact integers, at least ``chunk``.
    """

    name = "tfss"
    summary = "trapezoid factoring: batches of P chunks, each the mean of the next P TSS chunks"

    def min_chunks(self, n, threads):
        return -(-n // max(self.params["chunk"], -(-n // (2 * threads))))  # no chunk over max(k, f)

    def bounds(self, n, threads, loop, rng):
        first = math.ceil(n / (2 * threads))
        gaps = max(math.ceil(2 * n / (first + 1)) - 1, 1)
        k = self.params["chunk"]
        # ceil((2 f gaps - (2jP + P - 1)(f - 1)) / (2 gaps)), by negated floor division.
        return batched_bounds(n, threads, lambda left, j: max(
            k, -(-(2 * first * gaps - (2 * j * threads + threads - 1) * (first - 1)) // (2 * gaps))))


class FixedIncrease(ChunkRule):
    """Fixed increase self-scheduling (Philip & Das 1997): B stages of P chunks that grow by a fixed bump.

    With X = B + 2, stage s hands out P chunks of c_0 + s delta, c_0 = floor(N / (X P)) and
    delta = floor(2N (1 - B/X) / (P B (B-1))), so the B stages add up to N before rounding; the
    rounded sizes keep growing by delta until the loop ends. c_0 is at least ``chunk``.
    ``stages`` defaults to LB4OMP's P - 1, and to 2 when P < 3 (B = 1 divides by zero).
    """

    name = "fiss"
    summary = "fixed increase self-scheduling: stages of P chunks growing by a fixed bump"
    PARAMS = {**ChunkRule.PARAMS,
              "stages": Param("stages", int, None, lambda v: v >= 2, ">= 2",
                              help="B, the stages the loop is planned in (default: P - 1, at least 2)")}

    def min_chunks(self, n, threads):
        # The first stage alone hands out P chunks of c_0 (the last cut at N).
        stages = self.params["stages"] or max(2, threads - 1)
        first = max(self.params["chunk"], n // ((stages + 2) * threads))
        return min(threads, -(-n // first))

    def bounds(self, n, threads, loop, rng):
        b = self.params["stages"] or max(2, threads - 1)
        x = b + 2
        first = max(self.params["chunk"], n // (x * threads))
        # 2N (1 - B/X) = 4N / X, in exact integers.
        bump = 4 * n // (x * threads * b * (b - 1))
        return batched_bounds(n, threads, lambda left, stage: first + stage * bump)


class VariableIncrease(ChunkRule):
    """Variable increase self-scheduling (Philip & Das 1997): stages of P chunks whose increase halves each stage.

    Stage s hands out P chunks of floor(c_0 (2 - 2^-s)) (c_0, then c_0 + c_0/2, + c_0/4, ...),
    c_0 = floor(N / (X P)) with X = ``x`` (default P, as LB4OMP's kmp_sch_viss); at least ``chunk``.
    """

    name = "viss"
    summary = "variable increase self-scheduling: stages of P chunks, each increase half the last"
    PARAMS = {**ChunkRule.PARAMS,
              "x": Param("x", int, None, lambda v: v >= 1, ">= 1",
                         help="X: the first chunk is N/(X P) (default: P)")}

    def min_chunks(self, n, threads):
        # No chunk is larger than max(k, 2 c_0 - 1).
        first = n // ((self.params["x"] or threads) * threads)
        return -(-n // max(self.params["chunk"], 2 * first - 1, 1))

    def bounds(self, n, threads, loop, rng):
        first = n // ((self.params["x"] or threads) * threads)
        k = self.params["chunk"]

        def size(left, stage):
            # Once 2^s > c_0, floor(c_0 (2 - 2^-s)) stays at 2 c_0 - 1 (or 0): s need not grow past c_0's bits.
            s = min(stage, first.bit_length())
            return max(k, (first * ((2 << s) - 1)) >> s)

        return batched_bounds(n, threads, size)


class RandomChunks(ChunkRule):
    """Random self-scheduling (as LB4OMP's kmp_sch_rnd): each chunk's size uniform in [min, max], drawn from the
    run's generator when the master sets the loop up.

    Defaults as LB4OMP: min = 1 and max = N - 1 (but at least min).
    """

    name = "rnd"
    summary = "random chunk sizes, uniform in [min, max]"
    RANDOM = True
    PARAMS = {"min": Param("min", int, 1, lambda v: v >= 1, ">= 1", help="smallest chunk"),
              "max": Param("max", int, None, lambda v: v >= 1, ">= 1",
                           help="largest chunk (default: N - 1, at least min)"),
              "barrier": BARRIER_PARAM}

    def __init__(self, **params):
        super().__init__(**params)
        low, high = self.params["min"], self.params["max"]
        if high is not None and low > high:
            raise SimschedError(f"scheduler rnd: parameter min={low} must be <= max={high}")

    def min_chunks(self, n, threads):
        low = self.params["min"]
        return -(-n // (self.params["max"] if self.params["max"] is not None else max(low, n - 1)))

    def bounds(self, n, threads, loop, rng):
        low = self.params["min"]
        high = self.params["max"] if self.params["max"] is not None else max(low, n - 1)
        sizes = self._sizes(n, low, high, rng)
        return batched_bounds(n, 1, lambda left, chunk: next(sizes))

    @staticmethod
    def _sizes(n, low, high, rng):
        # Drawn in blocks of about the chunks still needed: one call per block, not per chunk.
        while True:
            yield from rng.integers(low, high + 1, size=max(16, 2 * n // (low + high))).tolist()


class PerformanceBased(ChunkRule):
    """Performance-based loop scheduling (Shih, Yang & Tseng 2007): a static part, then guided self-scheduling.

    Each worker w first runs its static block [w s, (w+1) s) of the first P s iterations,
    s = ceil(N SWR / P) (as LB4OMP's kmp_sch_pls), without a claim; the rest is claimed in
    GSS chunks of max(chunk, ceil(R/P)), R the iterations left. Those sizes depend only on how
    many chunks were claimed before, so the table is precomputed and claimed by index with one
    fetch-and-add (as LB4OMP does, from a claim counter) rather than by compare-and-swap on the
    iteration counter like omp-guided. The table's first P entries are the static blocks.
    """

    name = "pls"
    summary = "performance-based loop scheduling: static blocks of N*swr, then guided claims"
    PARAMS = {**ChunkRule.PARAMS,
              "swr": Param("swr", float, 0.5, lambda v: 0 <= v <= 1, "in [0, 1]",
                           help="static workload ratio: the share of iterations run in static blocks")}

    def min_chunks(self, n, threads):
        # Static blocks of ceil(N swr / P) <= ceil(N/P), then guided chunks of at most max(k, ceil(N/P)).
        return -(-n // max(self.params["chunk"], -(-n // threads)))

    def bounds(self, n, threads, loop, rng):
        block = math.ceil(n * self.params["swr"] / threads)
        bounds = [min(w * block, n) for w in range(threads + 1)]
        lo, k = bounds[-1], self.params["chunk"]
        while lo < n:
            lo = min(lo + max(k, math.ceil((n - lo) / threads)), n)
            bounds.append(lo)
        return bounds

    def prepare(self, sim, index):
        super().prepare(sim, index)
        self.next.value = sim.threads  # claims start after the static blocks

    def share(self, sim, w, index):
        if self.ranges[w][1] > self.ranges[w][0]:
            sim.counters["chunks"] += 1
            yield sim.until(sim.run_chunks(w, index, [self.ranges[w]], sim.env.now))
        yield from self.claim(sim, w, index)
