"""Grids that fit their machines: thread counts per machine, axes that vary together, grids counted first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pandas as pd
import pytest

from simsched import grid, sweep
from simsched.cli import main
from simsched.store import point_id

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = "uforall:n=96,total_us=5"


def config(grid: str, extra: str = "", name: str = "grid") -> str:
    """An experiment file with this [grid] body (and any sections after it)."""
    return f'[experiment]\nname = "{name}"\n\n[grid]\n{textwrap.dedent(grid)}\n{textwrap.dedent(extra)}'


def sweep_cli(tmp_path: Path, text: str, *options: str) -> int:
    """``simsched sweep`` in this process (one worker, no pool) on ``text``, into ``tmp_path/out``."""
    path = tmp_path / "exp.toml"
    path.write_text(text)
    return main(["sweep", str(path), "--out", str(tmp_path / "out"), "--jobs", "1", "--quiet", *options])


def results(tmp_path: Path) -> pd.DataFrame:
    return pd.read_csv(tmp_path / "out" / "results.csv")


def refusal(capsys) -> str:
    """The one line a refused command printed on stderr."""
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("simsched: error: ")
    return lines[0]


def cli_env() -> dict[str, str]:
    paths = [str(ROOT), os.environ.get("PYTHONPATH")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, paths))}


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """The real console entry in a subprocess."""
    return subprocess.run([sys.executable, "-m", "simsched.cli", *args], capture_output=True, text=True,
                          cwd=cwd, env=cli_env(), timeout=120)


def test_all_and_fractions_are_each_machines_share_of_its_cores(tmp_path):
    text = config(f"""
        machine = ["haswell-e5-2695v3", "xeon-e7-4860v2"]
        scheduler = "omp-static"
        threads = ["1/4", "1/2", "all"]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, text) == 0
    frame = results(tmp_path)
    assert (frame["error"].isna() | (frame["error"] == "")).all()
    by_machine = frame.groupby("machine")["threads"].apply(list).to_dict()
    assert by_machine == {"haswell-e5-2695v3": [7, 14, 28], "xeon-e7-4860v2": [12, 24, 48]}


