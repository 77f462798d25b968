"""E5's application workloads: generated loop statistics against AV21's tables, the experiments, the [apps] table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simsched.analysis.app_study import apps_comparison, apps_table, format_apps_table
from simsched.engine import simulate
from simsched.sweep import load_experiment
from simsched.workloads import get_workload
from simsched.workloads.apps import PUBLISHED, app_statistics, cilk_time_ns, cilk_work_ns, published_statistics

ROOT = Path(__file__).resolve().parents[1]
APPS = tuple(PUBLISHED)


def program(spec: str, seed: int = 0):
    return get_workload(spec).build(np.random.default_rng(seed))


@pytest.mark.parametrize("app", APPS)
def test_generated_statistics_match_the_published_ones(app):
    stats, pub = app_statistics(program(f"app:name={app}")), published_statistics(app)
    assert stats["loops"] == pub["loops"]
    assert stats["fine"] == pub["fine"]  # under 1 ms (codes), under 0.1 ms (Ligra)
    for key in ("min_us", "avg_us", "max_us"):
        assert stats[key] == pytest.approx(pub[key], rel=0.10), key
    their_time = "fine_s" if PUBLISHED[app].kind == "code" else "cilk_fine_s"
    assert stats[their_time] == pytest.approx(pub[their_time], rel=0.10)
    if PUBLISHED[app].kind == "code":
        assert stats["t_seq_s"] == pytest.approx(pub["t_seq_s"], rel=0.01)
        assert abs(stats["in_loops_pct"] - pub["in_loops_pct"]) <= 1.0
    else:
        assert stats["cilk_total_s"] == pytest.approx(pub["cilk_total_s"], rel=0.01)


@pytest.mark.parametrize("app", APPS)
def test_a_shortened_program_keeps_its_loops(app):
    short, whole = program(f"app:name={app},scale=0.5"), program(f"app:name={app},scale=1")
    full_stats = app_statistics(whole)
    run = app_statistics(short, full=False)
    assert len(short.order) < len(whole.order)
    assert run["min_us"] == pytest.approx(full_stats["min_us"]) and run["max_us"] == pytest.approx(full_stats["max_us"])
    if PUBLISHED[app].kind == "code":  # whole time steps: every distinct loop, the same share in loops
        assert run["loops"] == full_stats["loops"] and run["fine"] == full_stats["fine"]
        if app != "mpdata":  # its set-up loop runs once whatever the scale
            assert run["in_loops_pct"] == pytest.approx(full_stats["in_loops_pct"])


def test_mpdata_reads_the_table_with_uneven_repeats():
    mpdata = program("app:name=mpdata,scale=1")
    counts = mpdata.full_counts
    assert sorted(set(counts.tolist())) == [1, 207, 2070]
    fine = [loop.name.startswith("fine/") for loop in mpdata.loops]
    assert all(c == 2070 for c, f in zip(counts, fine) if f)


@pytest.mark.parametrize("app, steps, first", [("cloverleaf", 57, 0), ("mpdata", 207, 1), ("lb3d", 1000, 0)])
def test_a_code_runs_its_sequential_code_once_per_time_step(app, steps, first):
    whole = program(f"app:name={app},scale=1")
    pub = PUBLISHED[app]
    assert whole.serial_total_ns(full=True) == pytest.approx(pub.t_seq_s * 1e9 * (1 - pub.in_loops_pct / 100))
    # Before the step's first loop (MPDATA: after its set-up loop), nothing before the step's other loops.
    serial = np.array([whole.loops[i].serial_ns for i in whole.order])
    assert np.count_nonzero(serial) == steps
    per_step = len(whole.order[first:]) // steps
    assert np.flatnonzero(serial).tolist() == [first + k * per_step for k in range(steps)]
    assert all(loop.fine_grain for loop in whole.loops)


@pytest.mark.parametrize("app", ["bfs", "bc", "cc", "pr"])
def test_the_rest_of_a_ligra_kernel_is_coarse_cilk_loops_between_its_fine_grain_loops(app):
    kernel, pub = program(f"app:name={app},scale=1"), PUBLISHED[app]
    coarse = [i for i, loop in enumerate(kernel.loops) if loop.name.startswith("coarse/")]
    assert len(coarse) == 8 and kernel.serial_total_ns(full=True) == 0.0
    assert all(not kernel.loops[i].fine_grain for i in coarse)
    assert all(loop.fine_grain for i, loop in enumerate(kernel.loops) if i not in coarse)
    # Their Cilk times at 48 threads are the kernel's time outside its fine-grain loops.
    assert np.sum(kernel.times_ns[coarse]) == pytest.approx((pub.cilk_total_s - pub.cilk_fine_s) * 1e9)
    positions = [kernel.order.index(i) for i in coarse]
    assert 0 < min(positions) and max(positions) < len(kernel.order) - 1
    assert len(program(f"app:name={app},scale=0.5").counts.nonzero()[0]) == round(pub.loops / 2) + 4


def test_cilk_fg_runs_a_kernel_s_coarse_loop_as_cilk_and_its_fine_loops_as_static_blocks(tmp_path):
    spec = "app:name=bfs,scale=0.05"
    kernel = program(spec)
    names = [kernel.loops[i].name for i in kernel.order]
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", "xeon-e7-4860v2",
                           "--scheduler", "cilk-fg", "--threads", "8", "--workload", spec,
                           "--chunks", str(tmp_path / "c.csv")], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    chunks = pd.read_csv(tmp_path / "c.csv", comment="#")
    assert sorted(chunks["loop"].unique()) == list(range(len(names)))
    for index, name in enumerate(names):
        mine = chunks[chunks["loop"] == index]
        if name.startswith("coarse/"):
            assert len(mine) > 8 and mine["worker"].nunique() == 8
        else:
            # One static block per worker (no block for some of them when the loop has fewer iterations).
            assert mine["worker"].is_unique and len(mine) == min(8, kernel.loops[kernel.order[index]].n)


def test_ligra_times_are_cilk_times_of_the_work():
    times = np.array([500.0, 71e3, 2e6, 21e6])
    assert np.allclose(cilk_time_ns(cilk_work_ns(times)), times)
    bfs = program("app:name=bfs")
    assert np.allclose([loop.total for loop in bfs.loops], cilk_work_ns(bfs.times_ns))


def test_structured_loops_are_near_equal_and_graph_loops_skewed():
    def cv(spec):
        loop = max(program(spec).loops, key=lambda loop: loop.n)
        costs = np.diff(loop.prefix)
        return costs.std() / costs.mean()

    assert cv("app:name=cloverleaf") < 0.05
    assert 0.35 < cv("app:name=pr") < 0.7
    assert cv("app:name=pr,cv=0") == pytest.approx(0.0, abs=1e-9)


def test_the_same_seed_gives_the_same_program_and_another_seed_another():
    def costs(seed):
        return np.concatenate([np.diff(loop.prefix) for loop in program("app:name=cc", seed).program()])

    assert np.array_equal(costs(3), costs(3))
    other = costs(4)
    assert other.size != costs(3).size or not np.array_equal(other, costs(3))
    assert simulate("xeon-e7-4860v2", "fg-tree", "app:name=lb3d,scale=0.005", 4, seed=1).makespan_ns == \
        simulate("xeon-e7-4860v2", "fg-tree", "app:name=lb3d,scale=0.005", 4, seed=1).makespan_ns


def test_a_run_reports_loop_time_per_class():
    result = simulate("xeon-e7-4860v2", "fg-tree", "app:name=lb3d,scale=0.005", 8)
    classes = result.loop_ns_by_class()
    assert set(classes) == {"fine", "coarse"}
    assert sum(classes.values()) == pytest.approx(sum(result.loop_ns))
    assert result.to_dict()["loop_class_ns"] == classes


BAD_APPS = [
    ("app:name=bfs,scale=0", ("scale",)),
    ("app:name=bfs,scale=2", ("scale",)),
    ("app:name=lb3d,cv=-1", ("cv",)),
    ("app:name=lb3d,steps=3", ("steps",)),
    ("app:name=lb3d,max_iterations=0", ("max_iterations",)),
]


def _run_line(spec: str) -> list[str]:
    return ["run", "--machine", "xeon-e7-4860v2", "--scheduler", "fg-tree", "--threads", "4", "--workload", spec]


def test_an_unknown_app_exits_2_with_one_line():
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *_run_line("app:name=nope")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "error" in lines[0] and "name='nope'" in lines[0] and "cloverleaf" in lines[0]


@pytest.mark.parametrize("spec, needles", BAD_APPS)
def test_bad_app_parameters_exit_2_with_one_line(spec, needles, capsys):
    from simsched.cli import main

    assert main(_run_line(spec)) == 2
    out, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert out == "" and len(lines) == 1 and "error" in lines[0]
    assert all(needle in lines[0] for needle in needles), lines[0]


@pytest.mark.parametrize("name, runs, schedulers", [
    ("e5-apps-xeon-e7", 24, {"omp-static", "fg-tree"}),
    ("e5-ligra-xeon-e7", 48, {"cilk", "cilk-fg", "hybrid"}),
])
def test_the_e5_experiments_expand_to_the_documented_runs(name, runs, schedulers):
    experiment = load_experiment(ROOT / "experiments" / f"{name}.toml")
    assert len(experiment.points) == runs
    assert {p["scheduler"] for p in experiment.points} == schedulers
    assert {p["machine"] for p in experiment.points} == {"xeon-e7-4860v2"}
    assert max(p["threads"] for p in experiment.points) == 48
    assert experiment.apps is not None
    assert f"| `experiments/{name}.toml` |" in (ROOT / "docs" / "experiments.md").read_text()
    assert f"| {runs} |" in (ROOT / "docs" / "experiments.md").read_text()


def test_an_apps_section_needs_app_workloads(tmp_path):
    config = tmp_path / "e.toml"
    config.write_text('[grid]\nmachine = "xeon-e7-4860v2"\nscheduler = "fg-tree"\nthreads = 4\n'
                      'workload = "uniform:n=10"\n[apps]\npublished = "x"\n')
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "sweep", str(config), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 2 and "[apps]" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def _row(workload, scheduler, threads, seed=0, **columns):
    return {"machine": "m", "workload": workload, "scheduler": scheduler, "threads": threads, "seed": seed,
            "repeat": 1, "makespan_ns": 1e6, "error": "", **columns}


def test_the_apps_table_on_a_hand_made_frame():
    # lb3d at scale 0.005 runs 5 of 1000 steps: each class's time scales by 200, plus the whole program's serial code.
    lb3d = "app:name=lb3d,scale=0.005"
    mine = program(lb3d)
    serial_s = mine.serial_total_ns(full=True) / 1e9
    frame = pd.DataFrame([
        _row(lb3d, "omp-static", 48, loop_fine_ns=2e6, loop_coarse_ns=8e6),
        _row(lb3d, "fg-tree", 48, loop_fine_ns=1e6, loop_coarse_ns=8e6),
        _row(lb3d, "fg-tree", 1, loop_fine_ns=9e6, loop_coarse_ns=9e6),
        _row("uniform:n=10", "fg-tree", 48),  # not an app: left out
    ])
    table = apps_table(frame)
    assert len(table) == 3
    omp = table[(table["scheduler"] == "omp-static")].iloc[0]
    assert omp["fine_s"] == pytest.approx(2e6 * 200 / 1e9)
    assert omp["whole_s"] == pytest.approx((2e6 + 8e6) * 200 / 1e9 + serial_s)
    assert omp["t_seq_s"] == pytest.approx(4.92, rel=1e-6)
    comparison = apps_comparison(table)
    row = comparison.iloc[0]
    assert (row["scheduler"], row["baseline"], row["threads"]) == ("fg-tree", "omp-static", 48)
    assert row["fine_gain_pct"] == pytest.approx(100.0)
    assert row["whole_gain_pct"] == pytest.approx(100 * ((10e6 * 200 / 1e9 + serial_s) / (9e6 * 200 / 1e9 + serial_s) - 1))
    assert row["pub_base_speedup"] == 34.1 and row["pub_speedup"] == 39.3
    text = format_apps_table(comparison)
    assert "lb3d" in text and "+100.0" in text and "34.1/39.3" in text


def test_the_apps_table_compares_ligra_with_the_hybrid_cilk_published():
    bfs = "app:name=bfs,scale=0.1"
    frame = pd.DataFrame([_row(bfs, "cilk", 48, loop_fine_ns=3e6, loop_coarse_ns=5e6),
                          _row(bfs, "cilk-fg", 48, loop_fine_ns=2e6, loop_coarse_ns=5e6),
                          _row(bfs, "hybrid", 48, loop_fine_ns=4e6, loop_coarse_ns=5e6)])
    comparison = apps_comparison(apps_table(frame)).set_index("scheduler")
    assert comparison.loc["cilk-fg", "fine_gain_pct"] == pytest.approx(50.0)
    assert comparison.loc["hybrid", "fine_gain_pct"] == pytest.approx(-25.0)
    assert comparison.loc["cilk-fg", "pub_fine_gain_pct"] == pytest.approx(100 * (0.0928 / 0.0763 - 1))
    assert pd.isna(comparison.loc["hybrid"].get("pub_fine_gain_pct", np.nan))


def test_the_apps_table_refuses_results_without_class_columns():
    from simsched.errors import SimschedError

    with pytest.raises(SimschedError, match=r"no loop_\w+_ns column"):
        apps_table(pd.DataFrame([_row("app:name=lb3d", "fg-tree", 4)]))
