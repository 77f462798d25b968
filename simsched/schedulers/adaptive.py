"""Weighted and adaptive factoring: chunk sizes scaled by each worker's (given or measured) speed.

Every technique here claims from one shared next-iteration counter by compare-and-swap,
as the OpenMP guided schedule does: the chunk a worker may take depends on who it is, so
no chunk table can be built in advance. The adaptive ones time their chunks with the
machine's clock (``costs_ns.timer`` per read) and publish their statistics on a line of
their own; a worker that needs everyone's statistics reads all P lines.
"""

from __future__ import annotations

import bisect
import math

from ..errors import SimschedError
from ..spec import Param
from .selfsched import CHUNK_PARAM, Factoring, SelfScheduling
from .static import BARRIER_PARAM

# The clock's resolution: a measured time is never below one tick, so a speed is never infinite.
CLOCK_TICK_NS = 1.0


def parse_weights(raw, owner: str = "") -> tuple[float, ...]:
    """Weights given as ``a:b:c`` (one per worker) or as a sequence; each a finite number > 0."""
    if raw is None or raw == "":
        return ()
    where = f"{owner}: parameter weights" if owner else "parameter weights"
    items = raw.split(":") if isinstance(raw, str) else list(raw)
    weights = []
    for item in items:
        try:
            value = float(item.strip() if isinstance(item, str) else item)
        except (TypeError, ValueError):
            raise SimschedError(f"{where}: entry {item!r} is not a number") from None
        if not math.isfinite(value) or value <= 0:
            raise SimschedError(f"{where}: entry {item!r} must be a finite number > 0")
        weights.append(value)
    return tuple(weights)


# Entries are checked when the scheduler is made (naming it), their count when the run knows P.
WEIGHTS_PARAM = Param("weights", str, "",
                      help="relative speed of each worker, one per worker, e.g. 1:1:2:2 "
                           "(default: all equal; adaptive ones start from them)")


def fac2_batches(n: int, threads: int, k: int) -> tuple[list[int], list[int]]:
    """Factoring's batches of a loop of ``n``: where each starts, and the iterations left when it starts.

    Batch j hands out P chunks of max(k, ceil(R_j / 2P)); a claim at iteration ``lo``
    belongs to the last batch starting at or before ``lo``.
    """
    # Factoring's chunk table holds each batch's P chunks in turn: every P-th boundary starts a batch.
    starts = Factoring(chunk=k).bounds(n, threads, None, None)[:-1][::threads]
    return starts, [n - s for s in starts]


def normalised(weights, threads: int, owner: str = "") -> list[float]:
    """The weights scaled to sum to ``threads`` (all 1 without weights); their count must be ``threads``."""
    if not weights:
        return [1.0] * threads
    if len(weights) != threads:
        where = f"{owner}: parameter weights" if owner else "parameter weights"
        raise SimschedError(f"{where} has {len(weights)} entries but the run has P={threads} workers: "
                            "give one weight per worker")
    total = sum(weights)
    return [threads * w / total for w in weights]


class WorkerState:
    """What one worker keeps between its claims: its weight and its measurements."""

    __slots__ = ("weight", "count", "sum_time", "sum_iters", "sum_avg", "sum_avg2", "batch", "last", "size")

    def __init__(self, weight: float):
        self.weight = weight
        self.count = 0           # chunks measured
        self.sum_time = 0.0      # AWF: sum over own chunks k of k * t_k
        self.sum_iters = 0.0     # AWF: sum of k * n_k
        self.sum_avg = 0.0       # AF: sum of per-iteration averages t_k / n_k
        self.sum_avg2 = 0.0      # AF: sum of their squares
        self.batch = -1          # AWF-B/D: the batch the weight was last computed in
        self.last = None         # AWF-D/E: when the previous request read the clock
        self.size = 0            # the last chunk's iterations


