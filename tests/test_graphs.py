"""Graph workloads: hand-worked BFS levels and costs, the generators' degree statistics, bad graphs through the CLI."""

from __future__ import annotations

import json
import re

import networkx as nx
import numpy as np
import pytest
from test_cli import simsched_cli
from test_cli_errors import Case, error_line, run_args, run_cases

from simsched.errors import SimschedError
from simsched.workloads import get_workload
from simsched.workloads.graphs import adjacency, bfs_levels, build_graph, label_propagation_rounds, read_graph

# 0-1, 0-2, 1-3, 3-4, with a self-loop (2 2) and a repeated edge (1 0) that are dropped.
FIVE = "# a small undirected graph\n0 1\n0,2\n1 3\n% another comment\n3 4\n2 2\n1 0\n"
DIRECTED = "# Directed graph (each unordered pair of nodes is saved once)\n0 1\n1 2\n"


def costs(spec: str, seed: int = 0) -> list[list[float]]:
    """Each loop's iteration costs, as the run sees them."""
    return [np.diff(loop.prefix).tolist() for loop in get_workload(spec).loops(np.random.default_rng(seed))]


# -- hand-worked cases --------------------------------------------------------------------------------------

def test_five_vertex_bfs_levels_and_costs(tmp_path):
    path = tmp_path / "five.txt"
    path.write_text(FIVE)
    graph = read_graph(path)
    assert graph.shape == (5, 5) and graph.nnz == 8  # 4 edges, both ways; no loop, no duplicate
    assert np.diff(graph.indptr).tolist() == [2, 2, 1, 2, 1]
    assert bfs_levels(graph, 0).tolist() == [0, 1, 1, 2, 3]
    # Level by level, in vertex order: base 100 + 10 per out-edge.
    assert costs(f"bfs:graph={path},base_ns=100,edge_ns=10") == [[120], [120, 110], [120], [110]]
    assert costs(f"bfs:graph={path},source=3,base_ns=100,edge_ns=10") == [[120], [120, 110], [120], [110]]
    assert costs(f"bfs:graph={path},source=2,base_ns=0,edge_ns=1") == [[1], [2], [2], [2], [1]]
    # The first loop is what costs() gives.
    assert get_workload(f"bfs:graph={path},base_ns=100,edge_ns=10").costs(np.random.default_rng()).tolist() == [120]


def test_five_vertex_bfs_through_the_cli(tmp_path):
    (tmp_path / "five.txt").write_text(FIVE)
    proc = simsched_cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", "omp-dynamic", "--threads", "2",
                        "--workload", "bfs:graph=five.txt,base_ns=100,edge_ns=10,data=0", "--json", "--chunks",
                        "c.csv", cwd=tmp_path)
    result = json.loads(proc.stdout)
    # data=0: the vertices cost their compute alone (with their data, the memory time comes on top).
    assert result["sequential_ns"] == pytest.approx(120 + 230 + 120 + 110)
    import pandas as pd

    chunks = pd.read_csv(tmp_path / "c.csv", comment="#")
    assert (chunks["hi"] - chunks["lo"]).groupby(chunks["loop"]).sum().tolist() == [1, 2, 1, 1]


def test_directed_edge_list_follows_out_edges(tmp_path):
    path = tmp_path / "directed.txt"
    path.write_text(DIRECTED)
    graph = read_graph(path)
    assert graph.nnz == 2 and graph[0, 1] and not graph[1, 0]
    assert costs(f"bfs:graph={path},base_ns=1,edge_ns=10") == [[11], [11], [1]]
    # PageRank pulls over in-edges: vertex 0 has none.
    assert costs(f"pagerank:graph={path},iters=2,base_ns=1,edge_ns=10") == [[1, 11, 11]] * 2
    # Components ignore direction: a path 0-1-2 settles after 2 rounds, the third sees no change.
    assert costs(f"cc:graph={path},base_ns=1,edge_ns=10") == [[11, 21, 11]] * 3
    undirected = tmp_path / "undirected.txt"
    undirected.write_text(DIRECTED.replace("Directed", "Undirected"))
    assert read_graph(undirected).nnz == 4


