"""E3, the affinity study: its shape on the modeled Xeon E5, the [affinity] sweep section, its table and plot."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import simsched
from simsched.sweep import load_experiment

ROOT = Path(__file__).resolve().parents[1]
MACHINE = "xeon-e5-4620"
# E3's loop at a quarter of its iterations, with arrays four times as large: the same working sets.
N = 4096


def e3(scheduler: str, mb: float, balance: str = "balanced", threads: int = 32):
    workload = f"arrays:n={N},bytes={int(mb * 1e6 / N) // 8 * 8},balance={balance}"
    return simsched.simulate(MACHINE, scheduler, workload, threads, repeat=4)


def share(result, *names) -> float:
    served = ("l1_hits", "l2_hits", "l3_hits", "remote_l3_hits", "local_dram", "remote_dram")
    return sum(result.counters[n] for n in names) / sum(result.counters[n] for n in served)


def test_static_keeps_every_iteration_and_its_data_in_place():
    result = e3("omp-static", 79)
    assert result.affinity["per_loop"] == [None, 1.0, 1.0, 1.0]
    # First touch put each page on its runner's node: no line ever comes from another socket.
    assert share(result, "remote_dram", "remote_l3_hits") == 0


def test_hybrid_keeps_affinity_on_balanced_loops_and_much_of_it_on_unbalanced_ones():
    assert e3("hybrid", 79).affinity["overall"] >= 0.95
    unbalanced = e3("hybrid", 79, "unbalanced")
    assert 0.4 <= unbalanced.affinity["overall"] <= 0.9
    # ... and balances the ramp that static cannot.
    assert unbalanced.makespan_ns < e3("omp-static", 79, "unbalanced").makespan_ns


@pytest.mark.parametrize("scheduler", ["cilk", "omp-dynamic:chunk=0"])
def test_dynamic_schedules_keep_little(scheduler):
    assert e3(scheduler, 79).affinity["overall"] < 0.35


def test_guided_keeps_its_first_chunks_in_place_only_when_the_release_order_repeats():
    # The hyper barrier releases down a fixed tree: the workers claim guided's first, largest chunks in the
    # same order every loop. The central one serves its spinners in arrival order, which the loops reshuffle.
    tree = e3("omp-guided:chunk=0", 79)
    central = e3("omp-guided:chunk=0,barrier=central", 79)
    assert tree.affinity["overall"] > 0.5
    assert central.affinity["overall"] < 0.15
    # Both claim the same chunks: only who runs them, and so where their data is, differs.
    assert tree.chunk_count == central.chunk_count
    remote = ("remote_dram", "remote_l3_hits")
    assert share(central, *remote) > 3 * share(tree, *remote)


def test_the_e3_sweep_runs_the_publications_openmp_runtime_and_libgomp():
    experiment = load_experiment(ROOT / "experiments" / "e3-affinity-xeon-e5.toml")
    schedulers = {p["scheduler"] for p in experiment.points}
    assert {"omp-static:runtime=llvm", "omp-guided:chunk=0,runtime=llvm", "omp-guided:chunk=0,runtime=gnu",
            "omp-dynamic:chunk=0,runtime=llvm", "omp-dynamic:chunk=0,runtime=gnu"} <= schedulers


def test_static_beats_dynamic_at_79_mb_because_dynamic_reads_remote_dram():
    static, dynamic = e3("omp-static", 79), e3("omp-dynamic:chunk=0", 79)
    assert static.makespan_ns < 0.8 * dynamic.makespan_ns
    assert share(static, "remote_dram") == 0
    assert share(dynamic, "remote_dram") > 0.4
    # Below the L3 capacity both are served by caches, and the gap in time shrinks.
    small_static, small_dynamic = e3("omp-static", 11.9), e3("omp-dynamic:chunk=0", 11.9)
    # The first of the 4 loops reads everything from DRAM; the other three everything from the socket's caches.
    assert share(small_static, "l3_hits", "l1_hits", "l2_hits") == pytest.approx(0.75)
    assert small_dynamic.makespan_ns - small_static.makespan_ns < dynamic.makespan_ns - static.makespan_ns


def test_the_e3_experiment_is_the_published_grid():
    experiment = load_experiment(ROOT / "experiments" / "e3-affinity-xeon-e5.toml")
    assert len(experiment.points) == 336
    assert experiment.affinity is not None
    sizes = {round(simsched.get_workload(p["workload"]).footprint(16384).total / 1e6, 1)
             for p in experiment.points}
    assert sizes == {11.9, 15.9, 79.0, 265.9}  # the unbalanced ramps carry the same totals


CONFIG = """\
[experiment]
name = "small-e3"

[grid]
machine = "xeon-e5-4620"
scheduler = ["omp-static", "omp-dynamic:chunk=0"]
threads = THREADS
workload = "arrays:n=512,bytes=40000"
repeat = 3

[affinity]
published = "static keeps all"
"""


def cli(*args, cwd):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300, env=env)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_an_affinity_sweep_prints_and_saves_its_table_and_plots_it(tmp_path):
    config = tmp_path / "e.toml"
    config.write_text(CONFIG.replace("THREADS", "[1, 8]"))
    proc = cli("sweep", config, "--out", tmp_path / "out", "--jobs", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "affinity study at 8 threads" in proc.stdout and "published: static keeps all" in proc.stdout
    rows = pd.read_csv(tmp_path / "out" / "results.csv")
    static = rows[(rows["scheduler"] == "omp-static") & (rows["threads"] == 8)]
    assert static["affinity"].tolist() == [1.0]
    table = pd.read_csv(tmp_path / "out" / "affinity.csv")
    at8 = table[table["threads"] == 8].set_index("scheduler")
    assert at8.loc["omp-static", "scalability"] > 1
    assert at8.loc["omp-static", "work_efficiency"] == pytest.approx(1.0, abs=0.01)
    assert at8.loc["omp-static", "working_set_mb"] == pytest.approx(20.48)
    plot = cli("plot", tmp_path / "out", cwd=tmp_path)
    assert plot.returncode == 0, plot.stderr
    assert (tmp_path / "out" / "affinity.png").stat().st_size > 10_000


def test_an_affinity_section_needs_one_thread_in_the_grid(tmp_path):
    config = tmp_path / "e.toml"
    config.write_text(CONFIG.replace("THREADS", "[8]"))
    proc = cli("sweep", config, "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("[affinity]: scalability T1/TP needs 1 in grid.threads")
    assert len(proc.stderr.strip().splitlines()) == 1
    config.write_text(CONFIG.replace("THREADS", "[1]").replace("published =", "publisehd ="))
    proc = cli("sweep", config, "--out", tmp_path / "out", cwd=tmp_path)
    assert proc.returncode == 2 and "unknown key affinity.publisehd" in proc.stderr


def test_run_json_reports_affinity_per_loop(tmp_path):
    proc = cli("run", "--machine", MACHINE, "--scheduler", "omp-static", "--threads", "4", "--workload",
               "arrays:n=256,bytes=4096", "--repeat", "3", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["affinity"] == {"per_loop": [None, 1.0, 1.0], "overall": 1.0}
    assert data["counters"]["l2_hits"] > 0
