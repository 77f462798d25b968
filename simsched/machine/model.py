"""The machine model: which cores there are, how far apart, and what operations cost."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import SimschedError
from ..hierarchy import Hierarchy, socket_hops
from .overrides import format_setting
from .schema import DEFAULTS, HOLDS, SCHEMA, _validate, core_speeds
from .latencies import Latencies
from .topology import Topology, _build_topology


@dataclass
class Machine:
    """A modeled many-core machine: which cores there are, how far apart, and what operations cost."""

    name: str
    description: str
    data: dict[str, Any] = field(repr=False)
    # Every pair of cores' one-way latency, worked out when asked (``latency`` is the whole table).
    latencies: "Latencies" = field(repr=False)
    links: "Topology" = field(repr=False)
    # Caches and DRAM, or None when the machine file describes none (no locality model then).
    hierarchy: "Hierarchy | None" = field(default=None, repr=False)
    _latency: "np.ndarray | None" = field(default=None, repr=False, compare=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> "Machine":
        """Validate a machine description (as parsed from TOML) and build its model."""
        _validate(data, source)
        links, latencies = _build_topology(data, source)
        hierarchy = Hierarchy.from_machine_data(data, socket_hops(links, data["topology"]["sockets"]), source)
        name = data.get("name", Path(source).stem)
        return cls(name=name, description=data.get("description", ""), data=data,
                   latencies=latencies, links=links, hierarchy=hierarchy)

    @property
    def latency(self) -> np.ndarray:
        """The one-way latency matrix in ns, cores x cores (made when first asked for: 2 GB at 16,384 cores)."""
        if self._latency is None:
            self._latency = self.latencies.matrix()
        return self._latency

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
        for text, values in zip(("within a socket", "across sockets"), self.latencies.spread()):
            if values:
                lines.append(f"  one-way latency {text}: {min(values):.1f}-{max(values):.1f} ns")
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
