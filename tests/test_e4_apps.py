"""E4's applications: the LavaMD and k-means workloads worked out by hand, and the e4-apps experiment file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simsched import SimschedError, get_workload, simulate
from simsched.sweep import load_experiment
from simsched.workloads.kmeans import hamerly_distances
from simsched.workloads.lavamd import cube_side, neighbourhood_sums

ROOT = Path(__file__).resolve().parents[1]


def costs(spec: str, seed: int = 0) -> np.ndarray:
    return get_workload(spec).costs(np.random.default_rng(seed))


def loop_costs(spec: str, seed: int = 0) -> list[np.ndarray]:
    return [np.diff(loop.prefix) for loop in get_workload(spec).loops(np.random.default_rng(seed))]


# LavaMD


def test_neighbourhoods_count_corners_edges_faces_and_the_inside():
    sums = neighbourhood_sums(np.ones((3, 3, 3)))
    assert sums[0, 0, 0] == 8 and sums[0, 0, 1] == 12 and sums[0, 1, 1] == 18 and sums[1, 1, 1] == 27
    counts = np.arange(27.0).reshape(3, 3, 3)
    assert neighbourhood_sums(counts)[1, 1, 1] == counts.sum()
    assert neighbourhood_sums(counts)[0, 0, 0] == counts[:2, :2, :2].sum()


def test_lavamd_box_costs_by_hand():
    # 2 x 2 x 2 boxes: every box neighbours all 8, so box b costs pair_ns x c_b x (all particles).
    workload = get_workload("lavamd:boxes=8,pair_ns=3")
    counts = workload.particle_counts(np.random.default_rng(4)).ravel()
    assert np.array_equal(costs("lavamd:boxes=8,pair_ns=3", 4), 3 * counts * counts.sum())
    # One box: its particles against themselves.
    (one,) = get_workload("lavamd:boxes=1").particle_counts(np.random.default_rng(2)).ravel()
    assert costs("lavamd:boxes=1,pair_ns=1", 2).tolist() == [one * one]


def test_lavamd_numbers_boxes_as_lavamd_does():
    workload = get_workload("lavamd:boxes=27,pair_ns=1")
    counts = workload.particle_counts(np.random.default_rng(7))
    flat = costs("lavamd:boxes=27,pair_ns=1", 7)
    i, j, k = 0, 1, 2
    assert flat[(i * 3 + j) * 3 + k] == counts[i, j, k] * counts[0:2, 0:3, 1:3].sum()


def test_lavamd_particle_distribution():
    poisson = get_workload("lavamd:boxes=27000,spread=0").particle_counts(np.random.default_rng(0))
    assert poisson.mean() == pytest.approx(100, rel=0.01) and poisson.var() == pytest.approx(100, rel=0.1)
    clumped = get_workload("lavamd:boxes=27000,spread=0.5").particle_counts(np.random.default_rng(0))
    # A gamma(mean 1, cv 0.5) density: variance m + m^2 cv^2 = 100 + 2500.
    assert clumped.mean() == pytest.approx(100, rel=0.02) and clumped.var() == pytest.approx(2600, rel=0.1)


def test_lavamd_refuses_a_grid_that_is_not_a_cube():
    assert cube_side(512) == 8 and cube_side(1) == 1 and cube_side(500) is None
    with pytest.raises(SimschedError, match=r"boxes=500 is not a cube d\^3 \(e.g. 512 = 8 x 8 x 8\)"):
        get_workload("lavamd:boxes=500")


# K-means


def test_hamerly_work_by_hand():
    # Points 0, 1, 2, 10 on a line, centroids at 0 and 2. Step 1 moves them to 0.5 and 6 (shifts
    # 0.5, 4; half the gap 2.75): point 2's bound u = 4 fails and stays 4 when tightened, so it
    # computes both distances (1 + 2) and moves to the first cluster; point 10's u = 12 fails its
    # lower bound 9.5, and tightened to 4 passes (1). Step 2 (centroids 1 and 10) prunes every point.
    points = np.array([[0.0, 0], [1, 0], [2, 0], [10, 0]])
    work = hamerly_distances(points, points[[0, 2]].copy(), 3)
    assert work.tolist() == [[2, 2, 2, 2], [0, 0, 3, 1], [0, 0, 0, 0]]


def test_kmeans_costs_are_check_plus_distances():
    loops = loop_costs("kmeans:points=200,clusters=5,iters=4,check_ns=3,distance_ns=10")
    assert len(loops) == 4 and all(c.size == 200 for c in loops)
    assert np.all(loops[0] == 3 + 5 * 10)  # the first step computes every distance
    for later in loops[1:]:
        assert set(np.unique(later)) <= {3.0, 13.0, 63.0}  # pruned, tightened, or 1 + k distances


def test_kmeans_work_moves_from_loop_to_loop():
    loops = loop_costs("kmeans:points=5000,clusters=8,iters=4")
    full = [set(np.flatnonzero(c > 100)) for c in loops[1:]]
    # Some points recompute in one step and not in the next, and the other way round.
    assert full[0] - full[1] and full[1] - full[0] and full[1] - full[2] and full[2] - full[1]
    blocks = [c.reshape(10, -1).sum(axis=1) for c in loops[1:]]
    assert np.argsort(blocks[0]).tolist() != np.argsort(blocks[1]).tolist()
    assert loops[1].sum() > loops[-1].sum()  # the boundaries settle


@pytest.mark.parametrize("spec", ["lavamd:boxes=64", "kmeans:points=300,iters=3"])
def test_apps_are_deterministic_per_seed(spec):
    first, again, other = loop_costs(spec, 3), loop_costs(spec, 3), loop_costs(spec, 4)
    assert all(np.array_equal(a, b) for a, b in zip(first, again))
    assert not all(np.array_equal(a, b) for a, b in zip(first, other))


def test_kmeans_refuses_more_clusters_than_points():
    with pytest.raises(SimschedError, match="clusters=9 must be <= points=8"):
        get_workload("kmeans:points=8,clusters=9")


def test_kmeans_runs_as_a_program_of_loops():
    spec = "kmeans:points=400,iters=3,data=0"  # the points' compute alone: with their data, memory time comes on top
    result = simulate("haswell-e5-2695v3", "omp-dynamic:chunk=4", spec, threads=4, seed=1)
    assert len(result.loop_ns) == 3
    assert result.sequential_ns == pytest.approx(sum(c.sum() for c in loop_costs(spec, 1)))


# The experiment file


def test_e4_apps_experiment_loads_and_expands():
    experiment = load_experiment(ROOT / "experiments" / "e4-apps-haswell.toml")
    schedulers = {p["scheduler"] for p in experiment.points}
    workloads = {p["workload"] for p in experiment.points}
    assert len(schedulers) == 17 and {p["threads"] for p in experiment.points} == {1, 28}
    assert {w.split(":")[0] for w in workloads} == {"bfs", "lavamd", "kmeans", "spmv"}
    # Every method at 28 threads; on 1 thread only the baseline every speedup is over.
    assert len(experiment.points) == (17 + 1) * len(workloads)
    assert {p["scheduler"] for p in experiment.points if p["threads"] == 1} == {"omp-guided:chunk=1,runtime=gnu"}
    # The publication's 15 matrices, each by its published statistics.
    assert len([w for w in workloads if w.startswith("spmv:like=")]) == 15
    assert experiment.rank["baseline"] == "omp-guided:chunk=1,runtime=gnu" and experiment.rank["threads"] == 28
    assert experiment.rank["highlight"] == "ich"


# Ranking per application, with each SpMV matrix's row spread

SMALL_APPS = """\
[experiment]
name = "apps-small"