class WeightedFactoring(SelfScheduling):
    """Weighted factoring (WF; Hummel, Schmidt, Uma, Wein, SPAA 1996).

    FAC2 batches: batch j holds half of the R_j iterations left when it starts, and worker
    i's chunk in it is max(k, ceil(w_i R_j / 2P)), the weights w normalised to sum to P
    (as the WF case of Cariño and Banicescu's DLS library; LB4OMP's kmp_sch_wf weights FAC2
    chunks the same way). A claim
    belongs to the FAC2 batch its first iteration falls in (the master computes the batch
    starts with the loop). A claim reads the shared counter and compare-and-swaps it
    forward, retrying with the value a failed CAS returns.
    """

    name = "wf"
    summary = "weighted factoring: FAC2 batches, each worker's chunk scaled by its weight"
    PARAMS = {"chunk": CHUNK_PARAM, "weights": WEIGHTS_PARAM, "barrier": BARRIER_PARAM}
    COUNTERS = ("claims", "failed_claims")
    # Clock reads around each chunk (at its start, at its end) by a technique that times its chunks.
    READS_AT_START = READS_AT_END = 0

    def __init__(self, **params):
        super().__init__(**params)
        self.weights = parse_weights(self.params.get("weights", ""), f"scheduler {self.name}")

    def setup(self, sim):
        super().setup(sim)
        # Checked before the workers start: the weights must match the run's P.
        self.initial = normalised(self.weights, sim.threads, f"scheduler {self.name}")

    def prepare(self, sim, index):
        super().prepare(sim, index)
        self.n = n = sim.loops[index].n
        self.starts, self.left = fac2_batches(n, sim.threads, self.params["chunk"])
        # Each worker's published statistics, on a line it writes itself (None: nothing measured yet).
        self.stats = [sim.memory.line(f"loop[{index}].stats[{w}]", None, home=w) for w in range(sim.threads)]

    def batch(self, lo: int) -> int:
        """The FAC2 batch a claim at ``lo`` falls in."""
        return bisect.bisect_right(self.starts, lo) - 1

    def size(self, sim, w: int, state: WorkerState, lo: int, t: float) -> tuple[int, float]:
        """The chunk worker ``w`` asks for at ``lo`` at time ``t`` (before the cut at N), and when it knows it."""
        left = self.left[self.batch(lo)]
        return max(self.params["chunk"], math.ceil(state.weight * left / (2 * sim.threads))), t

    def request(self, sim, w: int, state: WorkerState, t: float) -> float:
        """Worker-side work at the start of a request issued at ``t``; return when it is done."""
        return t

    def measured(self, sim, w: int, state: WorkerState, size: int, elapsed: float, t: float) -> float:
        """Fold one timed chunk of ``size`` iterations into ``w``'s statistics, publish them; return when done."""
        return t

    def share(self, sim, w, index):
        yield from sim.drive(self.steps(sim, w, index))

    def steps(self, sim, w, index):
        """Worker ``w``'s requests, claims and chunks, as ``Simulation.drive`` runs them."""
        n, mem, costs = sim.loops[index].n, sim.memory, sim.costs
        state = WorkerState(self.initial[w])
        t = sim.env.now
        while True:
            t = self.request(sim, w, state, t)
            lo, t = mem.read(self.next, w, at=t)
            sim.counters["claims"] += 1
            while lo < n:
                size, t = self.size(sim, w, state, lo, t)
                # A retry sized within the hold window runs on the line its failed CAS left (Memory.holds).
                if not mem.holds(self.next, w, t):
                    yield sim.charged(w, "schedule", t)
                hi = min(lo + size, n)
                ok, found, t = mem.cas(self.next, w, lo, hi, at=t)
                if ok:
                    break
                sim.counters["failed_claims"] += 1
                lo = found
            if lo >= n:
                return sim.charged(w, "schedule", t), None
            sim.counters["chunks"] += 1
            # The per-chunk dispatch, and the clock read that starts a timed chunk.
            start = t + costs["chunk"] + self.READS_AT_START * costs["timer"]
            end = sim.record_chunk(w, index, lo, hi, start, sim.env.now)
            yield end
            state.size = hi - lo
            t = end
            if self.READS_AT_END:
                t = self.measured(sim, w, state, hi - lo, end - start, end + costs["timer"])


class AdaptiveWeightedFactoring(WeightedFactoring):
    """Adaptive weighted factoring: WF whose weights are learned from measured chunk times.

    Banicescu, Velusamy, Devaprasad (Cluster Computing 2003) and Cariño, Banicescu
    (J. Supercomputing 2008). Worker i's performance is its weighted average iteration
    time pi_i = sum_k k t_k / sum_k k n_k over its own chunks k = 1, 2, ... (n_k
    iterations measured at t_k), stored on its statistics line after each measurement.
    Its weight is w_i = m rho_i / sum_j rho_j, rho_j = mean(pi) / pi_j, over the m workers
    that have published (before its first measurement a worker keeps its initial weight).
    B and D recompute the weight at a worker's first claim in each FAC2 batch and ask for
    max(k, ceil(w_i R_j / 2P)); C and E recompute it at every claim and ask for
    max(k, ceil(w_i R / 2P)), R the iterations left at the claim. B and C time the chunk
    alone (clock reads at its start and end); D and E time from one request to the next,
    scheduling included (one clock read per request). A weight update reads all P
    statistics lines: O(P) per update, as the runtime does (LB4OMP kmp_sch_awf_b..e).
    """

    name = ""
    # Whether the weight is recomputed at every claim (C, E) rather than once per batch (B, D).
    PER_CHUNK = False
    # Whether the time runs from request to request (D, E) rather than over the chunk alone (B, C).
    ELAPSED = False
    READS_AT_START = READS_AT_END = 1

    def request(self, sim, w, state, t):
        if self.ELAPSED:
            # The clock read both ends the previous interval and starts the next one.
            now = t + sim.costs["timer"]
            t = now
            if state.last is not None:
                t = self.measured(sim, w, state, state.size, now - state.last, now)
            state.last = now
        return t

    def measured(self, sim, w, state, size, elapsed, t):
        state.count += 1
        k = state.count
        state.sum_time += k * max(elapsed, CLOCK_TICK_NS)
        state.sum_iters += k * size
        return sim.memory.store(self.stats[w], w, state.sum_time / state.sum_iters, at=t)

    def size(self, sim, w, state, lo, t):
        threads = sim.threads
        batch = self.batch(lo)
        if state.count and (self.PER_CHUNK or batch != state.batch):
            state.batch = batch
            t = self.update_weight(sim, w, state, t)
        left = self.n - lo if self.PER_CHUNK else self.left[batch]
        return max(self.params["chunk"], math.ceil(state.weight * left / (2 * threads))), t

    def update_weight(self, sim, w, state, t):
        """Read every worker's statistics line and recompute ``w``'s weight; return when done."""
        pis = []
        for line in self.stats:
            pi, t = sim.memory.read(line, w, at=t)
            pis.append(pi)
        known = [pi for pi in pis if pi is not None]
        mean = sum(known) / len(known)
        total = sum(mean / pi for pi in known)
        state.weight = (mean / pis[w]) * len(known) / total
        return t


