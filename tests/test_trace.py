"""Program traces: written and read back in three forms, simulated like the loops they hold, bad files refused."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from cli_runner import run_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simsched import Loop, Simulation, SimschedError, get_scheduler, load_machine, simulate_program
from simsched.footprint import Footprint
from simsched.workloads import get_workload
from simsched.workloads import trace as trace_module
from simsched.workloads.trace import TraceFile, trace_metadata, write_trace

FORMATS = ("parquet", "csv", "npz")
MACHINE = "xeon-e7-4860v2"


def program(seed: int = 0, sizes=(40, 7, 1, 25)) -> dict:
    """A small program: loops of uneven sizes and costs, names, phases, serial code and bytes."""
    rng = np.random.default_rng(seed)
    return {"loops": [rng.exponential(800.0, n) for n in sizes],
            "names": [f"kernel {k}, step" for k in range(len(sizes))],
            "phases": ["init" if k == 0 else "step" for k in range(len(sizes))],
            "serial_ns": [float(rng.integers(0, 5000)) if k else 0.0 for k in range(len(sizes))],
            "bytes": [rng.integers(0, 4, n) * 8 for n in sizes]}


def eager(given: dict, footprint=None) -> list[Loop]:
    """The same program given directly as loops (costs in memory, no file)."""
    return [Loop(costs, name=name, serial_ns=serial,
                 data=None if footprint is None else footprint(given["bytes"][k]))
            for k, (costs, name, serial) in enumerate(zip(given["loops"], given["names"], given["serial_ns"]))]


def run_loops(loops, scheduler: str, machine: str = MACHINE, threads: int = 4, seed: int = 3, repeat: int = 1):
    sim = Simulation(load_machine(machine), threads, seed=seed)
    sim.load(list(loops) * repeat)
    return sim.run(get_scheduler(scheduler))


def same_run(a, b) -> None:
    assert a.makespan_ns == b.makespan_ns
    assert a.loop_ns == b.loop_ns
    assert a.serial_ns == b.serial_ns and a.sequential_ns == b.sequential_ns
    assert a.counters == b.counters and a.events == b.events
    assert a.chunks.equals(b.chunks)


# -- round trips ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("form", FORMATS)
def test_written_trace_reads_back_whole(tmp_path, form):
    given = program()
    meta = {"block": 4, "source": "a recording", "threads": [1, 2]}
    path = write_trace(tmp_path / f"p.{form}", given["loops"], names=given["names"], phases=given["phases"],
                       serial_ns=given["serial_ns"], bytes=given["bytes"], metadata=meta)
    records = list(TraceFile(path).loops())
    assert [r.index for r in records] == [0, 1, 2, 3]
    for k, record in enumerate(records):
        assert np.array_equal(record.costs, given["loops"][k])  # bit for bit, CSV included
        assert np.array_equal(record.bytes, given["bytes"][k])
        assert (record.name, record.phase, record.serial_ns) == (given["names"][k], given["phases"][k],
                                                                 given["serial_ns"][k])
    assert trace_metadata(path) == meta
    loops = get_workload(f"trace:path={path}").loops(np.random.default_rng(0))
    assert [loop.n for loop in loops] == [40, 7, 1, 25]
    assert [loop.name for loop in loops] == given["names"]
    assert [loop.serial_ns for loop in loops] == given["serial_ns"]
    assert [loop.data.bytes.tolist() for loop in loops] == [b.tolist() for b in given["bytes"]]
    assert all(np.array_equal(loop.prefix, Loop(costs).prefix) for loop, costs in zip(loops, given["loops"]))


@pytest.mark.parametrize("form", FORMATS)
def test_a_bare_trace_has_only_the_required_columns(tmp_path, form):
    path = write_trace(tmp_path / f"p.{form}", [[1.0, 2.0], [3.0]])
    assert trace_metadata(path) == {}
    if form == "parquet":
        assert pq.ParquetFile(path).schema_arrow.names == ["loop", "iteration", "cost_ns"]
        assert pq.ParquetFile(path).num_row_groups == 2  # one per loop
    if form == "csv":
        assert path.read_text().splitlines()[0] == "loop,iteration,cost_ns"
    loops = get_workload(f"trace:path={path}").loops(None)
    assert [(loop.n, loop.total, loop.name, loop.serial_ns, loop.data) for loop in loops] == [
        (2, 3.0, "", 0.0, None), (1, 3.0, "", 0.0, None)]
    with pytest.raises(SimschedError, match="a program of 2 loops has no single array"):
        get_workload(f"trace:path={path}").costs(None)
    one = write_trace(tmp_path / f"one.{form}", [[1.0, 2.0]])
    assert get_workload(f"trace:path={one}").costs(None).tolist() == [1.0, 2.0]


def test_write_trace_takes_generators_and_refuses_bad_loops_leaving_nothing(tmp_path):
    path = write_trace(tmp_path / "g.parquet", (np.full(3, float(k)) for k in range(4)),
                       bytes=(np.full(3, 8) for _ in range(4)))
    assert [r.costs.tolist() for r in TraceFile(path).loops()] == [[float(k)] * 3 for k in range(4)]
    for bad, needle in ((dict(loops=[[1.0], [-1.0]]), "loop 1"), (dict(loops=[]), "at least one loop"),
                        (dict(loops=[[1.0]], names=["a", "b"]), "name has 2 values for 1 loops"),
                        (dict(loops=[[1.0, 2.0]], bytes=[[8]]), "bytes"),
                        (dict(loops=[[1.0]], metadata={"k": object()}), "JSON"),
                        (dict(loops=[[1.0]], names=["a\r"]), "control character")):
        for form in FORMATS:
            target = tmp_path / f"bad.{form}"
            with pytest.raises(SimschedError, match=needle):
                write_trace(target, **bad)
            assert not target.exists() and not list(tmp_path.glob("bad.*"))


names = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), max_size=6)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(data=st.data(), form=st.sampled_from(FORMATS))
def test_random_programs_read_back_as_written(tmp_path, data, form):
    sizes = data.draw(st.lists(st.integers(1, 12), min_size=1, max_size=4))
    costs = [np.asarray(data.draw(st.lists(st.floats(0, 1e9, allow_subnormal=True), min_size=n, max_size=n)))
             for n in sizes]
    loop_names = data.draw(st.lists(names, min_size=len(sizes), max_size=len(sizes)))
    serial = data.draw(st.lists(st.floats(0, 1e9), min_size=len(sizes), max_size=len(sizes)))
    footprints = [np.asarray(data.draw(st.lists(st.integers(0, 2**40), min_size=n, max_size=n))) for n in sizes]
    path = write_trace(tmp_path / f"h.{form}", costs, names=loop_names, serial_ns=serial, bytes=footprints)
    loops = get_workload(f"trace:path={path}").loops(None)
    assert [loop.n for loop in loops] == sizes
    assert [loop.name for loop in loops] == loop_names
    assert [loop.serial_ns for loop in loops] == serial
    for loop, c, b in zip(loops, costs, footprints):
        assert np.array_equal(loop.prefix, Loop(c).prefix)
        assert np.array_equal(loop.data.bytes, b)


# -- simulation --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scheduler", ["omp-dynamic:chunk=3", "binlpt:chunks=8", "omp-static", "stealing", "ich"])
def test_a_trace_simulates_exactly_like_its_loops_given_directly(tmp_path, scheduler):
    given = program(1)
    path = write_trace(tmp_path / "p.parquet", given["loops"], names=given["names"], serial_ns=given["serial_ns"])
    from_file = simulate_program(MACHINE, scheduler, f"trace:path={path}", 4, seed=3)
    same_run(from_file, run_loops(eager(given), scheduler))
    assert len(from_file.loop_ns) == 4 and from_file.serial_ns == sum(given["serial_ns"])


def test_a_trace_with_bytes_simulates_like_its_footprints_given_directly(tmp_path):
    given = program(2, sizes=(30, 30, 30))
    path = write_trace(tmp_path / "p.csv", given["loops"], names=given["names"], serial_ns=given["serial_ns"],
                       bytes=given["bytes"])
    spec = f"trace:path={path},pattern=stream,placement=interleave"
    from_file = simulate_program("xeon-e5-4620", "omp-dynamic", spec, 8, seed=5, repeat=2)
    direct = run_loops(eager(given, lambda b: Footprint(b, "stream", "interleave")), "omp-dynamic",
                       machine="xeon-e5-4620", threads=8, seed=5, repeat=2)
    same_run(from_file, direct)
    assert from_file.counters.get("local_dram", 0) + from_file.counters.get("remote_dram", 0) > 0


@pytest.fixture
def reads(monkeypatch):
    """The loops read again from their file (TraceFile.loop calls), in order."""
    seen = []
    original = TraceFile.loop
    monkeypatch.setattr(TraceFile, "loop", lambda self, index: seen.append(index) or original(self, index))
    return seen


def test_a_small_trace_is_read_once_and_held(tmp_path, reads):
    given = program(4, sizes=(20, 35, 5, 50, 12, 40, 9, 30))
    path = write_trace(tmp_path / "p.npz", given["loops"], names=given["names"], serial_ns=given["serial_ns"])
    loops = get_workload(f"trace:path={path}").loops(None)
    same_run(run_loops(loops, "binlpt:chunks=6", repeat=2), run_loops(eager(given), "binlpt:chunks=6", repeat=2))
    assert reads == [] and all(loop.held is not None for loop in loops)


@pytest.mark.parametrize("scheduler", ["binlpt:chunks=6", "omp-guided", "stealing"])
def test_streamed_loops_dropped_and_read_again_give_the_same_run(tmp_path, monkeypatch, reads, scheduler):
    monkeypatch.setattr(trace_module, "HELD_ITERATIONS", 0)  # hold the 3 loops read last, no more
    given = program(4, sizes=(20, 35, 5, 50, 12, 40, 9, 30))
    path = write_trace(tmp_path / "p.parquet", given["loops"], names=given["names"], serial_ns=given["serial_ns"])
    loops = get_workload(f"trace:path={path}").loops(None)
    same_run(run_loops(loops, scheduler, repeat=2), run_loops(eager(given), scheduler, repeat=2))
    # Each pass of the repeated program reads every loop again, in order; 3 stay held.
    assert reads == list(range(8)) * 2
    assert [loop.held is not None for loop in loops] == [False] * 5 + [True] * 3


def test_streamed_footprints_read_again_give_the_same_run(tmp_path, monkeypatch, reads):
    monkeypatch.setattr(trace_module, "HELD_ITERATIONS", 0)
    given = program(5, sizes=(24,) * 6)  # loops over one data set have one size
    path = write_trace(tmp_path / "p.csv", given["loops"], names=given["names"], serial_ns=given["serial_ns"],
                       bytes=given["bytes"])
    loops = get_workload(f"trace:path={path}").loops(None)
    direct = run_loops(eager(given, lambda b: Footprint(b)), "omp-dynamic", machine="xeon-e5-4620", threads=8)
    same_run(run_loops(loops, "omp-dynamic", machine="xeon-e5-4620", threads=8), direct)
    assert len(reads) >= 12 and sum(loop.held is not None for loop in loops) == 3


@pytest.mark.parametrize("form", FORMATS)
def test_a_trace_is_read_loop_by_loop_not_whole(tmp_path, monkeypatch, form):
    """Loop 0 comes out before the reader has seen loop 2's bad value: the file is streamed in small batches."""
    monkeypatch.setattr(trace_module, "BATCH_ROWS", 4)
    path = write_trace(tmp_path / f"s.{form}", [np.ones(10), np.ones(10), np.ones(10)])
    if form == "npz":
        npz(path, cost_ns_0=np.ones(10), cost_ns_1=np.ones(10), cost_ns_2=[1.0, -1.0])
    elif form == "csv":
        path.write_text(path.read_text().replace("2,9,1.0", "2,9,-1.0"))
    else:
        parquet(path, loop=np.repeat([0, 1, 2], 10), iteration=np.tile(np.arange(10), 3),
                cost_ns=np.r_[np.ones(29), -1.0])
    loops = TraceFile(path).loops()
    assert next(loops).costs.tolist() == [1.0] * 10 and next(loops).index == 1
    with pytest.raises(SimschedError, match="-1"):
        next(loops)