[grid]
machine = "haswell-e5-2695v3"
scheduler = ["omp-guided:chunk=1", "omp-dynamic:chunk=2", "ich:eps=0.25", "ich:eps=0.5"]
threads = [1, 4]
workload = ["spmv:matrix=powerlaw,iters=1", "spmv:matrix=banded,iters=1", "lavamd:boxes=27"]

[rank]
baseline = "omp-guided:chunk=1"
threads = 4
highlight = "ich"
"""


def test_rank_per_application_with_matrix_row_variance(tmp_path):
    import json
    import subprocess
    import sys

    from simsched.workloads.sparse import read_matrix, row_statistics

    (tmp_path / "apps.toml").write_text(SMALL_APPS, encoding="utf-8")
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "simsched.cli"]
    sweep = subprocess.run([*cli, "sweep", tmp_path / "apps.toml", "--out", out, "--jobs", "1", "--quiet"],
                           capture_output=True, text=True, timeout=300)
    assert sweep.returncode == 0, sweep.stderr
    ranked = subprocess.run([*cli, "rank", out, "--json"], capture_output=True, text=True, timeout=300)
    assert ranked.returncode == 0, ranked.stderr
    rows = json.loads(ranked.stdout)
    assert {r["workload"] for r in rows} == {"spmv:matrix=powerlaw,iters=1", "spmv:matrix=banded,iters=1",
                                             "lavamd:boxes=27"}
    assert {r["threads"] for r in rows} == {4}
    for row in rows:
        if row["workload"].startswith("spmv"):
            stats = row_statistics(read_matrix(row["workload"].split("=")[1].split(",")[0]))
            assert row["row_variance"] == pytest.approx(stats["var"]) and row["row_cv"] == pytest.approx(stats["cv"])
        else:
            assert row["row_variance"] is None
    assert sorted(r["rank"] for r in rows if r["workload"] == "lavamd:boxes=27") == [1, 2, 3]
    text = subprocess.run([*cli, "rank", out], capture_output=True, text=True, timeout=300).stdout
    banded = row_statistics(read_matrix("banded"))
    assert (f"spmv:matrix=banded,iters=1, 4 threads on haswell-e5-2695v3 (nonzeros per row: variance "
            f"{banded['var']:.1f}, CV 0.00)") in text
    assert "lavamd:boxes=27, 4 threads on haswell-e5-2695v3\n" in text and "ich: rank" in text
