"""LLVM libomp's stealing schedule: per-thread ranges of chunks, stolen a quarter at a time by a CAS on (count, ub).

libomp (kmp_dispatch.cpp, ``kmp_sch_static_steal``) splits the loop into C = ceil(N/k)
chunks of k iterations and gives thread t the contiguous chunk indices
[t*(C//P) + min(t, C%P), ... + C//P + (t < C%P)). Each thread keeps its range as a
(count, ub) pair on its own dispatch buffer and claims its next chunk by an atomic
increment of count (a CAS in libomp). A thread whose range is empty marks its buffer THIEF and looks for a
victim, starting with the thread after itself (later, the last victim it robbed),
skipping buffers marked THIEF; from a READY victim it takes, by one 64-bit CAS on the
victim's (count, ub), the last floor(remaining/4) chunks when more than 7 remain, else
the last one; from a victim that has not started the loop yet (UNUSED) it takes the
whole initial range. It makes at most P - 1 such attempts. OpenMP's
``schedule(nonmonotonic: dynamic, k)`` is this same schedule: libomp maps a
nonmonotonic dynamic schedule onto static_steal.
"""

from __future__ import annotations

from .base import STEALING_COUNTERS
from .runtimes import LIBOMP_RUNTIME_PARAM
from .selfsched import CHUNK_PARAM, FixedChunks, claim_by_index
from .static import OMP_BARRIER_PARAM, FullBarriers, OpenMPRuntime

# The states of a thread's dispatch buffer (libomp's steal_flag).
UNUSED, CLAIMED, READY, THIEF = "unused", "claimed", "ready", "thief"


def initial_range(chunks: int, threads: int, t: int) -> tuple[int, int]:
    """Thread ``t``'s initial chunk indices [count, ub) of ``chunks`` chunks: near-equal, the first C % P get one more."""
    small, extras = divmod(chunks, threads)
    init = t * small + min(t, extras)
    return init, init + small + (t < extras)


def stolen(count: int, ub: int) -> int:
    """How many chunks a thief takes from the tail of a victim's range [count, ub): a quarter when more than 7 remain."""
    remaining = ub - count
    return remaining >> 2 if remaining > 7 else 1