def test_a_trace_runs_through_the_cli(tmp_path):
    given = program(3)
    path = write_trace(tmp_path / "p.csv", given["loops"], names=given["names"], serial_ns=given["serial_ns"])
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", MACHINE, "--scheduler",
                           "omp-dynamic", "--threads", "4", "--seed", "3", "--workload", f"trace:path={path}",
                           "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    direct = run_loops(eager(given), "omp-dynamic")
    assert result["makespan_ns"] == direct.makespan_ns
    assert result["serial_ns"] == sum(given["serial_ns"]) and len(result["loop_ns"]) == 4
    assert result["loop_names"] == given["names"]


def test_bytes_parameter_and_bytes_column_are_not_both_taken(tmp_path):
    path = write_trace(tmp_path / "p.parquet", [[1.0, 2.0]], bytes=[[8, 8]])
    with pytest.raises(SimschedError, match="bytes= or the bytes column, not both"):
        get_workload(f"trace:path={path},bytes=64").loops(None)
    plain = write_trace(tmp_path / "q.parquet", [[1.0, 2.0]])
    assert get_workload(f"trace:path={plain},bytes=64").loops(None)[0].data.bytes.tolist() == [64, 64]


# -- bad traces, through the command line -------------------------------------------------------------------------

CSV_HEAD = "loop,iteration,cost_ns\n"


