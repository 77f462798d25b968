"""A sweep's input files: checked before any point runs; a saved point whose files changed is recomputed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from simsched import sweep
from simsched.cli import main
from simsched.workloads import REGISTRY, Workload

ROOT = Path(__file__).resolve().parents[1]

FILES = """\
[experiment]
name = "inputs"

[grid]
machine = "m.toml"
scheduler = "omp-static"
threads = 4
workload = ["file:path=costs.csv", "trace:path=trace.csv", "spmv:matrix=a.mtx,iters=2,nnz_ns=1000",
            "bfs:graph=edges.txt,edge_ns=1000", "uforall:n=64"]
"""
# What each workload file holds at first, and an edit that changes the runs that read it.
CONTENTS = {
    "costs.csv": ("\n".join(["1000"] * 64) + "\n", "\n".join(["1000"] * 63 + ["90000"]) + "\n"),
    "trace.csv": ("loop,iteration,cost_ns\n" + "".join(f"0,{i},500\n" for i in range(32)),
                  "loop,iteration,cost_ns\n" + "".join(f"0,{i},{500 + 300 * i}\n" for i in range(32))),
    "a.mtx": ("%%MatrixMarket matrix coordinate real general\n4 4 4\n1 1 1\n2 2 1\n3 3 1\n4 4 1\n",
              "%%MatrixMarket matrix coordinate real general\n4 4 7\n1 1 1\n1 2 1\n1 3 1\n1 4 1\n2 2 1\n"
              "3 3 1\n4 4 1\n"),
    "edges.txt": ("0 1\n1 2\n2 3\n", "0 1\n0 2\n0 3\n0 4\n0 5\n1 2\n2 3\n"),
}
WORKLOAD_OF = {"costs.csv": "file:path=costs.csv", "trace.csv": "trace:path=trace.csv",
               "a.mtx": "spmv:matrix=a.mtx,iters=2,nnz_ns=1000",
               "edges.txt": "bfs:graph=edges.txt,edge_ns=1000"}


@pytest.fixture
def folder(tmp_path, monkeypatch) -> Path:
    """A folder holding the experiment, a machine file and the workload files, made the working folder."""
    machine = (ROOT / "machines" / "uniform.toml").read_text().replace('name = "uniform"', 'name = "m"')
    (tmp_path / "m.toml").write_text(machine)
    for name, (first, _) in CONTENTS.items():
        (tmp_path / name).write_text(first)
    (tmp_path / "exp.toml").write_text(FILES)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def slower_chunks(machine: Path) -> None:
    """Edit a machine file: a chunk's bookkeeping costs 5 us instead of 10 ns."""
    text = machine.read_text()
    assert "chunk = 10 " in text
    machine.write_text(text.replace("chunk = 10 ", "chunk = 5000 "))


def sweep_cli(capsys, *extra) -> tuple[int, str, str]:
    status = main(["sweep", "exp.toml", "--out", "r", "--jobs", "1", "--quiet", *extra])
    out, err = capsys.readouterr()
    return status, out, err


def saved_counts(out: str) -> tuple[int, int]:
    line = next(line for line in out.splitlines() if "already saved" in line)
    words = line.split()
    return int(words[0]), int(words[3])


def results() -> pd.DataFrame:
    return pd.read_csv("r/results.csv", keep_default_na=False).set_index("workload")