class StaticSteal(OpenMPRuntime, FullBarriers):
    """libomp's static_steal: contiguous per-thread chunk ranges, claimed by CAS, robbed a quarter at a time.

    Each thread's (count, ub) pair and its steal flag sit on two lines of its own dispatch
    buffer (home: that thread). Owner claims, thieves' reads and CASes, the flag stores and
    the last thread's reset of every flag at the end of the loop all go through the
    modeled memory, so what stealing costs emerges from whose lines it touches. With fewer
    chunks than threads (or one thread) libomp falls back to dynamic scheduling, as here.
    """

    name = "static-steal"
    summary = "libomp static_steal: per-thread chunk ranges, idle threads CAS a quarter off a victim's tail"
    PARAMS = {"chunk": CHUNK_PARAM, "barrier": OMP_BARRIER_PARAM, "runtime": LIBOMP_RUNTIME_PARAM}
    COUNTERS = STEALING_COUNTERS
    UNSUPPORTED = {"gnu": "libgomp has no static_steal schedule (it is libomp's)"}

    def min_chunks(self, n, threads):
        return -(-n // self.params["chunk"])

    def setup(self, sim) -> None:
        super().setup(sim)
        mem = sim.memory
        self.pair = [mem.line(f"steal[{w}].range", (0, 0), home=w) for w in range(sim.threads)]
        self.flag = [mem.line(f"steal[{w}].flag", UNUSED, home=w) for w in range(sim.threads)]

    def prepare(self, sim, index):
        n, threads = sim.loops[index].n, sim.threads
        self.table = FixedChunks(n, self.params["chunk"])
        self.stealing = threads > 1 and len(self.table) >= threads
        # The loop's shared buffer: the dynamic fallback's counter, and the count of threads done.
        self.next = sim.memory.line(f"loop[{index}].next", 0, home=0)
        self.done = sim.memory.line(f"loop[{index}].done", 0, home=0)
        self.victim = [(w + 1) % threads for w in range(threads)]

    def share(self, sim, w, index):
        if not self.stealing:
            # Each fetch-and-add is a claim, the last (which finds none left) a failed one, as natively.
            claimed = yield from claim_by_index(sim, w, index, self.next, self.table)
            sim.counters["claims"] += claimed + 1
            sim.counters["failed_claims"] += 1
            return
        yield from sim.drive(self.steps(sim, w, index))

    def steps(self, sim, w, index):
        """Worker ``w``'s claims, steals and chunks, as ``Simulation.drive`` runs them."""
        mem, threads = sim.memory, sim.threads
        count, ub = initial_range(len(self.table), threads, w)
        # Claim the own buffer; a thief that got here first took the whole range.
        ok, _, t = mem.cas(self.flag[w], w, UNUSED, CLAIMED)
        if ok:
            t = mem.store(self.pair[w], w, (count, ub), at=t)
            t = mem.store(self.flag[w], w, READY, at=t)
        else:
            t = mem.store(self.pair[w], w, (count, count), at=t)
        yield sim.charged(w, "schedule", t)
        while True:
            chunk, t = self.claim_own(sim, w)
            if chunk is None:
                chunk = yield from self.steal(sim, w, t)
                t = sim.env.now
            if chunk is None:
                break
            lo, hi = self.table[chunk]
            sim.counters["chunks"] += 1
            yield sim.run_chunk(w, index, lo, hi, t)
        # The last thread to finish marks every buffer unused for the next loop.
        finished, t = mem.fetch_add(self.done, w, 1)
        if finished == threads - 1:
            for v in range(threads):
                t = mem.store(self.flag[v], w, UNUSED, at=t)
        return sim.charged(w, "schedule", t), None

    def claim_own(self, sim, w: int):
        """The owner's next chunk index (None when its range is empty) and when: one atomic increment of its count,
        libomp's CAS modeled as one read-modify-write."""
        mem = sim.memory
        (count, ub), t = mem.read(self.pair[w], w)
        if count >= ub:
            return None, t
        sim.counters["claims"] += 1
        (count, ub), t = mem.rmw(self.pair[w], w, lambda pair: (pair[0] + 1, pair[1]), at=t)
        if count >= ub:  # a thief took it between the read and the CAS
            sim.counters["failed_claims"] += 1
            return None, t
        return count, t

    def steal(self, sim, w: int, t: float):
        """From time ``t``, look for a victim (at most P - 1 attempts) and take chunks off its tail: the first
        stolen chunk index, or None."""
        mem, threads = sim.memory, sim.threads
        t = mem.store(self.flag[w], w, THIEF, at=t)
        for _ in range(threads - 1):
            victim = self.victim[w]
            last = victim - 1 if victim else threads - 1
            state, t = mem.read(self.flag[victim], w, at=t)
            # Skip the own buffer and buffers whose threads are stealing themselves.
            while (victim == w or state == THIEF) and victim != last:
                victim = (victim + 1) % threads
                state, t = mem.read(self.flag[victim], w, at=t)
            sim.counters["steal_attempts"] += 1
            if victim == w or state == THIEF:
                continue
            if state == UNUSED:
                yield sim.charged(w, "steal", t)
                ok, _, t = mem.cas(self.flag[victim], w, UNUSED, THIEF)
                if ok:
                    count, ub = initial_range(len(self.table), threads, victim)
                    return (yield from self.took(sim, w, victim, (victim + 1) % threads, count, ub, t))
            while True:
                yield sim.charged(w, "steal", t)
                (count, ub), t = mem.read(self.pair[victim], w)
                state, t = mem.read(self.flag[victim], w, at=t)
                if state != READY or count >= ub:
                    self.victim[w] = (victim + 1) % threads
                    break
                cut = ub - stolen(count, ub)
                yield sim.charged(w, "steal", t)
                ok, _, t = mem.cas(self.pair[victim], w, (count, ub), (count, cut))
                if ok:
                    return (yield from self.took(sim, w, victim, victim, cut, ub, t))
        yield sim.charged(w, "steal", t)
        return None

    def took(self, sim, w: int, victim: int, next_victim: int, init: int, ub: int, t: float):
        """``w`` stole chunks [init, ub): it runs ``init`` now and makes the rest its own, stealable, range."""
        mem = sim.memory
        sim.counters["steals"] += 1
        self.victim[w] = next_victim
        t = mem.store(self.pair[w], w, (init + 1, ub), at=t)
        if init + 1 < ub:
            t = mem.store(self.flag[w], w, READY, at=t)
        yield sim.charged(w, "steal", t)
        return init


class NonmonotonicDynamic(StaticSteal):
    """OpenMP's schedule(nonmonotonic: dynamic, k) as libomp runs it: the static_steal schedule, under its own name."""

    name = "nonmonotonic-dynamic"
    summary = "OpenMP nonmonotonic:dynamic, which libomp runs as static_steal"
    UNSUPPORTED = {"gnu": "libgomp runs schedule(nonmonotonic: dynamic) as its plain dynamic schedule: "
                          "use omp-dynamic:runtime=gnu"}
