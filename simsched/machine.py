"""A machine model: cores, their topology and latencies, and documented software costs, loaded from TOML."""

from __future__ import annotations

import copy
import heapq
import itertools
import json
import math
import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .errors import SimschedError
from .hierarchy import DRAM_OPTIONAL_KEYS, MAX_VALUE, Hierarchy, socket_hops
from .noise import NOISE_KEYS, check_noise
from .spec import Param, format_spec, parse_spec, resolve_params

# The schema every machine file is checked against: section -> key -> (type, required, check, rule).
_POSITIVE = (lambda v: v > 0, "> 0")
_NON_NEGATIVE = (lambda v: v >= 0, ">= 0")
_COUNT = (lambda v: v >= 1, ">= 1")


def _key(kind, required=True, check=_NON_NEGATIVE):
    return (kind, required, check)


SCHEMA: dict[str, dict[str, tuple]] = {
    "topology": {
        "sockets": _key(int, check=_COUNT),
        "cores_per_socket": _key(int, check=_COUNT),
        "threads_per_core": _key(int, False, _COUNT),
        "socket_links": _key((str, list), False, None),
        "core_layout": _key(str, False, None),
        # Nested groups of cores inside a socket, innermost first: {ccx = 4} for core complexes of 4 cores.
        "core_groups": _key(dict, False, None),
    },
    "clock": {
        "base_ghz": _key(float, check=_POSITIVE),
        "turbo_max_ghz": _key(float, False, _POSITIVE),
        "turbo_all_ghz": _key(float, False, _POSITIVE),
        "all_core_throughput": _key(float, False, (lambda v: 0 < v <= 1, "in (0, 1]")),
        # Each core's speed relative to the nominal core: one number per core, or [count, speed] runs.
        "core_speed": _key(list, False, None),
    },
    "latency_ns": {
        "smt": _key(float, False),
        "same_socket": _key(float, False),
        "ring_hop": _key(float, False),
        "socket_hop": _key(float, False),
        "transfer_fraction": _key(float, False, (lambda v: 0 < v <= 1, "in (0, 1]")),
        "matrix": _key(list, False, None),
    },
    "coherence": {
        "protocol": _key(str, False, None),  # snoop: spinners told at once; directory: one by one
        "serve_ns": _key(float, False),
        "atomics": _key(str, False, None),   # locked: requests queue for the line; reservation: LL/SC retries
        "hold": _key(str, False, None),      # request: a line stays with its last user until a request could
                                             # reach it; none: it leaves as the operation ends
    },
    "costs_ns": {
        "atomic": _key(float),
        "store": _key(float),
        "loop_setup": _key(float),
        "chunk": _key(float),
        "combine": _key(float),
        "spawn": _key(float, False),
        "steal": _key(float, False),
        "stack_switch": _key(float, False),
        "split": _key(float, False),
        "task_create": _key(float, False),
        "timer": _key(float, False),
    },
    "os": {
        "wakeup_ns": _key(float, False),
    },
    # The OpenMP runtime whose loop_setup and chunk [costs_ns] holds (native calibrate --openmp), as measured.
    "openmp": {
        "runtime": _key(str, check=None),
        "path": _key(str, False, None),
        "version": _key(str, False, None),
        "profile": _key(str, False, None),
        "threads": _key(int, check=_COUNT),
        "chunk_ns": _key(float),
        "loop_setup_ns": _key(float),
        "contended_chunk_ns": _key(float, False),
        "loop_iterations": _key(int, False, _COUNT),
        "static_loop_ns": _key(float, False),
        "dynamic64_loop_ns": _key(float, False),
        "guided_loop_ns": _key(float, False),
    },
    "memory_ns": {
        "l1": _key(float, False),
        "l2": _key(float, False),
        "l3": _key(float, False),
        "dram_local": _key(float, False),
        "l3_remote": _key(float, False),
        "dram_remote": _key(float, False),
        "dma_local_store": _key(float, False),
        "dma_memory": _key(float, False),
        "mmio": _key(float, False),
    },
}
_TOP_LEVEL = {"name": str, "description": str}
ATOMICS = ("locked", "reservation")
# [openmp] runtime: the OpenMP runtimes native calibrate --openmp measures (by the start of their library's
# file name), and the omp schedulers' runtime= profile that models each.
OPENMP_RUNTIMES = {"libiomp5": "llvm", "libomp": "llvm", "libgomp": "gnu"}
HOLDS = ("request", "none")
# The memory hierarchy ([cache.l1], [cache.l2], ..., [dram]): nested tables, checked in hierarchy.py.
_HIERARCHY_SECTIONS = ("cache", "dram")
# OS noise and late arrival ([noise]): checked in noise.py.
_NOISE_SECTION = "noise"
MAX_CORES = 1024
_REQUIRED_SECTIONS = ("topology", "clock", "latency_ns", "costs_ns")
# What a machine file that leaves out [coherence] or [os] (or one of their keys) gets: shown
# as "(default)" by ``simsched machines NAME``, so a what-if machine states only what it changes.
DEFAULTS: dict[str, dict[str, Any]] = {
    "coherence": {"protocol": "snoop", "serve_ns": 0.0, "atomics": "locked"},
    "os": {"wakeup_ns": 0.0},
}