def parquet(path: Path, **columns) -> None:
    pq.write_table(pa.table(columns), path)


def npz(path: Path, **arrays) -> None:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)


# name -> (file name, how to make it, needles the one error line must hold)
BAD = {
    "missing-cost-column": ("t.csv", "loop,iteration\n0,0\n", ("no cost_ns column",)),
    "missing-loop-column": ("t.parquet", dict(iteration=[0], cost_ns=[1.0]), ("no loop column",)),
    "unknown-column": ("t.csv", "loop,iteration,cost_ns,weight\n0,0,1,2\n", ("unknown column 'weight'",)),
    "unknown-npz-key": ("t.npz", dict(cost_ns_0=[1.0], costs=[1.0]), ("unknown key 'costs'",)),
    "not-a-number": ("t.csv", CSV_HEAD + "0,0,1\n0,1,fast\n", ("row 1 (line 3)", "cost_ns", "'fast'")),
    "text-column-in-parquet": ("t.parquet", dict(loop=[0], iteration=[0], cost_ns=["1"]), ("cost_ns", "string")),
    "negative-cost": ("t.csv", CSV_HEAD + "0,0,1\n0,1,2\n0,2,-4\n", ("row 2 (line 4)", "cost_ns", "-4")),
    "nan-cost": ("t.parquet", dict(loop=[0, 0], iteration=[0, 1], cost_ns=[1.0, float("nan")]),
                 ("row 1", "cost_ns", "nan")),
    "inf-cost": ("t.npz", dict(cost_ns_0=[1.0], cost_ns_1=[2.0, np.inf]), ("cost_ns_1[1]", "inf")),
    "negative-serial": ("t.csv", "loop,iteration,cost_ns,serial_ns\n0,0,1,-1\n", ("row 0", "serial_ns", "-1")),
    "loop-gap": ("t.csv", CSV_HEAD + "0,0,1\n2,0,1\n", ("row 1", "loop 2 follows loop 0")),
    "loop-not-from-0": ("t.parquet", dict(loop=[1], iteration=[0], cost_ns=[1.0]), ("row 0", "first loop is 1")),
    "loop-rows-apart": ("t.csv", CSV_HEAD + "0,0,1\n1,0,1\n0,1,1\n", ("row 2", "loop 0 follows loop 1")),
    "npz-loop-gap": ("t.npz", dict(cost_ns_0=[1.0], cost_ns_2=[1.0]), ("cost_ns_1",)),
    "iteration-gap": ("t.csv", CSV_HEAD + "0,0,1\n0,1,1\n0,3,1\n", ("row 2", "loop 0 has iteration 3 where 2")),
    "iteration-repeated": ("t.parquet", dict(loop=[0, 0, 1, 1], iteration=[0, 1, 0, 0], cost_ns=[1.0] * 4),
                           ("row 3", "loop 1 has iteration 0 where 1")),
    "name-varies": ("t.csv", "loop,iteration,cost_ns,name\n0,0,1,a\n0,1,1,b\n", ("row 1", "name of loop 0", "'b'")),
    "phase-varies": ("t.parquet", dict(loop=[0, 0], iteration=[0, 1], cost_ns=[1.0, 1.0], phase=["x", "y"]),
                     ("row 1", "phase of loop 0")),
    "serial-varies": ("t.csv", "loop,iteration,cost_ns,serial_ns\n0,0,1,5\n0,1,1,6\n", ("row 1", "serial_ns")),
    "bytes-fractional": ("t.csv", "loop,iteration,cost_ns,bytes\n0,0,1,2.5\n", ("row 0", "bytes", "2.5")),
    "empty-csv": ("t.csv", "", ("is empty",)),
    "header-only": ("t.csv", CSV_HEAD, ("holds no iterations",)),
    "empty-npz": ("t.npz", dict(), ("holds no loops",)),
    "unreadable-parquet": ("t.parquet", "not a parquet file\n", ("cannot read it",)),
    "unreadable-npz": ("t.npz", "not a zip archive\n", ("not an .npz archive",)),
    "unknown-suffix": ("t.tsv", CSV_HEAD + "0,0,1\n", ("unknown suffix '.tsv'",)),
    "no-such-file": (None, None, ("absent.csv", "no such file")),
}


