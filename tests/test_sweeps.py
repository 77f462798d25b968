"""Sweeps that survive: saved point by point, resumed, stopped by signals, run on Dask, through the real CLI."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

SMALL = """\
[experiment]
name = "NAME"

[grid]
machine = "haswell-e5-2695v3"
scheduler = ["omp-static", "fg-tree", "omp-dynamic"]
threads = [4, 28]
workload = "uforall:n=256"
"workload.total_us" = { logspace = [1, 1000], num = 4 }
"""
SMALL_POINTS = 24

# Points of about a tenth of a second each: long enough to stop a sweep half way.
SLOW = """\
[experiment]
name = "slow"

[grid]
machine = "haswell-e5-2695v3"
scheduler = ["omp-dynamic:chunk=1", "stealing:chunk=1"]
threads = 28
workload = "uforall:n=8000,cost_ns=100"
seed = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]
"""
SLOW_POINTS = 24


def cli(*args, cwd, **kwargs) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300, env=_env(), **kwargs)
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def _env() -> dict[str, str]:
    root = str(Path(__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}


def write(tmp_path: Path, text: str, name: str = "exp.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def journal(folder: Path) -> list[dict]:
    lines = (folder / "runs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def figures(folder: Path) -> pd.DataFrame:
    """The results table without its wall times (the only column that differs between two runs)."""
    return pd.read_csv(folder / "results.csv").drop(columns="wall_s")


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid``, from /proc."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parent = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def left_behind(pids: set[int], grace: float = 3.0) -> list[int]:
    """The processes of ``pids`` still running ``grace`` seconds on (multiprocessing's resource
    tracker leaves only when it reads the end of its dead parent's pipe)."""
    deadline = time.monotonic() + grace
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


def wait_for_rows(folder: Path, rows: int, proc: subprocess.Popen, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        path = folder / "runs.jsonl"
        if path.is_file() and path.read_text().count("\n") >= rows:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError(f"fewer than {rows} points finished in {timeout} s")


def interrupt(tmp_path: Path, config: Path, sig: int, *extra, group: bool = False) -> tuple[int, float, set[int], str]:
    """Start a sweep, signal its process (or, like a terminal's Ctrl-C, its whole process group) once a few
    points are saved; return exit status, stop time, workers and stderr."""
    proc = subprocess.Popen([sys.executable, "-m", "simsched.cli", "sweep", str(config), *extra],
                            cwd=tmp_path, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=group)
    try:
        wait_for_rows(tmp_path / "results" / "slow", 3, proc)
        workers = descendants(proc.pid)
        start = time.monotonic()
        if group:
            os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)
        _, err = proc.communicate(timeout=60)
        return proc.returncode, time.monotonic() - start, workers, err
    finally:
        if proc.poll() is None:
            proc.kill()


def check_complete(folder: Path, points: int) -> None:
    """Every point saved exactly once."""
    rows = journal(folder)
    keys = [row["point_id"] for row in rows]
    assert len(keys) == len(set(keys)) == points
    assert all(row["error"] == "" for row in rows)


def test_each_point_is_saved_as_it_finishes_and_a_rerun_computes_only_missing_ones(tmp_path):
    config = write(tmp_path, SMALL.replace("NAME", "small"))
    first = cli("sweep", config, "--jobs", "2", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    folder = tmp_path / "results" / "small"
    check_complete(folder, SMALL_POINTS)
    complete = figures(folder)
    # A sweep killed after 10 points, the 11th torn half-way through its line.
    lines = (folder / "runs.jsonl").read_text().splitlines(keepends=True)
    (folder / "runs.jsonl").write_text("".join(lines[:10]) + lines[10][:40])
    again = cli("sweep", config, "--jobs", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert "10 already saved, 14 run now" in again.stdout
    rows = journal(folder)
    assert [r["point_id"] for r in rows[:10]] == [json.loads(line)["point_id"] for line in lines[:10]]
    check_complete(folder, SMALL_POINTS)
    pd.testing.assert_frame_equal(figures(folder), complete)
    # Nothing left to do: nothing runs.
    third = cli("sweep", config, cwd=tmp_path)
    assert "24 already saved, 0 run now" in third.stdout
    assert len(journal(folder)) == SMALL_POINTS


def test_a_different_experiment_is_refused_unless_forced(tmp_path):
    first = write(tmp_path, SMALL.replace("NAME", "small"))
    assert cli("sweep", first, "--jobs", "1", cwd=tmp_path).returncode == 0
    other = write(tmp_path, SMALL.replace("NAME", "other").replace("num = 4", "num = 3"), "other.toml")
    refused = cli("sweep", other, "--out", "results/small", cwd=tmp_path)
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "different experiment ('small', 24 points)" in refused.stderr
    assert figures(tmp_path / "results" / "small")["experiment"].eq("small").all()
    forced = cli("sweep", other, "--out", "results/small", "--force", cwd=tmp_path)
    assert forced.returncode == 0, forced.stderr
    assert figures(tmp_path / "results" / "small")["experiment"].eq("other").all()
    check_complete(tmp_path / "results" / "small", 18)


def test_a_folder_of_other_files_is_not_a_sweep_to_overwrite(tmp_path):
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    proc = cli("sweep", write(tmp_path, SMALL.replace("NAME", "small")), "--out", "mine", cwd=tmp_path)
    assert proc.returncode == 2 and "holds no simsched sweep" in proc.stderr
    assert sorted(p.name for p in (tmp_path / "mine").iterdir()) == ["notes.txt"]


@pytest.mark.parametrize("sig, status", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_sweep_keeps_what_finished_and_a_rerun_resumes(tmp_path, sig, status):
    config = write(tmp_path, SLOW)
    code, seconds, workers, err = interrupt(tmp_path, config, sig, "--jobs", "2")
    assert code == status, err
    assert seconds < 5
    assert len(workers) == 2
    assert not left_behind(workers)
    assert "points saved in results/slow; run the same command again" in err
    folder = tmp_path / "results" / "slow"
    saved = journal(folder)
    assert 3 <= len(saved) < SLOW_POINTS
    assert len(pd.read_csv(folder / "results.csv")) == len(saved)  # the table of what finished
    again = cli("sweep", config, "--jobs", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    # The rest is run now, or copied where the signal came while a seed-independent run's copies were saved.
    counts = re.search(r"(\d+) already saved, (\d+) run now(?:, (\d+) copied)?", again.stdout)
    assert counts is not None, again.stdout
    already, run, copied = (int(x or 0) for x in counts.groups())
    assert already == len(saved) and run + copied == SLOW_POINTS - len(saved)
    check_complete(folder, SLOW_POINTS)


@pytest.mark.parametrize("pool", [("--jobs", "2"), ("--dask", "local:2")], ids=["processes", "dask"])
def test_a_ctrl_c_to_the_whole_process_group_stops_the_sweep_cleanly(tmp_path, pool):
    if pool[0] == "--dask":
        pytest.importorskip("dask.distributed")
    code, seconds, workers, err = interrupt(tmp_path, write(tmp_path, SLOW), signal.SIGINT, *pool, group=True)
    assert code == 130, err
    assert "Traceback" not in err and "Error" not in err, err
    assert err.strip().endswith("run the same command again to compute the rest")
    assert workers and not left_behind(workers)


def test_failed_points_make_the_sweep_fail_after_writing_everything(tmp_path):
    # Half the loops cost more than the 2**53 ns a run may add up to, which only running them finds.
    config = write(tmp_path, SMALL.replace("NAME", "bad").replace("{ logspace = [1, 1000], num = 4 }",
                                                                  "[1, 10, 1e13, 1e14]"))
    proc = cli("sweep", config, "--jobs", "2", cwd=tmp_path)
    assert proc.returncode == 1
    assert "12 of 24 points failed; their errors are in the 'error' column of results/bad/results.csv" \
        in proc.stderr
    table = pd.read_csv(tmp_path / "results" / "bad" / "results.csv", keep_default_na=False)
    assert len(table) == 24 and (table["error"] != "").sum() == 12
    huge = table["workload"].str.contains("total_us=10000000000000")  # 1e13 us and 1e14 us
    assert huge.sum() == 12 and table.loc[huge, "error"].str.contains("2**53", regex=False).all()


@pytest.mark.parametrize("jobs", ["0", "-3"])
def test_jobs_below_one_is_an_error(tmp_path, jobs):
    proc = cli("sweep", write(tmp_path, SMALL.replace("NAME", "x")), "--jobs", jobs, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip() == f"simsched: error: --jobs must be >= 1, got {jobs}"
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("name", ["../../escape", "a/b", "..", "a\\\\b"])
def test_an_experiment_name_is_not_a_path(tmp_path, name):
    proc = cli("sweep", write(tmp_path, SMALL.replace("NAME", name)), cwd=tmp_path)
    assert proc.returncode == 2 and "experiment.name must be a plain name" in proc.stderr
    assert list(tmp_path.iterdir()) == [tmp_path / "exp.toml"]


@pytest.mark.parametrize("section, message", [
    ('[fit]\npublished_d_us = { "fg-treee" = 5 }', "fit.published_d_us: 'fg-treee' is not a scheduler of the grid"),
    ('[rank]\nbaseline = "omp-guided"', "rank.baseline: 'omp-guided' is not a scheduler of the grid"),
    ('[rank]\nbaseline = "omp-static"\nhighlight = "ich"', "rank.highlight: 'ich' is not a scheduler of the grid"),
    ('[rank]\nbaseline = "omp-static"\nbaseline_threads = 1', "rank.baseline_threads = 1 is not a thread count"),
    ('[breakdown]\nbaseline = "lbz"', "breakdown.baseline: unknown scheduler"),
])
def test_analysis_sections_name_what_the_grid_runs(tmp_path, section, message):
    proc = cli("sweep", write(tmp_path, SMALL.replace("NAME", "x") + section), cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert proc.stderr.count("\n") == 1


@pytest.mark.parametrize("grid, message", [
    ('workload = ["uforall:n=256", "uforall:n=512"]', "[fit]: the grid mixes loop shapes: uforall's n (256, 512) differ"),
    ('workload = "uforall:n=256,total_us=10"', "[fit]: the grid runs one workload, uforall:n=256,total_us=10, so"),
])
def test_a_fit_over_a_grid_that_cannot_give_one_is_refused_before_running(tmp_path, grid, message):
    text = SMALL.replace("NAME", "x").replace('workload = "uforall:n=256"\n', grid + "\n")
    text = text.replace('"workload.total_us" = { logspace = [1, 1000], num = 4 }\n', "")
    proc = cli("sweep", write(tmp_path, text + '[fit]\npublished_d_us = { "fg-tree" = 5 }\n'), cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "results").exists()


def test_a_grid_listing_one_run_twice_is_an_error(tmp_path):
    proc = cli("sweep", write(tmp_path, SMALL.replace("NAME", "x") + "seed = [1, 1]\n"), cwd=tmp_path)
    assert proc.returncode == 2 and "the grid lists the same run twice" in proc.stderr


def test_a_local_dask_cluster_gives_the_local_pool_results_row_for_row(tmp_path):
    pytest.importorskip("dask.distributed")
    config = write(tmp_path, SMALL.replace("NAME", "small"))
    local = cli("sweep", config, "--jobs", "2", "--out", "pool", cwd=tmp_path)
    dask = cli("sweep", config, "--dask", "local:2", "--out", "dask", cwd=tmp_path)
    assert local.returncode == 0 and dask.returncode == 0, dask.stderr
    pd.testing.assert_frame_equal(figures(tmp_path / "dask"), figures(tmp_path / "pool"))


def test_a_dask_sweep_survives_a_killed_worker_and_resumes_after_sigterm(tmp_path):
    pytest.importorskip("dask.distributed")
    from dask.distributed import Client, LocalCluster

    config = write(tmp_path, SLOW)
    reference = cli("sweep", config, "--jobs", "2", "--out", "reference", cwd=tmp_path)
    assert reference.returncode == 0
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as client:
        proc = subprocess.Popen([sys.executable, "-m", "simsched.cli", "sweep", str(config),
                                 "--dask", cluster.scheduler_address], cwd=tmp_path, env=_env(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_rows(tmp_path / "results" / "slow", 3, proc)
        os.kill(next(iter(client.run(os.getpid).values())), signal.SIGKILL)
        out, err = proc.communicate(timeout=240)
        assert proc.returncode == 0, err
    folder = tmp_path / "results" / "slow"
    check_complete(folder, SLOW_POINTS)
    pd.testing.assert_frame_equal(figures(folder), figures(tmp_path / "reference"))
    # The same sweep on a cluster of its own, stopped by SIGTERM: its cluster goes with it.
    (folder / "runs.jsonl").unlink()
    code, seconds, workers, err = interrupt(tmp_path, config, signal.SIGTERM, "--dask", "local:2")
    assert code == 143, err
    assert workers and not left_behind(workers)
    saved = len(journal(folder))
    again = cli("sweep", config, "--dask", "local:2", cwd=tmp_path)
    assert again.returncode == 0 and f"{saved} already saved" in again.stdout
    check_complete(folder, SLOW_POINTS)
    pd.testing.assert_frame_equal(figures(folder), figures(tmp_path / "reference"))


def test_resuming_points_of_another_simsched_version_says_so(tmp_path):
    config = write(tmp_path, SMALL.replace("NAME", "small"))
    assert cli("sweep", config, "--jobs", "1", cwd=tmp_path).returncode == 0
    manifest = tmp_path / "results" / "small" / "sweep.json"
    manifest.write_text(manifest.read_text().replace('"simsched": "', '"simsched": "0.0.0-'))
    again = cli("sweep", config, "--jobs", "1", cwd=tmp_path)
    assert again.returncode == 0
    assert again.stderr.startswith("simsched: warning: results/small: resuming points saved by simsched 0.0.0-")
    assert again.stderr.count("\n") == 1


REUSE = """\
[experiment]
name = "reuse"

[grid]
machine = "cell-qs22"
scheduler = ["cellss", "lbs"]
threads = 4
workload = "uforall:n=200,cost_ns=1000"
seed = [0, 1, 2]
"""


def test_a_point_whose_run_draws_nothing_is_simulated_for_one_seed_and_copied_for_the_others(tmp_path, monkeypatch):
    import tomllib

    from simsched import sweep

    simulated = []
    simulate_point = sweep.run_point
    monkeypatch.setattr(sweep, "run_point",
                        lambda p: simulated.append((p["scheduler"], p["seed"])) or simulate_point(p))
    experiment = sweep.parse_experiment(tomllib.loads(REUSE))
    frame = sweep.run_sweep(experiment, jobs=1, progress=False, out=tmp_path / "r")
    # cellss hands out tasks in a fixed order and draws nothing; lbs's thieves draw their victims.
    assert sorted(simulated) == [("cellss", 0), ("lbs", 0), ("lbs", 1), ("lbs", 2)]
    assert frame.attrs["reused"] == 2
    cellss, lbs = frame[frame["scheduler"] == "cellss"], frame[frame["scheduler"] == "lbs"]
    assert list(cellss["seed"]) == [0, 1, 2]
    assert list(cellss["reused_from"]) == ["", cellss["point_id"].iloc[0], cellss["point_id"].iloc[0]]
    assert list(cellss["wall_s"].iloc[1:]) == [0.0, 0.0]
    assert cellss["seed_independent"].all() and not lbs["seed_independent"].any()
    assert (lbs["reused_from"] == "").all()
    # Each copy is what simulating its own seed gives.
    compared = ["makespan_ns", "sequential_ns", "chunks", "events", "state_compute_ns", "state_steal_ns",
                "counter_tasks_created"]
    for _, row in cellss.iterrows():
        fresh = simulate_point({k: row[k] for k in sweep.AXES})
        assert [fresh[k] for k in compared] == [row[k] for k in compared]
    # A re-run whose journal kept only seed 0 of cellss copies the other seeds again without simulating.
    journal_path = tmp_path / "r" / "runs.jsonl"
    kept = [line for line in journal_path.read_text().splitlines(keepends=True)
            if json.loads(line)["reused_from"] == ""]
    journal_path.write_text("".join(kept))
    simulated.clear()
    again = sweep.run_sweep(experiment, jobs=1, progress=False, out=tmp_path / "r")
    assert simulated == [] and again.attrs["reused"] == 2
    pd.testing.assert_frame_equal(again.drop(columns="wall_s"), frame.drop(columns="wall_s"))
