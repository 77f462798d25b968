"""The ``simsched`` command's happy paths, run as a user runs them: ``python -m simsched.cli ...``."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import simsched

ROOT = Path(__file__).resolve().parents[1]
BUILTIN = {"xeon-e7-4860v2": 48, "xeon-e5-4620": 32, "haswell-e5-2695v3": 28, "cell-qs22": 16, "uniform": 16,
           "epyc-7742-2s": 128, "xeon-8375c-2s": 64, "graviton3": 64}

RUN = ["run", "--machine", "xeon-e7-4860v2", "--scheduler", "omp-guided:chunk=2", "--threads", "48",
       "--workload", "exp-dec:n=20000", "--seed", "1"]
RESULT_KEYS = ["machine", "scheduler", "threads", "makespan_ns", "sequential_ns", "speedup", "state_ns", "counters"]
FIT_KEYS = ["machine", "scheduler", "threads", "d_us", "d_ci_us", "t05_us", "t50_us", "t95_us"]
PUBLISHED = {"omp-static": 1.2, "fg-tree": 0.4}
DURATIONS_US = [1.0, 10.0, 100.0, 1000.0]
BEYOND_US = [1e13, 1e14, 1e15, 1e16]   # loops whose costs add up to more than 2**53 ns: they fail as they run

EXPERIMENT = """\
[experiment]
name = "cli-happy"
description = "2 schedulers x 4 loop durations"

[grid]
machine = "haswell-e5-2695v3"
scheduler = ["omp-static", "fg-tree"]
threads = THREADS
workload = "uforall:n=256"
"workload.total_us" = { logspace = [1, 1000], num = 4 }

[fit]
published_d_us = { omp-static = 1.2, fg-tree = 0.4 }
source = "a made-up table"
"""


def simsched_cli(*args, cwd=None, status=0) -> subprocess.CompletedProcess:
    """Run the console entry; insist that it exited with ``status`` without a traceback."""
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300)
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def covered_once(chunks: pd.DataFrame, n: int) -> bool:
    count = np.zeros(n, dtype=np.int64)
    for lo, hi in zip(chunks["lo"], chunks["hi"]):
        assert 0 <= lo <= hi <= n
        count[lo:hi] += 1
    return bool(np.all(count == 1))


# -- simsched run ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def json_run(tmp_path_factory):
    """One ``run --json --chunks`` call shared by the tests that read its two outputs."""
    folder = tmp_path_factory.mktemp("run")
    chunks = folder / "chunks.csv"
    proc = simsched_cli(*RUN, "--json", "--chunks", chunks)
    return proc, chunks


def test_run_json_is_one_object_with_the_contract_keys(json_run):
    proc, _ = json_run
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stdout
    data = json.loads(lines[0])
    assert isinstance(data, dict)
    missing = [key for key in RESULT_KEYS if key not in data]
    assert not missing, f"JSON lacks {missing}"
    assert data["machine"] == "xeon-e7-4860v2"
    assert data["scheduler"] == "omp-guided:chunk=2"
    assert data["threads"] == 48
    assert data["makespan_ns"] > 0
    assert data["sequential_ns"] > 0
    assert data["speedup"] == pytest.approx(data["sequential_ns"] / data["makespan_ns"], rel=1e-12)
    assert 0 < data["speedup"] <= 48
    assert set(data["state_ns"]) >= {"compute", "schedule", "sync", "idle"}
    # Summed over workers, the states account for every worker's whole run.
    assert sum(data["state_ns"].values()) == pytest.approx(48 * data["makespan_ns"], rel=1e-9)
    assert isinstance(data["counters"], dict) and data["counters"]
    assert all(isinstance(v, int) and v >= 0 for v in data["counters"].values())


def test_run_json_matches_the_python_api(json_run):
    """The command reports what ``simsched.simulate`` computes for the same inputs (and is deterministic)."""
    data = json.loads(json_run[0].stdout)
    result = simsched.simulate("xeon-e7-4860v2", "omp-guided:chunk=2", "exp-dec:n=20000", 48, seed=1)
    assert data["makespan_ns"] == result.makespan_ns
    assert data["sequential_ns"] == result.sequential_ns
    assert data["counters"] == result.counters


def test_run_writes_the_chunk_table(json_run):
    proc, path = json_run
    assert path.is_file()
    # The first line names the run; pandas skips it as a comment. Times are in ns, and say so.
    chunks = pd.read_csv(path, comment="#").rename(columns={"start_ns": "start", "end_ns": "end"})
    assert list(chunks.columns) == ["worker", "loop", "lo", "hi", "start", "end"]
    data = json.loads(proc.stdout)
    assert len(chunks) == data["chunks"] > 0
    assert chunks["worker"].between(0, 47).all()
    assert (chunks["loop"] == 0).all()
    assert covered_once(chunks, 20000)
    assert (chunks["end"] >= chunks["start"]).all()
    assert chunks["end"].max() <= data["makespan_ns"] * (1 + 1e-12)


def test_run_human_output(json_run):
    proc = simsched_cli(*RUN)
    text = proc.stdout
    assert "makespan" in text and "speedup" in text
    data = json.loads(json_run[0].stdout)
    speedup_line = next(line for line in text.splitlines() if "speedup" in line)
    assert f"{data['speedup']:.3f}" in speedup_line
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


# -- simsched machines -----------------------------------------------------------------------------------

def test_machines_lists_the_builtin_machines():
    proc = simsched_cli("machines")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    assert sorted(line.split()[0] for line in lines) == sorted(BUILTIN)
    for name, cores in BUILTIN.items():
        line = next(line for line in lines if line.split()[0] == name)
        assert re.search(rf"\b{cores} cores\b", line), line


def test_machines_describes_one_machine():
    proc = simsched_cli("machines", "xeon-e7-4860v2")
    text = proc.stdout
    data = tomllib.loads((ROOT / "machines" / "xeon-e7-4860v2.toml").read_text(encoding="utf-8"))
    topo, lat = data["topology"], data["latency_ns"]
    assert "topology" in text
    assert f"{topo['sockets']} socket(s) x {topo['cores_per_socket']} cores" in text
    within = float(lat["same_socket"])
    across = within + float(lat["socket_hop"])  # full links: one hop between any two sockets
    assert re.search(rf"latency within a socket: {within:.1f}-{within:.1f} ns", text), text
    assert re.search(rf"latency across sockets: {across:.1f}-{across:.1f} ns", text), text
    assert f"atomic {data['costs_ns']['atomic']:g}" in text


def without_sections(text: str, *sections: str) -> str:
    """A machine file's text with whole ``[section]`` tables left out."""
    kept, skip = [], False
    for line in text.splitlines():
        if line.startswith("["):
            skip = line.strip() in sections
        if not skip:
            kept.append(line)
    return "\n".join(kept) + "\n"


