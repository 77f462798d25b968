"""The core/socket graph of a machine, and the one-way latency matrix it implies."""

from __future__ import annotations

import heapq
import itertools
from typing import Any

import numpy as np

from ..errors import SimschedError
from ..hierarchy import socket_hops
from .latencies import Latencies, _is_matrix


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


def _build_topology(data: dict[str, Any], source: str) -> tuple[Topology, Latencies]:
    """The core/socket graph and the core-to-core one-way latencies it implies."""
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
        return graph, Latencies.from_matrix(matrix)
    hops = socket_hops(graph, sockets)
    return graph, (Latencies.ring(lat, sockets, per, hops) if ring
                   else Latencies.crossbar(lat, sockets, per, groups, hops))
