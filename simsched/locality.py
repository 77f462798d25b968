"""Data locality: where each iteration's data sits in the memory hierarchy, and what a chunk pays to reach it.

An iteration j of a loop with a :class:`Footprint` touches ``bytes[j]`` bytes of a data block
of its own, block j of the loop's data set; loops of a program that name the same data set
touch the same blocks. :class:`DataState` keeps, per block, the core whose caches last held
it, when (in bytes moved through each cache since), and its home NUMA node. A chunk's memory
time is worked out when the chunk starts, for all its iterations at once with NumPy (or, for a
chunk of a few iterations, one iteration at a time in plain floats, with the same operations in
the same order and so the same result to the bit: NumPy's fixed cost per call would be most of
the chunk's cost):

* **Residency by reuse distance.** Each cache instance (a core's private level, a socket's
  shared level) counts the bytes that have passed through it. A block last brought in when
  the count was ``stamp`` has seen ``count - stamp`` bytes go through since; under LRU its
  most recent ``size - (count - stamp)`` bytes are still there, so that fraction of it is
  served from that level (clipped to [0, 1], and at least what an inner level holds, since
  the levels are inclusive). The rest comes from its home node's DRAM.
* **Lines, per chunk.** A data set's blocks lie one after another in memory (block j's bytes
  follow block j-1's), so a chunk brings in the distinct cache lines of its byte range: each
  iteration counts the lines its bytes touch but the one it shares with the chunk's previous
  bytes, which that iteration already brought in. On 64-byte lines, 64 iterations of 1 byte
  in one chunk cost one line, and a line each when every iteration is a chunk of its own;
  blocks of whole lines from line-aligned offsets cost their own lines either way. An
  iteration's accesses to a line it did not bring in are among its other accesses (below).
* **Where from.** A line in this core's caches, or this socket's shared level, costs that
  level's latency; a line in another core's private cache of the same socket is served
  through the shared level; a line in another socket's shared level, or in another node's
  DRAM, costs the remote latency for that many socket hops.
* **Access pattern.** ``stream`` is prefetched: a line costs line / bandwidth. ``stride``
  (13 elements modulo the block, which defeats the prefetcher) issues independent misses:
  a line costs max(latency / outstanding misses, line / bandwidth). ``random`` is a chain of
  dependent accesses: a line costs its full latency. An iteration's other element accesses
  (8-byte elements, the rest of each line's) are served by the innermost level its own
  block fits in (for ``stream`` they ride on the line already fetched).
* **Jitter.** A chunk's memory time is scaled by 1 + ``jitter_cv`` x z (z standard normal
  from the run's generator, clipped at 3): real memory times vary a little, which is what
  reorders equal chunks between loops under self-scheduling.
* **Shared bandwidth.** Chunks reading from one node's DRAM, or from one socket's shared
  cache, at the same time share its ``shared_bandwidth_gbs``: a chunk gets min(per-core
  bandwidth, shared / readers), with the readers counted when it starts.
* **Loaded latency.** A chunk's DRAM misses also wait behind the misses the chunks reading
  its node (and, remote, its socket link) keep in flight when it starts (``loaded.py``).

Running a chunk moves its blocks into the running core's caches (a write moves the line
there, invalidating other copies) and gives untouched blocks their home: the running core's
node under ``first-touch`` (so pages follow the schedule of the first loop that touches them,
as they follow a parallel initialisation loop's), block j on node j mod nodes under
``interleave``, or the master's node under ``master`` (a serial loader wrote them all).

A footprint may also :class:`Gather` from one read-only array that all iterations share (a
sparse product's x, a search's visited flags): reads at random places, so what each level of
the reading core's caches serves follows from the array's size against the level's, and the
rest comes from the DRAM of the nodes its pages sit on. Its reads are independent of each
other (their addresses come from the iteration's own data), so they overlap as many as the
core keeps misses in flight. It is charged per chunk, for all the chunk's reads at once.
"""

from __future__ import annotations

import copy
import math
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from .errors import SimschedError
from .loaded import Queueing

ELEMENT_BYTES = 8  # the kernels touch 8-byte doubles
PATTERNS = ("stride", "stream", "random")
PLACEMENTS = ("first-touch", "interleave", "master")
DRAM_COUNTERS = ("local_dram", "remote_dram")
# Chunks of up to this many iterations are worked out per iteration in plain floats (DataState._few), larger
# ones with NumPy: NumPy's path costs about the same for 1 to 128 iterations, the plain one grows by about
# 10 us an iteration, and they cross near 40 (benchmarks/bench_locality.py, docs/performance.md).
SCALAR_ITERATIONS = 32


@contextmanager
def scalar_iterations(limit: int):
    """Within it, chunks of up to ``limit`` iterations take the per-iteration path (0: every chunk NumPy's)."""
    global SCALAR_ITERATIONS
    kept, SCALAR_ITERATIONS = SCALAR_ITERATIONS, limit
    try:
        yield
    finally:
        SCALAR_ITERATIONS = kept


