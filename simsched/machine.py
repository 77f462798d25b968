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
from .hierarchy import MAX_VALUE, Hierarchy, socket_hops
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
    },
    "clock": {
        "base_ghz": _key(float, check=_POSITIVE),
        "turbo_max_ghz": _key(float, False, _POSITIVE),
        "turbo_all_ghz": _key(float, False, _POSITIVE),
        "all_core_throughput": _key(float, False, (lambda v: 0 < v <= 1, "in (0, 1]")),
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
# The memory hierarchy ([cache.l1], [cache.l2], ..., [dram]): nested tables, checked in hierarchy.py.
_HIERARCHY_SECTIONS = ("cache", "dram")
MAX_CORES = 1024
_REQUIRED_SECTIONS = ("topology", "clock", "latency_ns", "costs_ns")
# What a machine file that leaves out [coherence] or [os] (or one of their keys) gets: shown
# as "(default)" by ``simsched machines NAME``, so a what-if machine states only what it changes.
DEFAULTS: dict[str, dict[str, Any]] = {
    "coherence": {"protocol": "snoop", "serve_ns": 0.0},
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
        cores = self.placement(threads)
        busy = np.bincount([self.socket_of(c) for c in cores], minlength=self.sockets)
        span = max(self.cores_per_socket - 1, 1)
        factors = np.empty(len(cores))
        for w, core in enumerate(cores):
            share = (busy[self.socket_of(core)] - 1) / span
            ghz = top + (allcore - top) * share
            throughput = 1.0 + (shared - 1.0) * share
            factors[w] = top / ghz / throughput
        return factors

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
        lat = self.latency
        if self.cores > 1:
            same = [lat[a, b] for a in range(self.cores) for b in range(self.cores)
                    if a != b and self.socket_of(a) == self.socket_of(b)]
            cross = [lat[a, b] for a in range(self.cores) for b in range(self.cores)
                     if self.socket_of(a) != self.socket_of(b)]
            if same:
                lines.append(f"  one-way latency within a socket: {min(same):.1f}-{max(same):.1f} ns")
            if cross:
                lines.append(f"  one-way latency across sockets: {min(cross):.1f}-{max(cross):.1f} ns")
        smt = self.data["latency_ns"].get("smt")
        if smt is not None:
            lines.append(f"  one-way latency between hyperthreads: {smt} ns")
        defaulted = self.defaulted()

        def mark(setting):
            return " (default)" if setting in defaulted else ""

        lines.append(f"  coherence: {self.coherence}{mark('coherence.protocol')}, serve {self.serve_ns} ns "
                     f"per spinner{mark('coherence.serve_ns')}")
        lines.append("  software costs (ns): " + ", ".join(
            f"{k} {v:g}" for k, v in self.data["costs_ns"].items()))
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
        if key not in SCHEMA and key not in _HIERARCHY_SECTIONS:
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
            if key not in SCHEMA[section]:
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
    lat = data["latency_ns"]
    if "matrix" not in lat:
        needed = "ring_hop" if layout == "ring" else "same_socket"
        if topo["cores_per_socket"] > 1 and needed not in lat:
            raise SimschedError(f"{source}: missing key latency_ns.{needed}")
        if topo["sockets"] > 1 and "socket_hop" not in lat:
            raise SimschedError(f"{source}: missing key latency_ns.socket_hop")
    clock = data["clock"]
    if "turbo_all_ghz" in clock and clock["turbo_all_ghz"] > clock.get("turbo_max_ghz", math.inf):
        raise SimschedError(f"{source}: clock.turbo_all_ghz must not exceed clock.turbo_max_ghz")


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
    graph = Topology()
    for s in range(sockets):
        graph.add_node(("socket", s), kind="socket")
        for i in range(per):
            core = s * per + i
            graph.add_node(("core", core), kind="core", socket=s,
                           threads=topo.get("threads_per_core", 1))
        if topo.get("core_layout", "crossbar") == "ring":
            # The socket's interconnect is a ring; its first core is the gateway off-chip.
            hop = float(lat.get("ring_hop", 0.0))
            for i in range(per):
                a, b = s * per + i, s * per + (i + 1) % per
                if a != b:
                    graph.add_edge(("core", a), ("core", b), weight=hop)
            graph.add_edge(("socket", s), ("core", s * per), weight=0.0)
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
    matrix = np.zeros((n, n))
    for a in range(n):
        row = graph.distances(("core", a))
        for b in range(n):
            if a != b:
                matrix[a, b] = row[("core", b)]
    return graph, matrix


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
    """Names of the machine files shipped with simsched."""
    return sorted(p.name[:-5] for p in _machine_files().iterdir() if p.name.endswith(".toml"))


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


def parse_settings(text: str, source: str) -> dict[str, Any]:
    """``section.key=value,...`` as a dict of TOML values, refusing anything else with one line."""
    changes: dict[str, Any] = {}
    for item in text.split(","):
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
        if len(tables) == 1 and key in SCHEMA.get(tables[0], {}):
            continue  # an optional key the file leaves out, e.g. coherence.serve_ns
        if setting_at(machine.data, dotted) is None:
            known = ", ".join(sorted(k for k, v in machine.data.items() if isinstance(v, dict)))
            raise SimschedError(f"{source}: machine {machine.name} has no {dotted} (its sections: {known})")


def load_machine(name_or_path: str | Path | Machine) -> Machine:
    """Load a built-in machine by name, a machine file by path, or ``uniform:cores=N,latency_ns=L``.

    Any of these followed by ``[section.key=value,...]`` is that machine with those values
    changed (see :meth:`Machine.replace`), e.g. ``xeon-e7-4860v2[latency_ns.socket_hop=75]``.
    """
    if isinstance(name_or_path, Machine):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    if text.endswith("]") and "[" in text and not path.exists():
        base, _, settings = text[:-1].partition("[")
        machine = load_machine(base)
        changes = parse_settings(settings, f"machine {text}")
        _check_settings_exist(machine, changes, f"machine {text}")
        return machine.replace(**changes)
    if text.startswith(f"{UNIFORM}:") and not path.exists():
        return uniform_machine(text)
    if text.endswith(".toml") or path.exists():
        if not path.is_file():
            raise SimschedError(f"machine file not found: {text}")
        raw = path.read_bytes()
        source = str(path)
    else:
        resource = _machine_files().joinpath(f"{text}.toml")
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
