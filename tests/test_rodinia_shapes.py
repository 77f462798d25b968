"""Rodinia's application shapes: BFS's two loops over all vertices, k-means without pruning, LavaMD's data."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from cli_runs import cli, refused

from simsched.workloads import get_workload
from simsched.workloads.graphs import bfs_levels, build_graph
from simsched.workloads.lavamd import neighbourhood_sums

HASWELL = "haswell-e5-2695v3"
# 0-1, 0-2, 1-3, 3-4: from 0 the levels are [0], [1, 2], [3], [4], the out-degrees 2, 2, 1, 2, 1.
FIVE = "0 1\n0 2\n1 3\n3 4\n"
RODINIA_BFS = "structure=rodinia,base_ns=100,edge_ns=10"
# The 8 loops of the 5-vertex search by hand (test_ns=1, update_ns=5): per pass, (a) expands the frontier,
# (b) marks the next one; the last pass finds nothing and still runs both.
FIVE_LOOPS = [[121, 1, 1, 1, 1], [1, 6, 6, 1, 1],
              [1, 121, 111, 1, 1], [1, 1, 1, 6, 1],
              [1, 1, 1, 121, 1], [1, 1, 1, 1, 6],
              [1, 1, 1, 1, 111], [1, 1, 1, 1, 1]]


def loops(spec: str, seed: int = 0):
    return get_workload(spec).loops(np.random.default_rng(seed))


def costs(spec: str, seed: int = 0) -> list[list[float]]:
    return [np.diff(loop.prefix).tolist() for loop in loops(spec, seed)]


@pytest.fixture
def five(tmp_path):
    path = tmp_path / "five.txt"
    path.write_text(FIVE)
    return path


# -- BFS, Rodinia's structure -----------------------------------------------------------------------------

def test_rodinia_bfs_runs_two_loops_over_all_vertices_per_level(five):
    assert costs(f"bfs:graph={five},{RODINIA_BFS}") == FIVE_LOOPS
    # Every cost parameter where it belongs: from vertex 2 (levels [1, 2, 0, 3, 4]) the passes expand 2, then
    # 0, then 1, then 3, then 4; with only test_ns every vertex of every loop costs it.
    spread = costs(f"bfs:graph={five},source=2,structure=rodinia,base_ns=1000,edge_ns=100,test_ns=0,update_ns=7")
    assert spread == [[0, 0, 1100, 0, 0], [7, 0, 0, 0, 0], [1200, 0, 0, 0, 0], [0, 7, 0, 0, 0],
                      [0, 1200, 0, 0, 0], [0, 0, 0, 7, 0], [0, 0, 0, 1200, 0], [0, 0, 0, 0, 7],
                      [0, 0, 0, 0, 1100], [0, 0, 0, 0, 0]]
    assert costs(f"bfs:graph={five},structure=rodinia,base_ns=0,edge_ns=0,test_ns=2,update_ns=0") == [[2] * 5] * 8


def test_rodinia_bfs_footprints_by_hand(five):
    program = loops(f"bfs:graph={five},{RODINIA_BFS}")
    # (a): a mask flag each; a frontier vertex its node record, mask, cost and 4 bytes per out-edge (13 + 4 d).
    # (b): an updating mask each; a vertex of the next frontier also its mask and visited flags (3 bytes).
    assert [loop.data.bytes.tolist() for loop in program] == [
        [21, 1, 1, 1, 1], [1, 3, 3, 1, 1], [1, 21, 17, 1, 1], [1, 1, 1, 3, 1],
        [1, 1, 1, 21, 1], [1, 1, 1, 1, 3], [1, 1, 1, 1, 17], [1, 1, 1, 1, 1]]
    expanding, marking = program[0::2], program[1::2]
    # An out-edge reads the neighbour's visited flag; one into the next level also writes its cost and mask.
    assert [loop.data.gather.reads.tolist() for loop in expanding] == [
        [2 + 2 * 2, 0, 0, 0, 0], [0, 2 + 2 * 1, 1, 0, 0], [0, 0, 0, 2 + 2 * 1, 0], [0, 0, 0, 0, 1]]
    assert {(loop.data.gather.size, loop.data.gather.element) for loop in expanding} == {(5 * 6, 1)}
    assert all(loop.data.gather is None for loop in marking)
    # One data set for all the loops, a block per vertex; one shared array for the neighbours' entries.
    assert len({loop.data.data for loop in program}) == 1
    assert len({loop.data.gather.name for loop in expanding}) == 1
    assert {(loop.data.pattern, loop.data.placement, loop.data.optional) for loop in program} == \
        {("stream", "master", True)}
    assert {loop.data.optional for loop in loops(f"bfs:graph={five},{RODINIA_BFS},data=1")} == {False}
    assert {loop.data.placement for loop in loops(f"bfs:graph={five},{RODINIA_BFS},placement=interleave")} == \
        {"interleave"}
    assert all(loop.data is None for loop in loops(f"bfs:graph={five},{RODINIA_BFS},data=0"))


@pytest.mark.parametrize("graph", ["uniform,n=3000,degree=4", "scale-free,n=3000", "rmat,scale=11"])
def test_rodinia_bfs_passes_are_the_levels(graph):
    spec = f"bfs:graph={graph},source=0,structure=rodinia,base_ns=100,edge_ns=10,test_ns=1,update_ns=5"
    graph_params = dict(item.split("=") for item in f"graph={graph}".split(","))
    g = build_graph(graph_params, np.random.default_rng(3))
    levels = bfs_levels(g, 0)
    n, depth, reached = g.shape[0], int(levels.max()), levels >= 0
    program = costs(spec, 3)
    assert len(program) == 2 * (depth + 1) and all(len(loop) == n for loop in program)
    degree = np.diff(g.indptr)
    # Every reached vertex is expanded once, every vertex but the source marked once; the rest is testing.
    expanded = (100 + 10 * degree)[reached].sum()
    assert sum(map(sum, program[0::2])) == pytest.approx((depth + 1) * n + expanded)
    assert sum(map(sum, program[1::2])) == pytest.approx((depth + 1) * n + 5 * (reached.sum() - 1))
    # The frontier structure's loops are the same expansions, each vertex without its tests.
    frontier = costs(f"bfs:graph={graph},source=0,base_ns=100,edge_ns=10", 3)
    assert [sorted(x - 1 for x in loop if x > 1) for loop in program[0::2]] == [sorted(loop) for loop in frontier]


def test_rodinia_bfs_through_the_cli(five, run_json):
    result = run_json(f"bfs:graph=five.txt,{RODINIA_BFS},data=0", "omp-dynamic", 2, HASWELL, five.parent,
                      "--chunks", "c.csv")
    assert result["sequential_ns"] == pytest.approx(sum(map(sum, FIVE_LOOPS)))
    chunks = pd.read_csv(five.parent / "c.csv", comment="#")
    assert (chunks["hi"] - chunks["lo"]).groupby(chunks["loop"]).sum().tolist() == [5] * 8
    # With its data, the memory time comes on top, in as many events.
    touched = run_json(f"bfs:graph=five.txt,{RODINIA_BFS}", "omp-dynamic", 2, HASWELL, five.parent)
    assert touched["sequential_ns"] > result["sequential_ns"] and touched["counters"]["l1_hits"] > 0
    assert touched["events"] == result["events"]


def test_the_frontier_structure_is_the_default(five):
    assert costs(f"bfs:graph={five},base_ns=100,edge_ns=10") == \
        costs(f"bfs:graph={five},structure=frontier,base_ns=100,edge_ns=10") == [[120], [120, 110], [120], [110]]
    assert get_workload(f"bfs:graph={five}").loop_sizes() is None
    assert get_workload("bfs:n=500,structure=rodinia").loop_sizes() == [(500, 4)]


@pytest.mark.parametrize("workload, needles", [
    ("bfs:graph=five.txt,test_ns=2", ("test_ns does not apply", "structure=rodinia")),
    ("bfs:graph=five.txt,structure=frontier,update_ns=2", ("update_ns does not apply", "structure=rodinia")),
    ("bfs:graph=five.txt,structure=levels", ("structure='levels'", "frontier, rodinia")),
    ("bfs:graph=five.txt,structure=rodinia,test_ns=-1", ("test_ns=-1", ">= 0")),
    ("bfs:graph=five.txt,test_ns=-1", ("test_ns does not apply",)),  # the stray key, whatever its value
    ("bfs:graph=five.txt,structure=rodinia,placement=first-touch", ("placement='first-touch'",)),
    ("bfs:graph=five.txt,structure=rodinia,source=9", ("source=9", "0..4")),
])
def test_bad_rodinia_bfs_parameters_are_one_line(five, main, workload, needles):
    refused(main("run", "--machine", HASWELL, "--scheduler", "omp-static", "--threads", 2, "--workload", workload,
                 cwd=five.parent), *needles)


# -- k-means, Rodinia's: no pruning ----------------------------------------------------------------------

def test_rodinia_kmeans_costs_every_point_all_its_distances():
    spec = "kmeans:variant=rodinia,points=300,clusters=4,features=5,iters=3,point_ns=3,feature_ns=2,data=0"
    program = loops(spec)
    assert len(program) == 3 and all(loop.n == 300 for loop in program)
    for loop in program:
        assert np.diff(loop.prefix).tolist() == [3 + 4 * 5 * 2] * 300
    # Rodinia's KDD Cup 1999 run is the variant's default shape: 494,020 points of 34 features, k = 5.
    kdd = get_workload("kmeans:variant=rodinia")
    assert (kdd.params["points"], kdd.params["features"], kdd.params["clusters"]) == (494020, 34, 5)
    assert kdd.loop_sizes() == [(494020, 10)]
    first = np.diff(kdd.loops(np.random.default_rng(0))[0].prefix)
    assert first.size == 494020 and np.all(first == 20 + 5 * 34 * 1)
    assert np.all(get_workload("kmeans:variant=rodinia,points=10,clusters=3,iters=2").distances(None) == 3)
    # The Hamerly variant keeps its defaults, and is what a kmeans without variant= runs.
    assert (get_workload("kmeans").params["points"], get_workload("kmeans").params["clusters"]) == (10000, 8)
    hamerly = costs("kmeans:variant=hamerly,points=300,iters=3,data=0")
    assert hamerly == costs("kmeans:points=300,iters=3,data=0") and len({tuple(c) for c in hamerly}) > 1


def test_rodinia_kmeans_draws_nothing():
    rng = np.random.default_rng(5)
    state = rng.bit_generator.state
    get_workload("kmeans:variant=rodinia,points=500,iters=2").loops(rng)
    assert rng.bit_generator.state == state
    # Hamerly's steps draw their points.
    get_workload("kmeans:points=500,iters=2").loops(rng)
    assert rng.bit_generator.state != state


def test_rodinia_kmeans_footprint_by_hand():
    program = loops("kmeans:variant=rodinia,points=200,clusters=5,features=34,iters=4")
    fp = program[0].data
    # A row pointer (8), 34 4-byte features and a 4-byte cluster per point; k reads of a 136-byte centroid.
    assert np.all(fp.bytes == 8 + 34 * 4 + 4) and fp.bytes.size == 200
    assert np.all(fp.gather.reads == 5) and (fp.gather.size, fp.gather.element) == (5 * 34 * 4, 34 * 4)
    assert (fp.pattern, fp.placement, fp.optional) == ("stream", "master", True)
    # Every step walks the same points and reads the same centroids: one loop, four times.
    assert all(loop is program[0] for loop in program)
    assert loops("kmeans:variant=rodinia,points=200,iters=2,data=0")[0].data is None
    assert loops("kmeans:variant=rodinia,points=200,iters=2,placement=interleave")[0].data.placement == "interleave"


def test_rodinia_kmeans_through_the_cli(run_json):
    compute = run_json("kmeans:variant=rodinia,points=1000,iters=3,data=0", "omp-dynamic:chunk=8", 4)
    assert compute["sequential_ns"] == pytest.approx(3 * 1000 * 190)
    touched = run_json("kmeans:variant=rodinia,points=1000,iters=3", "omp-dynamic:chunk=8", 4)
    assert touched["sequential_ns"] > compute["sequential_ns"] and touched["counters"]["l1_hits"] > 0
    assert touched["events"] == compute["events"] and touched["chunks"] == compute["chunks"]


@pytest.mark.parametrize("workload, needles", [
    ("kmeans:variant=rodinia,blobs=4", ("blobs does not apply", "variant=hamerly")),
    ("kmeans:variant=rodinia,blob_std=-1", ("blob_std does not apply",)),
    ("kmeans:variant=rodinia,distance_ns=4", ("distance_ns does not apply", "variant=hamerly")),
    ("kmeans:features=34", ("features does not apply", "variant=rodinia")),
    ("kmeans:points=100,feature_ns=2", ("feature_ns does not apply", "variant=rodinia")),
    ("kmeans:variant=lloyd", ("variant='lloyd'", "hamerly, rodinia")),
    ("kmeans:variant=rodinia,points=4", ("clusters=5 must be <= points=4",)),
    ("kmeans:variant=rodinia,features=0", ("features=0", ">= 1")),
    ("kmeans:variant=rodinia,points=100,placement=node1", ("placement='node1'",)),
])
def test_bad_rodinia_kmeans_parameters_are_one_line(main, workload, needles):
    refused(main("run", "--machine", HASWELL, "--scheduler", "omp-static", "--threads", 2, "--workload", workload),
            *needles)


# -- LavaMD's data -----------------------------------------------------------------------------------------

def test_lavamd_footprint_by_hand():
    workload = get_workload("lavamd:boxes=27,data=1")
    (loop,) = workload.loops(np.random.default_rng(1))
    counts = workload.particle_counts(np.random.default_rng(1)).ravel().astype(int)
    neighbours = (neighbourhood_sums(np.ones((3, 3, 3))) - 1).ravel().astype(int)
    assert neighbours[0] == 7 and neighbours[13] == 26  # a corner and the centre box
    # A 32-byte box header, a 24-byte entry per neighbour, and per particle its position and charge (40 bytes,
    # read) and its force (32 bytes, read and written).
    assert loop.data.bytes.tolist() == (32 + 24 * neighbours + 72 * counts).tolist()
    # Each neighbour particle's position and charge once, from the arrays of all the grid's particles.
    sums = neighbourhood_sums(counts.reshape(3, 3, 3).astype(float)).ravel().astype(int)
    assert loop.data.gather.reads.tolist() == (sums - counts).tolist()
    assert (loop.data.gather.size, loop.data.gather.element) == (40 * counts.sum(), 40)
    assert (loop.data.pattern, loop.data.placement, loop.data.optional) == ("stream", "master", False)
    # The costs are those of the loop without data.
    (alone,) = get_workload("lavamd:boxes=27").loops(np.random.default_rng(1))
    assert alone.data is None and np.array_equal(alone.prefix, loop.prefix)


def test_lavamd_data_is_opt_in(run_json):
    default = run_json("lavamd:boxes=64", "omp-dynamic", 4)
    compute = run_json("lavamd:boxes=64,data=0", "omp-dynamic", 4)
    assert (default["makespan_ns"], default["counters"]) == (compute["makespan_ns"], compute["counters"])
    touched = run_json("lavamd:boxes=64,data=1", "omp-dynamic", 4)
    assert touched["makespan_ns"] > compute["makespan_ns"] and touched["counters"]["local_dram"] > 0
    assert touched["events"] == compute["events"]
    spread = run_json("lavamd:boxes=64,data=1,placement=interleave", "omp-dynamic", 28)
    assert spread["counters"]["remote_dram"] > 0


def test_lavamd_data_larger_than_memory_is_refused():
    # 10^6 boxes of about 2000 particles: 144 GB of the boxes' own and 80 GB of shared positions.
    refused(cli("run", "--machine", HASWELL, "--scheduler", "omp-static", "--threads", 2,
                "--workload", "lavamd:boxes=1000000,particles=2000,pair_ns=1,data=1"),
            "does not fit in the 128 GiB of DRAM of machine haswell-e5-2695v3")


@pytest.mark.parametrize("workload, machine, needles", [
    ("lavamd:boxes=8,data=1,placement=nowhere", HASWELL, ("placement='nowhere'", "master, first-touch, interleave")),
    ("lavamd:boxes=8,data=2", HASWELL, ("data=2", "0 or 1")),
    ("lavamd:boxes=8,bytes=64", HASWELL, ("unknown parameter 'bytes'",)),
    ("lavamd:boxes=8,data=1", "uniform", ("machine uniform describes no memory hierarchy",)),
])
def test_bad_lavamd_data_is_one_line(main, workload, machine, needles):
    refused(main("run", "--machine", machine, "--scheduler", "omp-static", "--threads", 2, "--workload", workload),
            *needles)


# -- events stay per chunk ---------------------------------------------------------------------------------

def loop_count(result: dict) -> int:
    return len(result["loop_names"])


@pytest.mark.parametrize("small, large", [
    ("bfs:graph=uniform,n=2000,degree=8,source=0,structure=rodinia",
     "bfs:graph=uniform,n=20000,degree=8,source=0,structure=rodinia"),
    ("kmeans:variant=rodinia,points=2000,iters=2", "kmeans:variant=rodinia,points=20000,iters=2"),
    ("lavamd:boxes=64,data=1", "lavamd:boxes=729,data=1"),
])
def test_events_stay_per_chunk_as_the_input_grows(run_json, small, large):
    # Static blocks: a chunk per worker and loop, however many iterations; the data adds no event.
    results = {}
    for spec in (small, large):
        touched = run_json(spec, "omp-static", 8)
        compute = run_json(spec.replace(",data=1", "") + ",data=0", "omp-static", 8)
        assert (touched["events"], touched["chunks"]) == (compute["events"], compute["chunks"]), spec
        assert touched["makespan_ns"] != compute["makespan_ns"], spec
        assert touched["chunks"] == 8 * loop_count(touched)
        results[spec] = touched["events"] / loop_count(touched)
    assert results[small] == results[large]