def test_a_fraction_rounds_down_and_never_below_one_thread(tmp_path):
    text = config(f"""
        machine = ["uniform:cores=10,latency_ns=100", "uniform:cores=3,latency_ns=100"]
        scheduler = "omp-static"
        threads = ["1/4", "2/3"]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, text) == 0
    frame = results(tmp_path)
    # 10 x 1/4 = 2.5 -> 2, 10 x 2/3 = 6.67 -> 6; 3 x 1/4 = 0.75 -> 1, 3 x 2/3 -> 2
    assert list(zip(frame["machine"].str.extract(r"cores=(\d+)")[0].astype(int), frame["threads"])) == \
        [(10, 2), (10, 6), (3, 1), (3, 2)]


def test_integer_grids_keep_their_point_ids():
    """Points carry integer thread counts, so an integer grid's saved results stay its own."""
    text = config(f"""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = [4, 28]
        workload = "{WORKLOAD}"
    """)
    points = sweep.parse_experiment(tomllib.loads(text)).points
    assert [p["threads"] for p in points] == [4, 28]
    assert all(type(p["threads"]) is int for p in points)
    # The ids these points had before thread counts could be shares of a machine's cores.
    assert [point_id(p) for p in points] == ["0f32371d6db85720", "0a01e6e0479adea6"]


def test_all_is_the_same_experiment_as_the_count_it_stands_for(tmp_path, capsys):
    counted = config(f"""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = [14, 28]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, counted) == 0
    capsys.readouterr()
    shared = counted.replace("threads = [14, 28]", 'threads = ["1/2", "all"]')
    assert sweep_cli(tmp_path, shared) == 0
    assert "2 already saved, 0 run now" in capsys.readouterr().out


def test_shares_that_come_to_the_same_run_are_run_once(tmp_path):
    text = config(f"""
        machine = ["uniform:cores=1,latency_ns=100", "uniform:cores=2,latency_ns=100"]
        scheduler = "omp-static"
        threads = ["1/2", "all", 1]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, text) == 0
    frame = results(tmp_path)
    assert list(zip(frame["machine"].str.extract(r"cores=(\d+)")[0].astype(int), frame["threads"])) == \
        [(1, 1), (2, 1), (2, 2)]
    assert json.loads((tmp_path / "out" / "sweep.json").read_text())["points"] == 3


def test_a_share_listed_twice_is_still_refused(tmp_path, capsys):
    text = config(f"""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = ["all", "all"]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, text) == 2
    assert "the grid lists the same run twice" in refusal(capsys)


@pytest.mark.parametrize("value, needle", [
    ('"0/4"', "more than 0 and at most 1"),
    ('"5/4"', "more than 0 and at most 1"),
    ('"1/0"', "more than 0 and at most 1"),
    ('"half"', "'half'"),
    ('"All"', "'All'"),
    ('"1/2.5"', "'1/2.5'"),
    ("0.5", "0.5"),
    ("0", ">= 1, got 0"),
    ("true", "True"),
])
def test_a_thread_count_that_is_no_count_or_share_is_refused(tmp_path, capsys, value, needle):
    text = config(f"""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = [4, {value}]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, text) == 2
    line = refusal(capsys)
    assert "grid.threads" in line and needle in line
    assert not (tmp_path / "out").exists()


def test_threads_beyond_a_machines_cores_are_refused_before_anything_runs(tmp_path):
    (tmp_path / "exp.toml").write_text(config(f"""
        machine = ["haswell-e5-2695v3", "xeon-e7-4860v2"]
        scheduler = ["omp-static", "fg-tree"]
        threads = [1, 28, 48]
        workload = "{WORKLOAD}"
    """))
    proc = run_cli("sweep", "exp.toml", "--out", "out", "--jobs", "1", "--quiet", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    line = proc.stderr.strip()
    assert "48 threads on machine haswell-e5-2695v3, which has 28 cores" in line
    assert not (tmp_path / "out").exists()


def test_machine_and_threads_can_vary_together(tmp_path):
    text = config(f"""
        machine = ["haswell-e5-2695v3", "haswell-e5-2695v3", "xeon-e7-4860v2"]
        threads = [14, "all", 48]
        together = [["machine", "threads"]]
        scheduler = ["omp-static", "fg-tree"]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, text) == 0
    frame = results(tmp_path)
    assert list(zip(frame["machine"], frame["threads"], frame["scheduler"])) == [
        ("haswell-e5-2695v3", 14, "omp-static"), ("haswell-e5-2695v3", 14, "fg-tree"),
        ("haswell-e5-2695v3", 28, "omp-static"), ("haswell-e5-2695v3", 28, "fg-tree"),
        ("xeon-e7-4860v2", 48, "omp-static"), ("xeon-e7-4860v2", 48, "fg-tree")]


def test_parameter_axes_can_vary_together(tmp_path):
    """Loops of the same total work: more iterations, each shorter."""
    text = config("""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = 4
        workload = "uforall:total_us=20"
        "workload.n" = [8, 16, 32]
        "scheduler.chunk" = [1, 2, 4]
        seed = [0, 1]
        together = [["workload.n", "scheduler.chunk"]]
    """)
    assert sweep_cli(tmp_path, text) == 0
    frame = results(tmp_path)
    assert list(zip(frame["workload"], frame["scheduler"], frame["seed"])) == [
        (f"uforall:total_us=20,n={n}", f"omp-static:chunk={c}", s)
        for s in (0, 1) for n, c in ((8, 1), (16, 2), (32, 4))]


@pytest.mark.parametrize("together, needle", [
    ('[["machine", "threads"]]', "as many values each (machine has 2, threads has 3)"),
    ('[["machine", "thread"]]', "'thread' is not an axis of the grid"),
    ('[["machine", "seed"]]', "'seed' is not an axis of the grid"),
    ('[["machine", "threads"], ["threads", "scheduler"]]', "axis threads is named more than once"),
    ('[["machine"]]', "two or more axes"),
    ('["machine", "threads"]', "list of groups of axis names"),
    ("[]", "list of groups of axis names"),
])
def test_a_malformed_together_is_refused(tmp_path, capsys, together, needle):
    text = config(f"""
        machine = ["haswell-e5-2695v3", "xeon-e7-4860v2"]
        threads = [1, 2, 4]
        scheduler = ["omp-static", "fg-tree"]
        workload = "{WORKLOAD}"
        together = {together}
    """)
    assert sweep_cli(tmp_path, text) == 2
    line = refusal(capsys)
    assert "grid.together" in line and needle in line


def test_an_axis_too_long_is_refused_before_it_is_built(tmp_path, capsys, monkeypatch):
    def built(*args, **kwargs):
        raise AssertionError("the axis was built before the grid was counted")

    monkeypatch.setattr(grid.np, "linspace", built)
    text = config("""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = 4
        workload = "uforall:n=96"
        "workload.total_us" = { linspace = [1, 100], num = 100000000 }
    """)
    assert sweep_cli(tmp_path, text) == 2
    line = refusal(capsys)
    assert "grid.workload.total_us.num = 100,000,000" in line and f"{grid.MAX_GRID_POINTS:,}" in line


def test_a_grid_of_too_many_points_is_refused_before_it_is_built(tmp_path, capsys, monkeypatch):
    def built(*args, **kwargs):
        raise AssertionError("an axis was built before the grid was counted")

    monkeypatch.setattr(grid.np, "linspace", built)
    monkeypatch.setattr(grid.np, "logspace", built)
    text = config("""
        machine = "haswell-e5-2695v3"
        scheduler = ["omp-static", "fg-tree"]
        threads = [1, 2, 4, 8]
        workload = "uforall"
        "workload.total_us" = { logspace = [1, 1000], num = 1000 }
        "workload.n" = { linspace = [100, 1000], num = 1000 }
    """)
    assert sweep_cli(tmp_path, text) == 2
    line = refusal(capsys)
    assert "the grid has 8,000,000 points" in line
    assert "2 scheduler x 4 threads x 1,000 workload.total_us x 1,000 workload.n" in line
    assert not (tmp_path / "out").exists()


def test_axes_that_vary_together_count_once(tmp_path, capsys):
    """Two axes of 1,000 values each taken in step are 1,000 points, not a million."""
    text = config(f"""
        machine = "haswell-e5-2695v3"
        scheduler = ["omp-static", "fg-tree"]
        threads = 4
        workload = "uforall"
        "workload.total_us" = {{ logspace = [1, 1000], num = 1000 }}
        "workload.n" = {{ linspace = [100, 1000], num = 1000 }}
        seed = {list(range(1000))}
        together = [["workload.total_us", "workload.n"]]
    """)
    assert sweep_cli(tmp_path, text) == 2
    line = refusal(capsys)
    assert "the grid has 2,000,000 points " in line
    assert "(2 scheduler x 1,000 seed x 1,000 workload.total_us/workload.n)" in line


def test_an_enormous_axis_costs_no_memory(tmp_path):
    """The refusal comes from counting: the process never holds the 10^8 values (800 MB as floats)."""
    (tmp_path / "exp.toml").write_text(config("""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = 4
        workload = "uforall:n=96"
        "workload.total_us" = { linspace = [1, 100], num = 100000000 }
    """))
    # A fresh parent whose one child is the command, so the peak is that command's alone.
    probe = ("import resource, subprocess, sys\n"
             "proc = subprocess.run([sys.executable, '-m', 'simsched.cli', 'sweep', 'exp.toml', "
             "'--out', 'out'], capture_output=True, text=True, timeout=120)\n"
             "print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
             "sys.stderr.write(proc.stderr)\n")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=tmp_path,
                          env=cli_env(), timeout=150)
    status, peak_kb = map(int, proc.stdout.split())
    assert status == 2 and "grid.workload.total_us.num" in proc.stderr
    assert peak_kb < 400_000, f"peak {peak_kb} kB"


def test_set_resolves_shares_on_the_changed_machine(tmp_path):
    text = config(f"""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = ["1/2", "all"]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, text, "--set", "topology.cores_per_socket=4") == 0
    frame = results(tmp_path)
    assert list(frame["threads"]) == [4, 8]
    assert set(frame["machine"]) == {"haswell-e5-2695v3[topology.cores_per_socket=4]"}


def test_set_refuses_counts_the_changed_machine_lacks(tmp_path, capsys):
    text = config(f"""
        machine = "haswell-e5-2695v3"
        scheduler = "omp-static"
        threads = [4, 28]
        workload = "{WORKLOAD}"
    """)
    assert sweep_cli(tmp_path, text, "--set", "topology.cores_per_socket=4") == 2
    assert "28 threads on machine haswell-e5-2695v3[topology.cores_per_socket=4], which has 8 cores" \
        in refusal(capsys)
    assert not (tmp_path / "out").exists()


def test_rank_reads_the_resolved_thread_counts(tmp_path, capsys):
    grid = f"""
        machine = "haswell-e5-2695v3"
        scheduler = ["omp-static", "fg-tree"]
        threads = ["1/28", "1/2", "all"]
        workload = "{WORKLOAD}"
    """
    assert sweep_cli(tmp_path, config(grid, '[rank]\nbaseline = "omp-static"\nthreads = 20\n')) == 2
    assert "rank.threads = 20 is not a thread count of the grid (1, 14, 28)" in refusal(capsys)
    assert sweep_cli(tmp_path, config(grid, '[rank]\nbaseline = "omp-static"\nthreads = 28\n')) == 0
    assert (tmp_path / "out" / "ranking.csv").is_file()


def test_affinity_needs_one_thread_on_every_machine(tmp_path, capsys):
    grid = """
        machine = ["xeon-e5-4620", "xeon-e5-4620", "haswell-e5-2695v3"]
        threads = ["1/32", "all", "all"]
        together = [["machine", "threads"]]
        scheduler = "omp-static"
        workload = "arrays:n=64,bytes=4096"
    """
    assert sweep_cli(tmp_path, config(grid, "[affinity]\n")) == 2
    line = refusal(capsys)
    assert "needs 1 thread on every machine; the grid never runs haswell-e5-2695v3 on 1 thread" in line
    one_each = grid.replace('threads = ["1/32", "all", "all"]', 'threads = ["1/32", "all", "1/28"]')
    assert sweep.parse_experiment(tomllib.loads(config(one_each, "[affinity]\n"))).affinity == {}
