"""Chunked work stealing over per-thread contiguous queues, the base of iCh's adaptive chunks.

Each worker's queue is a range [begin, end) of unstarted iterations on a line homed at
its core, guarded by a lock line of its own. Every critical section (own take, steal
attempt) is issued in one step and folded into one timeout: the lock is one atomic, the
rest is chained after it (``at=``), and the unlock store keeps the lock line busy until
then, so whoever comes next queues behind the holder (a queued lock) and pays the line
transfer.

Termination: a thread whose queue is empty never gets work again except by stealing,
and the owner always finishes its own queue, so when thieves stop decides only how
well the load is balanced, never whether every iteration runs. A thief stops after
P - 1 consecutive failed random attempts followed by one sweep over every other queue
in order (starting after its own) in which every attempt fails too; any success resets
the count. That costs 2(P - 1) failed attempts per thread at the end of a loop and no
shared state, and 2P(P - 1) attempts in all, each an event: at thousands of threads the end of
a loop costs more events than its chunks. ``give_up=K`` is the other choice, which no
publication describes either: a thief stops after K failed attempts in a row, every victim
drawn at random (no sweep), so a loop's end costs at most K P attempts.
"""

from __future__ import annotations

from functools import partial

from .. import memory as memory_module
from ..chunklog import pack_record
from ..spec import Param
from .base import STEALING_COUNTERS, block
from .static import BARRIER_PARAM, FullBarriers


def give_up_after(threads: int) -> int:
    """Failed steal attempts in a row after which a thief stops: P - 1 random ones, then a sweep (``attempt``)."""
    return 2 * (threads - 1)


GIVE_UP_PARAM = Param("give_up", int, None, lambda v: v >= 1, ">= 1",
                      help="failed steal attempts in a row after which a thief stops, every victim drawn at random "
                           "(default: P - 1 random ones, then a sweep of every other queue: 2(P - 1))")


