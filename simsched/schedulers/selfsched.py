"""Work sharing from one shared next-iteration counter: OpenMP dynamic and guided self-scheduling."""

from __future__ import annotations

import math

from ..spec import Param
from .static import BARRIER_PARAM, FullBarriers

CHUNK_PARAM = Param("chunk", int, 1, lambda v: v >= 1, ">= 1", help="minimum chunk size")


class SelfScheduling(FullBarriers):
    """Workers grab chunks from one shared counter between full fork and join barriers."""

    PARAMS = {"chunk": CHUNK_PARAM, "barrier": BARRIER_PARAM}

    def prepare(self, sim, index):
        # A fresh next-iteration counter per loop, initialised by the master with the descriptor.
        self.next = sim.memory.line(f"loop[{index}].next", 0, home=0)

    def share(self, sim, w, index):
        n = sim.loops[index].n
        while True:
            lo, hi, t = yield from self.grab(sim, w, n)
            if lo >= n:
                yield sim.wait(w, "schedule", t)
                return
            sim.counters["chunks"] += 1
            yield sim.until(sim.run_chunk(w, index, lo, hi, t))

    def grab(self, sim, w, n):
        """Claim the next chunk: (lo, hi, time the claim completes); lo >= n when none is left."""
        raise NotImplementedError


class OmpDynamic(SelfScheduling):
    """Fixed chunks claimed with one atomic fetch-and-add each."""

    name = "omp-dynamic"
    summary = "OpenMP dynamic: fixed chunks by fetch-and-add on one counter"

    def share(self, sim, w, index):
        # Inlined Simulation.run_chunk with local accumulators: the claim and the chunk it
        # hands out are one timeout, one event per chunk, and this loop runs once per chunk.
        k, n = self.params["chunk"], sim.loops[index].n
        prefix, slow, dispatch = sim.loops[index].prefix, sim.slowdown[w], sim.costs["chunk"]
        fetch_add, line, env, log = sim.memory.fetch_add, self.next, sim.env, sim._chunks.append
        timeout = env.timeout
        chunks = 0
        scheduling = busy = 0.0
        while True:
            now = env.now
            lo, t = fetch_add(line, w, k)
            if lo >= n:
                break
            hi = lo + k if lo + k < n else n
            start = t + dispatch
            work = (prefix.item(hi) - prefix.item(lo)) * slow
            log((w, index, lo, hi, start, start + work))
            scheduling += start - now
            busy += work
            chunks += 1
            yield timeout(start + work - now)
        sim.counters["chunks"] += chunks
        sim.time["schedule"][w] += scheduling
        sim.time["compute"][w] += busy
        yield sim.wait(w, "schedule", t)


class OmpGuided(SelfScheduling):
    """Chunks of max(k, ceil(R/P)) claimed by compare-and-swap on the shared counter, retried on conflict."""

    name = "omp-guided"
    summary = "OpenMP guided: max(chunk, ceil(R/P)) by compare-and-swap"

    def grab(self, sim, w, n):
        k, threads, mem = self.params["chunk"], sim.threads, sim.memory
        lo, t = mem.read(self.next, w)
        while lo < n:
            yield sim.wait(w, "schedule", t)
            size = max(k, math.ceil((n - lo) / threads))
            hi = min(lo + size, n)
            ok, found, t = mem.cas(self.next, w, lo, hi)
            if ok:
                return lo, hi, t
            lo = found
        return lo, lo, t