@dataclass
class Machine:
    """A modeled many-core machine: which cores there are, how far apart, and what operations cost."""

    name: str
    description: str
    data: dict[str, Any] = field(repr=False)
    latency: np.ndarray = field(repr=False)
    links: "Topology" = field(repr=False)
    # Caches and DRAM, or None when the machine file describes none (no locality model then).
    hierarchy: "Hierarchy | None" = field(default=None, repr=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> "Machine":
        """Validate a machine description (as parsed from TOML) and build its model."""
        _validate(data, source)
        links, latency = _build_topology(data, source)
        hierarchy = Hierarchy.from_machine_data(data, socket_hops(links, data["topology"]["sockets"]), source)
        name = data.get("name", Path(source).stem)
        return cls(name=name, description=data.get("description", ""), data=data,
                   latency=latency, links=links, hierarchy=hierarchy)

    @property
    def graph(self):
        """The core/socket graph as a networkx Graph (edge attribute ``weight`` in ns)."""
        return self.links.to_networkx()

    # -- structure -------------------------------------------------------------------
    @property
    def topology(self) -> dict[str, Any]:
        return self.data["topology"]

    @property
    def sockets(self) -> int:
        return self.topology["sockets"]

    @property
    def cores_per_socket(self) -> int:
        return self.topology["cores_per_socket"]

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    def socket_of(self, core: int) -> int:
        return core // self.cores_per_socket

    @property
    def costs(self) -> dict[str, float]:
        """Software costs in ns, shared by every scheduler (missing optional ones are 0)."""
        costs = {k: 0.0 for k in SCHEMA["costs_ns"]}
        costs.update({k: float(v) for k, v in self.data["costs_ns"].items()})
        return costs

    @property
    def transfer_fraction(self) -> float:
        """One cache-line transfer as a fraction of the one-way (ping-pong) latency."""
        return float(self.data["latency_ns"].get("transfer_fraction", 0.5))

    def setting(self, section: str, key: str) -> Any:
        """A [coherence] or [os] value: the machine file's, else its documented default."""
        return self.data.get(section, {}).get(key, DEFAULTS[section][key])

    def defaulted(self) -> list[str]:
        """The ``section.key`` settings the machine file leaves to their defaults."""
        return [f"{section}.{key}" for section, keys in DEFAULTS.items() for key in keys
                if key not in self.data.get(section, {})]

    @property
    def wakeup_ns(self) -> float:
        return float(self.setting("os", "wakeup_ns"))

    @property
    def coherence(self) -> str:
        return self.setting("coherence", "protocol")

    @property
    def atomics(self) -> str:
        """How atomics take a contended line: ``locked`` (they queue for it) or ``reservation`` (LL/SC, retried)."""
        return self.setting("coherence", "atomics")

    @property
    def hold(self) -> str:
        """How long a line stays with the core that used it last: ``request`` (until another core's
        request could reach it, so that core's retry runs there) or ``none`` (it leaves at once)."""
        return self.data.get("coherence", {}).get("hold", HOLDS[0])

    @property
    def serve_ns(self) -> float:
        """Time the line's source takes per spinner when spinners re-read after a write."""
        return float(self.setting("coherence", "serve_ns"))

    @property
    def memory_ns(self) -> dict[str, float]:
        return {k: float(v) for k, v in self.data.get("memory_ns", {}).items()}

    def check_threads(self, threads: int) -> int:
        """Return ``threads`` if this machine can pin that many workers, else raise."""
        if isinstance(threads, bool) or not isinstance(threads, (int, np.integer)):
            raise SimschedError(f"threads must be an integer, got {threads!r}")
        if threads < 1:
            raise SimschedError(f"threads must be >= 1, got {threads}")
        if threads > self.cores:
            raise SimschedError(
                f"threads={threads} exceeds the {self.cores} cores of machine {self.name}")
        return int(threads)

    @property
    def core_speed(self) -> np.ndarray:
        """Each core's speed relative to the nominal core (``clock.core_speed``; all 1 without it)."""
        speeds = self.data["clock"].get("core_speed")
        return np.ones(self.cores) if speeds is None else core_speeds(speeds, self.cores, self.name)

    def placement(self, threads: int) -> list[int]:
        """Cores of the workers, pinned compactly: worker w on core w, filling a socket first."""
        return list(range(self.check_threads(threads)))

    def speed_factors(self, threads: int) -> np.ndarray:
        """Time per ns of sequential work on each worker's core, given how many cores of its socket are busy.

        Sequential time is measured on one busy core at the single-core turbo clock.
        With more busy cores in a socket the clock drops toward the all-core turbo, and
        each core's throughput drops toward ``all_core_throughput`` (cores sharing the
        socket's caches, ring and memory controllers); both are interpolated linearly
        in the number of busy cores.
        """
        clock = self.data["clock"]
        top = clock.get("turbo_max_ghz", clock["base_ghz"])
        allcore = clock.get("turbo_all_ghz", top)
        shared = clock.get("all_core_throughput", 1.0)
        share = self.busy_share(threads)
        ghz = top + (allcore - top) * share
        throughput = 1.0 + (shared - 1.0) * share
        return top / ghz / throughput / self.core_speed[self.placement(threads)]

    def busy_share(self, threads: int) -> np.ndarray:
        """For each worker, its socket's other busy cores as a share of the socket's other cores (0 to 1).

        It is 0 for a worker alone in its socket and 1 when every core of the socket is busy:
        what the clock and whatever else cores share in a socket fall with, in a run of
        ``threads`` workers pinned as ``placement`` pins them.
        """
        sockets = np.array([self.socket_of(c) for c in self.placement(threads)])
        busy = np.bincount(sockets, minlength=self.sockets)
        return (busy[sockets] - 1) / max(self.cores_per_socket - 1, 1)

    # -- what-if variants ------------------------------------------------------------
    def replace(self, **changes: Any) -> "Machine":
        """A copy with some values changed, keyed ``section.key`` (``latency_ns__socket_hop`` also works).

        >>> m.replace(**{"latency_ns.socket_hop": 120, "topology.sockets": 8})
        """
        data = copy.deepcopy(self.data)
        data.pop("_source", None)
        if "name" not in changes:
            # A variant must not pass for the machine it came from in result tables.
            data["name"] = f"{self.name}[" + ",".join(f"{k.replace('__', '.')}={format_setting(v)}"
                                                      for k, v in changes.items()) + "]"
        for dotted, value in changes.items():
            *tables, key = dotted.replace("__", ".").split(".")
            table = data
            for name in tables:  # cache.l3.size_kib reaches into nested tables
                table = table.setdefault(name, {})
                if not isinstance(table, dict):
                    raise SimschedError(f"cannot set {dotted}: {name} is not a table")
            table[key] = value
        keys = {k.replace("__", ".") for k in changes}
        if "latency_ns.matrix" not in keys and keys & {"topology.sockets", "topology.cores_per_socket"}:
            data["latency_ns"].pop("matrix", None)  # it described the old core count
        return Machine.from_dict(data, source=f"{self.name} (modified)")

    def describe(self) -> str:
        """A human summary of topology, latencies and costs."""
        t = self.topology
        lines = [f"{self.name}: {self.description}".rstrip(": "),
                 f"  topology: {t['sockets']} socket(s) x {t['cores_per_socket']} cores"
                 f" x {t.get('threads_per_core', 1)} thread(s), socket links: {_links_text(t)}",
                 "  clock: " + ", ".join(f"{k} {v}" for k, v in self.data["clock"].items())]
        groups = t.get("core_groups", {})
        if groups:
            lines.append("  core groups: " + ", ".join(f"{name} of {size} cores" for name, size in groups.items()))
        if self.cores > 1:
            socket = np.arange(self.cores) // self.cores_per_socket
            together = socket[:, None] == socket[None, :]
            off_diagonal = ~np.eye(self.cores, dtype=bool)
            for text, mask in (("within a socket", together & off_diagonal), ("across sockets", ~together)):
                if mask.any():
                    values = self.latency[mask]
                    lines.append(f"  one-way latency {text}: {values.min():.1f}-{values.max():.1f} ns")
        speeds = self.core_speed
        if not np.all(speeds == 1.0):
            lines.append(f"  core speeds: {speeds.min():g}-{speeds.max():g} x nominal "
                         f"({int(np.sum(speeds != 1.0))} core(s) not at 1)")
        smt = self.data["latency_ns"].get("smt")
        if smt is not None:
            lines.append(f"  one-way latency between hyperthreads: {smt} ns")
        defaulted = self.defaulted()

        def mark(setting):
            return " (default)" if setting in defaulted else ""

        lines.append(f"  coherence: {self.coherence}{mark('coherence.protocol')}, serve {self.serve_ns} ns "
                     f"per spinner{mark('coherence.serve_ns')}, {self.atomics} atomics{mark('coherence.atomics')}")
        lines.append("  software costs (ns): " + ", ".join(
            f"{k} {v:g}" for k, v in self.data["costs_ns"].items()))
        omp = self.data.get("openmp")
        if omp is not None:
            lines.append(f"  OpenMP runtime of loop_setup and chunk: {omp['runtime']} on {omp['threads']} "
                         f"thread(s), chunk {omp['chunk_ns']:g} ns, fork/join {omp['loop_setup_ns']:g} ns as "
                         "measured")
        if self.wakeup_ns or "os.wakeup_ns" in defaulted:
            lines.append(f"  wake-up latency: {self.wakeup_ns:g} ns{mark('os.wakeup_ns')}")
        if self.memory_ns:
            lines.append("  memory (ns): " + ", ".join(f"{k} {v:g}" for k, v in self.memory_ns.items()))
        if self.hierarchy is not None:
            lines.append("  memory hierarchy:")
            lines.extend(self.hierarchy.describe())
        return "\n".join(lines)


def _links_text(topology):
    links = topology.get("socket_links", "full")
    return links if isinstance(links, str) else f"{len(links)} explicit link(s)"


def _validate(data: dict[str, Any], source: str) -> None:
    if not isinstance(data, dict):
        raise SimschedError(f"{source}: a machine file must be a TOML table")
    for key, value in data.items():
        if key.startswith("_"):
            continue
        if key in _TOP_LEVEL:
            if not isinstance(value, _TOP_LEVEL[key]):
                raise SimschedError(f"{source}: key {key} must be a string")
            continue
        if key not in SCHEMA and key not in _HIERARCHY_SECTIONS and key != _NOISE_SECTION:
            raise SimschedError(f"{source}: unknown section or key {key!r}")
        if not isinstance(value, dict):
            raise SimschedError(f"{source}: {key} must be a table")
    for section in _REQUIRED_SECTIONS:
        if section not in data:
            raise SimschedError(f"{source}: missing section [{section}]")
    for section, table in data.items():
        if section not in SCHEMA:  # the hierarchy sections are checked by Hierarchy
            continue
        for key in table:
            if key not in SCHEMA[section] and not (section == "latency_ns" and key in _group_names(data)):
                raise SimschedError(f"{source}: unknown key {section}.{key}")
        for key, (kind, required, check) in SCHEMA[section].items():
            where = f"{section}.{key}"
            if key not in table:
                if required:
                    raise SimschedError(f"{source}: missing key {where}")
                continue
            value = table[key]
            if kind is float:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise SimschedError(f"{source}: {where} must be a number, got {value!r}")
                if not math.isfinite(value) or abs(value) > MAX_VALUE:
                    raise SimschedError(f"{source}: {where} must be a finite number up to {MAX_VALUE:g}, "
                                        f"got {value!r}")
            elif kind is int:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise SimschedError(f"{source}: {where} must be an integer, got {value!r}")
            elif not isinstance(value, kind):
                raise SimschedError(f"{source}: {where} has the wrong type ({type(value).__name__})")
            if check is not None and not check[0](value):
                raise SimschedError(f"{source}: {where} must be {check[1]}, got {value!r}")
    topo = data["topology"]
    if topo["sockets"] * topo["cores_per_socket"] > MAX_CORES:
        raise SimschedError(f"{source}: topology has {topo['sockets'] * topo['cores_per_socket']} cores; "
                            f"at most {MAX_CORES} are supported")
    layout = topo.get("core_layout", "crossbar")
    if layout not in ("crossbar", "ring"):
        raise SimschedError(f"{source}: topology.core_layout must be crossbar or ring, got {layout!r}")
    protocol = data.get("coherence", {}).get("protocol", DEFAULTS["coherence"]["protocol"])
    if protocol not in ("snoop", "directory"):
        raise SimschedError(f"{source}: coherence.protocol must be snoop or directory, got {protocol!r}")
    atomics = data.get("coherence", {}).get("atomics", DEFAULTS["coherence"]["atomics"])
    if atomics not in ATOMICS:
        raise SimschedError(f"{source}: coherence.atomics must be {' or '.join(ATOMICS)}, got {atomics!r}")
    hold = data.get("coherence", {}).get("hold", HOLDS[0])
    if hold not in HOLDS:
        raise SimschedError(f"{source}: coherence.hold must be {' or '.join(HOLDS)}, got {hold!r}")
    if "openmp" in data:
        _validate_openmp(data["openmp"], source)
    lat = data["latency_ns"]
    if _NOISE_SECTION in data:
        check_noise(data[_NOISE_SECTION], topo["sockets"] * topo["cores_per_socket"], source)
    _validate_groups(data, source)
    if "core_speed" in data["clock"]:
        core_speeds(data["clock"]["core_speed"], topo["sockets"] * topo["cores_per_socket"], source)
    if "matrix" not in lat:
        needed = "ring_hop" if layout == "ring" else "same_socket"
        if topo["cores_per_socket"] > 1 and needed not in lat:
            raise SimschedError(f"{source}: missing key latency_ns.{needed}")
        if topo["sockets"] > 1 and "socket_hop" not in lat:
            raise SimschedError(f"{source}: missing key latency_ns.socket_hop")
    clock = data["clock"]
    if "turbo_all_ghz" in clock and clock["turbo_all_ghz"] > clock.get("turbo_max_ghz", math.inf):
        raise SimschedError(f"{source}: clock.turbo_all_ghz must not exceed clock.turbo_max_ghz")


def _validate_openmp(table: dict[str, Any], source: str) -> None:
    runtime = table["runtime"]
    if runtime not in OPENMP_RUNTIMES:
        raise SimschedError(f"{source}: openmp.runtime must be {', '.join(OPENMP_RUNTIMES)}, got {runtime!r}")
    profiles = sorted(set(OPENMP_RUNTIMES.values()))
    if "profile" in table and table["profile"] not in profiles:
        raise SimschedError(f"{source}: openmp.profile must be {' or '.join(profiles)}, "
                            f"got {table['profile']!r}")
    loops = [key for key in ("static_loop_ns", "dynamic64_loop_ns", "guided_loop_ns") if key in table]
    if loops and "loop_iterations" not in table:
        raise SimschedError(f"{source}: openmp.{loops[0]} needs openmp.loop_iterations (its iterations)")


def _group_names(data: dict[str, Any]) -> list[str]:
    groups = data.get("topology", {}).get("core_groups")
    return list(groups) if isinstance(groups, dict) else []


def _validate_groups(data: dict[str, Any], source: str) -> None:
    """Core groups nest (each group's size divides the next and the socket) and each has a latency.

    A latency grows with the level that two cores first share, so that the groups are a
    tree of latencies: the innermost group's at most the next one's, at most ``same_socket``.
    """
    topo, lat = data["topology"], data["latency_ns"]
    groups = topo.get("core_groups", {})
    if not groups:
        return
    if topo.get("core_layout", "crossbar") != "crossbar":
        raise SimschedError(f"{source}: topology.core_groups needs core_layout = \"crossbar\"")
    inner, below = 1, 0.0
    for name, cores in groups.items():
        where = f"topology.core_groups.{name}"
        if name in SCHEMA["latency_ns"] or not name.isidentifier():
            raise SimschedError(f"{source}: {where}: a group needs a name of its own (not {name!r})")
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 2:
            raise SimschedError(f"{source}: {where} must be an integer >= 2, got {cores!r}")
        if cores % inner or topo["cores_per_socket"] % cores:
            raise SimschedError(f"{source}: {where} = {cores} must be a multiple of the group inside it ({inner}) "
                                f"and divide topology.cores_per_socket ({topo['cores_per_socket']})")
        inner = cores
        if "matrix" in lat:
            continue
        latency = lat.get(name)
        if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency <= MAX_VALUE:
            raise SimschedError(f"{source}: latency_ns.{name} (one-way latency within a {name}) must be a number "
                                f">= 0, got {latency!r}")
        if latency < below:
            raise SimschedError(f"{source}: latency_ns.{name} = {latency} is below the latency of the group "
                                f"inside it ({below}): latencies must grow outward")
        below = latency
    if "matrix" not in lat and lat.get("same_socket", below) < below:
        raise SimschedError(f"{source}: latency_ns.same_socket = {lat['same_socket']} is below latency_ns."
                            f"{name} ({below}): latencies must grow outward")


def core_speeds(value: list, cores: int, source: str = "machine") -> np.ndarray:
    """``clock.core_speed`` as one speed per core: a list of ``cores`` numbers, or ``[count, speed]`` runs."""
    where = f"{source}: clock.core_speed"
    runs = value and all(isinstance(item, list) for item in value)
    if runs:
        if not all(len(item) == 2 and isinstance(item[0], int) and not isinstance(item[0], bool) and item[0] >= 1
                   for item in value):
            raise SimschedError(f"{where}: runs must be [count, speed] pairs with count >= 1")
        if sum(item[0] for item in value) != cores:
            raise SimschedError(f"{where}: the runs cover {sum(item[0] for item in value)} cores; "
                                f"the machine has {cores}")
        speeds = [item[1] for item in value for _ in range(item[0])]
    else:
        if len(value) != cores:
            raise SimschedError(f"{where}: {len(value)} speeds given for {cores} cores (give one per core, "
                                "or [count, speed] runs)")
        speeds = value
    for speed in speeds:
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed) or speed <= 0:
            raise SimschedError(f"{where}: speeds must be numbers > 0, got {speed!r}")
    return np.asarray(speeds, dtype=float)


