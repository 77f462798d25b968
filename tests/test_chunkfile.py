"""The chunk table file: its metadata line, its ns columns, and native replay checking it against its workload."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest
from test_cli import simsched_cli

from simsched import native

WORKLOAD = "uniform:n=120,low_ns=100,high_ns=900"
RUN = ["run", "--machine", "haswell-e5-2695v3", "--scheduler", "omp-dynamic:chunk=10", "--threads", "2",
       "--workload", WORKLOAD, "--seed", "4", "--repeat", "2"]
needs_native = pytest.mark.skipif(not native.available(), reason="native mode is not built")


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=300)


@pytest.fixture(scope="module")
def chunk_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("chunks") / "sim.csv"
    proc = simsched_cli(*RUN, "--json", "--chunks", path)
    return path, json.loads(proc.stdout)


def test_chunk_file_records_the_run_and_its_units(chunk_file):
    path, result = chunk_file
    first = path.read_text().splitlines()[0]
    assert first.startswith("# simsched: ")
    meta = json.loads(first[len("# simsched: "):])
    assert meta == {"source": "simulated", "machine": "haswell-e5-2695v3", "scheduler": "omp-dynamic:chunk=10",
                    "workload": WORKLOAD, "threads": 2, "seed": 4, "repeat": 2, "time_unit": "ns"}
    table = pd.read_csv(path, comment="#")
    assert list(table.columns) == ["worker", "loop", "lo", "hi", "start_ns", "end_ns"]
    assert len(table) == result["chunks"] and table["end_ns"].max() <= result["makespan_ns"]
    assert (table["end_ns"] - table["start_ns"]).sum() == pytest.approx(result["state_ns"]["compute"], rel=1e-9)


@needs_native
def test_replay_takes_the_recorded_seed_and_accepts_the_same_workload_spelled_otherwise(chunk_file):
    path, _ = chunk_file
    proc = simsched_cli("native", "replay", path, "--workload", "uniform:high_ns=900,low_ns=100,n=120", "--json")
    assert proc.stderr == ""
    assert json.loads(proc.stdout)["chunks"] == len(pd.read_csv(path, comment="#"))
    simsched_cli("native", "replay", path, "--workload", WORKLOAD, "--seed", 4)


@needs_native
@pytest.mark.parametrize("args, needle", [
    (["--workload", "uniform:n=120,low_ns=100,high_ns=901"], "records workload 'uniform:n=120,low_ns=100,high_ns=900'"),
    (["--workload", "uforall:n=120"], "not 'uforall:n=120'"),
    (["--workload", WORKLOAD, "--seed", "5"], "records seed 4, not 5"),
])
def test_replay_refuses_a_workload_or_seed_other_than_the_recorded_one(chunk_file, tmp_path, args, needle):
    path, _ = chunk_file
    out = tmp_path / "per-chunk.csv"
    proc = cli("native", "replay", path, *args, "--out", out)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not out.exists()


@needs_native
def test_replay_reads_an_older_chunk_table_and_says_it_is_unchecked(chunk_file, tmp_path):
    path, _ = chunk_file
    old = tmp_path / "old.csv"
    pd.read_csv(path, comment="#").rename(columns={"start_ns": "start", "end_ns": "end"}).to_csv(old, index=False)
    proc = cli("native", "replay", old, "--workload", WORKLOAD, "--seed", 4, "--json")
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "records no workload or seed" in lines[0]
    assert json.loads(proc.stdout)["chunks"] == len(pd.read_csv(old))


@needs_native
@pytest.mark.parametrize("text, needle", [
    ("# simsched: {not json\nworker,loop,lo,hi,start_ns,end_ns\n0,0,0,120,0,1\n", "cannot read the chunk table"),
    ("worker,loop,lo,hi,start_ns\n0,0,0,120,0\n", "lacks column 'end_ns'"),
    ("worker,loop,lo,hi,start,end,start_ns,end_ns\n0,0,0,120,0,1,0,1\n", "both 'start' and 'start_ns'"),
])
def test_replay_refuses_a_malformed_chunk_file_in_one_line(tmp_path, text, needle):
    bad = tmp_path / "bad.csv"
    bad.write_text(text)
    proc = cli("native", "replay", bad, "--workload", WORKLOAD)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0], proc.stderr