def make(folder: Path, name: str, content) -> Path:
    path = folder / name
    if isinstance(content, str):
        path.write_text(content)
    elif name.endswith(".parquet"):
        parquet(path, **content)
    else:
        npz(path, **content)
    return path


def prepare_bad(folder: Path, case: str) -> tuple[list, Path]:
    """The case's folder, made with its bad trace: the command line that runs it, the chunk file it names."""
    name, content, _ = BAD[case]
    folder.mkdir()
    path = make(folder, name, content)
    out = folder / "chunks.csv"
    return ["run", "--machine", MACHINE, "--scheduler", "omp-static", "--threads", "2", "--workload",
            f"trace:path={path}", "--chunks", out], out


# The bad traces also run through the command line (the others are checked in-process: each start costs a second).
CLI_CASES = ("missing-cost-column", "unknown-column", "not-a-number", "negative-cost", "nan-cost", "inf-cost",
             "loop-gap", "iteration-gap", "iteration-repeated", "name-varies", "empty-csv", "unreadable-parquet")


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory):
    """The CLI cases through the real command line, run concurrently up front."""
    base = tmp_path_factory.mktemp("bad")
    prepared = {case: prepare_bad(base / case, case) for case in CLI_CASES}
    # Forked from one warm interpreter (tests/cli_runner.py), the first as a genuine subprocess.
    procs = run_batch({case: (args, base / case) for case, (args, _) in prepared.items()}, real=CLI_CASES[:1])
    return {case: (procs[case], out) for case, (_, out) in prepared.items()}