def _sum(values: list) -> float:
    """The sum of floats in the order NumPy's pairwise summation adds them (blocks of up to 128 elements,
    each with 8 running sums), so that plain lists sum to the bit what NumPy arrays of them sum to."""
    n = len(values)
    if n < 8:
        total = 0.0
        for value in values:
            total += value
        return total
    if n <= 128:
        sums = values[:8]
        whole = n - n % 8
        for i in range(8, whole, 8):
            for k in range(8):
                sums[k] += values[i + k]
        total = ((sums[0] + sums[1]) + (sums[2] + sums[3])) + ((sums[4] + sums[5]) + (sums[6] + sums[7]))
        for value in values[whole:]:
            total += value
        return total
    half = n // 2
    half -= half % 8
    return _sum(values[:half]) + _sum(values[half:])


def _access(latency: float, bandwidth_gbs: float, pattern: str, nbytes: int, overlap) -> float:
    """``DataState.access`` for one line (or element) in plain floats."""
    transfer = nbytes / bandwidth_gbs
    if pattern == "stream":
        return transfer
    return max(latency / (overlap if pattern == "stride" else 1), transfer)


@dataclass(eq=False)
class Gather:
    """Reads at random places of a read-only array that all iterations share: ``reads[j]`` by iteration j."""

    reads: np.ndarray
    size: int                       # bytes of the array
    element: int = ELEMENT_BYTES    # bytes of one read
    name: str = "shared"            # the array: gathers naming the same one read the same array

    def __post_init__(self):
        reads = np.asarray(self.reads)
        whole = not reads.size or np.issubdtype(reads.dtype, np.integer)
        if reads.ndim != 1 or not whole or np.any(reads < 0):
            raise SimschedError("a gather needs a 1-D array of whole numbers >= 0 of reads per iteration")
        self.reads = reads.astype(np.int64)
        for key in ("size", "element"):
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise SimschedError(f"a gather's {key} must be a whole number of bytes >= 1, got {value!r}")


@dataclass(eq=False)
class Footprint:
    """The data a loop's iterations touch: bytes per iteration, how they are accessed, and where pages live."""

    bytes: np.ndarray
    pattern: str = "stride"
    placement: str = "first-touch"
    data: str = "data"
    # Reads of an array all iterations share, besides each iteration's own bytes (None: none).
    gather: Gather | None = None
    # A footprint the workload gives unasked: left out, not refused, where the data model does not apply.
    optional: bool = False

    def __post_init__(self):
        values = np.asarray(self.bytes)
        if values.ndim != 1:
            raise SimschedError(f"a footprint needs a 1-D array of bytes per iteration, got shape {values.shape}")
        if values.size and not np.issubdtype(values.dtype, np.integer):
            if not np.all(np.isfinite(values)) or np.any(values != np.round(values)):
                raise SimschedError("bytes per iteration must be whole numbers")
        if np.any(values < 0):
            raise SimschedError("bytes per iteration must be >= 0")
        self.bytes = values.astype(np.int64)
        if self.pattern not in PATTERNS:
            raise SimschedError(f"unknown access pattern {self.pattern!r} (known: {', '.join(PATTERNS)})")
        if self.placement not in PLACEMENTS:
            raise SimschedError(f"unknown page placement {self.placement!r} (known: {', '.join(PLACEMENTS)})")
        if self.gather is not None and self.gather.reads.size != values.size:
            raise SimschedError(f"a footprint of {values.size} iterations needs {values.size} gather counts, "
                                f"got {self.gather.reads.size}")

    @property
    def total(self) -> int:
        return int(self.bytes.sum())


def only_optional(loops) -> bool:
    """Whether every footprint of these loops is one its workload gave unasked (True when there is none)."""
    return all(loop.data is None or loop.data.optional for loop in loops)


def without_optional(loops) -> list:
    """The loops, those whose footprint their workload gave unasked replaced by copies without it."""
    kept = []
    for loop in loops:
        if loop.data is not None and loop.data.optional:
            loop = copy.copy(loop)
            loop.data = None
        kept.append(loop)
    return kept


def counter_names(hierarchy) -> tuple[str, ...]:
    """The served-by counters a machine's hierarchy reports, innermost first (cache lines served)."""
    names = []
    for level in hierarchy.levels:
        names.append(f"{level.name}_hits")
        if level.shared_by == "socket":
            names.append(f"remote_{level.name}_hits")
    return tuple(names) + DRAM_COUNTERS


class Readers:
    """The chunks reading one shared resource (a node's DRAM, a socket's shared cache, a socket link): each
    from its start to its end, with what it demands of the resource meanwhile (GB/s, misses in flight).

    A worker may record chunks ahead of the simulation clock (a static block's chunks, back to
    back), so readers are counted at a chunk's own start and forgotten only once the clock has
    passed their end.
    """

    def __init__(self):
        self.spans: list[tuple[float, float, float, float]] = []
        self.soonest = math.inf  # the earliest end of a span: until the clock reaches it, none is dropped

    def forget(self, now: float) -> None:
        """Drop the readers that ended by ``now`` (no chunk starts before the clock)."""
        if self.soonest <= now:
            self.spans = [span for span in self.spans if span[1] > now]
            self.soonest = min((span[1] for span in self.spans), default=math.inf)

    def count(self, at: float) -> int:
        return sum(1 for span in self.spans if span[0] <= at < span[1])

    def load(self, at: float) -> tuple[float, float]:
        """The GB/s and the misses in flight that the readers at ``at`` demand together."""
        gbs = in_flight = 0.0
        for start, end, rate, misses in self.spans:
            if start <= at < end:
                gbs += rate
                in_flight += misses
        return gbs, in_flight

    def add(self, start: float, end: float, gbs: float = 0.0, in_flight: float = 0.0) -> None:
        self.spans.append((start, end, gbs, in_flight))
        self.soonest = min(self.soonest, end)