class AwfB(AdaptiveWeightedFactoring):
    __doc__ = "AWF-B: weights updated once per FAC2 batch, from chunk times alone."
    name = "awf-b"
    summary = "adaptive weighted factoring: weights per batch from chunk times"


class AwfC(AdaptiveWeightedFactoring):
    __doc__ = "AWF-C: weights updated at every claim, chunks from the iterations left, chunk times alone."
    name = "awf-c"
    summary = "adaptive weighted factoring: weights per chunk from chunk times"
    PER_CHUNK = True


class AwfD(AdaptiveWeightedFactoring):
    __doc__ = "AWF-D: as AWF-B, but timed from request to request (scheduling overhead included)."
    name = "awf-d"
    summary = "adaptive weighted factoring: weights per batch from request-to-request times"
    ELAPSED = True
    READS_AT_START = READS_AT_END = 0  # one clock read per request instead


class AwfE(AdaptiveWeightedFactoring):
    __doc__ = "AWF-E: as AWF-C, but timed from request to request (scheduling overhead included)."
    name = "awf-e"
    summary = "adaptive weighted factoring: weights per chunk from request-to-request times"
    PER_CHUNK = ELAPSED = True
    READS_AT_START = READS_AT_END = 0  # one clock read per request instead


class AdaptiveFactoring(WeightedFactoring):
    """Adaptive factoring (AF; Banicescu and Liu, HPC Symposium 2000).

    Worker i learns the mean mu_i and variance sigma_i^2 of its iteration time from its
    chunks: chunk k of n_k iterations timed at t_k (clock reads at its start and end) gives
    the sample t_k / n_k; mu_i is their mean, sigma_i^2 their sample variance (0 from one
    sample), as LB4OMP's kmp_sch_af computes them from its sub-chunks. Each worker stores
    (mu_i, sigma_i^2) on its statistics line after each chunk. Its chunk is
    x_i = (D + 2TR - sqrt(D^2 + 4DTR)) / (2 mu_i), D = sum_j sigma_j^2 / mu_j,
    T = (sum_j 1/mu_j)^-1, R the iterations left, at least k; a worker that has published
    nothing yet counts with the requester's own statistics (LB4OMP). Start-up: a worker
    without statistics takes the minimum chunk k (the DLS library of Cariño and Banicescu).
    Every claim after the first reads all P statistics lines: O(P) per claim.
    """

    name = "af"
    summary = "adaptive factoring: chunks from each worker's learned mean and variance of iteration time"
    PARAMS = {"chunk": CHUNK_PARAM, "barrier": BARRIER_PARAM}
    READS_AT_START = READS_AT_END = 1

    def measured(self, sim, w, state, size, elapsed, t):
        state.count += 1
        c = state.count
        sample = max(elapsed, CLOCK_TICK_NS) / size
        state.sum_avg += sample
        state.sum_avg2 += sample * sample
        mu = state.sum_avg / c
        var = max((state.sum_avg2 - c * mu * mu) / (c - 1), 0.0) if c > 1 else 0.0
        return sim.memory.store(self.stats[w], w, (mu, var), at=t)

    def size(self, sim, w, state, lo, t):
        k = self.params["chunk"]
        if not state.count:
            return k, t
        stats = []
        for line in self.stats:
            value, t = sim.memory.read(line, w, at=t)
            stats.append(value)
        return max(k, af_chunk(stats, w, self.n - lo)), t


def af_chunk(stats, w: int, left: int) -> int:
    """AF's chunk for worker ``w`` with ``left`` iterations left, from each worker's (mu, sigma^2) or None."""
    mine = stats[w]
    d = t_inv = 0.0
    for value in stats:
        mu, var = value if value is not None else mine
        d += var / mu
        t_inv += 1.0 / mu
    t = 1.0 / t_inv
    x = (d + 2.0 * t * left - math.sqrt(d * d + 4.0 * d * t * left)) / (2.0 * mine[0])
    return math.ceil(x)
