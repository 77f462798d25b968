"""A machine's memory hierarchy: its cache levels, who shares each, and its DRAM per NUMA node, as data.

A machine file describes it in ``[cache.l1]``, ``[cache.l2]``, ... (innermost first) and
``[dram]``; the locality model (``locality.py``) reads it from here. Sizes are per instance
of a level (one per core, or one per socket), latencies are one line's access time, and
bandwidths are what one core reading at that level gets (``bandwidth_gbs``) and what all the
cores sharing an instance get together (``shared_bandwidth_gbs``). Independent misses overlap:
``outstanding_misses`` of them, or for the ``stride`` pattern ``stride_misses`` by array size;
a level (or DRAM) may also give ``random_read_ns``, what one core's independent reads at random
places of data it holds cost each, measured, which gathers then pay instead of latency over
``outstanding_misses``. ``[dram] gathers`` says whether a chunk's gathers overlap its other work.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from .errors import SimschedError

SHARING = ("core", "socket")  # innermost first: a level is private to a core or shared by a socket's cores
MAX_VALUE = 1e12  # no latency, cost, clock or size in a machine file is anywhere near this (ns, GHz, KiB, GiB)
_LEVEL_NAME = re.compile(r"l[1-9]")


def _number(value) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def _positive(table: dict, key: str, where: str, required: bool = True) -> float | None:
    if key not in table:
        if required:
            raise SimschedError(f"{where}: missing key {key}")
        return None
    value = table[key]
    if not _number(value) or not 0 < value <= MAX_VALUE:
        raise SimschedError(f"{where}.{key} must be a number > 0 and up to {MAX_VALUE:g}, got {value!r}")
    return float(value)


def _by_hops(table: dict, where: str, hops: int) -> tuple[float, ...]:
    """``remote_latency_ns``: one number for every remote socket, or a list by hop count (1 hop, 2 hops, ...)."""
    value = table["remote_latency_ns"]
    values = value if isinstance(value, list) else [value]
    if not values or not all(_number(v) and 0 < v <= MAX_VALUE for v in values):
        raise SimschedError(f"{where}.remote_latency_ns must be a number > 0 (up to {MAX_VALUE:g}) or a list of "
                            f"them by hop count, got {value!r}")
    if isinstance(value, list) and len(values) < hops:
        raise SimschedError(f"{where}.remote_latency_ns lists {len(values)} hop count(s); the sockets are up to "
                            f"{hops} hops apart")
    return tuple(float(v) for v in values) if isinstance(value, list) else (float(value),) * max(hops, 1)


def _jitter(table: dict, where: str) -> float:
    value = table.get("jitter_cv", 0.0)
    if not _number(value) or not 0 <= value <= 0.5:
        raise SimschedError(f"{where}.jitter_cv must be a number in [0, 0.5], got {value!r}")
    return float(value)


def _line_bytes(table: dict, where: str) -> int:
    if "line_bytes" not in table:
        raise SimschedError(f"{where}: missing key line_bytes")
    value = table["line_bytes"]
    if isinstance(value, bool) or not isinstance(value, int) or value < 8 or value > 2**20 or value & (value - 1):
        raise SimschedError(f"{where}.line_bytes must be a power of two from 8 to 2**20, got {value!r}")
    return value


def _check_keys(table: Any, allowed: set[str], where: str) -> dict:
    if not isinstance(table, dict):
        raise SimschedError(f"{where} must be a table")
    for key in table:
        if key not in allowed:
            raise SimschedError(f"{where}: unknown key {key!r} (expected {', '.join(sorted(allowed))})")
    return table


@dataclass(frozen=True)
class CacheLevel:
    """One cache level: size and line per instance, which cores share an instance, and its access costs."""

    name: str
    size_bytes: int
    line_bytes: int
    shared_by: str
    latency_ns: float
    bandwidth_gbs: float
    shared_bandwidth_gbs: float | None
    # A line held by this level of another socket, by hop count (socket-shared levels only; else empty).
    remote_latency_ns: tuple[float, ...] = ()
    # ns per independent read at a random place of data this level holds, one core reading (None: not measured).
    random_read_ns: float | None = None


@dataclass(frozen=True)
class Dram:
    """Main memory: one NUMA node per socket, each with its own controllers."""

    size_bytes: int
    latency_ns: float
    remote_latency_ns: tuple[float, ...]
    bandwidth_gbs: float
    shared_bandwidth_gbs: float | None
    # Relative standard deviation of a chunk's memory time: what the model leaves out (DRAM refresh and bank
    # conflicts, queueing in the interconnect) and what makes equal chunks finish in a different order each loop.
    jitter_cv: float = 0.0
    # How a miss's latency grows with the other cores' load on its controller and socket link (see loaded.py):
    # "closed" (a queue behind their misses in flight) or "none" (the idle latency however loaded).
    queueing: str = "closed"
    # A measured latency under load: (GB/s the other cores read from the node, ns), ascending; empty: none.
    loaded_latency_ns: tuple[tuple[float, float], ...] = ()
    # What one socket link carries each way; None: the links add no wait.
    link_bandwidth_gbs: float | None = None
    # ns per independent read at a random place in DRAM, one core reading (None: not measured).
    random_read_ns: float | None = None
    # How a chunk's gathers (independent reads of a shared array) add to its time: "overlapped" (they run
    # under the chunk's work and streamed data, which an out-of-order core keeps issuing: the chunk takes
    # the longer of the two) or "added" (after them).
    gathers: str = "overlapped"
    # How the chunks reading a node share its shared_bandwidth_gbs: "at-start" (each keeps shared / readers,
    # counted when it starts) or "conserved" (each gets what the readers already there leave of it, more as
    # they end, so the node never serves more than its bandwidth).
    bandwidth_share: str = "at-start"


_CACHE_KEYS = {"size_kib", "line_bytes", "shared_by", "latency_ns", "bandwidth_gbs", "shared_bandwidth_gbs",
               "remote_latency_ns", "outstanding_misses", "stride_misses", "random_read_ns"}
_DRAM_KEYS = {"node", "size_gib", "line_bytes", "latency_ns", "remote_latency_ns", "bandwidth_gbs",
              "shared_bandwidth_gbs", "jitter_cv", "queueing", "loaded_latency_ns", "link_bandwidth_gbs",
              "random_read_ns", "gathers", "bandwidth_share"}
QUEUEING = ("closed", "none")
GATHERS = ("overlapped", "added")
BANDWIDTH_SHARES = ("at-start", "conserved")
# The [dram] keys a file may leave out that a variant may still set (``machine[dram.queueing="none"]``).
DRAM_OPTIONAL_KEYS = {"shared_bandwidth_gbs", "jitter_cv", "queueing", "loaded_latency_ns",
                      "link_bandwidth_gbs", "random_read_ns", "gathers", "bandwidth_share"}


@dataclass(frozen=True)
class Hierarchy:
    """The caches (innermost first) and DRAM of a machine, and how many socket hops apart its sockets are."""

    levels: tuple[CacheLevel, ...]
    dram: Dram
    line_bytes: int
    # Misses one core keeps in flight at once (line fill buffers): independent misses overlap this much.
    outstanding_misses: int
    socket_hops: np.ndarray
    # The misses in flight the stride pattern gets by the size of the array it strides over, where a prefetcher
    # makes them depend on it: (array bytes, misses) ascending; empty: outstanding_misses for every size.
    stride_misses: tuple[tuple[int, int], ...] = ()

    def stride_overlap(self, nbytes: np.ndarray) -> np.ndarray | int:
        """Misses in flight for a stride over arrays of ``nbytes``: interpolated in log size, the ends beyond."""
        if not self.stride_misses:
            return self.outstanding_misses
        sizes, misses = zip(*self.stride_misses)
        return np.interp(np.log2(np.maximum(nbytes, 1)), np.log2(sizes), misses)

    @classmethod
    def from_machine_data(cls, data: dict[str, Any], socket_hops: np.ndarray, source: str) -> "Hierarchy | None":
        """The hierarchy a machine file describes, checked; None when it describes none."""
        caches, dram = data.get("cache"), data.get("dram")
        if caches is None and dram is None:
            return None
        hops = int(socket_hops.max()) if socket_hops.size else 0
        if dram is None:
            raise SimschedError(f"{source}: [cache.*] levels need a [dram] section (main memory behind them)")
        caches = _check_keys(caches if caches is not None else {}, {f"l{i}" for i in range(1, 10)},
                             f"{source}: [cache]")
        names = sorted(caches, key=lambda name: int(name[1:]))
        for i, name in enumerate(names, start=1):
            if not _LEVEL_NAME.fullmatch(name) or name != f"l{i}":
                raise SimschedError(f"{source}: cache levels must be l1, l2, ... without gaps; found "
                                    f"{', '.join(names)}")
        levels, misses, stride, line = [], 1, (), None
        for name in names:
            where = f"{source}: cache.{name}"
            table = _check_keys(caches[name], _CACHE_KEYS, where)
            size = _positive(table, "size_kib", where)
            line_bytes = _line_bytes(table, where)
            if line is not None and line_bytes != line:
                raise SimschedError(f"{where}.line_bytes is {line_bytes}, but the levels inside it use {line}")
            line = line_bytes
            if "shared_by" not in table:
                raise SimschedError(f"{where}: missing key shared_by")
            shared_by = table["shared_by"]
            if shared_by not in SHARING:
                raise SimschedError(f"{where}.shared_by must be core or socket, got {shared_by!r}")
            remote = ()
            if "remote_latency_ns" in table:
                if shared_by != "socket":
                    raise SimschedError(f"{where}.remote_latency_ns is for socket-shared levels only")
                remote = _by_hops(table, where, hops)
            if "outstanding_misses" in table:
                if name != "l1":
                    raise SimschedError(f"{where}.outstanding_misses belongs in cache.l1 (its fill buffers)")
                misses = table["outstanding_misses"]
                if isinstance(misses, bool) or not isinstance(misses, int) or misses < 1:
                    raise SimschedError(f"{where}.outstanding_misses must be an integer >= 1, got {misses!r}")
            if "stride_misses" in table:
                if name != "l1":
                    raise SimschedError(f"{where}.stride_misses belongs in cache.l1 (with outstanding_misses)")
                stride = _stride_misses(table["stride_misses"], where)
            levels.append(CacheLevel(name, int(round(size * 1024)), line_bytes, shared_by,
                                     _positive(table, "latency_ns", where), _positive(table, "bandwidth_gbs", where),
                                     _positive(table, "shared_bandwidth_gbs", where, required=False), remote,
                                     _positive(table, "random_read_ns", where, required=False)))
        for inner, outer in zip(levels, levels[1:]):
            where = f"{source}: cache.{outer.name}"
            if outer.size_bytes <= inner.size_bytes:
                raise SimschedError(f"{where}.size_kib ({outer.size_bytes / 1024:g}) must exceed cache.{inner.name}."
                                    f"size_kib ({inner.size_bytes / 1024:g}): levels are listed innermost first")
            if outer.latency_ns < inner.latency_ns:
                raise SimschedError(f"{where}.latency_ns ({outer.latency_ns:g}) is below cache.{inner.name}'s "
                                    f"({inner.latency_ns:g}): levels are listed innermost first")
            if SHARING.index(outer.shared_by) < SHARING.index(inner.shared_by):
                raise SimschedError(f"{where} is private to a core inside the socket-shared cache.{inner.name}")
        where = f"{source}: dram"
        table = _check_keys(dram, _DRAM_KEYS, where)
        if table.get("node", "socket") != "socket":
            raise SimschedError(f"{where}.node must be socket (one NUMA node per socket), got {table['node']!r}")
        if "line_bytes" in table:
            # Without caches, the unit DMA or the memory controller moves; with them, it must be theirs.
            dram_line = _line_bytes(table, where)
            if line is not None and dram_line != line:
                raise SimschedError(f"{where}.line_bytes is {dram_line}, but the cache levels use {line}")
            line = dram_line
        if hops and "remote_latency_ns" not in table:
            raise SimschedError(f"{where}: missing key remote_latency_ns (the machine has {len(socket_hops)} sockets)")
        queueing = table.get("queueing", "closed")
        if queueing not in QUEUEING:
            raise SimschedError(f"{where}.queueing must be closed or none, got {queueing!r}")
        gathers = table.get("gathers", "overlapped")
        if gathers not in GATHERS:
            raise SimschedError(f"{where}.gathers must be overlapped or added, got {gathers!r}")
        sharing = table.get("bandwidth_share", "at-start")
        if sharing not in BANDWIDTH_SHARES:
            raise SimschedError(f"{where}.bandwidth_share must be at-start or conserved, got {sharing!r}")
        if "link_bandwidth_gbs" in table and not hops:
            raise SimschedError(f"{where}.link_bandwidth_gbs is for machines of more than one socket")
        memory = Dram(int(_positive(table, "size_gib", where) * 2**30), _positive(table, "latency_ns", where),
                      _by_hops(table, where, hops) if "remote_latency_ns" in table else (),
                      _positive(table, "bandwidth_gbs", where),
                      _positive(table, "shared_bandwidth_gbs", where, required=False), _jitter(table, where),
                      queueing, _loaded_curve(table, where),
                      _positive(table, "link_bandwidth_gbs", where, required=False),
                      _positive(table, "random_read_ns", where, required=False), gathers, sharing)
        if levels and memory.latency_ns < levels[-1].latency_ns:
            raise SimschedError(f"{where}.latency_ns ({memory.latency_ns:g}) is below the last cache level's "
                                f"({levels[-1].latency_ns:g})")
        return cls(tuple(levels), memory, line or 64, misses, socket_hops, stride)

    def describe(self) -> list[str]:
        """One line per level, for ``simsched machines NAME``."""
        lines = []
        for level in self.levels:
            shared = f", {level.shared_bandwidth_gbs:g} GB/s shared" if level.shared_bandwidth_gbs else ""
            remote = (f", other socket {'/'.join(f'{x:g}' for x in level.remote_latency_ns)} ns"
                      if level.remote_latency_ns else "")
            lines.append(f"    {level.name}: {_size(level.size_bytes)} per {level.shared_by}, {level.line_bytes} B lines, "
                         f"{level.latency_ns:g} ns{remote}, {level.bandwidth_gbs:g} GB/s per core{shared}")
        d = self.dram
        remote = f", remote {'/'.join(f'{x:g}' for x in d.remote_latency_ns)} ns" if d.remote_latency_ns else ""
        shared = f", {d.shared_bandwidth_gbs:g} GB/s per node" if d.shared_bandwidth_gbs else ""
        line = "" if self.levels else f", {self.line_bytes} B lines"  # else shown with the caches
        lines.append(f"    dram: {_size(d.size_bytes)} per socket{line}, {d.latency_ns:g} ns{remote}, "
                     f"{d.bandwidth_gbs:g} GB/s per core{shared}")
        if d.queueing == "none":
            lines.append("    loaded latency: none (a miss costs the idle latency however loaded)")
        elif d.loaded_latency_ns or d.shared_bandwidth_gbs or d.link_bandwidth_gbs:
            measured = ", ".join(f"{ns:g} ns at {gbs:g} GB/s" for gbs, ns in d.loaded_latency_ns)
            queue = "queue at the node's shared bandwidth" if d.shared_bandwidth_gbs else "none"
            controller = f"measured, {measured}" if d.loaded_latency_ns else queue
            link = f"; links: queue at {d.link_bandwidth_gbs:g} GB/s each way" if d.link_bandwidth_gbs else ""
            lines.append(f"    loaded latency: controller {controller}{link}")
        return lines


def _stride_misses(value, where: str) -> tuple[tuple[int, int], ...]:
    """[[array KiB, misses], ...] with sizes ascending and whole misses >= 1, as (bytes, misses) pairs."""
    def number(x):
        return isinstance(x, (int, float)) and not isinstance(x, bool)

    shape = (f"{where}.stride_misses must be a list of [array KiB, misses in flight] pairs, the sizes ascending "
             f"and the misses integers >= 1, got {value!r}")
    if not isinstance(value, list) or not value:
        raise SimschedError(shape)
    pairs = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and number(pair[0]) and pair[0] > 0
                and isinstance(pair[1], int) and not isinstance(pair[1], bool) and pair[1] >= 1):
            raise SimschedError(shape)
        pairs.append((int(round(pair[0] * 1024)), pair[1]))
    if any(b[0] <= a[0] for a, b in zip(pairs, pairs[1:])):
        raise SimschedError(shape)
    return tuple(pairs)


def _loaded_curve(table: dict, where: str) -> tuple[tuple[float, float], ...]:
    """``loaded_latency_ns``: [[GB/s others read, ns], ...] from 0 GB/s, both ascending; () if absent."""
    if "loaded_latency_ns" not in table:
        return ()
    value = table["loaded_latency_ns"]
    shape = (f"{where}.loaded_latency_ns must be a list of at least two [GB/s others read, latency ns] "
             f"pairs, the first at 0 GB/s, the GB/s rising and the ns (> 0) not falling, got {value!r}")
    if not isinstance(value, list) or len(value) < 2:
        raise SimschedError(shape)
    pairs = []
    for pair in value:
        if not (isinstance(pair, list) and len(pair) == 2 and all(_number(x) for x in pair)
                and 0 <= pair[0] <= MAX_VALUE and 0 < pair[1] <= MAX_VALUE):
            raise SimschedError(shape)
        pairs.append((float(pair[0]), float(pair[1])))
    if pairs[0][0] != 0 or any(b[0] <= a[0] or b[1] < a[1] for a, b in zip(pairs, pairs[1:])):
        raise SimschedError(shape)
    return tuple(pairs)


def _size(nbytes: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:g} {unit}"
    return f"{nbytes} B"


def socket_hops(links, sockets: int) -> np.ndarray:
    """Hop counts between sockets over the machine's socket links (breadth-first on the topology graph)."""
    hops = np.zeros((sockets, sockets), dtype=np.int64)
    for start in range(sockets):
        seen, frontier, distance = {start}, [start], 0
        while frontier and len(seen) < sockets:   # stop once every socket is reached (at once, fully linked)
            distance += 1
            reached = []
            for s in frontier:
                for node in links.adj.get(("socket", s), {}):
                    if node[0] == "socket" and node[1] not in seen:
                        seen.add(node[1])
                        reached.append(node[1])
                        hops[start, node[1]] = distance
            frontier = reached
    return hops