def test_a_machine_without_coherence_or_os_gets_the_listed_defaults(tmp_path):
    text = (ROOT / "machines" / "haswell-e5-2695v3.toml").read_text(encoding="utf-8")
    bare = tmp_path / "bare.toml"
    bare.write_text(without_sections(text, "[coherence]", "[os]"), encoding="utf-8")
    explicit = tmp_path / "explicit.toml"
    explicit.write_text(without_sections(text, "[coherence]", "[os]")
                        + '[coherence]\nprotocol = "snoop"\nserve_ns = 0\natomics = "locked"\n[os]\nwakeup_ns = 0\n',
                        encoding="utf-8")
    described = simsched_cli("machines", str(bare)).stdout
    assert "coherence: snoop (default), serve 0.0 ns per spinner (default), locked atomics (default)" in described
    assert "wake-up latency: 0 ns (default)" in described
    assert json.loads(simsched_cli("machines", str(bare), "--json").stdout)["defaults"] == {
        "coherence.protocol": "snoop", "coherence.serve_ns": 0.0, "coherence.atomics": "locked", "os.wakeup_ns": 0.0}
    assert "(default)" not in simsched_cli("machines", "haswell-e5-2695v3").stdout
    assert json.loads(simsched_cli("machines", "haswell-e5-2695v3", "--json").stdout)["defaults"] == {}
    # serve_ns and wakeup_ns matter to these runs, so the defaults are exactly the values listed.
    for scheduler in ("omp-static:barrier=central", "cilk:sleep_after=1"):
        makespans = [json.loads(simsched_cli("run", "--machine", machine, "--scheduler", scheduler, "--threads", "28",
                                             "--workload", "uniform:n=2000", "--json").stdout)["makespan_ns"]
                     for machine in (str(bare), str(explicit), "haswell-e5-2695v3")]
        assert makespans[0] == makespans[1] != makespans[2], scheduler


# -- simsched sweep and fit -------------------------------------------------------------------------------