class Stealing(FullBarriers):
    """Per-thread queues of contiguous blocks: owners take fixed chunks, thieves take half the rest."""

    COUNTERS = STEALING_COUNTERS

    name = "stealing"
    summary = "chunked work stealing: per-thread blocks, random victims lose the back half"
    PARAMS = {"chunk": Param("chunk", int, 1, lambda v: v >= 1, ">= 1", help="iterations per chunk"),
              "give_up": GIVE_UP_PARAM, "barrier": BARRIER_PARAM}

    def setup(self, sim):
        super().setup(sim)
        mem, threads = sim.memory, sim.threads
        # A queue line holds (begin, end) plus what the policy publishes with it (``extra``).
        self.queue = [mem.line(f"queue[{w}]", (0, 0), home=w) for w in range(threads)]
        self.lock = [mem.line(f"queue[{w}].lock", 0, home=w) for w in range(threads)]

    def min_chunks(self, n, threads):
        # Chunks lie within the blocks dealt (a steal splits a range, never joins two); none passes ``chunk``.
        return max(min(n, threads), -(-n // self.params["chunk"]))

    def prepare(self, sim, index):
        super().prepare(sim, index)
        self.n = sim.loops[index].n

    def fork(self, sim, w):
        if w == 0:
            # The master deals every queue its block before the fork barrier releases anyone,
            # so no thief can find a queue that is not filled yet.
            yield sim.wait(0, "schedule", self.deal(sim, sim.env.now))
        yield from super().fork(sim, w)

    def deal(self, sim, t):
        """Master: store each worker's block into its queue, starting at ``t``; return when done."""
        for v in range(sim.threads):
            t = sim.memory.store(self.queue[v], 0, block(self.n, sim.threads, v) + self.extra(v), at=t)
        return t

    # -- policy: what iCh changes ---------------------------------------------------------------
    def extra(self, w):
        """Per-thread state published on the queue line with the bounds (none here)."""
        return ()

    def chunk_size(self, w, left):
        """Iterations the owner takes from a queue with ``left`` unstarted."""
        return self.params["chunk"]

    def give_up(self, threads):
        """(failed attempts in a row after which a thief stops, how many of them draw their victims at random)."""
        given = self.params.get("give_up")
        return (give_up_after(threads), threads - 1) if given is None else (given, given)

    def least(self, w):
        """The smallest half worth stealing (here one chunk): a steal that would get less fails."""
        return self.params["chunk"]

    def report(self, sim, w, size):
        """Called when a chunk of ``size`` iterations ends: when the worker may issue its next operation."""
        return sim.env.now

    def stolen(self, w, victim):
        """A successful steal read ``victim`` (the victim's queue line value)."""

    def adaptive(self, sim, w):
        """What the compiled steps need to run this policy's hooks themselves (None: they call them)."""
        return None

    def thief(self, sim, w):
        """What the compiled steps need to take ``attempt`` themselves, drawing the victims from the run's
        generator as it would (None: they call it, as where an atomic can lose its reservation)."""
        mem, policy = sim.memory, type(self)
        if mem.reservations or policy.attempt is not Stealing.attempt or policy.steal is not Stealing.steal:
            return None
        least = self.params["chunk"] if policy.least is Stealing.least else self.least
        return (sim.rng.bit_generator, self.lock, self.queue, mem.transfers_to(w),
                mem.latencies_to(w), least, partial(self.split, sim, w), mem._notify, self.give_up(sim.threads)[1])

    # -- the algorithm --------------------------------------------------------------------------
    def share(self, sim, w, index):
        yield from sim.drive(self.steps(sim, w, index))

    def steps(self, sim, w, index):
        """Worker ``w``'s chunks and steal attempts, as ``Simulation.drive`` runs them.

        With the take issued inline, the compiled copy of ``python_steps`` takes them when it
        is built (``simsched._speedups``); it calls the policy's hooks, ``take`` and ``attempt``,
        and for a chunk with data or noise ``Simulation.chunk_time``, as the Python loop does.
        """
        speedups = memory_module.speedups
        if not (memory_module.INLINE and speedups is not None):
            return self.python_steps(sim, w, index)
        mem, policy = sim.memory, type(self)
        sink = sim.inline_chunks(w, index)
        fixed = self.params["chunk"] if policy.chunk_size is Stealing.chunk_size else 0
        extra = self.extra if policy.extra is not Stealing.extra else None
        report = partial(self.report, sim, w) if policy.report is not Stealing.report else None
        return speedups.steals(sim.env, w, index, sim.threads, self.give_up(sim.threads)[0], self.lock[w],
                               self.queue[w], mem.atomic_ns, mem.store_ns, fixed, self.chunk_size, extra, report,
                               partial(self.take, sim, w), partial(self.attempt, sim, w), sim.charged,
                               partial(self.finished, sim, w), sim.time["schedule"], sim.time["compute"],
                               sim.loops[index].prefix, sim.costs["chunk"], sink.pending, sink.slow, sink.flush,
                               sink.full, sink.mark, self.adaptive(sim, w), self.thief(sim, w),
                               # an attempt's time charged on charged's own tables, unless it keeps a timeline
                               (sim.time["steal"], sim.last) if sim.segments is None else None,
                               None if sink.plain else sim.chunk_time)

    def python_steps(self, sim, w, index):
        """``steps`` in Python."""
        env, threads = sim.env, sim.threads
        # Chunks are recorded inline, as record_chunk records them and in the same order: this loop is the
        # family's hot path (as index_claims is the self-scheduling one's).
        prefix, slow, plain, pending, full, flush, mark = sim.inline_chunks(w, index)
        dispatch, scheduling, computing = sim.costs["chunk"], sim.time["schedule"], sim.time["compute"]
        # take() inline while no other core has touched this worker's lock and queue lines since it
        # last did: its exchange, read and two stores then cost no transfer, change no holder and
        # (the worker holding both lines) lose no reservation.
        mem, inline = sim.memory, memory_module.INLINE
        lock, queue, atomic_ns, store_ns = self.lock[w], self.queue[w], mem.atomic_ns, mem.store_ns
        chunk_size, extra = self.chunk_size, self.extra
        # The policy hooks a subclass leaves as they are here need no call per chunk.
        policy = type(self)
        reports = not inline or policy.report is not Stealing.report
        fixed = self.params["chunk"] if policy.chunk_size is Stealing.chunk_size else 0
        publishes = policy.extra is not Stealing.extra
        own_takes = 0
        give_up = self.give_up(threads)[0]
        chunks = attempts = steals = failures = 0
        size = 0                        # the chunk that just ended (0: none)
        empty = False
        while True:
            t = self.report(sim, w, size) if size and reports else env.clock
            size = 0
            if not empty:
                if (inline and lock.holder == w and queue.holder == w and len(lock.sharers) == 1
                        and len(queue.sharers) == 1 and not lock.spinners and not queue.spinners):
                    own_takes += 1
                    free = lock.free_at
                    t = (free if free > t else t) + atomic_ns
                    free = queue.free_at
                    if free > t:
                        t = free
                    value = queue.value
                    lo = hi = value[0]
                    end = value[1]
                    if lo < end:
                        hi = lo + (fixed or chunk_size(w, end - lo))
                        if hi > end:
                            hi = end
                        queue.value = (hi, end, *extra(w)) if publishes else (hi, end)
                        queue.free_at = queue.written_at = t
                        t += store_ns
                    lock.value = 0
                    lock.free_at = lock.written_at = t
                    t += store_ns
                else:
                    lo, hi, t = self.take(sim, w, t)
                if hi > lo:
                    chunks += 1
                    size = hi - lo
                    now, start = env.clock, t + dispatch
                    work = (prefix(hi) - prefix(lo)) * slow if plain else sim.chunk_time(w, index, lo, hi, start)
                    end = start + work
                    pending += pack_record(w, index, lo, hi, start, end)
                    if len(pending) >= full:
                        flush()
                    scheduling[w] += start - now
                    computing[w] += work
                    if mark is not None and start > now:
                        mark((w, "schedule", now, start))
                    yield end
                    continue
                empty = True
            if threads == 1:
                break
            # One steal attempt, folded into the same wait as the failed take before it, if any.
            attempts += 1
            got, t = self.attempt(sim, w, failures, t)
            if got:
                steals += 1
                failures = 0
                empty = False
            else:
                failures += 1
            yield sim.charged(w, "steal", t)
            if failures == give_up:
                break
        return self.finished(sim, w, own_takes, 0, chunks, attempts, steals, t)

    def attempt(self, sim, w, failures, at):
        """One steal attempt at ``at`` after ``failures`` failed ones in a row: (iterations stolen, when done).

        The first P - 1 victims in a row are drawn at random; then each other queue in turn (with
        ``give_up``, every victim at random).
        """
        threads = sim.threads
        patience = self.give_up(threads)[1]
        if failures < patience:
            v = int(sim.rng.integers(threads - 1))
            v += v >= w
        else:
            v = (w + 1 + failures - patience) % threads
        return self.steal(sim, w, v, at)

    def finished(self, sim, w, atomics, transfers, chunks, attempts, steals, t):
        """Account a worker's loop once it leaves it at ``t``: ``(when, None)`` for ``drive``.

        ``atomics`` and ``transfers`` are those the loop issued inline, not through ``Memory``.
        """
        sim.memory.atomics += atomics
        sim.memory.transfers += transfers
        counters = sim.counters
        counters["chunks"] += chunks
        counters["steal_attempts"] += attempts
        counters["steals"] += steals
        return sim.charged(w, "schedule", t), None     # a lone worker's last look at its empty queue

    def take(self, sim, w, at):
        """Lock the own queue at ``at``, take a chunk off its front, unlock: (lo, hi, time)."""
        mem = sim.memory
        lock, queue = self.lock[w], self.queue[w]
        _, t = mem.exchange(lock, w, 1, at)   # local and cheap unless a thief held the lock last
        value, t = mem.read(queue, w, t)      # a transfer only if a thief wrote the bounds
        begin, end = value[0], value[1]
        hi = begin
        if begin < end:
            hi = begin + self.chunk_size(w, end - begin)
            if hi > end:
                hi = end
            t = mem.store(queue, w, (hi, end, *self.extra(w)), t)
        return begin, hi, mem.store(lock, w, 0, t)   # lo == hi: the queue was empty

    def steal(self, sim, w, v, at):
        """One attempt at ``at`` on victim ``v``: (iterations stolen, time the thief is done)."""
        mem = sim.memory
        lock, queue = self.lock[v], self.queue[v]
        _, t = mem.exchange(lock, w, 1, at=at)
        value, t = mem.read(queue, w, at=t)      # a transfer from the victim
        begin, end = value[0], value[1]
        half = (end - begin) // 2           # the victim's running chunk is already out of its queue
        if half < self.least(w):
            return 0, mem.store(lock, w, 0, at=t)
        return self.split(sim, w, v, value, half, t)

    def split(self, sim, w, v, value, half, t):
        """A steal from ``v`` whose queue held ``value`` at ``t``, with its lock held: take its back ``half``."""
        mem = sim.memory
        lock, queue = self.lock[v], self.queue[v]
        begin, end = value[0], value[1]
        t = mem.store(queue, w, (begin, end - half) + value[2:], at=t)
        t = mem.store(lock, w, 0, at=t)
        self.stolen(w, value)
        # The thief's own queue is empty, and stays empty to everyone until this store lands
        # (later reads of the line wait for it), so publishing the stolen range needs no lock.
        t = mem.store(self.queue[w], w, (end - half, end) + self.extra(w), at=t)
        return half, t + sim.costs["steal"]