def test_matrix_market_graphs(tmp_path):
    symmetric = tmp_path / "sym.mtx"
    symmetric.write_text("%%MatrixMarket matrix coordinate pattern symmetric\n3 3 2\n2 1\n3 2\n")
    assert read_graph(symmetric).toarray().tolist() == [[0, 1, 0], [1, 0, 1], [0, 1, 0]]
    general = tmp_path / "general.mtx"
    general.write_text("%%MatrixMarket matrix coordinate real general\n3 3 3\n1 2 0.5\n2 3 1\n3 3 7\n")
    assert read_graph(general).toarray().tolist() == [[0, 1, 0], [0, 0, 1], [0, 0, 0]]


def naive_rounds(graph) -> int:
    """Synchronous min-label propagation, round by round, counting the round that changes nothing."""
    labels = np.arange(graph.shape[0])
    sym = ((graph + graph.T) > 0).tolil()
    rounds = 0
    while True:
        rounds += 1
        new = np.array([min([labels[v], *labels[sym.rows[v]]]) for v in range(labels.size)])
        if np.array_equal(new, labels):
            return rounds
        labels = new


@pytest.mark.parametrize("seed", range(6))
def test_label_propagation_rounds_match_the_propagation(seed):
    rng = np.random.default_rng(seed)
    n = 40
    edges = rng.integers(0, n, size=(30, 2))  # sparse: several components and isolated vertices
    graph = adjacency(n, edges[:, 0], edges[:, 1], directed=bool(seed % 2))
    assert label_propagation_rounds(graph) == naive_rounds(graph)


def test_bfs_levels_are_shortest_hop_distances():
    graph = build_graph({"graph": "scale-free", "n": 3000}, np.random.default_rng(4))
    levels = bfs_levels(graph, 0)
    expected = nx.single_source_shortest_path_length(nx.from_scipy_sparse_array(graph), 0)
    assert {v: int(levels[v]) for v in np.flatnonzero(levels >= 0)} == expected


def test_a_program_of_levels_covers_the_reached_vertices_once():
    spec = "bfs:graph=rmat,scale=10,base_ns=1,edge_ns=0"
    graph = build_graph({"graph": "rmat", "scale": 10}, np.random.default_rng(7))
    reached = int((bfs_levels(graph, 0) >= 0).sum())
    loops = get_workload(spec).loops(np.random.default_rng(7))
    assert sum(loop.n for loop in loops) == reached and sum(loop.total for loop in loops) == reached


# -- generators ---------------------------------------------------------------------------------------------

# (R-MAT leaves many vertices isolated, so a BFS from vertex 0 may have nowhere to go: pagerank shows its graph.)
@pytest.mark.parametrize("spec", ["bfs:graph=uniform,n=2000", "bfs:graph=scale-free,n=2000",
                                  "pagerank:graph=rmat,scale=10,iters=1", "cc:graph=uniform,n=300,degree=2"])
def test_a_seed_fixes_the_graph(spec):
    first, again, other = costs(spec, 3), costs(spec, 3), costs(spec, 4)
    assert first == again and first != other


def test_uniform_degrees():
    degree = 8
    graph = build_graph({"graph": "uniform", "n": 20_000, "degree": degree}, np.random.default_rng(1))
    degrees = np.diff(graph.indptr)
    assert (graph != graph.T).nnz == 0 and graph.diagonal().sum() == 0
    # Uniform in [1, 2 degree - 1]; pairing stubs at random makes a few loops and repeats, which are dropped.
    assert abs(degrees.mean() - degree) < 0.15
    assert degrees.max() <= 2 * degree - 1
    counts = np.bincount(degrees, minlength=2 * degree)[1:2 * degree]
    assert counts.min() > 0.8 * counts.mean()


def test_scale_free_degrees_have_a_power_law_tail():
    gamma = 2.3
    graph = build_graph({"graph": "scale-free", "n": 100_000, "gamma": gamma, "min_degree": 2},
                        np.random.default_rng(2))
    degrees = np.diff(graph.indptr)
    assert (degrees == 0).mean() < 0.001 and np.median(degrees) <= 4  # (a vertex whose 2 stubs paired up has none)
    # P(degree >= k) = (2 / k)**(gamma - 1): the slope of the tail on log-log axes is -(gamma - 1).
    tail = [(degrees >= k).mean() for k in (20, 200)]
    slope = np.log(tail[1] / tail[0]) / np.log(10)
    assert -(gamma - 1) - 0.15 < slope < -(gamma - 1) + 0.15
    assert tail[0] == pytest.approx((2 / 20) ** (gamma - 1), rel=0.1)