def sweep_cli(tmp_path_factory, name, threads, *options, status=0, durations=None):
    """Run ``simsched sweep`` on the test grid with ``threads`` (and ``durations``): (process, output folder)."""
    folder = tmp_path_factory.mktemp(name)
    config = folder / "experiment.toml"
    text = EXPERIMENT.replace("THREADS", threads)
    if durations is not None:
        text = text.replace("{ logspace = [1, 1000], num = 4 }", durations)
    config.write_text(text, encoding="utf-8")
    out = folder / "out"
    return simsched_cli("sweep", config, "--out", out, "--quiet", *options, cwd=folder, status=status), out


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A clean 2 x 4 sweep (threads = 8), written as CSV with two worker processes."""
    return sweep_cli(tmp_path_factory, "sweep", "8", "--jobs", "2")


@pytest.fixture(scope="module")
def failing_sweep(tmp_path_factory):
    """The grid with 8 durations, half of them beyond the 2**53 ns a run may add up to, as Parquet: it exits 1."""
    return sweep_cli(tmp_path_factory, "failing-sweep", "8", "--jobs", "1", "--format", "parquet", status=1,
                     durations=f"{DURATIONS_US + BEYOND_US}")


def total_us(workload: str) -> float:
    match = re.search(r"total_us=([0-9.e+-]+)", workload)
    assert match, workload
    return float(match.group(1))


def test_sweep_writes_one_row_per_run(sweep):
    proc, out = sweep
    assert "8 runs (0 failed)" in proc.stdout
    frame = pd.read_csv(out / "results.csv", keep_default_na=False)  # an empty error stays ""
    assert len(frame) == 8
    for column in ["machine", "scheduler", "threads", "workload", "seed", "repeat", "error", "wall_s",
                   "makespan_ns", "sequential_ns", "speedup"]:
        assert column in frame.columns, column
    assert set(frame["machine"]) == {"haswell-e5-2695v3"}
    assert (frame["threads"] == 8).all()
    runs = sorted((s, total_us(w)) for s, w in zip(frame["scheduler"], frame["workload"]))
    assert runs == sorted((s, t) for s in PUBLISHED for t in DURATIONS_US)
    # The resolved workload is what ran: its sequential time is total_us.
    for workload, sequential in zip(frame["workload"], frame["sequential_ns"]):
        assert sequential == pytest.approx(total_us(workload) * 1e3, rel=1e-9)
    assert frame["error"].eq("").all(), frame["error"].tolist()
    assert (frame["wall_s"] > 0).all()
    assert np.allclose(frame["speedup"], frame["sequential_ns"] / frame["makespan_ns"])
    # The sweep keeps its config beside the results, and fits the burden it was asked for.
    assert (out / "experiment.toml").is_file()
    assert (out / "burden.csv").is_file()


def test_sweep_row_matches_the_python_api(sweep):
    _, out = sweep
    frame = pd.read_csv(out / "results.csv", keep_default_na=False, na_values=[""])
    row = frame[frame["scheduler"] == "fg-tree"].iloc[2]
    result = simsched.simulate(row["machine"], row["scheduler"], row["workload"], int(row["threads"]),
                               seed=int(row["seed"]), repeat=int(row["repeat"]))
    assert row["makespan_ns"] == pytest.approx(result.makespan_ns, rel=1e-12)


def test_a_failing_point_is_a_row_not_the_end(failing_sweep):
    proc, out = failing_sweep
    assert "16 runs (8 failed)" in proc.stdout
    assert (out / "results.parquet").is_file()
    assert not (out / "results.csv").exists()
    frame = pd.read_parquet(out / "results.parquet")
    assert len(frame) == 16
    assert {"error", "wall_s"} <= set(frame.columns)
    beyond = frame["workload"].map(total_us) >= min(BEYOND_US)
    bad = frame[beyond]
    good = frame[~beyond]
    assert len(bad) == len(good) == 8
    assert bad["error"].map(lambda e: isinstance(e, str) and "2**53" in e).all(), bad["error"].tolist()
    assert good["error"].eq("").all()
    assert good["makespan_ns"].map(math.isfinite).all()
    assert bad["wall_s"].notna().all()


def test_fit_json(sweep):
    _, out = sweep
    proc = simsched_cli("fit", out, "--json")
    records = json.loads(proc.stdout)
    assert isinstance(records, list) and len(records) == 2
    for record in records:
        missing = [key for key in FIT_KEYS if key not in record]
        assert not missing, f"fit record lacks {missing}"
        assert record["machine"] == "haswell-e5-2695v3"
        assert record["threads"] == 8
        for key in ("d_us", "d_ci_us", "t05_us", "t50_us", "t95_us"):
            assert isinstance(record[key], (int, float)), (key, record[key])
        assert record["d_us"] > 0
        assert record["t05_us"] <= record["t50_us"] <= record["t95_us"]
        # fit found the published values in the experiment.toml the sweep kept beside its results.
        assert record["published_d_us"] == PUBLISHED[record["scheduler"]]
    assert sorted(r["scheduler"] for r in records) == sorted(PUBLISHED)


def test_fit_reads_parquet_and_skips_failed_runs(failing_sweep):
    _, out = failing_sweep
    proc = simsched_cli("fit", out, "--json")
    records = json.loads(proc.stdout)
    assert sorted(r["scheduler"] for r in records) == sorted(PUBLISHED)
    assert {r["threads"] for r in records} == {8}


@pytest.mark.parametrize("name, written", [("curves", "curves.png"), ("curves.", "curves.png"),
                                           ("curves.svg", "curves.svg")])
def test_plot_prints_the_file_it_wrote(sweep, tmp_path, name, written):
    _, out = sweep
    proc = simsched_cli("plot", out, "--out", tmp_path / name)
    assert proc.stdout.strip() == str(tmp_path / written)
    assert sorted(p.name for p in tmp_path.iterdir()) == [written]  # savefig appended .png, nothing else is left
    head = (tmp_path / written).read_bytes()[:8]
    assert head == b"\x89PNG\r\n\x1a\n" if written.endswith(".png") else head.startswith(b"<?xml")
