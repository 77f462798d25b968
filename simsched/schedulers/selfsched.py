"""Work sharing from one shared queue: OpenMP dynamic and guided, trapezoid, factoring, and taskloop."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from .. import memory as memory_module
from ..chunklog import pack_record
from ..errors import SimschedError
from ..spec import Param
from .base import STEALING_COUNTERS, Steps, block, default_grain
from .runtimes import RUNTIME_PARAM, gnu_guided_size, llvm_guided_mode, llvm_guided_size, llvm_switch
from .static import BARRIER_PARAM, OMP_BARRIER_PARAM, FullBarriers, OpenMPRuntime

if TYPE_CHECKING:
    from ..engine import Simulation
    from ..loop import Loop
    from ..memory import Line

CHUNK_PARAM = Param("chunk", int, 1, lambda v: v >= 1, ">= 1",
                    help="chunk size (for guided, tss and fac2: the smallest chunk)")


# OpenMP dynamic and guided may take cilk_for's default grain instead of a fixed chunk (E3 runs them so).
OMP_CHUNK_PARAM = Param("chunk", int, 1, lambda v: v >= 0, ">= 0",
                        help="chunk size (guided: the smallest chunk); 0: cilk_for's grain max(1, min(2048, N/(8P)))")


class SelfScheduling(FullBarriers):
    """Workers grab chunks from one shared counter between full fork and join barriers."""

    PARAMS = {"chunk": CHUNK_PARAM, "barrier": BARRIER_PARAM}

    def prepare(self, sim: Simulation, index: int) -> None:
        # A fresh next-iteration counter per loop, initialised by the master with the descriptor.
        self.next = sim.memory.line(f"loop[{index}].next", 0, home=0)

    def chunk(self, n: int, threads: int) -> int:
        """The chunk size for a loop of ``n`` iterations on ``threads`` workers."""
        return self.params["chunk"] or default_grain(n, threads)


class OmpDynamic(OpenMPRuntime, SelfScheduling):
    """Fixed chunks claimed with one atomic fetch-and-add each (the same in every runtime profile)."""

    name = "omp-dynamic"
    summary = "OpenMP dynamic: fixed chunks by fetch-and-add on one counter"
    PARAMS = {"chunk": OMP_CHUNK_PARAM, "barrier": OMP_BARRIER_PARAM, "runtime": RUNTIME_PARAM}

    def min_chunks(self, n, threads):
        return -(-n // self.chunk(n, threads))

    def share(self, sim, w, index):
        # Claiming chunk i by index is the same atomic as claiming iteration i*k.
        n = sim.loops[index].n
        chunks = FixedChunks(n, self.chunk(n, sim.threads))
        yield from claim_by_index(sim, w, index, self.next, chunks)


class FixedChunks:
    """The chunk table [ik, (i+1)k) of a loop of n iterations, computed on demand."""

    __slots__ = ("n", "k", "count")

    def __init__(self, n: int, k: int):
        self.n, self.k, self.count = n, k, -(-n // k)

    def __len__(self) -> int:
        return self.count

    def __getitem__(self, i: int) -> tuple[int, int]:
        lo = i * self.k
        return lo, min(lo + self.k, self.n)


class OmpGuided(OpenMPRuntime, SelfScheduling):
    """Shrinking chunks claimed by compare-and-swap on the counter, sized by the runtime profile's rule.

    gnu and mixed (libgomp's gomp_iter_guided_next): max(k, ceil(R/P)), R the iterations left; a
    failed CAS returns the value it found, which the retry uses. llvm (libomp's
    kmp_sch_guided_iterative_chunked): floor(R * (0.5/P)) while R >= 2P(k + 1), each try reading
    the counter afresh; below that, chunks of k by fetch-and-add on the same counter. libomp runs a
    loop with (2k + 1)P >= N as plain dynamic, and one thread's loop as one chunk with no atomic.
    """

    name = "omp-guided"
    summary = "OpenMP guided: max(chunk, ceil(R/P)) by compare-and-swap (runtime=llvm: R/2P, then chunk)"
    PARAMS = {"chunk": OMP_CHUNK_PARAM, "barrier": OMP_BARRIER_PARAM, "runtime": RUNTIME_PARAM}

    def min_chunks(self, n, threads):
        k = self.chunk(n, threads)
        if self.runtime.guided == "llvm":
            # No chunk is larger than the first guided one, floor(N/2P), or k; one thread's loop is one chunk.
            return min(n, 1) if threads == 1 else -(-n // max(k, n // (2 * threads), 1))
        # No chunk is larger than max(k, ceil(N/P)).
        return -(-n // max(k, -(-n // threads)))

    def share(self, sim, w, index):
        n, threads = sim.loops[index].n, sim.threads
        k = self.chunk(n, threads)
        mode = llvm_guided_mode(n, threads, k) if self.runtime.guided == "llvm" else "guided"
        if mode == "dynamic":
            # libomp's own fallback: the chunk index by one atomic increment, as omp-dynamic claims it.
            yield from claim_by_index(sim, w, index, self.next, FixedChunks(n, k))
        elif mode == "whole":
            # One thread: static_greedy hands it the whole loop from its private buffer; no shared line.
            if n:
                sim.counters["chunks"] += 1
                yield sim.until(sim.run_chunk(w, index, 0, n, sim.env.now))
        elif self.runtime.guided == "llvm":
            yield from sim.drive(self.llvm_steps(sim, w, index, k))
        else:
            yield from sim.drive(self.steps(sim, w, index))

    def steps(self, sim, w, index):
        """Worker ``w``'s claims and chunks under libgomp's rule, as ``Simulation.drive`` runs them."""
        n, threads, mem = sim.loops[index].n, sim.threads, sim.memory
        k = self.chunk(n, threads)
        while True:
            # Read the counter, size the chunk from what is left, and claim it with a CAS; a
            # failed CAS returns the value it found, so the next try needs no extra read. That try
            # runs on the line the failed CAS left with this core (Memory.holds): chained, not queued.
            lo, t = mem.read(self.next, w)
            while lo < n:
                hi = min(lo + gnu_guided_size(n - lo, threads, k), n)
                if not mem.holds(self.next, w, t):
                    yield sim.charged(w, "schedule", t)
                ok, found, t = mem.cas(self.next, w, lo, hi, at=t)
                if ok:
                    break
                lo = found
            if lo >= n:
                return sim.charged(w, "schedule", t), None
            sim.counters["chunks"] += 1
            yield sim.run_chunk(w, index, lo, hi, t)

    def llvm_steps(self, sim, w, index, k):
        """Worker ``w``'s claims and chunks under libomp's rule, as ``Simulation.drive`` runs them."""
        n, threads, mem = sim.loops[index].n, sim.threads, sim.memory
        switch = llvm_switch(threads, k)
        held, t = False, sim.env.now
        while True:
            # Each try reads the counter: libomp's compare_and_swap says only whether it succeeded.
            # After a failed one the line is still this core's (Memory.holds): the read and the
            # retry run there.
            if held:
                lo, t = mem.read(self.next, w, at=t)
            else:
                lo, t = mem.read(self.next, w)
                yield sim.charged(w, "schedule", t)
            left = n - lo
            if left <= 0:
                return sim.charged(w, "schedule", t), None
            if left < switch:
                lo, t = mem.fetch_add(self.next, w, k, at=t)
                if lo >= n:
                    return sim.charged(w, "schedule", t), None
                hi = min(lo + k, n)
            else:
                hi = lo + llvm_guided_size(left, threads)
                ok, _, t = mem.cas(self.next, w, lo, hi, at=t)
                if not ok:
                    held = mem.holds(self.next, w, t)
                    if not held:
                        yield sim.charged(w, "schedule", t)
                    continue
            held = False
            sim.counters["chunks"] += 1
            yield sim.run_chunk(w, index, lo, hi, t)


def claim_by_index(sim: Simulation, w: int, index: int, line: Line,
                   ranges: Sequence[tuple[int, int]]) -> Steps:
    """Run ``ranges[i]`` for each i claimed by fetch-and-add on ``line`` until a claim finds none left;
    return when that failing claim completes, with how many chunks this worker claimed.

    Worker ``w`` runs it inside its process (``claimed = yield from claim_by_index(...)``); ``line``
    is a counter from 0 that every worker of loop ``index`` claims from, and ``ranges`` the loop's
    chunks in claim order (a list of (lo, hi), or anything with ``len`` and ``[i]``)."""
    return (yield from sim.drive(index_claims(sim, w, index, line, ranges)))


def index_claims(sim, w, index, line, ranges):
    """The steps of ``claim_by_index``: a claim's completion is folded into its chunk's wait, one per chunk.

    Where the claim is issued inline, the compiled copy of these steps takes them when it is built
    (``simsched._speedups``; a chunk with data or noise is timed by ``Simulation.chunk_time``, as
    here); otherwise ``index_claim_steps`` does.
    """
    mem, loop = sim.memory, sim.loops[index]
    inline, speedups = memory_module.INLINE and not mem.reservations, memory_module.speedups
    if inline and speedups is not None:
        sink = sim.inline_chunks(w, index)
        k, count = fixed_chunk(ranges), len(ranges)
        return speedups.claims(sim.env, w, index, line, mem.transfers_to(w), mem.atomic_ns, k,
                               count, ranges, loop.n, loop.prefix, sim.costs["chunk"], sink.pending, sink.slow,
                               sink.flush, sink.full, sink.mark, mem._notify, partial(claimed, sim, w, inline),
                               None if sink.plain else sim.chunk_time)
    return index_claim_steps(sim, w, index, line, ranges, inline)


def fixed_chunk(ranges) -> int:
    """A fixed chunk's size, whose bounds the claim loops work out as ``FixedChunks[i]`` would (else 0)."""
    return ranges.k if isinstance(ranges, FixedChunks) else 0


def claimed(sim, w, inline, chunks, transfers, scheduling, busy, t):
    """Account a claim loop's chunks and time once it leaves; return ``(when, chunks)`` for ``drive``."""
    if inline:
        mem = sim.memory
        mem.atomics += chunks + 1
        mem.transfers += transfers
    sim.counters["chunks"] += chunks
    sim.time["schedule"][w] += scheduling
    sim.time["compute"][w] += busy
    return sim.charged(w, "schedule", t), chunks


def index_claim_steps(sim, w, index, line, ranges, inline):
    """``index_claims`` in Python; with ``inline``, the fetch-and-add is issued in the loop, as ``Memory`` does it."""
    env, dispatch, n, mem = sim.env, sim.costs["chunk"], sim.loops[index].n, sim.memory
    # Memory.fetch_add (its exchange) and record_chunk, inline: this loop is the family's hot path.
    # (Reservation atomics take the method: a lost reservation is not among what the inline copy does.)
    exchange = mem.exchange
    into, atomic_ns = mem.transfers_to(w), mem.atomic_ns
    prefix, slow, plain, pending, full, flush, mark = sim.inline_chunks(w, index)
    k = fixed_chunk(ranges)
    count = len(ranges)
    chunks = transfers = 0
    scheduling = busy = 0.0
    while True:
        now = env.clock
        if inline:
            free = line.free_at
            t = free if free > now else now
            if line.holder != w:
                transfers += 1
                t += into[line.holder]
                line.holder = w
                line.sharers = {w}
            elif len(line.sharers) > 1:
                line.sharers = {w}
            t += atomic_ns
            i = line.value
            line.value = i + 1
            line.free_at = line.written_at = t
            if line.spinners:
                mem._notify(line, w, t)
        else:
            i, t = exchange(line, w, line.value + 1, now)
        if i >= count:
            break
        if k:
            lo = i * k
            hi = lo + k
            if hi > n:
                hi = n
        else:
            lo, hi = ranges[i]
        start = t + dispatch
        work = (prefix(hi) - prefix(lo)) * slow if plain else sim.chunk_time(w, index, lo, hi, start)
        pending += pack_record(w, index, lo, hi, start, start + work)
        if len(pending) >= full:
            flush()
        if mark is not None and start > now:
            mark((w, "schedule", now, start))
        scheduling += start - now
        busy += work
        chunks += 1
        yield start + work
    return claimed(sim, w, inline, chunks, transfers, scheduling, busy, t)


class IndexedChunks(SelfScheduling):
    """A chunk table the master precomputes per loop; each chunk is claimed by one fetch-and-add on its index.

    This is how runtimes implement such schedules (libomp's trapezoidal one claims a
    chunk number, then computes its bounds): the claim is one atomic on a shared line,
    and the lookup of the chunk's bounds is part of the machine's per-chunk cost.
    Building the table is counted in the master's loop set-up cost. A subclass (a chunk
    rule, built-in or a plugin's) gives ``bounds``; native mode claims the same table.
    """

    COUNTERS = STEALING_COUNTERS
    # Whether the table draws from the run's generator: then every loop of a run gets a table of its own.
    RANDOM = False

    def prepare(self, sim: Simulation, index: int) -> None:
        """Compute loop ``index``'s chunk table from ``bounds`` and allocate its claim counter."""
        loop = sim.loops[index]
        bounds = chunk_bounds(self, loop, sim.threads, sim.rng)
        self.ranges = list(zip(bounds[:-1], bounds[1:]))
        self.next = sim.memory.line(f"loop[{index}].chunk", 0, home=0)

    def share(self, sim: Simulation, w: int, index: int) -> Steps:
        yield from self.claim(sim, w, index)

    def claim(self, sim: Simulation, w: int, index: int) -> Steps:
        """Claim and run chunks of the table until a claim finds none left; each fetch-and-add is a claim."""
        claimed = yield from claim_by_index(sim, w, index, self.next, self.ranges)
        sim.counters["claims"] += claimed + 1
        sim.counters["failed_claims"] += 1

    def bounds(self, n: int, threads: int, loop: Loop, rng: np.random.Generator) -> list[int]:
        """The chunk boundaries 0 = b0 < b1 < ... = n for ``loop`` (n iterations) on ``threads`` workers.

        ``loop`` gives the iteration costs to rules that use their mean or deviation
        (``np.diff(loop.prefix)``); ``rng`` is the run's one generator, for rules that draw
        (which set ``RANDOM = True``). The same rule computes the table natively.
        """
        raise NotImplementedError


def chunk_bounds(rule: IndexedChunks, loop: Loop, threads: int, rng: np.random.Generator) -> list[int]:
    """``rule.bounds`` for ``loop`` on ``threads`` workers, in the simulation and natively alike; the table of
    a rule defined outside simsched (a plugin's) is checked before it is used, so that a wrong one is refused
    in one line."""
    bounds = rule.bounds(loop.n, threads, loop, rng)
    if not type(rule).__module__.startswith("simsched."):
        return check_bounds(f"scheduler {rule.name}", bounds, loop.n)
    return bounds


def check_bounds(owner: str, bounds, n: int) -> list[int]:
    """``bounds`` as a list, refused unless integers 0 = b0 < b1 < ... = n (naming the first one wrong)."""
    what = f"{owner}: bounds() must return integers 0 = b0 < b1 < ... = n ({n} here)"
    try:
        values = list(bounds)
    except TypeError:
        raise SimschedError(f"{what}; it returned {type(bounds).__name__}") from None
    if not values:
        raise SimschedError(f"{what}; it returned none")
    for i, value in enumerate(values):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise SimschedError(f"{what}; b{i} = {value!r} is not an integer")
    if values[0] != 0 or values[-1] != n:
        raise SimschedError(f"{what}; it returned b0 = {values[0]} ... b{len(values) - 1} = {values[-1]}")
    for i in range(len(values) - 1):
        if values[i + 1] <= values[i]:
            raise SimschedError(f"{what}; b{i} = {values[i]} is followed by b{i + 1} = {values[i + 1]}")
    return values


class Trapezoid(IndexedChunks):
    """Trapezoid self-scheduling: chunks shrink linearly from f = ceil(N/2P) to l = 1 in ceil(2N/(f+l)) steps.

    Each size is rounded to the nearest integer (halves up) and floored at ``chunk``;
    the chunk that reaches N is cut there, and if the rounded sizes fall short, the
    last chunk takes what is left. With ``rounding=truncate`` the decrement itself is
    truncated to an integer, d = floor((f - l) / (C - 1)), and chunk i is f - i*d, as
    LoopSim computes it.
    """

    name = "tss"
    summary = "trapezoid self-scheduling: linearly shrinking chunks, claimed by index"
    PARAMS = {**SelfScheduling.PARAMS,
              "rounding": Param("rounding", str, "round", choices=("round", "truncate"),
                                help="round: each size to the nearest integer; truncate: the decrement "
                                     "to an integer (LoopSim)")}

    def min_chunks(self, n, threads):
        # Sizes shrink from f = ceil(N/2P): no chunk is larger than max(k, f).
        return -(-n // max(self.params["chunk"], -(-n // (2 * threads))))

    def bounds(self, n, threads, loop, rng):
        k = self.params["chunk"]
        first, last = math.ceil(n / (2 * threads)), 1
        count = math.ceil(2 * n / (first + last))
        gaps = max(count - 1, 1)
        step = (first - last) // gaps
        truncate = self.params["rounding"] == "truncate"
        bounds, lo = [0], 0
        for i in range(count):
            if truncate:
                size = first - i * step
            else:
                # round(first - i * (first - last) / gaps), halves up, in exact integers.
                size = (2 * (first * gaps - i * (first - last)) + gaps) // (2 * gaps)
            lo = min(lo + max(size, k), n)
            bounds.append(lo)
            if lo == n:
                break
        bounds[-1] = n  # rounding may leave a few iterations over: the last chunk takes them
        return bounds


class Factoring(IndexedChunks):
    """Factoring: batches of P equal chunks of ceil(R/2P), R the iterations left when the batch starts."""

    name = "fac2"
    summary = "factoring: batches of P chunks of ceil(R/2P), claimed by index"

    def min_chunks(self, n, threads):
        # No chunk is larger than the first batch's max(k, ceil(N/2P)).
        return -(-n // max(self.params["chunk"], -(-n // (2 * threads))))

    def bounds(self, n, threads, loop, rng):
        k = self.params["chunk"]
        return batched_bounds(n, threads, lambda left, batch: max(k, math.ceil(left / (2 * threads))))


def batched_bounds(n: int, threads: int, size) -> list[int]:
    """Chunk boundaries in batches of ``threads`` equal chunks, batch j's of ``size(R_j, j)`` iterations,
    R_j the iterations left when it starts; the chunk that reaches ``n`` is cut there."""
    bounds, lo, batch = [0], 0, 0
    while lo < n:
        chunk = size(n - lo, batch)
        for _ in range(threads):
            lo = min(lo + chunk, n)
            bounds.append(lo)
            if lo == n:
                break
        batch += 1
    return bounds


class Taskloop(OpenMPRuntime, FullBarriers):
    """OpenMP taskloop: the master creates contiguous-range tasks one by one; workers take them in order.

    The queue is two lines: the master publishes task i by storing i + 1 on the tail
    line; a worker claims the next task with a fetch-and-add on the head line and, if
    that task is not published yet, spins on the tail line until it is. One shared queue
    and one task per worker by default is libgomp's taskloop (GOMP_taskloop).
    """

    COUNTERS = STEALING_COUNTERS
    UNSUPPORTED = {"llvm": "libomp's taskloop, whose tasks go to the creating thread's deque for the "
                           "others to steal, is not modeled (this taskloop is libgomp's: one queue the "
                           "master fills)"}

    name = "taskloop"
    summary = "OpenMP taskloop: master creates num_tasks tasks, workers take them from a queue"
    PARAMS = {
        "num_tasks": Param("num_tasks", int, None, lambda v: v >= 1, ">= 1",
                           help="tasks to create (default: one per worker; never more than iterations)"),
        "barrier": OMP_BARRIER_PARAM,
        "runtime": RUNTIME_PARAM,
    }

    def min_chunks(self, n, threads):
        return min(self.params["num_tasks"] or threads, n)  # one chunk per task

    def prepare(self, sim, index):
        n = sim.loops[index].n
        self.tasks = min(self.params["num_tasks"] or sim.threads, n)
        self.head = sim.memory.line(f"loop[{index}].tasks.head", 0, home=0)
        self.tail = sim.memory.line(f"loop[{index}].tasks.tail", 0, home=0)

    def share(self, sim, w, index):
        n, tasks, mem, env = sim.loops[index].n, self.tasks, sim.memory, sim.env
        if w == 0:
            # Creation is sequential: each task costs task_create, then a store that publishes it.
            create, t = sim.costs["task_create"], env.now
            for i in range(tasks):
                yield sim.wait(0, "schedule", t + create)
                t = mem.store(self.tail, 0, i + 1)
            sim.counters["tasks_created"] += tasks
            yield sim.wait(0, "schedule", t)
        while True:
            i, t = mem.fetch_add(self.head, w, 1)
            yield sim.wait(w, "schedule", t)
            if i >= tasks:
                return
            sim.begin(w, "schedule")
            yield mem.spin_until(self.tail, w, lambda published, i=i: published > i)
            sim.end(w)
            lo, hi = block(n, tasks, i)
            sim.counters["chunks"] += 1
            yield sim.until(sim.run_chunk(w, index, lo, hi, env.now))
