"""Contention for shared memory resources: who reads each, the bandwidth shares, the misses' waits."""

from __future__ import annotations

import bisect
import math

import numpy as np


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


class Calendar:
    """What a node's DRAM has promised the chunks reading it, over time, under ``bandwidth_share =
    "conserved"``: a step function of the GB/s committed, never above the node's shared bandwidth.

    A chunk that starts takes what the earlier ones leave, from its start on, at most its core's
    bandwidth, until its bytes are served; its rate then counts as committed over that time. The
    earlier chunks keep what they have (processor sharing would slow them down instead), so the
    node never serves more than its bandwidth, and a chunk whose node is busy waits for it.
    """

    def __init__(self, shared_gbs: float | None):
        self.shared = shared_gbs
        self.times: list[float] = []       # breakpoints, ascending
        self.committed: list[float] = []   # GB/s committed from each breakpoint to the next (0 after the last)

    def forget(self, now: float) -> None:
        """Drop the commitments that ended by ``now`` (no chunk starts before the clock)."""
        keep = 0
        while keep + 1 < len(self.times) and self.times[keep + 1] <= now:
            keep += 1
        if keep:
            del self.times[:keep], self.committed[:keep]

    def _split(self, at: float) -> int:
        """The index of a breakpoint at ``at``, made if there is none (it takes the rate it falls in)."""
        times = self.times
        i = bisect.bisect_left(times, at)
        if i < len(times) and times[i] == at:
            return i
        times.insert(i, at)
        self.committed.insert(i, self.committed[i - 1] if i > 0 else 0.0)
        return i

    def take(self, start: float, nbytes: float, cap_gbs: float) -> float:
        """Serve ``nbytes`` from ``start`` at what the node has left, at most ``cap_gbs``; the ns they take."""
        i = self._split(start)
        left = nbytes
        while True:
            rate = min(cap_gbs, max(self.shared - self.committed[i], 0.0))
            last = i + 1 == len(self.times)   # nothing is committed beyond the last breakpoint
            span = math.inf if last else self.times[i + 1] - self.times[i]
            if rate > 0.0 and left <= rate * span:
                end = self.times[i] + left / rate
                j = self._split(end)
                for k in range(i, j):
                    self.committed[k] += rate
                return end - start
            if rate > 0.0:
                left -= rate * span
                self.committed[i] += rate
            i += 1


class Contention:
    """The part of the locality model (``DataState``) that shares resources among the chunks reading them.

    Mixed into ``DataState``, whose tables it keeps: ``readers`` (a :class:`Readers` per instance
    of each shared resource), ``queueing`` (what makes a miss wait behind the others').
    """

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

    def _conserved_shares(self, start: float, lines: list) -> list[float]:
        """The per-core bandwidth from each node's DRAM for a chunk reading ``lines`` from it, when a node
        never serves more than its shared bandwidth (``Calendar``): its bytes over the time they take."""
        dram = self.h.dram
        shares = []
        for node, count in enumerate(lines):
            if count:
                nbytes = count * self.line
                shares.append(nbytes / self.calendars[node].take(start, nbytes, dram.bandwidth_gbs))
            else:
                shares.append(self._share("dram", dram, start, node))
        return shares

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
