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

Footprints and gathers are in ``footprint.py``; the readers of the shared resources, their
bandwidth shares and waits in ``contention.py``; the per-iteration path in ``small_chunks.py``.
"""

from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from .contention import Calendar, Contention, Readers
from .errors import SimschedError
from .footprint import ELEMENT_BYTES, Footprint
from .loaded import Queueing
from .small_chunks import SmallChunks, _sum

DRAM_COUNTERS = ("local_dram", "remote_dram")
# Chunks of up to this many iterations are worked out per iteration in plain floats (DataState._few), larger
# ones with NumPy: NumPy's path costs about the same for 1 to 128 iterations, the plain one grows by about
# 10 us an iteration, and they cross near 40 (benchmarks/bench_locality.py, docs/performance.md).
SCALAR_ITERATIONS = 32

# The per-iteration path and the readers compiled (simsched/_locality.c), the same arithmetic in the same order;
# None where the extension is not built, or to run the Python path, which is the reference (the tests compare
# every path).
try:
    from . import _locality as compiled
except ImportError:
    compiled = None
else:
    if getattr(compiled, "INTERFACE", None) != 2:   # built from an older source: it takes other arguments
        import warnings

        warnings.warn("simsched's compiled data model is out of date (rebuild it: pip install -e .); "
                      "running the Python path", RuntimeWarning, stacklevel=1)
        compiled = None
# Compiled, the per-iteration path costs about 0.2 us an iteration over some 7 us a chunk, under NumPy's
# 300-900 us a chunk at every size up to 2048 iterations (benchmarks/bench_locality.py); it holds about 200
# bytes an iteration while it works, so chunks beyond this many iterations still take NumPy's path.
COMPILED_ITERATIONS = 1 << 16


@contextmanager
def scalar_iterations(limit: int):
    """Within it, chunks of up to ``limit`` iterations take the per-iteration path, compiled or not (0: every
    chunk NumPy's)."""
    global SCALAR_ITERATIONS, COMPILED_ITERATIONS
    kept = SCALAR_ITERATIONS, COMPILED_ITERATIONS
    SCALAR_ITERATIONS = COMPILED_ITERATIONS = limit
    try:
        yield
    finally:
        SCALAR_ITERATIONS, COMPILED_ITERATIONS = kept


def counter_names(hierarchy) -> tuple[str, ...]:
    """The served-by counters a machine's hierarchy reports, innermost first (cache lines served)."""
    names = []
    for level in hierarchy.levels:
        names.append(f"{level.name}_hits")
        if level.shared_by == "socket":
            names.append(f"remote_{level.name}_hits")
    return tuple(names) + DRAM_COUNTERS


def held_by_lru(capacity: float, array: float, line: int, own_per_read: float = 0.0, own: float = 0.0) -> float:
    """The chance that a read at a random place of an array of ``array`` bytes finds its line in an LRU level
    of ``capacity`` bytes, when each read comes with ``own_per_read`` bytes of other data (``own`` in all).

    A line read again g reads after its last read is still there if the distinct bytes read in
    between fit in the level: the array's, array x (1 - exp(-u)) for u = g / (array / line), the
    reads being at random lines; and the other data's, min(own_per_read x g, own). u is
    exponential for random reads, so the line is held with chance 1 - exp(-u*), u* where the two
    fill the level. Without other data that is min(1, capacity / array): the array has the
    level to itself.
    """
    fill = capacity / array
    if own_per_read <= 0 or own <= 0:
        return min(1.0, fill)
    per_u = own_per_read / line  # the other data read per unit of u, as a share of the array's size
    cap = own / array
    if fill >= 1.0 + cap:
        return 1.0

    def excess(u: float) -> float:
        return -math.expm1(-u) + min(per_u * u, cap) - fill

    upper = 1.0
    while excess(upper) < 0:
        upper *= 2.0
    from scipy.optimize import brentq

    return -math.expm1(-brentq(excess, 0.0, upper, xtol=1e-12))


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


class DataState(SmallChunks, Contention):
    """The locality model of one run: the hierarchy, every data set's blocks, and the bytes through each cache."""

    def __init__(self, machine, cores: list[int], loops, rng: np.random.Generator | None = None):
        readers_type = Readers if compiled is None else compiled.Readers
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
        self.readers = {"dram": [readers_type() for _ in range(self.sockets)]}
        for i, level in enumerate(levels):
            if level.shared_by == "socket" and level.shared_bandwidth_gbs:
                self.readers[i] = [readers_type() for _ in range(self.sockets)]
        # What makes a miss wait behind the others' (None: nothing does); the links ("link") are read from a
        # home node by a socket, instance home x sockets + socket.
        self.queueing = Queueing.of(hierarchy)
        # With a conserved bandwidth, each node's commitments over time (``_conserved_shares``); else none.
        dram = hierarchy.dram
        calendar_type = Calendar if compiled is None else compiled.Calendar
        self.calendars = ([calendar_type(dram.shared_bandwidth_gbs) for _ in range(self.sockets)]
                          if dram.bandwidth_share == "conserved" and dram.shared_bandwidth_gbs else [])
        if self.queueing is not None and self.queueing.link_gbs:
            self.readers["link"] = [readers_type() for _ in range(self.sockets * self.sockets)]
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
        self.plans: dict[tuple, dict] = {}  # what a read of each footprint's shared array costs each socket (_gather_plan)
        self.offsets: dict[Footprint, np.ndarray] = {}  # where each footprint's blocks start (_offsets)
        # The run's generator, for the jitter of memory times (none: exact times, as for a sequential baseline).
        self.rng = rng
        self.check(machine, loops)
        self.small = self._compiled_path()

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

    def chunk(self, worker: int, fp: Footprint, lo: int, hi: int, start: float, now: float | None = None,
              work: float = 0.0) -> float:
        """The memory time of iterations [lo, hi) run by ``worker`` from ``start``; moves their data there.

        ``now`` is the simulation clock (default: ``start``), before which no chunk starts. ``work``
        is the chunk's compute time, under which its gathers run where they overlap (``with_gathers``).
        Chunks of up to ``SCALAR_ITERATIONS`` iterations take the per-iteration path (``_few``; compiled,
        up to ``COMPILED_ITERATIONS``), the others NumPy's: the same arithmetic in the same order, so the
        same time to the bit.
        """
        now = start if now is None else now
        if hi - lo <= COMPILED_ITERATIONS and self.small is not None:
            return self.small.run(self, worker, fp, lo, hi, start, now, work)
        for readers in self.every_reader:
            readers.forget(now)
        for calendar in self.calendars:
            calendar.forget(now)
        if hi - lo <= SCALAR_ITERATIONS:
            return self._few(worker, fp, lo, hi, start, work)
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
        used = from_dram > 0
        lines_by_node = np.bincount(home[used], weights=from_dram[used], minlength=self.sockets).tolist()
        bandwidth = self._shared("dram", dram, start, home, used, reading)
        if self.calendars:
            bandwidth = np.asarray(self._conserved_shares(start, lines_by_node))[home]
        if self.queueing is not None:
            latency = latency + self._waiting(start, socket, home, from_dram, latency, pattern, overlap)
        time += from_dram * self.access(latency, bandwidth, pattern, line, overlap)
        self.counters["local_dram"] += float(from_dram[node_hops == 0].sum())
        self.counters["remote_dram"] += float(from_dram[node_hops > 0].sum())
        time += self._reuse(size, lines, pattern, latency, bandwidth, overlap)
        gathered = None
        if fp.gather is not None:
            reads = fp.gather.reads[lo:hi]
            count = float(reads.sum())
            if count:
                per_read = self._gather(worker, fp, count, start, reading)
                if self.h.dram.gathers == "added":
                    time += reads * per_read
                else:
                    gathered = count * per_read
        total = self._jitter(self.with_gathers(float(time.sum()), gathered, work))
        # The chunk's blocks now live in this core's caches, stamped in the order it touched them.
        blocks.holder[lo:hi] = worker
        moved = float(size.sum())
        for i in range(len(self.h.levels)):
            mine = self.instance[i][worker]
            blocks.stamp[i, lo:hi] = self.through[i][mine] + before + size
            self.through[i][mine] += moved
        demand = {}
        if self.queueing is not None:
            waiting = np.bincount(home[used], weights=(from_dram * latency)[used], minlength=self.sockets)
            demand = self._demand(total, socket, lines_by_node, waiting.tolist())
        self._hold(reading, demand, start, start + total)
        return total

    def _compiled_path(self):
        """``_few`` compiled (``compiled.Chunks``), holding this state's tables; None without the extension."""
        if compiled is None:
            return None
        h, dram, queue = self.h, self.h.dram, self.queueing

        def sharing(resource, source):
            """The readers of a resource whose bandwidth its readers share (None: each reads at its own)."""
            return self.readers[resource] if resource in self.readers and source.shared_bandwidth_gbs else None

        kinds = ("shared", "private", "alone")
        levels = [(level.size_bytes, level.latency_ns, level.bandwidth_gbs, level.shared_bandwidth_gbs or 0.0,
                   level.random_read_ns or 0.0, kinds.index(kind), self.far[i], *self.tallies[i],
                   self.instance_list[i], sharing(i, level))
                  for i, (level, kind) in enumerate(zip(h.levels, self.kinds))]
        memory = (dram.latency_ns, dram.remote_latency_ns or (), dram.bandwidth_gbs, dram.shared_bandwidth_gbs or 0.0,
                  dram.random_read_ns or 0.0, self.readers["dram"], sharing("dram", dram), dram.gathers == "added")
        queueing = None if queue is None else (queue, queue.controller, bool(queue.curve), queue.controller_gbs or 0.0,
                                                queue.link_gbs or 0.0)
        return compiled.Chunks(self, levels, -1 if self.shared is None else self.shared, memory, queueing,
                               self.readers.get("link"), self.socket_list, self.hops_list, self.line,
                               h.outstanding_misses, bool(h.stride_misses), self.rng is not None and bool(dram.jitter_cv),
                               self.calendars or None)

    @staticmethod
    def with_gathers(own: float, gathered: float | None, work: float) -> float:
        """A chunk's memory time: its own data's, ``own``, and its gathers' (``gathered`` ns; None: none, or
        added into ``own`` already) where they outlast the chunk's work and own data, which they run under.

        An out-of-order core issues a gather's reads (their addresses come from the iteration's own
        data, not from each other) while it computes and streams, so the chunk lasts the longer of
        the two; a chunk of little work and many reads is as long as its reads.
        """
        if gathered is None:
            return own
        return own + max(gathered - work - own, 0.0)

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

        A read at a random place finds the array in a level with the chance that the level still
        holds its line since the line was last read (``held_by_lru``: the array's other lines and
        the iterations' own data read in between push it out), at least what the inner levels
        hold (they are inclusive); the rest comes from DRAM, from each node in proportion to the
        array's pages there. Reads missing a level bring their lines through it, which ages what
        the iterations' own data left there.
        """
        socket = self.socket_list[worker]
        plan = self._gather_plan(fp, socket)
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
            latency = level.random_read_ns if level.random_read_ns else level.latency_ns / overlap
            per_read += part * max(latency, nbytes / bandwidth)
            self.counters[name] += part * count
        missed = plan["dram"]
        if missed > 0:
            dram, share = self.h.dram, plan["share"]
            self._note("dram", dram, plan["nodes"], reading)
            # A measured read costs as much more from another node as that node's latency is more.
            scale = dram.random_read_ns / dram.latency_ns if dram.random_read_ns else 1.0 / overlap
            costs = [part * max(latency * scale, self.line / self._share("dram", dram, start, node, shares))
                     for node, (part, latency) in enumerate(zip(share, plan["latency"]))]
            per_read += missed * _sum(costs)
            self.counters["local_dram"] += missed * count * share[socket]
            self.counters["remote_dram"] += missed * count * (1.0 - share[socket])
        return per_read

    def _gather_plan(self, fp: Footprint, socket: int) -> dict:
        """What a read of a footprint's shared array costs a core of ``socket``, but for the shared bandwidths:
        worked out once per footprint and socket (each level's share of the reads, and the DRAM's by node)."""
        key = (fp, socket)  # a footprint hashes by identity
        plan = self.plans.get(key)
        if plan is None:
            gather, placement = fp.gather, fp.placement
            # The iterations' own bytes, per read of the array and in all: what else passes through a level.
            own = float(fp.total)
            own_per_read = own / max(float(gather.reads.sum()), 1.0)
            levels, inner = [], 0.0
            for i, level in enumerate(self.h.levels):
                held = max(inner, held_by_lru(level.size_bytes, gather.size, self.line, own_per_read, own))
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

    def tally(self, counters) -> None:
        """Add the served-by counts (whole cache lines) to a run's counters."""
        for name, value in self.counters.items():
            counters[name] += int(round(value))