class Blocks:
    """One data set's blocks: the core that last held each, its stamp in each cache level, and its home node."""

    def __init__(self, n: int, levels: int, placement: str, nodes: int, master: int = 0):
        self.holder = np.full(n, -1, dtype=np.int64)
        self.stamp = np.zeros((levels, n))
        self.home = np.full(n, -1, dtype=np.int64)
        if placement == "interleave":
            self.home[:] = np.arange(n) % nodes
        elif placement == "master":
            self.home[:] = master


class DataState:
    """The locality model of one run: the hierarchy, every data set's blocks, and the bytes through each cache."""

    def __init__(self, machine, cores: list[int], loops, rng: np.random.Generator | None = None):
        hierarchy = machine.hierarchy
        if hierarchy is None:
            raise SimschedError(f"machine {machine.name} describes no memory hierarchy ([cache.*] and [dram]); "
                                "workloads with bytes= or data=1 need one")
        self.h = hierarchy
        self.cores = np.asarray(cores, dtype=np.int64)
        per = machine.cores_per_socket
        self.sockets = machine.sockets
        self.socket_of_worker = self.cores // per
        self.master = int(self.socket_of_worker[0])  # the node a serial loader (the master, worker 0) fills
        self.line = hierarchy.line_bytes
        levels = hierarchy.levels
        # Which cache instance of each level a worker uses: its core for private levels, its socket for shared ones.
        self.instance = [self.cores if lv.shared_by == "core" else self.socket_of_worker for lv in levels]
        # Bytes through each instance of each level so far (plain floats: most chunks read or add one at a time).
        self.through = [[0.0] * (machine.cores if lv.shared_by == "core" else machine.sockets) for lv in levels]
        self.shared = next((i for i, lv in enumerate(levels) if lv.shared_by == "socket"), None)
        # Who reads each shared resource now: every node's DRAM ("dram") and every socket's shared level (its index).
        self.readers = {"dram": [Readers() for _ in range(self.sockets)]}
        for i, level in enumerate(levels):
            if level.shared_by == "socket" and level.shared_bandwidth_gbs:
                self.readers[i] = [Readers() for _ in range(self.sockets)]
        # What makes a miss wait behind the others' (None: nothing does); the links ("link") are read from a
        # home node by a socket, instance home x sockets + socket.
        self.queueing = Queueing.of(hierarchy)
        if self.queueing is not None and self.queueing.link_gbs:
            self.readers["link"] = [Readers() for _ in range(self.sockets * self.sockets)]
        self.counters = dict.fromkeys(counter_names(hierarchy), 0.0)
        # The same tables as plain lists, for the per-iteration path of small chunks (_few).
        self.every_reader = [readers for resource in self.readers.values() for readers in resource]
        self.socket_list = self.socket_of_worker.tolist()
        self.instance_list = [instance.tolist() for instance in self.instance]
        self.hops_list = hierarchy.socket_hops.tolist()
        self.overlaps: dict[float, float] = {}  # a stride's misses in flight by block size (_overlap)
        # How each level serves a line another core last held (see chunk): "shared" (it is the socket's level),
        # "private" (through the socket's shared level), "alone" (from memory: there is no shared level).
        self.kinds = ["shared" if lv.shared_by == "socket" else "private" if self.shared is not None else "alone"
                      for lv in levels]
        # The counters each level's lines go to, as chunk adds them: served here, by the other instance (the
        # shared level's, or DRAM with none), by another socket's shared level (None: no such thing).
        source = levels[self.shared].name if self.shared is not None else None
        self.tallies = [(f"{lv.name}_hits", f"remote_{lv.name}_hits", None) if kind == "shared"
                        else (f"{lv.name}_hits", f"{source}_hits", f"remote_{source}_hits") if kind == "private"
                        else (f"{lv.name}_hits", "local_dram", None) for lv, kind in zip(levels, self.kinds)]
        # Each level's latency from so many socket hops away (``_far``), by hop count.
        hops = range(int(hierarchy.socket_hops.max()) + 1)
        self.far = [[lv.remote_latency_ns[max(k, 1) - 1] if lv.remote_latency_ns else lv.latency_ns for k in hops]
                    for lv in levels]
        self.blocks: dict[str, Blocks] = {}
        self.plans: dict[tuple, dict] = {}  # what a read of each shared array costs each socket (_gather_plan)
        self.offsets: dict[Footprint, np.ndarray] = {}  # where each footprint's blocks start (_offsets)
        # The run's generator, for the jitter of memory times (none: exact times, as for a sequential baseline).
        self.rng = rng
        self.check(machine, loops)

    def check(self, machine, loops) -> None:
        """Refuse data sets whose loops disagree on their size, or that do not fit in the machine's memory."""
        sizes: dict[str, tuple[int, int, str]] = {}
        shared: dict[str, int] = {}  # the bytes of each array that gathers read
        for loop in loops:
            fp = loop.data
            if fp is None:
                continue
            if fp.data in sizes and sizes[fp.data][0] != loop.n:
                raise SimschedError(f"loops over data {fp.data!r} have {sizes[fp.data][0]} and {loop.n} iterations; "
                                    "give loops over different data different names (data=NAME)")
            if fp.data in sizes and sizes[fp.data][2] != fp.placement:
                raise SimschedError(f"loops over data {fp.data!r} ask for different page placements")
            largest = max(sizes.get(fp.data, (0, 0, ""))[1], fp.total)
            sizes[fp.data] = (loop.n, largest, fp.placement)
            if fp.gather is not None:
                shared[fp.gather.name] = max(shared.get(fp.gather.name, 0), fp.gather.size)
        memory = self.h.dram.size_bytes * self.sockets
        total = sum(size for _, size, _ in sizes.values()) + sum(shared.values())
        if total > memory:
            raise SimschedError(f"the workload's data ({total / 2**30:.3g} GiB) does not fit in the "
                                f"{memory / 2**30:.3g} GiB of DRAM of machine {machine.name}")
        for name, (n, _, placement) in sizes.items():
            self.blocks[name] = Blocks(n, len(self.h.levels), placement, self.sockets, self.master)

    def access(self, latency, bandwidth_gbs, pattern: str, nbytes: int, overlap=1):
        """ns to fetch ``nbytes`` (a line, or one element of it) from a level with this latency and bandwidth.

        ``overlap``: the misses in flight a stride gets (for each iteration, or one for all).
        """
        transfer = nbytes / bandwidth_gbs
        if pattern == "stream":
            return transfer
        return np.maximum(np.asarray(latency) / (overlap if pattern == "stride" else 1), transfer)

    def remote(self, latencies: tuple[float, ...], hops: np.ndarray) -> np.ndarray:
        """The remote latency for each hop count (0 hops: the caller's local value applies)."""
        return np.asarray(latencies)[np.maximum(hops, 1) - 1]

    def chunk(self, worker: int, fp: Footprint, lo: int, hi: int, start: float, now: float | None = None) -> float:
        """The memory time of iterations [lo, hi) run by ``worker`` from ``start``; moves their data there.

        ``now`` is the simulation clock (default: ``start``), before which no chunk starts.
        Chunks of up to ``SCALAR_ITERATIONS`` iterations take the per-iteration path (``_few``),
        the others NumPy's: the same arithmetic in the same order, so the same time to the bit.
        """
        now = start if now is None else now
        for readers in self.every_reader:
            readers.forget(now)
        if hi - lo <= SCALAR_ITERATIONS:
            return self._few(worker, fp, lo, hi, start)
        blocks = self.blocks[fp.data]
        pattern, line = fp.pattern, self.line
        size = fp.bytes[lo:hi].astype(float)
        lines = self._lines(fp, lo, hi)
        overlap = self.h.stride_overlap(size)
        before = np.cumsum(size) - size  # this chunk's bytes ahead of each iteration
        holder = blocks.holder[lo:hi]
        seen = (holder >= 0) & (size > 0)
        holder = np.where(seen, holder, worker)
        socket = int(self.socket_of_worker[worker])
        holder_socket = self.socket_of_worker[holder]
        same_socket = holder_socket == socket
        hops = self.h.socket_hops[socket, holder_socket]
        time = np.zeros(hi - lo)
        inner = np.zeros(hi - lo)  # fraction of each block held by the levels already looked at
        reading = []  # (resource, instances) this chunk reads from, held until it ends
        for i, level in enumerate(self.h.levels):
            mine = self.instance[i][worker]
            theirs = self.instance[i][holder]
            local = theirs == mine
            distance = np.array(self.through[i])[theirs] - blocks.stamp[i, lo:hi] + np.where(local, before, 0.0)
            with np.errstate(divide="ignore", invalid="ignore"):
                held = np.where(seen, np.clip((level.size_bytes - distance) / size, 0.0, 1.0), 0.0)
            held = np.maximum(held, inner)  # inclusive levels: what an inner level holds, this one holds too
            part = (held - inner) * lines
            inner = held
            if not part.any():
                continue
            if level.shared_by == "socket":
                latency = np.where(local, level.latency_ns, self._far(level, hops))
                bandwidth = self._shared(i, level, start, holder_socket, part > 0, reading)
                self._count(level, part, local)
            elif self.shared is not None:
                # Another core's private copy comes through this socket's shared level, or the other socket's.
                source = self.h.levels[self.shared]
                latency = np.where(local, level.latency_ns, np.where(same_socket, source.latency_ns,
                                                                     self._far(source, hops)))
                bandwidth = np.where(local, level.bandwidth_gbs,
                                     self._shared(self.shared, source, start, holder_socket, (part > 0) & ~local,
                                                  reading))
                self.counters[f"{level.name}_hits"] += float(part[local].sum())
                self._count(source, part * ~local, same_socket)
            else:  # no shared level: the owner writes the line back and it comes from memory
                latency = np.where(local, level.latency_ns, self.h.dram.latency_ns)
                bandwidth = np.where(local, level.bandwidth_gbs, self.h.dram.bandwidth_gbs)
                self.counters[f"{level.name}_hits"] += float(part[local].sum())
                self.counters["local_dram"] += float(part[~local].sum())
            time += part * self.access(latency, bandwidth, pattern, line, overlap)
        home = blocks.home[lo:hi]
        if (home < 0).any():  # first touch: a page lands on the node of the core that writes it first
            home = np.where(home < 0, socket, home)
            blocks.home[lo:hi] = home
        dram = self.h.dram
        node_hops = self.h.socket_hops[socket, home]
        latency = np.where(node_hops == 0, dram.latency_ns,
                           self.remote(dram.remote_latency_ns, node_hops) if dram.remote_latency_ns else 0.0)
        from_dram = (1.0 - inner) * lines
        bandwidth = self._shared("dram", dram, start, home, from_dram > 0, reading)
        if self.queueing is not None:
            latency = latency + self._waiting(start, socket, home, from_dram, latency, pattern, overlap)
        time += from_dram * self.access(latency, bandwidth, pattern, line, overlap)
        self.counters["local_dram"] += float(from_dram[node_hops == 0].sum())
        self.counters["remote_dram"] += float(from_dram[node_hops > 0].sum())
        time += self._reuse(size, lines, pattern, latency, bandwidth, overlap)
        if fp.gather is not None:
            reads = fp.gather.reads[lo:hi]
            count = float(reads.sum())
            if count:
                time += reads * self._gather(worker, fp, count, start, reading)
        total = self._jitter(float(time.sum()))
        # The chunk's blocks now live in this core's caches, stamped in the order it touched them.
        blocks.holder[lo:hi] = worker
        moved = float(size.sum())
        for i in range(len(self.h.levels)):
            mine = self.instance[i][worker]
            blocks.stamp[i, lo:hi] = self.through[i][mine] + before + size
            self.through[i][mine] += moved
        demand = {}
        if self.queueing is not None:
            used = from_dram > 0
            lines_by_node = np.bincount(home[used], weights=from_dram[used], minlength=self.sockets)
            waiting = np.bincount(home[used], weights=(from_dram * latency)[used], minlength=self.sockets)
            demand = self._demand(total, socket, lines_by_node.tolist(), waiting.tolist())
        self._hold(reading, demand, start, start + total)
        return total

    def _few(self, worker: int, fp: Footprint, lo: int, hi: int, start: float) -> float:
        """``chunk`` for a few iterations, one at a time in plain floats, in NumPy's order of operations.

        Each iteration's time takes the NumPy path's steps in its order, and the counters and
        readers get the same additions in the same order (sums as NumPy's pairwise summation
        adds them: ``_sum``), so times and counters are the same to the bit; what it saves is
        NumPy's fixed cost per call, which is most of a small chunk's cost there.
        """
        h, line, pattern, dram = self.h, self.line, fp.pattern, self.h.dram
        levels, instances, through, kinds = h.levels, self.instance_list, self.through, self.kinds
        blocks = self.blocks[fp.data]
        socket = self.socket_list[worker]
        hops_from = self.hops_list[socket]
        mine = [instance[worker] for instance in instances]
        n = hi - lo
        sizes = [float(nbytes) for nbytes in fp.bytes[lo:hi].tolist()]
        points = self._offsets(fp)[lo:hi + 1].tolist()  # as _lines: the lines reached by each block's end
        first = points[0]
        reached = first // line
        last = blocks.holder[lo:hi].tolist()
        stamps = blocks.stamp[:, lo:hi].tolist()
        home = blocks.home[lo:hi].tolist()
        if home and min(home) < 0:  # first touch: a page lands on the node of the core that writes it first
            home = [socket if node < 0 else node for node in home]
            blocks.home[lo:hi] = home
        shares = {}  # each (resource, instance)'s bandwidth share: its readers do not change during the chunk
        # What each level serves, split as the NumPy path's counter sums split it, and the instances of a
        # shared level whose bandwidth it takes (its own, or for a private level the one it reads through).
        served = [([], [], []) for _ in levels]
        used = [[] for _ in levels]
        time, lines_of, overlap_of, before_of, latency, from_dram = [], [], [], [], [], []
        ahead = 0.0
        for j in range(n):
            size = sizes[j]
            end = points[j + 1]
            upto = -(-end // line) if end > first else reached
            lines = float(upto - reached)
            reached = upto
            overlap = self._overlap(size) if h.stride_misses else h.outstanding_misses
            ahead += size
            before = ahead - size  # this chunk's bytes ahead of the iteration
            seen = last[j] >= 0 and size > 0
            holder = last[j] if seen else worker
            holder_socket = self.socket_list[holder]
            same_socket = holder_socket == socket
            hops = hops_from[holder_socket]
            t = inner = 0.0
            for i, level in enumerate(levels):
                theirs = instances[i][holder]
                local = theirs == mine[i]
                held = 0.0
                if seen:
                    distance = through[i][theirs] - stamps[i][j] + (before if local else 0.0)
                    held = min(max((level.size_bytes - distance) / size, 0.0), 1.0)
                held = max(held, inner)
                part = (held - inner) * lines
                inner = held
                here, there, far_away = served[i]
                if kinds[i] == "shared":
                    (here if local else there).append(part)
                    if not part:
                        continue
                    level_latency = level.latency_ns if local else self.far[i][hops]
                    bandwidth = self._share(i, level, start, holder_socket, shares)
                    if part > 0:
                        used[i].append(holder_socket)
                elif kinds[i] == "private":
                    if local:
                        here.append(part)
                    (there if same_socket else far_away).append(0.0 if local else part)
                    if not part:
                        continue
                    if local:
                        level_latency, bandwidth = level.latency_ns, level.bandwidth_gbs
                    else:
                        source = levels[self.shared]
                        level_latency = source.latency_ns if same_socket else self.far[self.shared][hops]
                        bandwidth = self._share(self.shared, source, start, holder_socket, shares)
                        if part > 0:
                            used[i].append(holder_socket)
                else:
                    (here if local else there).append(part)
                    if not part:
                        continue
                    level_latency = level.latency_ns if local else dram.latency_ns
                    bandwidth = level.bandwidth_gbs if local else dram.bandwidth_gbs
                t += part * _access(level_latency, bandwidth, pattern, line, overlap)
            time.append(t)
            lines_of.append(lines)
            overlap_of.append(overlap)
            before_of.append(before)
            far = hops_from[home[j]]
            latency.append(dram.latency_ns if far == 0 else dram.remote_latency_ns[far - 1]
                           if dram.remote_latency_ns else 0.0)
            from_dram.append((1.0 - inner) * lines)
        reading = []
        counters = self.counters
        for i, (here, there, far_away) in enumerate(served):
            named_here, named_there, named_far = self.tallies[i]
            if here:  # (an empty list sums to 0.0, which leaves a counter as it is)
                counters[named_here] += _sum(here)
            if there:
                counters[named_there] += _sum(there)
            if far_away:
                counters[named_far] += _sum(far_away)
            if used[i]:
                resource = i if kinds[i] == "shared" else self.shared
                self._note(resource, levels[resource], used[i], reading)
        bandwidth = [self._share("dram", dram, start, node, shares) for node in home]
        self._note("dram", dram, [node for node, lines in zip(home, from_dram) if lines > 0], reading)
        if self.queueing is not None:
            by_node, own = [0.0] * self.sockets, [0.0] * self.sockets
            for j in range(n):
                in_flight = latency[j] / _access(latency[j], dram.bandwidth_gbs, pattern, line, overlap_of[j])
                by_node[home[j]] += from_dram[j]
                own[home[j]] += from_dram[j] * in_flight
            wait = self._waits(start, socket, by_node, own)
            latency = [latency[j] + wait[home[j]] for j in range(n)]
        local_dram, remote_dram = [], []
        for j in range(n):
            time[j] += from_dram[j] * _access(latency[j], bandwidth[j], pattern, line, overlap_of[j])
            (local_dram if hops_from[home[j]] == 0 else remote_dram).append(from_dram[j])
        counters["local_dram"] += _sum(local_dram)
        counters["remote_dram"] += _sum(remote_dram)
        if pattern != "stream":  # as _reuse: the accesses beyond one per line, at the level the block fits in
            for j in range(n):
                extra = max(math.ceil(sizes[j] / ELEMENT_BYTES) - lines_of[j], 0.0)
                if extra:
                    fits = next((level for level in levels if level.size_bytes >= sizes[j]), None)
                    if fits is None:  # no cache holds the block: DRAM's cost, as the block's lines got it
                        cost = _access(latency[j], bandwidth[j], pattern, ELEMENT_BYTES, overlap_of[j])
                    else:
                        cost = _access(fits.latency_ns, fits.bandwidth_gbs, pattern, ELEMENT_BYTES, overlap_of[j])
                    time[j] += extra * cost
        if fp.gather is not None:
            reads = fp.gather.reads[lo:hi].tolist()
            count = float(sum(reads))
            if count:
                per_read = self._gather(worker, fp, count, start, reading, shares)
                for j in range(n):
                    time[j] += reads[j] * per_read
        total = self._jitter(_sum(time))
        # The chunk's blocks now live in this core's caches, stamped in the order it touched them.
        blocks.holder[lo:hi] = worker
        moved = _sum(sizes)
        for i, stamp in enumerate(blocks.stamp):
            base = through[i][mine[i]]
            for j in range(n):  # one at a time: NumPy takes a list into a slice at several times the cost
                stamp[lo + j] = base + before_of[j] + sizes[j]
            through[i][mine[i]] += moved
        demand = {}
        if self.queueing is not None:
            by_node, waiting = [0.0] * self.sockets, [0.0] * self.sockets
            for j in range(n):
                if from_dram[j] > 0:
                    by_node[home[j]] += from_dram[j]
                    waiting[home[j]] += from_dram[j] * latency[j]
            demand = self._demand(total, socket, by_node, waiting)
        self._hold(reading, demand, start, start + total)
        return total

    def _offsets(self, fp: Footprint) -> np.ndarray:
        """Where each of the footprint's blocks starts in its data, and where the last one ends (n + 1 byte
        offsets: the blocks lie one after another), worked out once per footprint."""
        offsets = self.offsets.get(fp)
        if offsets is None:
            offsets = self.offsets[fp] = np.concatenate(([0], np.cumsum(fp.bytes, dtype=np.int64)))
        return offsets

    def _lines(self, fp: Footprint, lo: int, hi: int) -> np.ndarray:
        """The cache lines each iteration of the chunk [lo, hi) brings in: the distinct lines of the chunk's
        byte range, each counted by the first iteration that touches it.

        Counted up to each block's end, the chunk has reached line ceil(end / line) (line
        floor(start / line) before its first byte, which may share its line with the block
        before the chunk); an iteration brings in the lines from where the chunk had reached
        to where it reaches, none for a block of 0 bytes.
        """
        points = self._offsets(fp)[lo:hi + 1]
        first = points[0]
        reached = np.where(points > first, -(-points // self.line), first // self.line)
        return np.diff(reached).astype(float)

    def _jitter(self, total: float) -> float:
        """A chunk's memory time scaled by 1 + jitter_cv x z (z from the run's generator, clipped at 3)."""
        if self.rng is not None and self.h.dram.jitter_cv:
            total *= 1.0 + self.h.dram.jitter_cv * float(np.clip(self.rng.standard_normal(), -3.0, 3.0))
        return total

    def _hold(self, reading: list, demand: dict, start: float, end: float) -> None:
        """Count the chunk among the readers of what it reads, with what it demands of each, until ``end``."""
        for resource, instances in reading:
            for instance in instances:
                load = demand.pop((resource, instance), ())
                self.readers[resource][instance].add(start, end, *load)
        for (resource, instance), load in demand.items():  # read without a bandwidth share, still loading it
            self.readers[resource][instance].add(start, end, *load)

    def _waiting(self, start: float, socket: int, home: np.ndarray, from_dram: np.ndarray, idle: np.ndarray,
                 pattern: str, overlap) -> np.ndarray:
        """Each iteration's wait per DRAM line behind the misses of the chunks reading its node (and link).

        The misses this chunk keeps in flight alone are its ``idle`` latency over what a line
        costs it at its own bandwidth, whatever share it gets now (see ``loaded.py``).
        """
        in_flight = idle / self.access(idle, self.h.dram.bandwidth_gbs, pattern, self.line, overlap)
        lines = np.bincount(home, weights=from_dram, minlength=self.sockets)
        own = np.bincount(home, weights=from_dram * in_flight, minlength=self.sockets)
        return np.asarray(self._waits(start, socket, lines.tolist(), own.tolist()))[home]

    def _waits(self, start: float, socket: int, lines: list, own: list) -> list[float]:
        """The wait per DRAM line at each node (and the link from it) for a chunk of ``socket`` reading
        ``lines`` from each node, with ``own`` (its lines x misses in flight) there.

        One wait per node (and per link from it), from the others' load when this chunk starts,
        as for the shared bandwidth, and the chunk's own misses in flight to the node, the mean
        over its lines.
        """
        queue, dram = self.queueing, self.h.dram
        waits = [0.0] * self.sockets
        for node, count in enumerate(lines):
            if not count:
                continue
            hops = self.hops_list[socket][node]
            latency = dram.remote_latency_ns[hops - 1] if hops else dram.latency_ns
            mine = own[node] / count
            wait = 0.0
            if queue.controller:
                wait += queue.controller_wait(*self.readers["dram"][node].load(start), mine, latency)
            if queue.link_gbs and hops:
                others = self.readers["link"][node * self.sockets + socket].load(start)
                wait += queue.link_wait(*others, mine, latency)
            waits[node] = wait
        return waits

    def _demand(self, total: float, socket: int, lines: list, waiting: list) -> dict:
        """What this chunk demands of each node's controller (and link) it reads, over its memory time.

        ``lines``: the DRAM lines it reads from each node; ``waiting``: their lines x latency there.
        {(resource, instance): (GB/s, misses in flight)}; by Little's law its misses in flight are
        its lines x their latency over that time.
        """
        if total <= 0 or not any(lines):
            return {}
        demand = {}
        for node, count in enumerate(lines):
            if not count:
                continue
            load = (count * self.line / total, waiting[node] / total)
            if self.queueing.controller:
                demand["dram", node] = load
            if self.queueing.link_gbs and node != socket:
                demand["link", node * self.sockets + socket] = load
        return demand

    def _far(self, level, hops: np.ndarray) -> np.ndarray:
        """A socket-shared level's latency from ``hops`` sockets away (its local latency if none is given)."""
        return self.remote(level.remote_latency_ns, hops) if level.remote_latency_ns else np.full(hops.shape,
                                                                                                  level.latency_ns)

    def _count(self, level, part: np.ndarray, local: np.ndarray) -> None:
        self.counters[f"{level.name}_hits"] += float(part[local].sum())
        self.counters[f"remote_{level.name}_hits"] += float(part[~local].sum())

    def _overlap(self, nbytes: float) -> float:
        """``hierarchy.stride_overlap`` of one block size, worked out by it once per size."""
        overlap = self.overlaps.get(nbytes)
        if overlap is None:
            overlap = self.overlaps[nbytes] = float(self.h.stride_overlap(np.array([nbytes]))[0])
        return overlap

    def _reuse(self, size, lines, pattern, dram_latency, dram_bandwidth, overlap) -> np.ndarray:
        """The time of each iteration's accesses beyond one per line, at the innermost level its block fits in."""
        extra = np.maximum(np.ceil(size / ELEMENT_BYTES) - lines, 0.0)
        if pattern == "stream" or not extra.any():  # a stream's other accesses ride on the line just fetched
            return np.zeros_like(size)
        levels = self.h.levels
        fits = np.searchsorted([lv.size_bytes for lv in levels], size, side="left")
        # Each level's cost (with each iteration's misses in flight); DRAM's for blocks that fit no cache.
        costs = [self.access(lv.latency_ns, lv.bandwidth_gbs, pattern, ELEMENT_BYTES, overlap) for lv in levels]
        costs.append(self.access(dram_latency, dram_bandwidth, pattern, ELEMENT_BYTES, overlap))
        return extra * np.choose(fits, costs)

    def _gather(self, worker: int, fp: Footprint, count: float, start: float, reading: list,
                shares: dict | None = None) -> float:
        """The time of one read of the footprint's shared array by ``worker``, its chunk reading ``count``
        (``shares``: as for ``_share``).

        A read at a random place finds the array in a level with the chance that the level holds
        it, min(1, level size / array size), as if the array had the level to itself (at least
        what the inner levels hold: they are inclusive); the rest comes from DRAM, from each node
        in proportion to the array's pages there. Reads missing a level bring their lines through
        it, which ages what the iterations' own data left there.
        """
        socket = self.socket_list[worker]
        plan = self._gather_plan(fp.gather, fp.placement, socket)
        overlap = self.h.outstanding_misses
        per_read = 0.0
        for i, level, part, missed, nbytes, name in plan["levels"]:
            self.through[i][self.instance_list[i][worker]] += missed * count * self.line
            if part <= 0:
                continue
            bandwidth = level.bandwidth_gbs
            if level.shared_by == "socket":
                bandwidth = self._share(i, level, start, socket, shares)
                self._note(i, level, [socket], reading)
            per_read += part * max(level.latency_ns / overlap, nbytes / bandwidth)
            self.counters[name] += part * count
        missed = plan["dram"]
        if missed > 0:
            dram, share = self.h.dram, plan["share"]
            self._note("dram", dram, plan["nodes"], reading)
            costs = [part * max(latency / overlap, self.line / self._share("dram", dram, start, node, shares))
                     for node, (part, latency) in enumerate(zip(share, plan["latency"]))]
            per_read += missed * _sum(costs)
            self.counters["local_dram"] += missed * count * share[socket]
            self.counters["remote_dram"] += missed * count * (1.0 - share[socket])
        return per_read

    def _gather_plan(self, gather: Gather, placement: str, socket: int) -> dict:
        """What a read of a shared array costs a core of ``socket``, but for the shared bandwidths: worked out
        once per array and socket (each level's share of the reads, and the DRAM's by node)."""
        key = (gather.size, gather.element, placement, socket)
        plan = self.plans.get(key)
        if plan is None:
            levels, inner = [], 0.0
            for i, level in enumerate(self.h.levels):
                held = max(inner, min(1.0, level.size_bytes / gather.size))
                # A read served by the innermost level moves one element; one that missed it, the whole line.
                levels.append((i, level, held - inner, 1.0 - held, gather.element if i == 0 else self.line,
                               f"{level.name}_hits"))
                inner = held
            dram = self.h.dram
            nodes = np.arange(self.sockets)
            hops = self.h.socket_hops[socket, nodes]
            latency = (np.where(hops == 0, dram.latency_ns, self.remote(dram.remote_latency_ns, hops))
                       if dram.remote_latency_ns else np.full(self.sockets, dram.latency_ns))
            share = self._pages(placement)
            plan = {"levels": levels, "dram": 1.0 - inner, "share": share.tolist(),
                    "latency": latency.tolist(), "nodes": np.flatnonzero(share > 0).tolist()}
            self.plans[key] = plan
        return plan

    def _pages(self, placement: str) -> np.ndarray:
        """The share of a shared array's pages on each node: all on the master's (a serial loader), dealt
        evenly (interleave), or as a parallel loop of static blocks over the run's workers touches them first."""
        if placement == "master":
            return np.eye(self.sockets)[self.master]
        if placement == "interleave":
            return np.full(self.sockets, 1.0 / self.sockets)
        return np.bincount(self.socket_of_worker, minlength=self.sockets) / self.socket_of_worker.size

    def _shared(self, resource, source, start: float, instances: np.ndarray, used: np.ndarray, reading: list):
        """The per-core bandwidth from each of ``instances`` of a shared resource, one more reader being added.

        ``resource`` names it in ``readers`` ("dram", or a shared level's index); the
        instances actually ``used`` are noted in ``reading`` to hold a reader until the chunk ends.
        """
        if resource not in self.readers or not source.shared_bandwidth_gbs:
            return np.full(instances.shape, source.bandwidth_gbs)
        if used.any():
            reading.append((resource, np.unique(instances[used]).tolist()))
        readers = np.array([r.count(start) + 1 for r in self.readers[resource]])
        return np.minimum(source.bandwidth_gbs, source.shared_bandwidth_gbs / readers)[instances]

    def _share(self, resource, source, start: float, instance: int, known: dict | None = None) -> float:
        """``_shared`` for one instance: the per-core bandwidth from it, one more reader being added
        (``known``: the shares already worked out for this chunk)."""
        if resource not in self.readers or not source.shared_bandwidth_gbs:
            return source.bandwidth_gbs
        key = (resource, instance)
        if known is not None and key in known:
            return known[key]
        readers = self.readers[resource][instance].count(start) + 1
        share = min(source.bandwidth_gbs, source.shared_bandwidth_gbs / readers)
        if known is not None:
            known[key] = share
        return share

    def _note(self, resource, source, used: list, reading: list) -> None:
        """``_shared``'s bookkeeping for a chunk: hold a reader of each instance ``used`` until it ends."""
        if used and resource in self.readers and source.shared_bandwidth_gbs:
            reading.append((resource, sorted(set(used))))

    def tally(self, counters) -> None:
        """Add the served-by counts (whole cache lines) to a run's counters."""
        for name, value in self.counters.items():
            counters[name] += int(round(value))