class Topology:
    """An undirected weighted graph of cores and sockets, kept as plain dicts (networkx costs 0.2 s to import).

    Nodes, edges and neighbours keep the order they were added in, as in a networkx Graph,
    so that shortest paths, and so the latencies, come out as networkx computes them.
    """

    def __init__(self):
        self.nodes: dict[tuple, dict[str, Any]] = {}
        self.adj: dict[tuple, dict[tuple, float]] = {}
        self.edges: list[tuple[tuple, tuple, float]] = []

    def add_node(self, node, **attrs) -> None:
        self.nodes.setdefault(node, {}).update(attrs)
        self.adj.setdefault(node, {})

    def add_edge(self, a, b, weight: float) -> None:
        for node in (a, b):
            self.add_node(node)
        self.adj[a][b] = weight
        self.adj[b][a] = weight
        self.edges.append((a, b, weight))

    def is_connected(self) -> bool:
        start = next(iter(self.adj))
        reached, todo = {start}, [start]
        while todo:
            for other in self.adj[todo.pop()]:
                if other not in reached:
                    reached.add(other)
                    todo.append(other)
        return len(reached) == len(self.adj)

    def distances(self, source) -> dict[tuple, float]:
        """Shortest-path lengths from ``source``: Dijkstra as networkx runs it (same order, same sums)."""
        dist: dict[tuple, float] = {}
        seen: dict[tuple, float] = {source: 0}
        tie = itertools.count()
        fringe = [(0, next(tie), source)]
        while fringe:
            d, _, node = heapq.heappop(fringe)
            if node in dist:
                continue
            dist[node] = d
            for other, cost in self.adj[node].items():
                length = d + cost
                if other not in dist and (other not in seen or length < seen[other]):
                    seen[other] = length
                    heapq.heappush(fringe, (length, next(tie), other))
        return dist

    def to_networkx(self):
        """The same graph as a networkx Graph."""
        import networkx as nx

        graph = nx.Graph()
        for node, attrs in self.nodes.items():
            graph.add_node(node, **attrs)
        for a, b, weight in self.edges:
            graph.add_edge(a, b, weight=weight)
        return graph


