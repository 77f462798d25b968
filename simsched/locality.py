"""Data locality: where each iteration's data sits in the memory hierarchy, and what a chunk pays to reach it.

An iteration j of a loop with a :class:`Footprint` touches ``bytes[j]`` bytes of a data block
of its own, block j of the loop's data set; loops of a program that name the same data set
touch the same blocks. :class:`DataState` keeps, per block, the core whose caches last held
it, when (in bytes moved through each cache since), and its home NUMA node. A chunk's memory
time is worked out when the chunk starts, for all its iterations at once with NumPy:

* **Residency by reuse distance.** Each cache instance (a core's private level, a socket's
  shared level) counts the bytes that have passed through it. A block last brought in when
  the count was ``stamp`` has seen ``count - stamp`` bytes go through since; under LRU its
  most recent ``size - (count - stamp)`` bytes are still there, so that fraction of it is
  served from that level (clipped to [0, 1], and at least what an inner level holds, since
  the levels are inclusive). The rest comes from its home node's DRAM.
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

Running a chunk moves its blocks into the running core's caches (a write moves the line
there, invalidating other copies) and gives untouched blocks their home: the running core's
node under ``first-touch``, or block j on node j mod nodes under ``interleave``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .errors import SimschedError

ELEMENT_BYTES = 8  # the kernels touch 8-byte doubles
PATTERNS = ("stride", "stream", "random")
PLACEMENTS = ("first-touch", "interleave")
DRAM_COUNTERS = ("local_dram", "remote_dram")


@dataclass(eq=False)
class Footprint:
    """The data a loop's iterations touch: bytes per iteration, how they are accessed, and where pages live."""

    bytes: np.ndarray
    pattern: str = "stride"
    placement: str = "first-touch"
    data: str = "data"

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

    @property
    def total(self) -> int:
        return int(self.bytes.sum())


def counter_names(hierarchy) -> tuple[str, ...]:
    """The served-by counters a machine's hierarchy reports, innermost first (cache lines served)."""
    names = []
    for level in hierarchy.levels:
        names.append(f"{level.name}_hits")
        if level.shared_by == "socket":
            names.append(f"remote_{level.name}_hits")
    return tuple(names) + DRAM_COUNTERS


class Readers:
    """The chunks reading one shared resource (a node's DRAM, a socket's shared cache): each from its start to its end.

    A worker may record chunks ahead of the simulation clock (a static block's chunks, back to
    back), so readers are counted at a chunk's own start and forgotten only once the clock has
    passed their end.
    """

    def __init__(self):
        self.spans: list[tuple[float, float]] = []

    def forget(self, now: float) -> None:
        """Drop the readers that ended by ``now`` (no chunk starts before the clock)."""
        if self.spans:
            self.spans = [span for span in self.spans if span[1] > now]

    def count(self, at: float) -> int:
        return sum(1 for start, end in self.spans if start <= at < end)

    def add(self, start: float, end: float) -> None:
        self.spans.append((start, end))


class Blocks:
    """One data set's blocks: the core that last held each, its stamp in each cache level, and its home node."""

    def __init__(self, n: int, levels: int, placement: str, nodes: int):
        self.holder = np.full(n, -1, dtype=np.int64)
        self.stamp = np.zeros((levels, n))
        self.home = np.full(n, -1, dtype=np.int64)
        if placement == "interleave":
            self.home[:] = np.arange(n) % nodes