@pytest.mark.parametrize("case", CLI_CASES)
def test_a_bad_trace_is_one_line_naming_what_is_wrong(bad_runs, case):
    proc, out = bad_runs[case]
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    for needle in BAD[case][2]:
        assert needle in lines[0], lines[0]
    assert "trace" in lines[0] and proc.stdout == ""
    assert not out.exists() and not list(out.parent.glob("chunks.csv*"))


@pytest.mark.parametrize("case", list(BAD))
def test_a_bad_trace_is_refused_naming_what_is_wrong(tmp_path, case):
    name, content, needles = BAD[case]
    path = make(tmp_path, name, content) if name else tmp_path / "absent.csv"
    with pytest.raises(SimschedError) as error:
        get_workload(f"trace:path={path}").loops(None)
    message = str(error.value)
    assert len(message.splitlines()) == 1 and all(needle in message for needle in needles), message


@pytest.mark.parametrize("case", ["negative-cost", "iteration-gap", "name-varies", "header-only"])
def test_bad_rows_are_named_in_parquet_as_in_csv(tmp_path, case):
    """The CSV cases above, rewritten as Parquet: the same row is named, without a CSV line number."""
    import io

    import pandas as pd

    frame = pd.read_csv(io.StringIO(BAD[case][1]), dtype={"name": str})
    path = tmp_path / "t.parquet"
    frame.to_parquet(path, index=False)
    with pytest.raises(SimschedError) as error:
        list(TraceFile(path).loops())
    needles = [n.split(" (line")[0] for n in BAD[case][2]]
    assert all(n in str(error.value) for n in needles) and "(line" not in str(error.value), str(error.value)