def _build_topology(data: dict[str, Any], source: str) -> tuple[Topology, np.ndarray]:
    """The core/socket graph and the core-to-core one-way latency matrix it implies."""
    topo, lat = data["topology"], data["latency_ns"]
    sockets, per = topo["sockets"], topo["cores_per_socket"]
    n = sockets * per
    ring = topo.get("core_layout", "crossbar") == "ring"
    groups = list(topo.get("core_groups", {}).items())
    graph = Topology()
    for s in range(sockets):
        graph.add_node(("socket", s), kind="socket")
        for i in range(per):
            core = s * per + i
            graph.add_node(("core", core), kind="core", socket=s,
                           threads=topo.get("threads_per_core", 1))
        if ring:
            # The socket's interconnect is a ring; its first core is the gateway off-chip.
            hop = float(lat.get("ring_hop", 0.0))
            for i in range(per):
                a, b = s * per + i, s * per + (i + 1) % per
                if a != b:
                    graph.add_edge(("core", a), ("core", b), weight=hop)
            graph.add_edge(("socket", s), ("core", s * per), weight=0.0)
        elif groups and "matrix" not in lat:
            # Groups nest as a tree whose edges are half the latency each level adds.
            for i in range(per):
                node, below = ("core", s * per + i), 0.0
                for name, size in groups:
                    parent = (name, (s * per + i) // size)
                    graph.add_edge(node, parent, weight=(float(lat[name]) - below) / 2)
                    node, below = parent, float(lat[name])
                if i % groups[-1][1] == 0:
                    graph.add_edge(node, ("socket", s), weight=(float(lat.get("same_socket", below)) - below) / 2)
        else:
            # A crossbar: every pair of cores in the socket is same_socket apart.
            half = float(lat.get("same_socket", 0.0)) / 2
            for i in range(per):
                graph.add_edge(("socket", s), ("core", s * per + i), weight=half)
    links = topo.get("socket_links", "full")
    if sockets > 1:
        if links == "full":
            pairs = [(a, b) for a in range(sockets) for b in range(a + 1, sockets)]
        elif links == "ring":
            pairs = [(s, (s + 1) % sockets) for s in range(sockets) if s != (s + 1) % sockets]
        elif isinstance(links, list):
            pairs = []
            for link in links:
                if (not isinstance(link, list) or len(link) != 2
                        or not all(isinstance(s, int) and 0 <= s < sockets for s in link)):
                    raise SimschedError(
                        f"{source}: topology.socket_links entries must be [a, b] socket pairs")
                pairs.append(tuple(link))
        else:
            raise SimschedError(f"{source}: topology.socket_links must be full, ring or a list of pairs")
        for a, b in pairs:
            graph.add_edge(("socket", a), ("socket", b), weight=float(lat["socket_hop"]))
        if not graph.is_connected():
            raise SimschedError(f"{source}: topology.socket_links leave some sockets unreachable")
    if "matrix" in lat:
        matrix = np.asarray(lat["matrix"], dtype=float) if _is_matrix(lat["matrix"], n) else None
        if matrix is None:
            raise SimschedError(f"{source}: latency_ns.matrix must be a {n}x{n} table of numbers >= 0")
        return graph, matrix
    hops = socket_hops(graph, sockets)
    matrix = _ring_latency(lat, sockets, per, hops) if ring else _crossbar_latency(lat, sockets, per, groups, hops)
    np.fill_diagonal(matrix, 0.0)
    return graph, matrix


def _added(start: np.ndarray, step: float, times: np.ndarray) -> np.ndarray:
    """``start`` plus ``step`` added ``times`` times, one addition after another (as a shortest path sums it)."""
    out = np.array(start, dtype=float)
    for k in range(int(times.max()) if times.size else 0):
        out = np.where(times > k, out + step, out)
    return out


def _crossbar_latency(lat, sockets: int, per: int, groups, hops: np.ndarray) -> np.ndarray:
    """The latency matrix of crossbar sockets of nested core groups, as the paths of the topology graph sum it.

    Two cores of one socket are the latency of the innermost group they share apart, else
    ``same_socket``; cores of different sockets are half of ``same_socket`` out, one
    ``socket_hop`` per hop, and half back in.
    """
    same = float(lat.get("same_socket", float(lat[groups[-1][0]]) if groups else 0.0))
    half = same / 2
    inside = np.full((per, per), half + half)
    core = np.arange(per)
    for name, size in reversed(groups):  # inner groups overwrite outer ones
        inside[(core[:, None] // size) == (core[None, :] // size)] = float(lat[name])
    across = _added(np.full(hops.shape, half), float(lat.get("socket_hop", 0.0)), hops) + half
    matrix = np.repeat(np.repeat(across, per, axis=0), per, axis=1)
    for s in range(sockets):
        matrix[s * per:(s + 1) * per, s * per:(s + 1) * per] = inside
    return matrix


def _ring_latency(lat, sockets: int, per: int, hops: np.ndarray) -> np.ndarray:
    """The latency matrix of ring sockets whose first core is the gateway to the socket links."""
    hop = float(lat.get("ring_hop", 0.0))
    position = np.arange(per)
    around = np.abs(position[:, None] - position[None, :])
    around = np.minimum(around, per - around)
    inside = _added(np.zeros((per, per)), hop, around)
    to_gateway = around[:, 0]
    # core i -> its gateway (ring hops), the socket hops, the other gateway -> core j; the gateways' edges to
    # their socket nodes weigh 0, which adds nothing to a sum.
    out = _added(np.zeros(per), hop, to_gateway)[:, None, None]
    out = _added(np.broadcast_to(out, (per, *hops.shape)).copy(), float(lat.get("socket_hop", 0.0)),
                 np.broadcast_to(hops, (per, *hops.shape)))
    # out[i, a, b]: from core i of socket a to socket b's gateway; then ring hops to core j.
    full = _added(np.broadcast_to(out[:, :, :, None], (per, sockets, sockets, per)).copy(), hop,
                  np.broadcast_to(to_gateway[None, None, None, :], (per, sockets, sockets, per)))
    matrix = full.transpose(1, 0, 2, 3).reshape(sockets * per, sockets * per)
    for s in range(sockets):
        matrix[s * per:(s + 1) * per, s * per:(s + 1) * per] = inside
    return matrix


def _is_matrix(value, n):
    if not isinstance(value, list) or len(value) != n:
        return False
    for row in value:
        if not isinstance(row, list) or len(row) != n:
            return False
        for x in row:
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not math.isfinite(x) or x < 0:
                return False
    return True


def _machine_files():
    """The folder of built-in machine files: package data when installed, ``machines/`` in a checkout."""
    try:
        return resources.files("simsched.machines")
    except ModuleNotFoundError:
        # Imported from a source tree (not through the installed package's mapping).
        return Path(__file__).resolve().parent.parent / "machines"


def builtin_machine_bytes(name: str) -> bytes | None:
    """The bytes of the built-in machine file ``name``, or None where there is none."""
    resource = _machine_files().joinpath(f"{name}.toml")
    return resource.read_bytes() if resource.is_file() else None


def value_sources(name: str) -> dict[str, str]:
    """Each ``section.key`` of a built-in machine file with the comment giving its source, continued lines joined."""
    raw = builtin_machine_bytes(name)
    if raw is None:
        return {}
    sources: dict[str, str] = {}
    section, last = "", None
    for line in raw.decode("utf-8").splitlines():
        text = line.strip()
        if text.startswith("["):
            section, last = text.strip("[]").strip(), None
        elif text.startswith("#"):
            if last is not None and line[:1].isspace():  # an indented comment continues the value's source
                sources[last] += " " + text.lstrip("#").strip()
            else:
                last = None
        elif "=" in text and "#" in text:
            key = text.split("=", 1)[0].strip()
            last = f"{section}.{key}" if section else key
            sources[last] = text.split("#", 1)[1].strip()
        else:
            last = None
    return sources


def builtin_machines() -> list[str]:
    """Names of the machine files shipped with simsched, and of those plugins registered."""
    shipped = [p.name[:-5] for p in _machine_files().iterdir() if p.name.endswith(".toml")]
    return sorted(set(shipped) | set(_REGISTERED_MACHINES))


# Machines plugins add by name: name -> machine file.
_REGISTERED_MACHINES: dict[str, Path] = {}


def register_machine(name: str, path: str | Path) -> None:
    """Make the machine file ``path`` loadable by ``name`` (as a built-in machine is), e.g. from a plugin."""
    path = Path(path)
    if not isinstance(name, str) or not name or _machine_form(name) != "builtin":
        raise SimschedError(f"register_machine: {name!r} is not a machine name (a name, not a path or a spec)")
    if not path.is_file():
        raise SimschedError(f"register_machine: {name}: no machine file at {path}")
    held = _REGISTERED_MACHINES.get(name)
    if (held is not None and held != path.resolve()) or _machine_files().joinpath(f"{name}.toml").is_file():
        raise SimschedError(f"register_machine: a machine {name!r} exists already")
    _REGISTERED_MACHINES[name] = path.resolve()


UNIFORM = "uniform"
# uniform:key=value sets these entries of machines/uniform.toml.
UNIFORM_PARAMS = {
    "cores": Param("cores", int, 16, lambda v: 1 <= v <= MAX_CORES, f"in [1, {MAX_CORES}]",
                   help="cores, all one latency apart"),
    "latency_ns": Param("latency_ns", float, 100.0, lambda v: v >= 0, ">= 0",
                        help="one-way core-to-core latency in ns"),
}


def uniform_machine(spec: str) -> Machine:
    """The parametric machine ``uniform:cores=N,latency_ns=L``: equidistant cores, constant clock, no caches."""
    _, given = parse_spec(spec, "machine")
    params = resolve_params(f"machine {UNIFORM}", UNIFORM_PARAMS, given)
    data = tomllib.loads(_machine_files().joinpath(f"{UNIFORM}.toml").read_text("utf-8"))
    data["topology"]["cores_per_socket"] = params["cores"]
    data["latency_ns"]["same_socket"] = params["latency_ns"]
    data["name"] = format_spec(UNIFORM, params)
    return Machine.from_dict(data, source=f"{UNIFORM}.toml")


SCALED = "scaled"
# scaled:key=value builds a larger (or smaller) machine of the base machine's sockets.
SCALED_PARAMS = {
    "base": Param("base", str, None, help="the machine whose sockets, latencies and costs are repeated"),
    "sockets": Param("sockets", int, None, lambda v: 1 <= v <= MAX_CORES, f"in [1, {MAX_CORES}]",
                     help="sockets (default: the base machine's)"),
    "cores_per_socket": Param("cores_per_socket", int, None, lambda v: 1 <= v <= MAX_CORES, f"in [1, {MAX_CORES}]",
                              help="cores per socket (default: the base machine's)"),
    "socket_links": Param("socket_links", str, None, choices=("full", "ring"),
                          help="how the sockets connect (default: the base machine's, which must be full or ring)"),
}


def scaled_machine(spec: str) -> Machine:
    """The parametric machine ``scaled:base=NAME,sockets=S,cores_per_socket=C``: the base machine, resized.

    Latencies, costs, clocks and caches are the base machine's; the core groups must still
    divide the new socket. A base with a measured latency matrix or explicit socket links
    cannot be resized (nothing says what the new cores' latencies would be).
    """
    _, given = parse_spec(spec, "machine")
    params = resolve_params(f"machine {SCALED}", SCALED_PARAMS, given)
    if params["base"] is None:
        raise SimschedError(f"machine {spec!r}: give the machine to scale, e.g. scaled:base=xeon-e7-4860v2,sockets=16")
    base = load_machine(params["base"])
    if "matrix" in base.data["latency_ns"]:
        raise SimschedError(f"machine {spec!r}: {base.name} gives a measured latency matrix, which cannot be resized")
    changes = {f"topology.{key}": value for key, value in params.items() if key != "base" and value is not None}
    links = changes.get("topology.socket_links", base.topology.get("socket_links", "full"))
    if not isinstance(links, str):
        raise SimschedError(f"machine {spec!r}: {base.name} lists its socket links one by one; "
                            "choose socket_links=full or socket_links=ring for the scaled machine")
    sockets = changes.get("topology.sockets", base.sockets)
    if sockets > 1 and "socket_hop" not in base.data["latency_ns"]:
        raise SimschedError(f"machine {spec!r}: {base.name} has one socket and no latency_ns.socket_hop "
                            "to join more")
    cores = sockets * changes.get("topology.cores_per_socket", base.cores_per_socket)
    if cores > MAX_CORES:
        raise SimschedError(f"machine {spec!r}: {cores} cores; at most {MAX_CORES} are supported")
    changes["name"] = format_spec(SCALED, {key: value for key, value in params.items() if value is not None})
    changes["description"] = (f"{base.description} -- resized to {sockets} socket(s) x "
                              f"{cores // sockets} cores (what-if)")
    try:
        return base.replace(**changes)
    except SimschedError as error:
        raise SimschedError(f"machine {spec!r}: {error}") from None


def parse_settings(text: str, source: str) -> dict[str, Any]:
    """``section.key=value,...`` as a dict of TOML values, refusing anything else with one line."""
    changes: dict[str, Any] = {}
    for item in _top_level_items(text):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key or not value:
            raise SimschedError(f"{source}: expected section.key=value, got {item.strip()!r}")
        if "." not in key:
            raise SimschedError(f"{source}: {key!r} names no section: write section.key, e.g. latency_ns.{key}")
        if key in changes:
            raise SimschedError(f"{source}: {key} is set twice")
        try:
            changes[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            raise SimschedError(f"{source}: {key}={value} is not a TOML value (a number, true/false or "
                                f"a quoted string)") from None
    return changes


def _top_level_items(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes, so that a list value stays whole."""
    items, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def with_settings(machine: str, settings: list[str]) -> str:
    """The machine spec ``machine`` with ``--set`` settings (``section.key=value`` each) added to its variant list."""
    if not settings:
        return machine
    parse_settings(",".join(settings), "--set")  # refuse a malformed setting here, naming the option
    base, bracket, inner = machine.partition("[")
    if bracket and machine.endswith("]") and not Path(machine).exists():
        return f"{base}[{inner[:-1]},{','.join(settings)}]"
    return f"{machine}[{','.join(settings)}]"


def format_setting(value: Any) -> str:
    """A value as TOML writes it, so that a variant's name reads back as the same variant."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def setting_at(data: dict[str, Any], dotted: str) -> Any:
    """The value at ``section.key`` (or a nested ``cache.l3.key``) of machine data; None where there is none."""
    value: Any = data
    for name in dotted.split("."):
        value = value.get(name) if isinstance(value, dict) else None
    return value


def _check_settings_exist(machine: Machine, changes: dict[str, Any], source: str) -> None:
    """Refuse a key the machine neither has nor could have: a misspelt key must not add a new value."""
    for dotted in changes:
        *tables, key = dotted.split(".")
        optional = NOISE_KEYS if tables == [_NOISE_SECTION] else SCHEMA.get(tables[0], {}) if len(tables) == 1 else {}
        if key in optional:
            continue  # an optional key the file leaves out, e.g. coherence.serve_ns
        if tables == ["dram"] and "dram" in machine.data and key in DRAM_OPTIONAL_KEYS:
            continue  # how the machine's DRAM loads, e.g. dram.queueing
        if setting_at(machine.data, dotted) is None:
            known = ", ".join(sorted(k for k, v in machine.data.items() if isinstance(v, dict)))
            raise SimschedError(f"{source}: machine {machine.name} has no {dotted} (its sections: {known})")


def _machine_form(text: str) -> str:
    """The kind of machine spec ``text`` is: variant, uniform, scaled, file or builtin (a file on disk wins)."""
    exists = Path(text).exists()
    if text.endswith("]") and "[" in text and not exists:
        return "variant"
    if text.startswith(f"{UNIFORM}:") and not exists:
        return UNIFORM
    if text.startswith(f"{SCALED}:") and not exists:
        return SCALED
    if text.endswith(".toml") or exists:
        return "file"
    return "builtin"


def machine_files(name_or_path: str | Path | Machine) -> list[Path]:
    """The user's machine files that loading this machine spec reads (built-in machines are not listed)."""
    if isinstance(name_or_path, Machine):
        return []
    text = str(name_or_path)
    form = _machine_form(text)
    if form == "variant":
        return machine_files(text[:-1].partition("[")[0])
    if form == SCALED:
        base = parse_spec(text, "machine")[1].get("base")
        return machine_files(base) if base else []
    return [Path(text)] if form == "file" else []


def load_machine(name_or_path: str | Path | Machine) -> Machine:
    """Load a built-in machine by name, a machine file by path, ``uniform:cores=N,latency_ns=L`` or ``scaled:base=...``.

    Any of these followed by ``[section.key=value,...]`` is that machine with those values
    changed (see :meth:`Machine.replace`), e.g. ``xeon-e7-4860v2[latency_ns.socket_hop=75]``.
    """
    if isinstance(name_or_path, Machine):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    form = _machine_form(text)
    if form == "variant":
        base, _, settings = text[:-1].partition("[")
        machine = load_machine(base)
        changes = parse_settings(settings, f"machine {text}")
        _check_settings_exist(machine, changes, f"machine {text}")
        return machine.replace(**changes)
    if form == UNIFORM:
        return uniform_machine(text)
    if form == SCALED:
        return scaled_machine(text)
    if form == "file":
        if not path.is_file():
            # A relative path is read from the working folder, which is not always the config's.
            relative = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
            raise SimschedError(f"machine file not found: {text}{relative}")
        from .filesize import MACHINE_FILE_BYTES, read_limited

        raw = read_limited(path, "machine file", MACHINE_FILE_BYTES)
        source = str(path)
    else:
        resource = _machine_files().joinpath(f"{text}.toml")
        if not resource.is_file() and text not in _REGISTERED_MACHINES:
            from . import plugins

            plugins.load_automatic()  # a plugin may register it
        if text in _REGISTERED_MACHINES:
            resource = _REGISTERED_MACHINES[text]
        if not resource.is_file():
            known = ", ".join(builtin_machines())
            raise SimschedError(f"unknown machine {text!r} (built-in: {known})")
        raw = resource.read_bytes()
        source = f"{text}.toml"
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SimschedError(f"{source}: not valid TOML: {exc}") from None
    return Machine.from_dict(data, source=source)
