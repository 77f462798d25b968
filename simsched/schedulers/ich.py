"""iCh's adaptive chunk self-scheduling: chunked work stealing whose chunk size each thread adapts."""

from __future__ import annotations

from ..spec import Param
from .base import STEALING_COUNTERS
from .static import BARRIER_PARAM
from .stealing import GIVE_UP_PARAM, Stealing


class ICh(Stealing):
    """Work stealing with chunks of ``|q|/d`` (``|q|``: the iterations left in its queue), each thread adapting d
    to its progress against the mean."""

    name = "ich"
    summary = "iCh: stealing with chunk |q|/d, d adapted against mean progress (eps)"
    COUNTERS = STEALING_COUNTERS + ("d_halved", "d_doubled")
    PARAMS = {"eps": Param("eps", float, 0.33, lambda v: v > 0, "> 0",
                           help="band around the mean progress within which d is left alone"),
              # BL classify after a chunk against the mean of every thread's k, and do not say whether each
              # classification reads the counts afresh: 1 (every chunk) is the plain reading of their text.
              "mu_every": Param("mu_every", int, 1, lambda v: v >= 1, ">= 1",
                                help="a worker reads every thread's k and classifies itself after every "
                                     "mu_every-th chunk of its own (1: after each chunk)"),
              "give_up": GIVE_UP_PARAM, "barrier": BARRIER_PARAM}

    def min_chunks(self, n, threads):
        return min(n, threads)  # at least one chunk within each block dealt; their sizes adapt

    def setup(self, sim):
        super().setup(sim)
        # Each thread's k on a (padded) line of its own, homed on its core: the owner stores it after each
        # chunk, and whoever computes the mean progress mu = sum_j k_j / P reads all P of them.
        self.counter = [sim.memory.line(f"ich.k[{w}]", 0, home=w) for w in range(sim.threads)]
        self.threads, self.eps, self.every = sim.threads, self.params["eps"], self.params["mu_every"]
        # Misses a core keeps in flight (its L1 line fill buffers); a machine that describes no caches gives
        # none, and its reads go one after another.
        hierarchy = sim.machine.hierarchy
        self.overlap = hierarchy.outstanding_misses if hierarchy is not None else 1

    def prepare(self, sim, index):
        super().prepare(sim, index)
        threads = sim.threads
        self.k = [0] * threads          # iterations completed (on the thread's counter and queue lines)
        self.d = [threads] * threads    # divisor: first chunk |q|/P, about N/P^2
        self.since = [0] * threads      # chunks since the thread last read the counters

    def deal(self, sim, t):
        # The master zeroes every counter with the queues, before the fork barrier lets anyone read them.
        t = super().deal(sim, t)
        for line in self.counter:
            t = sim.memory.store(line, 0, 0, at=t)
        return t

    def extra(self, w):
        return (self.k[w], self.d[w])

    def chunk_size(self, w, left):
        return max(1, left // self.d[w])

    def adaptive(self, sim, w):
        mem = sim.memory
        policy = type(self)
        # The compiled policy is ICh's own hooks.
        if (policy.report, policy.chunk_size, policy.extra) != (ICh.report, ICh.chunk_size, ICh.extra):
            return None
        return (self.counter, self.k, self.d, self.since, sim.counters, self.eps, self.every, self.n,
                self.overlap, mem.transfers_to(w), mem.latencies_to(w), mem._notify)

    def least(self, w):
        return 1

    def report(self, sim, w, size):
        mem = sim.memory
        k = self.k[w] = self.k[w] + size
        # A plain store to the thread's own line: a transfer falls on the next reader, not on the owner.
        t = mem.store(self.counter[w], w, k, sim.env.clock)
        self.since[w] += 1
        if self.since[w] < self.every:
            return t
        self.since[w] = 0
        # Each line another core wrote since this thread last read it costs a transfer from that core; the
        # P loads are independent, so the core overlaps their misses as far as its fill buffers go.
        values, t = mem.read_all(self.counter, w, t, self.overlap)
        mu = sum(values) / self.threads
        delta = self.eps * mu
        if k < mu - delta:              # slow: bigger chunks, less time scheduling
            self.d[w] = max(1, self.d[w] // 2)
            sim.counters["d_halved"] += 1
        elif k > mu + delta:            # fast: smaller chunks, more left to steal
            # Beyond n no chunk can get smaller, so the cap changes nothing but the int's size.
            self.d[w] = min(2 * self.d[w], self.n)
            sim.counters["d_doubled"] += 1
        return t

    def stolen(self, w, victim):
        # The victim's k and d travel on its queue line, which the thief just read.
        # Its counter line gets the averaged k with the store after its next chunk.
        self.k[w] = (self.k[w] + victim[2]) // 2
        self.d[w] = max(1, (self.d[w] + victim[3]) // 2)
        # Its next chunk, |stolen| // d, is at most what it stole.