class DataState:
    """The locality model of one run: the hierarchy, every data set's blocks, and the bytes through each cache."""

    def __init__(self, machine, cores: list[int], loops, rng: np.random.Generator | None = None):
        hierarchy = machine.hierarchy
        if hierarchy is None:
            raise SimschedError(f"machine {machine.name} describes no memory hierarchy ([cache.*] and [dram]); "
                                "workloads with bytes= need one")
        self.h = hierarchy
        self.cores = np.asarray(cores, dtype=np.int64)
        per = machine.cores_per_socket
        self.sockets = machine.sockets
        self.socket_of_worker = self.cores // per
        self.line = hierarchy.line_bytes
        levels = hierarchy.levels
        # Which cache instance of each level a worker uses: its core for private levels, its socket for shared ones.
        self.instance = [self.cores if lv.shared_by == "core" else self.socket_of_worker for lv in levels]
        self.through = [np.zeros(machine.cores if lv.shared_by == "core" else machine.sockets) for lv in levels]
        self.shared = next((i for i, lv in enumerate(levels) if lv.shared_by == "socket"), None)
        # Who reads each shared resource now: every node's DRAM ("dram") and every socket's shared level (its index).
        self.readers = {"dram": [Readers() for _ in range(self.sockets)]}
        for i, level in enumerate(levels):
            if level.shared_by == "socket" and level.shared_bandwidth_gbs:
                self.readers[i] = [Readers() for _ in range(self.sockets)]
        self.counters = dict.fromkeys(counter_names(hierarchy), 0.0)
        self.blocks: dict[str, Blocks] = {}
        # The run's generator, for the jitter of memory times (none: exact times, as for a sequential baseline).
        self.rng = rng
        self.check(machine, loops)

    def check(self, machine, loops) -> None:
        """Refuse data sets whose loops disagree on their size, or that do not fit in the machine's memory."""
        sizes: dict[str, tuple[int, int, str]] = {}
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
        memory = self.h.dram.size_bytes * self.sockets
        total = sum(size for _, size, _ in sizes.values())
        if total > memory:
            raise SimschedError(f"the workload's data ({total / 2**30:.3g} GiB) does not fit in the "
                                f"{memory / 2**30:.3g} GiB of DRAM of machine {machine.name}")
        for name, (n, _, placement) in sizes.items():
            self.blocks[name] = Blocks(n, len(self.h.levels), placement, self.sockets)

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
        """
        for resource in self.readers.values():
            for readers in resource:
                readers.forget(start if now is None else now)
        blocks = self.blocks[fp.data]
        pattern, line = fp.pattern, self.line
        size = fp.bytes[lo:hi].astype(float)
        lines = np.ceil(size / line)
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
            distance = self.through[i][theirs] - blocks.stamp[i, lo:hi] + np.where(local, before, 0.0)
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
        time += from_dram * self.access(latency, bandwidth, pattern, line, overlap)
        self.counters["local_dram"] += float(from_dram[node_hops == 0].sum())
        self.counters["remote_dram"] += float(from_dram[node_hops > 0].sum())
        time += self._reuse(size, lines, pattern, latency, bandwidth, overlap)
        total = float(time.sum())
        if self.rng is not None and self.h.dram.jitter_cv:
            total *= 1.0 + self.h.dram.jitter_cv * float(np.clip(self.rng.standard_normal(), -3.0, 3.0))
        # The chunk's blocks now live in this core's caches, stamped in the order it touched them.
        blocks.holder[lo:hi] = worker
        moved = float(size.sum())
        for i in range(len(self.h.levels)):
            mine = self.instance[i][worker]
            blocks.stamp[i, lo:hi] = self.through[i][mine] + before + size
            self.through[i][mine] += moved
        for resource, instances in reading:
            for instance in instances:
                self.readers[resource][instance].add(start, start + total)
        return total

    def _far(self, level, hops: np.ndarray) -> np.ndarray:
        """A socket-shared level's latency from ``hops`` sockets away (its local latency if none is given)."""
        return self.remote(level.remote_latency_ns, hops) if level.remote_latency_ns else np.full(hops.shape,
                                                                                                  level.latency_ns)

    def _count(self, level, part: np.ndarray, local: np.ndarray) -> None:
        self.counters[f"{level.name}_hits"] += float(part[local].sum())
        self.counters[f"remote_{level.name}_hits"] += float(part[~local].sum())

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

    def tally(self, counters) -> None:
        """Add the served-by counts (whole cache lines) to a run's counters."""
        for name, value in self.counters.items():
            counters[name] += int(round(value))
