"""Graph workloads: BFS, PageRank and connected components as programs of parallel loops over a CSR graph.

A graph is a ``scipy.sparse.csr_matrix`` adjacency: row u holds u's out-neighbours. It is
generated from the run's seeded generator (``uniform``, ``scale-free``, ``rmat``) or read from
a file; self-loops and duplicate edges are dropped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # SciPy loads where a graph or matrix is built, not with the command line
    import scipy.sparse as sp

from ..errors import SimschedError
from ..footprint import Footprint, Gather
from ..spec import Param, refuse_other_modes, resolve_params
from . import _cost
from .program import ProgramWorkload, data_name, data_params

# CSR indices stay 32-bit integers, as native kernels read them.
MAX_GRAPH_SIZE = 2**31 - 1
# The parameters each generator takes; a file takes none.
GENERATOR_KEYS = {"uniform": ("n", "degree"), "scale-free": ("n", "gamma", "min_degree"),
                  "rmat": ("scale", "edge_factor")}
GENERATORS = tuple(GENERATOR_KEYS)
# Graph500's Kronecker initiator: the probabilities of the quadrants a, b, c (d = 1 - a - b - c).
RMAT_ABC = (0.57, 0.19, 0.19)
# What expanding a frontier vertex touches, laid out as Rodinia's BFS lays out its graph: of its own, its
# node record (the start and length of its adjacency list, two 4-byte ints), its frontier mask flag (1 byte,
# read and cleared) and its level (4 bytes, read to give its neighbours the next one), then its adjacency
# list (a 4-byte vertex number per out-edge); and per out-edge one read of the neighbour's visited flag
# (1 byte), from an array of one flag per vertex.
VERTEX_BYTES = 8 + 1 + 4
EDGE_BYTES = 4
FLAG_BYTES = 1
# Rodinia's per-vertex arrays that an edge reaches into at its far end: the visited flag (read), and for a
# neighbour not yet visited its cost (a 4-byte int) and its updating-mask flag (both written).
NEIGHBOUR_BYTES = FLAG_BYTES + 4 + FLAG_BYTES
# How a BFS is laid out as loops: one per level over its frontier, or Rodinia's two over all vertices a level.
STRUCTURES = ("frontier", "rodinia")
# The parameters that apply to one structure only.
STRUCTURE_KEYS = {"frontier": (), "rodinia": ("test_ns", "update_ns")}

GRAPH_PARAMS = {
    "graph": Param("graph", str, "uniform",
                   help="uniform, scale-free, rmat, or the path of an edge list or Matrix Market (.mtx) file"),
    "n": Param("n", int, 10_000, lambda v: 2 <= v <= MAX_GRAPH_SIZE, f">= 2 and <= {MAX_GRAPH_SIZE}",
               help="vertices (uniform, scale-free)"),
    "degree": Param("degree", int, 8, lambda v: v >= 1, ">= 1",
                    help="mean degree (uniform: each vertex's degree is uniform in [1, 2 degree - 1])"),
    "gamma": Param("gamma", float, 2.3, lambda v: v > 2, "> 2 (a finite mean degree)",
                   help="power-law exponent of the degrees (scale-free)"),
    "min_degree": Param("min_degree", int, 2, lambda v: v >= 1, ">= 1", help="smallest degree (scale-free)"),
    "scale": Param("scale", int, 14, lambda v: 1 <= v <= 30, ">= 1 and <= 30", help="2**scale vertices (rmat)"),
    "edge_factor": Param("edge_factor", int, 16, lambda v: v >= 1, ">= 1",
                         help="edges drawn per vertex (rmat)"),
}


def check_graph_params(given: Mapping[str, Any], owner: str = "graph") -> dict[str, Any]:
    """Graph parameters checked, with defaults; unknown ones and those the chosen graph does not take are refused."""
    graph = str(given.get("graph", GRAPH_PARAMS["graph"].default))
    if not graph:
        raise SimschedError(f"{owner}: parameter graph= is empty (give {', '.join(GENERATORS)} or a file path)")
    # Which keys apply is checked first: a stray key is the mistake, whatever its value.
    takes = GENERATOR_KEYS.get(graph, ())
    stray = [k for k in GRAPH_PARAMS if k != "graph" and k in given and k not in takes]
    if stray:
        what = f"graph={graph} takes {', '.join(takes)}" if takes else f"a graph file (graph={graph}) takes none"
        raise SimschedError(f"{owner}: parameter {stray[0]} does not apply: {what}")
    return resolve_params(owner, GRAPH_PARAMS, dict(given))


def build_graph(params: Mapping[str, Any], rng: np.random.Generator) -> sp.csr_matrix:
    """The adjacency of the graph the parameters name (``graph=`` and its generator's keys), drawn from ``rng``."""
    p = check_graph_params(params)
    graph = p["graph"]
    if graph == "uniform":
        _check_size(p["n"] * p["degree"], "n x degree is")
        degrees = rng.integers(1, 2 * p["degree"], size=p["n"], endpoint=False)
        return _configuration(degrees, rng)
    if graph == "scale-free":
        mean = p["min_degree"] * (p["gamma"] - 1) / (p["gamma"] - 2)
        _check_size(round(p["n"] * mean), "the mean degree makes about")
        return _configuration(_power_law_degrees(p["n"], p["gamma"], p["min_degree"], rng), rng)
    if graph == "rmat":
        return _rmat(p["scale"], p["edge_factor"], rng)
    return read_graph(graph)


def _check_size(edges: int, what: str) -> None:
    if edges > MAX_GRAPH_SIZE:
        raise SimschedError(f"graph: {what} {edges} edges; the bound is {MAX_GRAPH_SIZE} (32-bit CSR indices)")


def _power_law_degrees(n: int, gamma: float, min_degree: int, rng: np.random.Generator) -> np.ndarray:
    """n degrees with P(degree >= k) = (min_degree / k)**(gamma - 1), at most n - 1."""
    # Inverse transform of the Pareto tail, floored: the tail is exact at every integer k.
    tail = min_degree * (1.0 - rng.random(n)) ** (-1.0 / (gamma - 1.0))
    return np.minimum(np.floor(tail), n - 1).astype(np.int64)


def _configuration(degrees: np.ndarray, rng: np.random.Generator) -> sp.csr_matrix:
    """An undirected graph wiring these degrees at random: the configuration model's uniform stub pairing."""
    total = int(degrees.sum())
    _check_size(total, "the degrees add up to")
    stubs = np.repeat(np.arange(degrees.size, dtype=np.int64), degrees)
    stubs = stubs[rng.permutation(stubs.size)]
    # An odd stub count leaves the last stub unpaired.
    half = stubs.size // 2
    return adjacency(degrees.size, stubs[:half], stubs[half:2 * half], directed=False)


def _rmat(scale: int, edge_factor: int, rng: np.random.Generator) -> sp.csr_matrix:
    """Graph500's Kronecker (R-MAT) generator, one bit of both endpoints per level, vertices then relabelled."""
    n, m = 2**scale, edge_factor * 2**scale
    _check_size(m, "rmat draws")
    a, b, c = RMAT_ABC
    u = np.zeros(m, dtype=np.int64)
    v = np.zeros(m, dtype=np.int64)
    # One single-precision draw per edge and level picks the quadrant: a, b, c or d.
    for bit in range(scale):
        r = rng.random(m, dtype=np.float32)
        down = r >= a + b
        right = (r >= a) & ~down | (r >= a + b + c)
        u |= down.astype(np.int64) << bit
        v |= right.astype(np.int64) << bit
    # Graph500 permutes the labels so that vertex number says nothing about degree.
    label = rng.permutation(n)
    return adjacency(n, label[u], label[v], directed=False)


def adjacency(n: int, u: np.ndarray, v: np.ndarray, directed: bool) -> sp.csr_matrix:
    """The n x n CSR adjacency of edges u -> v (both ways unless directed), without self-loops or duplicates."""
    import scipy.sparse as sp
    u = np.asarray(u, dtype=np.int64)
    v = np.asarray(v, dtype=np.int64)
    keep = u != v
    u, v = u[keep], v[keep]
    if not directed:
        u, v = np.concatenate([u, v]), np.concatenate([v, u])
    keys = np.sort(u * n + v)  # (np.unique is many times slower than a sort on large int64 arrays)
    keys = keys[np.concatenate(([True], keys[1:] != keys[:-1]))] if keys.size else keys
    rows, cols = np.divmod(keys, n)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    index = np.int32 if max(n, keys.size) <= MAX_GRAPH_SIZE else np.int64
    return sp.csr_matrix((np.ones(keys.size, dtype=np.int8), cols.astype(index), indptr.astype(index)),
                         shape=(n, n))


_DIRECTED_HEADER = re.compile(r"^\s*[#%]\s*directed\b", re.I)


def read_graph(path: "str | Path") -> sp.csr_matrix:
    """A graph file's adjacency: an edge list (two integer columns) or Matrix Market (.mtx), undirected by default.

    An edge list is directed when a comment line before the edges starts with ``Directed``
    (as SNAP's headers do); a Matrix Market file is directed when its symmetry is ``general``.
    """
    path = Path(path)
    if not path.is_file():
        raise SimschedError(f"graph: no such file {path}")
    if path.suffix.lower() == ".mtx":
        return _read_mtx(path)
    return _read_edge_list(path)


def _read_mtx(path: Path) -> sp.csr_matrix:
    import scipy.sparse as sp
    import scipy.io

    try:
        info = scipy.io.mminfo(str(path))
        matrix = scipy.io.mmread(str(path))
    except Exception as exc:  # scipy raises several kinds on a malformed file
        raise SimschedError(f"graph: cannot read Matrix Market file {path}: {exc}".splitlines()[0]) from None
    rows, cols = info[0], info[1]
    if rows != cols:
        raise SimschedError(f"graph: {path} is a {rows} x {cols} matrix; an adjacency matrix is square")
    if rows < 1:
        raise SimschedError(f"graph: {path} has no vertices")
    coo = sp.coo_matrix(matrix)
    # mmread expands a symmetric file into both triangles, so its edges come out both ways already.
    return adjacency(rows, coo.row, coo.col, directed=info[5] == "general")


def _read_edge_list(path: Path) -> sp.csr_matrix:
    import io

    import pandas as pd

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SimschedError(f"graph: cannot read {path}: {exc}".splitlines()[0]) from None
    lines = text.splitlines()
    directed = False
    for line in lines:
        if line.strip() and not line.lstrip().startswith(("#", "%")):
            break
        directed = directed or bool(_DIRECTED_HEADER.match(line))
    body = "\n".join(line for line in lines if not line.lstrip().startswith(("#", "%"))).replace(",", " ")
    if not body.strip():
        raise SimschedError(f"graph: {path} holds no edges")
    try:
        frame = pd.read_csv(io.StringIO(body), sep=r"\s+", header=None, dtype=str, skip_blank_lines=True)
    except Exception as exc:  # ragged rows
        raise SimschedError(f"graph: cannot read edges from {path}: {exc}".splitlines()[0]) from None
    if frame.shape[1] != 2 or frame.isna().to_numpy().any():
        raise SimschedError(f"graph: {path} must hold two integer columns (an edge per line), not "
                            f"{frame.shape[1]}")
    try:
        edges = frame.to_numpy().astype(np.int64)
    except (ValueError, OverflowError):
        bad = next(x for x in frame.to_numpy().ravel() if not re.fullmatch(r"[+-]?\d+", x))
        raise SimschedError(f"graph: {path}: vertex {bad!r} is not an integer") from None
    if edges.min() < 0:
        raise SimschedError(f"graph: {path}: vertex {int(edges.min())} is negative; vertices are numbered from 0")
    n = int(edges.max()) + 1
    if n > MAX_GRAPH_SIZE:
        raise SimschedError(f"graph: {path}: vertex {n - 1} is beyond the bound of {MAX_GRAPH_SIZE} vertices")
    return adjacency(n, edges[:, 0], edges[:, 1], directed=directed)


def bfs_levels(graph: sp.csr_matrix, sources: "int | np.ndarray") -> np.ndarray:
    """Every vertex's BFS level from ``sources`` (level 0) along out-edges, -1 where unreached."""
    import scipy.sparse as sp
    from scipy.sparse.csgraph import breadth_first_order

    n = graph.shape[0]
    sources = np.atleast_1d(np.asarray(sources, dtype=np.int64))
    # Several sources: one more vertex with an edge to each, searched from instead.
    if sources.size > 1:
        indptr = np.concatenate([graph.indptr, [graph.indptr[-1] + sources.size]])
        indices = np.concatenate([graph.indices, sources])
        graph = sp.csr_matrix((np.ones(indices.size, dtype=np.int8), indices, indptr), shape=(n + 1, n + 1))
        root = n
    else:
        root = int(sources[0])
    order, pred = breadth_first_order(graph, root, directed=True, return_predecessors=True)
    # Depths by pointer jumping up the BFS tree: log2(depth) vectorised rounds.
    depth = np.ones(graph.shape[0], dtype=np.int64)
    jump = pred.astype(np.int64)
    depth[root], jump[root] = 0, root
    while True:
        up = jump[order]
        if np.all(up == root):
            break
        depth[order] += depth[up]
        jump[order] = jump[up]
    levels = np.full(graph.shape[0], -1, dtype=np.int64)
    levels[order] = depth[order]
    return levels[:n] - 1 if sources.size > 1 else levels


def undirected(graph: sp.csr_matrix) -> sp.csr_matrix:
    """The graph with every edge both ways (itself when already symmetric)."""
    if (graph != graph.T).nnz == 0:
        return graph
    coo = graph.tocoo()
    return adjacency(graph.shape[0], coo.row, coo.col, directed=False)


def label_propagation_rounds(graph: sp.csr_matrix) -> int:
    """Rounds of synchronous min-label propagation until no label changes, counting the last, unchanged one.

    After t rounds a vertex holds the least label within t hops, so the labels settle after
    the largest distance from a vertex to the least vertex of its component.
    """
    from scipy.sparse.csgraph import connected_components

    sym = undirected(graph)
    count, component = connected_components(sym, directed=False)
    least = np.full(count, sym.shape[0], dtype=np.int64)
    np.minimum.at(least, component, np.arange(sym.shape[0]))
    return int(bfs_levels(sym, least).max()) + 1


def _graph_keys(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in params.items() if k in GRAPH_PARAMS}


class GraphWorkload(ProgramWorkload):
    """A program of loops over a graph's vertices."""

    def __init__(self, **params: Any):
        # The graph's keys first, so that a key of another generator is named as such.
        check_graph_params(_graph_keys(params), f"workload {self.name}")
        super().__init__(**params)

    def input_files(self):
        graph = self.params["graph"]
        return [] if graph in GENERATORS else [Path(graph)]

    def vertices(self) -> int | None:
        """The vertices of a generated graph (None for a file's, known once it is read)."""
        graph = self.params["graph"]
        if graph not in GENERATORS:
            return None
        return 2 ** self.params["scale"] if graph == "rmat" else self.params["n"]

    def graph(self, rng: np.random.Generator) -> sp.csr_matrix:
        """The workload's graph, drawn from the run's generator."""
        return build_graph(_graph_keys(self.given), rng)


class BFS(GraphWorkload):
    """Breadth-first search level by level, as loops over its frontiers or as Rodinia's loops over all vertices.

    ``structure=frontier``: one loop per level over its frontier, in vertex order; an iteration
    expands one frontier vertex: ``base_ns`` plus ``edge_ns`` per out-edge.
    ``structure=rodinia``: per level two loops over all n vertices, as Rodinia's BFS runs it
    (see ``rodinia``).
    """

    name = "bfs"
    summary = ("BFS from source: one loop per level over its frontier (structure=frontier), or Rodinia's two loops "
               "over all vertices per level (structure=rodinia)")
    PARAMS = {**GRAPH_PARAMS,
              "source": Param("source", int, 0, lambda v: v >= 0, ">= 0", help="the vertex the search starts from"),
              "structure": Param("structure", str, "frontier", choices=STRUCTURES,
                                 help="frontier: a loop per level over its frontier; rodinia: per level, two loops "
                                      "over all vertices (expand the frontier, then mark the next one)"),
              "base_ns": _cost("base_ns", 50.0, "per frontier vertex"),
              "edge_ns": _cost("edge_ns", 10.0, "per out-edge of a frontier vertex"),
              "test_ns": _cost("test_ns", 1.0, "structure=rodinia: per vertex and loop, testing its flag"),
              "update_ns": _cost("update_ns", 5.0,
                                 "structure=rodinia: per vertex of the next frontier, marking it in the second loop"),
              # Rodinia's BFS reads the graph file on the master thread: all of it sits on the master's node.
              **data_params("master", ("master", "interleave"))}

    def __init__(self, **params):
        refuse_other_modes("workload bfs", "structure", params.get("structure", self.PARAMS["structure"].default),
                           STRUCTURE_KEYS, params)
        super().__init__(**params)

    def loop_sizes(self):
        n = self.vertices()
        if self.params["structure"] != "rodinia" or n is None:
            return None
        return [(n, 4)]  # a source that reaches another vertex: at least two levels, two loops each

    def levels(self, rng) -> tuple[sp.csr_matrix, np.ndarray]:
        """The graph and every vertex's BFS level from the source (-1 where unreached)."""
        graph = self.graph(rng)
        n, source = graph.shape[0], self.params["source"]
        if source >= n:
            raise SimschedError(f"workload bfs: source={source} is not a vertex; the graph has vertices 0..{n - 1}")
        levels = bfs_levels(graph, source)
        if np.count_nonzero(levels >= 0) == 1:
            raise SimschedError(f"workload bfs: disconnected BFS source: vertex {source} reaches no other vertex")
        return graph, levels

    def search(self, rng) -> tuple[list[np.ndarray], int]:
        """Each frontier vertex's out-degree, level by level in vertex order, and the graph's vertices."""
        graph, levels = self.levels(rng)
        reached = np.flatnonzero(levels >= 0)  # in vertex order
        frontier = reached[np.argsort(levels[reached], kind="stable")]
        degrees = np.diff(graph.indptr)[frontier].astype(np.int64)
        return np.split(degrees, np.cumsum(np.bincount(levels[frontier]))[:-1]), graph.shape[0]

    def rodinia(self, rng, data: bool) -> tuple[list[np.ndarray], list[Footprint] | None]:
        """Rodinia's loops: their iteration costs, and with ``data`` their footprints.

        Rodinia repeats, while the last pass marked a vertex, a pass of two loops over all n
        vertices: (a) a vertex whose frontier mask is set clears it and, for each out-edge whose
        neighbour is not visited, sets the neighbour's cost and updating mask; (b) a vertex whose
        updating mask is set clears it, sets its mask and visited flag (the next frontier) and
        the stop flag. A vertex of level k is expanded in pass k, so the passes are the levels,
        the last one marking nothing. In (a) every vertex costs ``test_ns``, a frontier vertex
        ``base_ns`` + ``edge_ns`` per out-edge more; in (b) every vertex ``test_ns``, a vertex of
        the next frontier ``update_ns`` more.
        """
        graph, levels = self.levels(rng)
        p = self.params
        n = graph.shape[0]
        degree = np.diff(graph.indptr).astype(np.int64)
        order = np.argsort(levels, kind="stable")
        reached = order[np.count_nonzero(levels < 0):]
        passes = np.split(reached, np.cumsum(np.bincount(levels[reached]))[:-1])  # each level's vertices
        expand = p["base_ns"] + p["edge_ns"] * degree
        costs = []
        for level, frontier in enumerate(passes):
            expanding = np.full(n, p["test_ns"])
            expanding[frontier] += expand[frontier]
            marking = np.full(n, p["test_ns"])
            if level + 1 < len(passes):
                marking[passes[level + 1]] += p["update_ns"]
            costs += [expanding, marking]
        if not data:
            return costs, None
        # Edges into the next level find their neighbour not yet visited: visited is set in (b), a pass late.
        rows = np.repeat(np.arange(n), degree)
        into_next = (levels[rows] >= 0) & (levels[graph.indices] == levels[rows] + 1)
        writes = np.bincount(rows[into_next], minlength=n)
        # Every loop touches, of each vertex, its entries in Rodinia's per-vertex arrays: one data set for all,
        # a block per vertex. The three arrays an edge reaches into at random are one shared array.
        name = data_name("bfs")
        optional = "data" not in self.given
        flags = np.full(n, FLAG_BYTES, dtype=np.int64)
        footprints = []
        for level, frontier in enumerate(passes):
            own = flags.copy()
            own[frontier] = VERTEX_BYTES + EDGE_BYTES * degree[frontier]
            reads = np.zeros(n, dtype=np.int64)
            reads[frontier] = degree[frontier] + 2 * writes[frontier]
            footprints.append(Footprint(own, "stream", p["placement"], name, optional=optional,
                                        gather=Gather(reads, n * NEIGHBOUR_BYTES, FLAG_BYTES,
                                                      f"{name} neighbour flags and costs")))
            marked = flags.copy()
            if level + 1 < len(passes):
                marked[passes[level + 1]] = 3 * FLAG_BYTES  # updating mask read and cleared, mask and visited set
            footprints.append(Footprint(marked, "stream", p["placement"], name, optional=optional))
        return costs, footprints

    def loop_costs(self, rng):
        if self.params["structure"] == "rodinia":
            return self.rodinia(rng, data=False)[0]
        return [self.params["base_ns"] + self.params["edge_ns"] * d for d in self.search(rng)[0]]

    def loops(self, rng):
        if self.params["structure"] == "rodinia":
            return self.program(*self.rodinia(rng, data=bool(self.params["data"])))
        degrees, n = self.search(rng)
        costs = [self.params["base_ns"] + self.params["edge_ns"] * d for d in degrees]
        if not self.params["data"]:
            return self.program(costs)
        # A vertex is expanded in one level only: each level's vertices are a data set of their own, which
        # only a repetition of the search touches again; the visited flags are one array for all levels.
        name = data_name("bfs")
        optional = "data" not in self.given
        footprints = [Footprint(VERTEX_BYTES + EDGE_BYTES * d, "stream", self.params["placement"],
                                f"{name} level {level}", optional=optional,
                                gather=Gather(d, n * FLAG_BYTES, FLAG_BYTES, f"{name} visited"))
                      for level, d in enumerate(degrees)]
        return self.program(costs, footprints)


class PageRank(GraphWorkload):
    """Pull-style PageRank: ``iters`` loops over all vertices, ``base_ns`` plus ``edge_ns`` per in-edge each."""

    name = "pagerank"
    summary = "iters loops over all vertices, base_ns + edge_ns x in-degree each (pull PageRank)"
    PARAMS = {**GRAPH_PARAMS,
              "iters": Param("iters", int, 20, lambda v: v >= 1, ">= 1", help="PageRank iterations (loops)"),
              "base_ns": _cost("base_ns", 10.0, "per vertex"),
              "edge_ns": _cost("edge_ns", 10.0, "per in-edge")}

    def loop_sizes(self):
        return [(self.vertices() or 1, self.params["iters"])]  # a file's graph: at least one vertex

    def loop_costs(self, rng):
        graph = self.graph(rng)
        in_degree = np.bincount(graph.indices, minlength=graph.shape[0])
        cost = self.params["base_ns"] + self.params["edge_ns"] * in_degree
        return [cost] * self.params["iters"]


class ConnectedComponents(GraphWorkload):
    """Label propagation until labels settle: each round a loop over all vertices, base + ``edge_ns`` per edge."""

    name = "cc"
    summary = "label-propagation rounds until labels settle, each over all vertices, base_ns + edge_ns x degree"
    PARAMS = {**GRAPH_PARAMS,
              "base_ns": _cost("base_ns", 10.0, "per vertex"),
              "edge_ns": _cost("edge_ns", 10.0, "per edge (either direction)")}

    def loop_sizes(self):
        return [(self.vertices() or 1, 1)]  # at least one round; a file's graph: at least one vertex

    def loop_costs(self, rng):
        graph = undirected(self.graph(rng))
        cost = self.params["base_ns"] + self.params["edge_ns"] * np.diff(graph.indptr)
        return [cost] * label_propagation_rounds(graph)


__all__ = ["BFS", "ConnectedComponents", "PageRank", "adjacency", "bfs_levels", "build_graph",
           "check_graph_params", "label_propagation_rounds", "read_graph"]
