"""Recorded traces: real kernels timed on one thread (native record), run under every native scheduler, and
validated against the simulator (native validate --workload trace:)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.io
import scipy.sparse as sp

import simsched.native as native
from simsched.workloads import get_workload
from simsched.workloads.trace import trace_metadata

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")
ROOT = Path(__file__).resolve().parents[1]
MACHINE = ROOT / "machines" / "haswell-e5-2695v3.toml"
THREADS = min(2, len(native.cores()))
# A 3 x 3 matrix with rows of 2, 1 and 3 nonzeros.
DENSE = np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0], [4.0, 5.0, 6.0]])
# Levels from 0: {0}, {1, 2}, {3}, {4, 5}; vertex 6 is unreached.
EDGES = "# a hand-made graph\n0 1\n0 2\n1 3\n2 3\n3 4\n3 5\n6 6\n"


def _cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", "native", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@pytest.fixture
def matrix(tmp_path) -> Path:
    path = tmp_path / "a.mtx"
    scipy.io.mmwrite(str(path), sp.coo_matrix(DENSE))
    return path


@pytest.fixture
def graph(tmp_path) -> Path:
    path = tmp_path / "g.txt"
    path.write_text(EDGES)
    return path


def _loops(path: Path) -> list[np.ndarray]:
    """The trace's loops' costs, read by the trace: workload."""
    loops = get_workload(f"trace:path={path}").loops(np.random.default_rng(0))
    return [np.diff(loop.prefix) for loop in loops]


@needs_native
@pytest.mark.parametrize("suffix", [".parquet", ".csv", ".npz"])
def test_record_spmv_gives_a_loop_per_multiplication_of_one_row_per_iteration(matrix, tmp_path, suffix):
    out = tmp_path / f"spmv{suffix}"
    proc = _cli("record", "spmv", "--matrix", matrix, "--iters", 2, "--block", 1, "--samples", 3, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "2 loop(s), 6 iterations in blocks of 1" in proc.stdout
    loops = _loops(out)
    assert [loop.size for loop in loops] == [3, 3]
    assert all((loop >= 0).all() and np.isfinite(loop).all() for loop in loops)
    meta = trace_metadata(out)
    assert meta["kernel"] == "spmv" and meta["matrix"] == str(matrix.resolve()) and meta["iters"] == 2
    assert meta["block"] == 1 and meta["samples"] == 3 and meta["host"] and meta["empty_block_ns"] > 0


@needs_native
def test_record_blocks_of_k_give_one_row_per_block(matrix, tmp_path):
    out = tmp_path / "spmv.csv"
    assert _cli("record", "spmv", "--matrix", matrix, "--block", 2, "--out", out).returncode == 0
    assert [loop.size for loop in _loops(out)] == [2]  # rows 0-1 and row 2
    assert out.read_text().startswith("# simsched: {")
    assert trace_metadata(out)["block"] == 2


@needs_native
def test_record_bfs_has_one_loop_per_level_over_its_frontier(graph, tmp_path):
    out = tmp_path / "bfs.parquet"
    proc = _cli("record", "bfs", "--graph", graph, "--source", 0, "--block", 1, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert [loop.size for loop in _loops(out)] == [1, 2, 1, 2]
    meta = trace_metadata(out)
    assert (meta["kernel"], meta["source"], meta["graph"]) == ("bfs", 0, str(graph.resolve()))


@needs_native
def test_record_memory_has_a_loop_per_repeat(tmp_path):
    out = tmp_path / "memory.npz"
    proc = _cli("record", "memory", "--n", 16, "--array-bytes", 256, "--repeat", 3, "--out", out)
    assert proc.returncode == 0, proc.stderr
    loops = _loops(out)
    block = trace_metadata(out)["block"]
    assert len(loops) == 3 and all(loop.size == -(-16 // block) for loop in loops)


def test_the_block_is_chosen_from_the_timer_cost():
    from simsched.native.record import BLOCK_SPANS, block_sizes, choose_block

    assert choose_block(40.0, 10_000.0) == 1  # a long iteration is timed alone
    assert choose_block(40.0, 20.0) == BLOCK_SPANS * 2
    assert block_sizes(10, 4).tolist() == [4, 4, 2]


@needs_native
def test_the_kernels_compute_their_results_under_every_native_scheduler(matrix, graph):
    from simsched.native import NATIVE, execute, kernels
    from simsched.schedulers import get_scheduler
    from simsched.workloads.graphs import read_graph

    spmv = kernels.spmv(matrix, iters=2)
    x = 1.0 + (np.arange(3) % 10) / 10
    bfs = kernels.bfs(graph, 0)
    g = read_graph(graph)
    levels = np.array([0, 1, 1, 2, 3, 3, -1], dtype=float)
    for name in NATIVE:
        sched = get_scheduler(name)
        result, out = execute(sched, spmv.spec, THREADS, np.zeros(3), spmv.sizes, spmv.passes, csr=spmv.csr)
        np.testing.assert_allclose(np.frombuffer(out), DENSE @ x)
        assert len(result.loop_ns) == 2  # and every row of both loops ran once (execute checks it)
        result, out = execute(sched, bfs.spec, THREADS, np.zeros(6), bfs.sizes, 1, csr=bfs.csr)
        # Each reached vertex sums its neighbours' levels; the unreached one is never an iteration.
        expected = g @ levels
        expected[6] = 0
        np.testing.assert_allclose(np.frombuffer(out), expected)
        assert len(result.loop_ns) == 4


@needs_native
def test_validate_runs_a_recorded_trace_natively_and_simulated(matrix, tmp_path):
    out = tmp_path / "spmv.parquet"
    assert _cli("record", "spmv", "--matrix", matrix, "--iters", 2, "--out", out).returncode == 0
    proc = _cli("validate", "--machine", MACHINE, "--threads", THREADS, "--repeat", 2,
                "--workload", f"trace:path={out}", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(row["scheduler"], row["threads"], row["control"]) for row in rows] == (
        [("omp-static", 1, True)] + [(name, THREADS, False) for name in native.NATIVE])
    for row in rows:
        assert row["native_ms"] > 0 and row["sim_ms"] > 0
        assert row["error"] == pytest.approx((row["sim_ms"] - row["native_ms"]) / row["native_ms"])
    from simsched.native.validate import format_trace_validation

    text = format_trace_validation(pd.DataFrame(rows))
    median = np.median([abs(row["error"]) for row in rows[1:]])  # over the schedulers, not the control
    lines = text.splitlines()
    assert lines[-2] == f"median |error|: {100 * median:.1f}%"
    assert lines[-1].startswith("control, omp-static on 1 thread as recorded")
    assert [line.split()[0] for line in lines[1:1 + len(native.NATIVE)]] == list(native.NATIVE)


@needs_native
def test_validate_refuses_a_trace_whose_input_changed(matrix, tmp_path):
    out = tmp_path / "spmv.csv"
    assert _cli("record", "spmv", "--matrix", matrix, "--block", 1, "--out", out).returncode == 0
    scipy.io.mmwrite(str(matrix), sp.coo_matrix(np.eye(5)))
    proc = _cli("validate", "--machine", MACHINE, "--threads", 1, "--workload", f"trace:path={out}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert "the input changed since it was recorded" in proc.stderr


@needs_native
@pytest.mark.parametrize("args, message", [
    (["record", "spmv", "--matrix", "{dir}/absent.mtx"], "no such file"),
    (["record", "sort", "--matrix", "{dir}/a.mtx"], "unknown kernel 'sort'"),
    (["record", "spmv", "--matrix", "{dir}/a.mtx", "--block", "0"], "--block must be an integer in [1,"),
    (["record", "spmv", "--matrix", "{dir}/a.mtx", "--samples", "0"], "--samples must be an integer"),
    (["record", "spmv", "--graph", "{dir}/g.txt"], "--graph does not apply to the spmv kernel"),
    (["record", "bfs", "--graph", "{dir}/g.txt", "--source", "7"], "--source must be a vertex in [0, 6]"),
    (["record", "memory", "--n", "4"], "the memory kernel needs --array-bytes"),
    (["record", "spmv", "--matrix", "{dir}/a.mtx", "--out", "{dir}/t.txt"], "a trace is a .parquet, .csv, .npz"),
    (["validate", "--machine", str(MACHINE), "--workload", "trace:path={dir}/plain.csv"],
     "names no kernel in its metadata"),
    (["validate", "--machine", str(MACHINE), "--workload", "uniform:n=4"], "takes a recorded trace"),
])
def test_bad_input_is_one_line_and_exit_2(args, message, matrix, graph, tmp_path):
    (tmp_path / "plain.csv").write_text("loop,iteration,cost_ns\n0,0,5\n0,1,6\n")
    args = [a.replace("{dir}", str(tmp_path)) for a in args]
    if args[0] == "record" and "--out" not in args:
        args += ["--out", str(tmp_path / "t.csv")]
    proc = _cli(*args)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "t.csv").exists()


def test_the_kernels_declare_what_their_iterations_touch(matrix, graph):
    from simsched.native import kernels

    # Row i: its row pointers and y[i] (16 B), 12 B a nonzero streamed; x (3 doubles) gathered at its columns.
    spmv = kernels.spmv(matrix, iters=2)
    footprints = spmv.footprints()
    assert len(footprints) == 2 and footprints[0] is footprints[1]  # both products touch the same data
    assert footprints[0].bytes.tolist() == [16 + 12 * 2, 16 + 12 * 1, 16 + 12 * 3]
    assert footprints[0].gather.reads.tolist() == [2, 1, 3] and footprints[0].gather.size == 3 * 8
    assert (footprints[0].pattern, footprints[0].placement) == ("stream", "master")
    # A level's vertex: its number, row pointers and sum (24 B), 4 B an edge; the 7 levels (doubles) gathered.
    bfs = kernels.bfs(graph, 0)
    degrees = [[2], [2, 2], [4], [1, 1]]
    assert [fp.bytes.tolist() for fp in bfs.footprints()] == [[24 + 4 * d for d in level] for level in degrees]
    assert [fp.gather.reads.tolist() for fp in bfs.footprints()] == degrees
    assert {fp.gather.size for fp in bfs.footprints()} == {7 * 8}
    assert len({fp.data for fp in bfs.footprints()}) == 4  # each level's vertices are data of their own


def test_a_hot_recording_plans_every_block_twice_in_a_row():
    from simsched.native.record import alone

    rows, offsets = alone([5, 2], 2, 2, runs=2)
    assert rows.tolist() == [[0, 0, 2], [0, 0, 2], [0, 2, 4], [0, 2, 4], [0, 4, 5], [0, 4, 5],
                             [1, 0, 2], [1, 0, 2]]
    assert offsets.tolist() == [0, 8, 8]


@needs_native
def test_record_with_data_times_each_block_again_and_validate_adds_the_footprints(matrix, tmp_path):
    out = tmp_path / "spmv.npz"
    proc = _cli("record", "spmv", "--matrix", matrix, "--block", 1, "--samples", 2, "--data", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert trace_metadata(out)["data"] is True and [loop.size for loop in _loops(out)] == [3]
    proc = _cli("validate", "--machine", MACHINE, "--threads", THREADS, "--repeat", 2,
                "--workload", f"trace:path={out}", "--schedulers", "omp-static", "--json")
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [row["data"] for row in rows] == [True, True]
    # The simulation is of the recorded work with the kernel's data: the same as simulating both here, and more
    # than the work alone.
    from simsched.engine import Simulation
    from simsched.loop import Loop
    from simsched.machine import load_machine
    from simsched.native import kernels
    from simsched.native.validate import recorded_costs
    from simsched.schedulers import get_scheduler

    costs = recorded_costs(out, kernels.spmv(matrix), 1)

    def simulated(data: bool) -> float:
        sim = Simulation(load_machine(MACHINE), 1, keep_chunks=False)
        sim.load([Loop(c, data=fp if data else None) for c, fp in zip(costs, kernels.spmv(matrix).footprints())])
        return sum(sim.run(get_scheduler("omp-static")).loop_ns) / 1e6

    assert rows[0]["sim_ms"] == pytest.approx(simulated(True), rel=1e-12)
    assert rows[0]["sim_ms"] > simulated(False)


@needs_native
def test_data_recordings_refuse_blocks_too_large_to_run_again_from_cache(tmp_path):
    from simsched.errors import SimschedError
    from simsched.native import kernels
    from simsched.native.record import check_hot_blocks

    memory = kernels.memory(8, 4096)
    check_hot_blocks(memory, 2, room=8192)
    with pytest.raises(SimschedError, match="a block of 3 iteration"):
        check_hot_blocks(memory, 3, room=8192)
    out = tmp_path / "m.npz"
    proc = _cli("record", "memory", "--n", 4, "--array-bytes", 64 << 20, "--block", 1, "--data", "--out", out)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "give a smaller --block" in proc.stderr and not out.exists()


@needs_native
def test_a_data_recording_on_a_machine_without_caches_is_refused_before_any_run(matrix, tmp_path):
    out = tmp_path / "spmv.npz"
    assert _cli("record", "spmv", "--matrix", matrix, "--block", 1, "--samples", 1, "--data",
                "--out", out).returncode == 0
    proc = _cli("validate", "--machine", ROOT / "machines" / "graviton3.toml", "--threads", 1, "--repeat", 1,
                "--workload", f"trace:path={out}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "was recorded with --data" in proc.stderr


@needs_native
def test_a_trace_whose_data_mark_is_not_a_boolean_is_refused(matrix, tmp_path):
    from simsched.workloads.trace import write_trace

    out = tmp_path / "spmv.npz"
    assert _cli("record", "spmv", "--matrix", matrix, "--block", 1, "--samples", 1, "--out", out).returncode == 0
    edited = tmp_path / "edited.npz"
    write_trace(edited, _loops(out), metadata={**trace_metadata(out), "data": "false"})
    proc = _cli("validate", "--machine", MACHINE, "--threads", 1, "--repeat", 1, "--workload", f"trace:path={edited}")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "its metadata's data must be true or false" in proc.stderr


@needs_native
def test_a_plan_that_runs_a_chunk_other_than_twice_is_refused(matrix):
    from simsched.errors import ExecutionError
    from simsched.native import execute, kernels
    from simsched.schedulers import get_scheduler

    spmv = kernels.spmv(matrix)
    rows = np.array([[0, 0, 2], [0, 0, 2], [0, 2, 3]])
    with pytest.raises(ExecutionError, match=r"a planned chunk ran 1 time\(s\), not 2"):
        execute(get_scheduler("omp-static"), spmv.spec, 1, np.zeros(3), spmv.sizes, 1, csr=spmv.csr,
                plan=(rows, np.array([0, 3])), runs_each=2)