def makespan_of_run(capsys, workload: str, machine: str = "m.toml") -> float:
    assert main(["run", "--machine", machine, "--scheduler", "omp-static", "--threads", "4",
                 "--workload", workload, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["makespan_ns"]


def test_unchanged_files_are_resumed_and_each_row_records_them(folder, capsys):
    status, out, _ = sweep_cli(capsys)
    assert status == 0 and saved_counts(out) == (0, 5)
    status, out, _ = sweep_cli(capsys)
    assert status == 0 and saved_counts(out) == (5, 0)
    assert "recomputed" not in out
    table = results()
    record = json.loads(table.loc["file:path=costs.csv", "inputs"])
    assert set(record) == {"m.toml", "costs.csv"} and all(len(h) == 16 for h in record.values())
    assert table.loc["uforall:n=64", "inputs"] == json.dumps({"m.toml": record["m.toml"]})


@pytest.mark.parametrize("name", sorted(CONTENTS))
def test_an_edited_workload_file_recomputes_the_points_that_read_it(folder, capsys, name):
    assert sweep_cli(capsys)[0] == 0
    before = results()
    (folder / name).write_text(CONTENTS[name][1])
    status, out, _ = sweep_cli(capsys)
    assert status == 0 and saved_counts(out) == (4, 1)
    assert f"1 saved point recomputed because input files changed since they were saved: {name}" in out
    after = results()
    workload = WORKLOAD_OF[name]
    assert after.loc[workload, "makespan_ns"] != before.loc[workload, "makespan_ns"]
    assert after.loc[workload, "makespan_ns"] == makespan_of_run(capsys, workload)
    others = [w for w in after.index if w != workload]
    assert (after.loc[others, "makespan_ns"] == before.loc[others, "makespan_ns"]).all()
    assert saved_counts(sweep_cli(capsys)[1]) == (5, 0)


def test_an_edited_machine_file_recomputes_every_point(folder, capsys):
    assert sweep_cli(capsys)[0] == 0
    before = results()
    machine = folder / "m.toml"
    slower_chunks(machine)
    status, out, _ = sweep_cli(capsys)
    assert status == 0 and saved_counts(out) == (0, 5)
    assert "5 saved points recomputed because input files changed since they were saved: m.toml" in out
    after = results()
    assert (after["makespan_ns"] > before["makespan_ns"]).all()
    assert after.loc["file:path=costs.csv", "makespan_ns"] == makespan_of_run(capsys, "file:path=costs.csv")


def test_a_machine_variant_or_scaled_machine_tracks_its_base_file(folder, capsys):
    machines = '["m.toml", "scaled:base=m.toml,cores_per_socket=8"]'
    (folder / "exp.toml").write_text(FILES.replace('"m.toml"', machines))
    assert sweep_cli(capsys, "--set", "latency_ns.same_socket=300")[0] == 0
    machine = folder / "m.toml"
    slower_chunks(machine)
    status, out, _ = sweep_cli(capsys, "--set", "latency_ns.same_socket=300")
    assert status == 0 and saved_counts(out) == (0, 10)
    assert "10 saved points recomputed because input files changed since they were saved: m.toml" in out


class DataWorkload(Workload):
    """A workload registered from outside simsched whose costs come from a file it names."""

    name = "from-data"
    LISTED = False  # registered by the test itself, for the test's duration
    TOUCHES_DATA = False
    PARAMS = {}

    def input_files(self):
        return [Path("data.npy")]

    def generate(self, rng):
        return np.load("data.npy")


def test_a_registered_workload_names_its_files_and_is_recomputed_when_they_change(folder, capsys,
                                                                                    monkeypatch):
    monkeypatch.setitem(REGISTRY, DataWorkload.name, DataWorkload)
    np.save(folder / "data.npy", np.full(64, 1000.0))
    (folder / "exp.toml").write_text(FILES.split("workload =")[0] + 'workload = "from-data"\n')
    assert sweep_cli(capsys)[0] == 0
    before = results().loc["from-data", "makespan_ns"]
    np.save(folder / "data.npy", np.full(64, 3000.0))
    status, out, _ = sweep_cli(capsys)
    assert status == 0 and saved_counts(out) == (0, 1)
    assert "1 saved point recomputed because input files changed since they were saved: data.npy" in out
    assert results().loc["from-data", "makespan_ns"] > 2 * before


PLUGIN = """\
import numpy as np
from simsched.workloads import Workload


class Flat(Workload):
    \"\"\"A user's workload in a file of its own: every iteration costs COST ns.\"\"\"

    name = "flat-plugin"
    LISTED = False
    TOUCHES_DATA = False
    PARAMS = {{}}

    def generate(self, rng):
        return np.full(64, {cost})
"""


def load_plugin(path: Path, cost: float, monkeypatch) -> None:
    """Write the plugin with this cost, import it afresh and register its workload."""
    import importlib.util

    path.write_text(PLUGIN.format(cost=cost))
    spec = importlib.util.spec_from_file_location(f"flat_plugin_{int(cost)}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(REGISTRY, module.Flat.name, module.Flat)


def test_an_edited_plugin_recomputes_the_points_that_use_it(folder, capsys, monkeypatch):
    load_plugin(folder / "flat_plugin.py", 1000.0, monkeypatch)
    (folder / "exp.toml").write_text(FILES.split("workload =")[0] + 'workload = "flat-plugin"\n')
    assert sweep_cli(capsys)[0] == 0
    before = results().loc["flat-plugin", "makespan_ns"]
    load_plugin(folder / "flat_plugin.py", 3000.0, monkeypatch)
    status, out, _ = sweep_cli(capsys)
    assert status == 0 and saved_counts(out) == (0, 1)
    assert "1 saved point recomputed because input files changed since they were saved: " in out
    assert out.rstrip().endswith("flat_plugin.py")
    assert results().loc["flat-plugin", "makespan_ns"] > 2 * before


def test_rows_saved_without_a_record_of_their_files_are_recomputed(folder, capsys):
    (folder / "exp.toml").write_text(FILES.replace('"m.toml"', '"uniform:cores=8"'))
    assert sweep_cli(capsys)[0] == 0
    journal = folder / "r" / "runs.jsonl"
    rows = [json.loads(line) for line in journal.read_text().splitlines()]
    journal.write_text("".join(json.dumps({k: v for k, v in row.items() if k != "inputs"}) + "\n"
                               for row in rows))
    status, out, _ = sweep_cli(capsys)
    # A built-in machine is no file of the user's: only the four points that read files are recomputed.
    assert status == 0 and saved_counts(out) == (1, 4)
    assert ("4 saved points recomputed because input files changed since they were saved: "
            "a.mtx, costs.csv, edges.txt, trace.csv") in out


def test_a_stopped_sweep_keeps_no_stale_row_in_its_table(folder, capsys, monkeypatch):
    assert sweep_cli(capsys)[0] == 0
    (folder / "costs.csv").write_text(CONTENTS["costs.csv"][1])
    simulate = sweep.run_point

    def stop_at_once(point):
        os.kill(os.getpid(), signal.SIGINT)
        return simulate(point)

    monkeypatch.setattr(sweep, "run_point", stop_at_once)
    status, _, err = sweep_cli(capsys)
    assert status == 130 and "4 of 5 points saved" in err
    assert "file:path=costs.csv" not in set(results().index)
    monkeypatch.setattr(sweep, "run_point", simulate)
    status, out, _ = sweep_cli(capsys)
    assert status == 0 and saved_counts(out) == (4, 1)
    assert "1 saved point recomputed because input files changed since they were saved: costs.csv" in out
    rerun = makespan_of_run(capsys, "file:path=costs.csv")
    assert results().loc["file:path=costs.csv", "makespan_ns"] == rerun


def cli(*args, cwd) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=120, env={**os.environ, "PYTHONPATH": path})


def test_a_missing_input_file_is_refused_before_anything_runs_or_is_written(folder):
    elsewhere = folder / "elsewhere"
    elsewhere.mkdir()
    proc = cli("sweep", folder / "exp.toml", "--out", "r", "--jobs", "1", cwd=elsewhere)
    assert proc.returncode == 2 and proc.stderr.splitlines() == [
        f"simsched: error: {folder / 'exp.toml'}: grid.machine: machine file not found: m.toml "
        f"(relative to {elsewhere})"]
    (elsewhere / "m.toml").write_text((folder / "m.toml").read_text())
    proc = cli("sweep", folder / "exp.toml", "--out", "r", "--jobs", "1", cwd=elsewhere)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.splitlines() == [
        f"simsched: error: {folder / 'exp.toml'}: grid.workload: file:path=costs.csv: no such file costs.csv "
        f"(relative to {elsewhere})"]
    assert not (elsewhere / "r").exists()


def test_a_folder_named_as_an_input_file_is_refused(folder, capsys):
    (folder / "costs.csv").unlink()
    (folder / "costs.csv").mkdir()
    status, out, err = sweep_cli(capsys)
    assert status == 2 and out == ""
    assert err == ("simsched: error: exp.toml: grid.workload: file:path=costs.csv: "
                   f"costs.csv (relative to {folder}) is not a file\n")
    assert not (folder / "r").exists()


def test_a_rerun_after_failed_points_names_retry_failed(folder, capsys):
    (folder / "costs.csv").write_text("1000\nlots\n")
    status, out, err = sweep_cli(capsys)
    assert status == 1 and saved_counts(out) == (0, 5)
    assert err.count("\n") == 1 and "1 of 5 points failed;" in err and "add --retry-failed" in err
    status, out, err = sweep_cli(capsys)
    assert status == 1 and saved_counts(out) == (5, 0)
    assert "1 of 5 points failed (1 kept from an earlier run);" in err and "add --retry-failed" in err
    # Mending the file is an edit like any other: the failed point runs again without --retry-failed.
    (folder / "costs.csv").write_text(CONTENTS["costs.csv"][0])
    status, out, err = sweep_cli(capsys)
    assert status == 0 and saved_counts(out) == (4, 1) and err == ""
    assert "1 saved point recomputed because input files changed since they were saved: costs.csv" in out