def test_rmat_degrees_are_skewed():
    scale, edge_factor = 12, 8
    graph = build_graph({"graph": "rmat", "scale": scale, "edge_factor": edge_factor}, np.random.default_rng(3))
    degrees = np.diff(graph.indptr)
    assert graph.shape == (2**scale, 2**scale) and (graph != graph.T).nnz == 0
    assert degrees.mean() <= 2 * edge_factor and degrees.mean() > edge_factor  # repeats dropped, most kept
    assert degrees.max() > 20 * degrees.mean() and (degrees == 0).mean() > 0.1  # hubs, and isolated vertices


def test_build_graph_refuses_what_the_generator_does_not_take():
    with pytest.raises(SimschedError, match="gamma does not apply: graph=uniform takes n, degree"):
        build_graph({"graph": "uniform", "gamma": 2.5}, np.random.default_rng())
    with pytest.raises(SimschedError, match="unknown parameter 'gama'"):
        build_graph({"graph": "scale-free", "gama": 2.5}, np.random.default_rng())


# -- bad input through the command line ---------------------------------------------------------------------

def graph_case(workload: str, *needles: str, files=None) -> Case:
    return Case(run_args(workload=workload), needles, files or {"five.txt": FIVE})


# Every kind of mistake once through the command line; the rest of each kind in-process, below.
CASES = {
    "source-outside": graph_case("bfs:graph=five.txt,source=5", "source=5", "0..4"),
    "disconnected": graph_case("bfs:graph=d.txt,source=2", "disconnected BFS source", "vertex 2",
                               files={"d.txt": DIRECTED}),
    "stray-uniform": graph_case("bfs:graph=uniform,gamma=2.5", "gamma", "graph=uniform takes n, degree"),
    "stray-file": graph_case("cc:graph=five.txt,scale=3", "scale", "takes none"),
    "gamma": graph_case("pagerank:graph=scale-free,gamma=1.5", "gamma", "> 2"),
    "too-many-edges": graph_case("bfs:graph=uniform,n=1000000000,degree=4", "edges", "bound"),
    "no-file": graph_case("bfs:graph=missing.txt", "no such file", "missing.txt"),
    "three-columns": graph_case("bfs:graph=e.txt", "two integer columns", files={"e.txt": "0 1 5\n1 2 5\n"}),
    "bad-mtx": graph_case("bfs:graph=g.mtx", "g.mtx", files={"g.mtx": "not a matrix\n"}),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    # One case goes through a genuine ``python -m simsched.cli``, the others are forked (tests/cli_runner.py).
    return run_cases(tmp_path_factory.mktemp("graph-errors"), CASES, real=["source-outside"])


@pytest.mark.parametrize("name", CASES)
def test_bad_graph_input_is_one_line_and_status_2(outcomes, name):
    error_line(outcomes[name], *CASES[name].needles)
    assert outcomes[name].proc.returncode == 2


@pytest.mark.parametrize("spec, content, needle", [
    ("bfs:graph={},source=-1", FIVE, "source=-1 must be >= 0"),
    ("pagerank:graph=rmat,n=100", FIVE, "parameter n does not apply: graph=rmat takes scale, edge_factor"),
    ("bfs:graph=rmat,scale=40", FIVE, "scale=40 must be >= 1 and <= 30"),
    ("bfs:graph=scale-free,n=1000000000,min_degree=30", FIVE, "edges; the bound is"),
    ("bfs:graph={}", "0 1\n1 2 5\n", "cannot read edges"),
    ("bfs:graph={}", "0 1\n1 x\n", "vertex 'x' is not an integer"),
    ("bfs:graph={}", "0 1\n-3 2\n", "vertex -3 is negative"),
    ("bfs:graph={}", "# nothing\n", "holds no edges"),
    ("bfs:graph={}.mtx", "%%MatrixMarket matrix coordinate pattern general\n2 3 1\n1 3\n", "2 x 3 matrix"),
])
def test_bad_graphs_are_refused(tmp_path, spec, content, needle):
    path = tmp_path / "g"
    for suffix in ("", ".mtx"):
        path.with_suffix(suffix).write_text(content)
    with pytest.raises(SimschedError, match=re.escape(needle)):
        get_workload(spec.format(path)).loops(np.random.default_rng())
