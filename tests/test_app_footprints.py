"""Application workloads touch data: spmv, bfs and kmeans footprints, shared gathers, placement and refusals."""

from __future__ import annotations

import numpy as np
import pytest
from cli_runs import cli, refused

from simsched.footprint import Footprint, Gather
from simsched.locality import DataState
from simsched.loop import Loop
from simsched.machine import load_machine
from simsched.workloads import get_workload

HASWELL = "haswell-e5-2695v3"
# Rows of 2, 0 and 3 nonzeros in 3 columns.
THREE = ("%%MatrixMarket matrix coordinate real general\n3 3 5\n"
         "1 1 4.0\n1 3 -1\n3 1 2.5\n3 2 0\n3 3 1\n")
# 0-1, 0-2, 1-3, 3-4: from 0 the levels are [0], [1, 2], [3], [4] with out-degrees [2], [2, 1], [2], [1].
FIVE = "0 1\n0 2\n1 3\n3 4\n"


def loops(spec: str, seed: int = 0) -> list[Loop]:
    return get_workload(spec).loops(np.random.default_rng(seed))


# -- what each application touches, by hand ----------------------------------------------------------------

def test_spmv_rows_stream_their_csr_bytes_and_gather_x(tmp_path):
    path = tmp_path / "three.mtx"
    path.write_text(THREE)
    program = loops(f"spmv:matrix={path},iters=3")
    assert len(program) == 3
    fp = program[0].data
    # A row pointer and a y entry (16 bytes), then 12 bytes (value and column) per nonzero.
    assert fp.bytes.tolist() == [16 + 24, 16, 16 + 36]
    assert (fp.pattern, fp.placement, fp.optional) == ("stream", "master", True)
    # Each nonzero reads one 8-byte entry of x, a vector of 3 columns shared by every row.
    assert fp.gather.reads.tolist() == [2, 0, 3] and (fp.gather.size, fp.gather.element) == (24, 8)
    assert all(loop.data.data == fp.data for loop in program)  # every product touches the same rows
    assert loops(f"spmv:matrix={path},data=0")[0].data is None
    assert loops(f"spmv:matrix={path},data=1")[0].data.optional is False


def test_bfs_levels_touch_their_vertices_and_gather_visited_flags(tmp_path):
    path = tmp_path / "five.txt"
    path.write_text(FIVE)
    program = loops(f"bfs:graph={path}")
    degrees = [[2], [2, 1], [2], [1]]
    # A vertex's record, mask flag and level (13 bytes), then 4 bytes per out-edge; a 1-byte flag read per edge.
    assert [loop.data.bytes.tolist() for loop in program] == [[13 + 4 * d for d in level] for level in degrees]
    assert [loop.data.gather.reads.tolist() for loop in program] == degrees
    assert {(loop.data.gather.size, loop.data.gather.element) for loop in program} == {(5, 1)}
    # A vertex is expanded once: each level is data of its own; the flags are one array.
    assert len({loop.data.data for loop in program}) == 4
    assert len({loop.data.gather.name for loop in program}) == 1
    assert {loop.data.placement for loop in program} == {"master"}


def test_kmeans_points_and_centroid_reads_follow_the_pruning():
    spec = "kmeans:points=300,clusters=5,iters=3,check_ns=0,distance_ns=1"
    program = loops(spec)
    for loop in program:
        # Coordinates, cluster and bounds: 36 bytes a point; a 16-byte centroid read per distance computed.
        assert np.all(loop.data.bytes == 36) and loop.data.gather.size == 5 * 16
        assert loop.data.gather.reads.tolist() == np.diff(loop.prefix).astype(int).tolist()
    assert len({loop.data.data for loop in program}) == 1


def test_a_gathered_read_pays_the_level_that_holds_it_by_the_arrays_size():
    machine = load_machine(HASWELL)
    reads = np.array([10, 0, 5])
    gather = Gather(reads, size=2**20)  # 1 MiB: L1 holds 1/32 of it, L2 1/4, L3 all
    loop = Loop(np.zeros(3), data=Footprint(np.zeros(3, dtype=np.int64), "stream", "master", "own", gather=gather))
    state = DataState(machine, [0], [loop])
    # Independent reads overlap 10 misses: L1 max(1.4 / 10, 8 B / 179 GB/s), L2 max(4.3 / 10, 64 B / 65 GB/s),
    # L3 max(21 / 10, 64 B / 34 GB/s).
    per_read = 0.14 / 32 + (64 / 65) * (1 / 4 - 1 / 32) + 2.1 * 3 / 4
    assert state.chunk(0, loop.data, 0, 3, 0.0) == pytest.approx(15 * per_read)
    assert state.counters["l3_hits"] == pytest.approx(15 * 3 / 4)
    # 64 MiB from a core of socket 1, all pages on the master's socket 0: the L3 holds 35/64 of it, the
    # rest is remote DRAM (146 ns / 10 in flight).
    far = Gather(reads, size=64 * 2**20)
    loop = Loop(np.zeros(3), data=Footprint(np.zeros(3, dtype=np.int64), "stream", "master", "own", gather=far))
    state = DataState(machine, [0, 14], [loop])
    l1, l2, l3 = 2**15 / 2**26, 2**18 / 2**26, 35840 * 1024 / 2**26
    per_read = 0.14 * l1 + (64 / 65) * (l2 - l1) + 2.1 * (l3 - l2) + 14.6 * (1 - l3)
    assert state.chunk(1, loop.data, 0, 3, 0.0) == pytest.approx(15 * per_read)
    assert state.counters["remote_dram"] == pytest.approx(15 * (1 - l3)) and state.counters["local_dram"] == 0


# -- through the command line ---------------------------------------------------------------------------

def test_data_is_on_by_default_and_data_0_runs_the_compute_alone(tmp_path, run_json):
    (tmp_path / "three.mtx").write_text(THREE)
    compute = run_json("spmv:matrix=three.mtx,iters=4,row_ns=10,nnz_ns=2,data=0", cwd=tmp_path)
    touched = run_json("spmv:matrix=three.mtx,iters=4,row_ns=10,nnz_ns=2", cwd=tmp_path)
    assert compute["sequential_ns"] == pytest.approx(4 * 40)
    assert "local_dram" not in compute["counters"]
    # The first product reads the rows from DRAM; later ones find them in cache.
    assert touched["sequential_ns"] > 4 * 40 and touched["counters"]["local_dram"] > 0
    assert touched["makespan_ns"] > compute["makespan_ns"]
    for workload in ("bfs:graph=uniform,n=2000,degree=8,source=0", "kmeans:points=2000,iters=3"):
        compute = run_json(f"{workload},data=0")
        touched = run_json(workload)
        assert touched["sequential_ns"] > compute["sequential_ns"], workload
        assert touched["counters"]["l1_hits"] > 0, workload


def test_a_machine_without_a_hierarchy_runs_applications_without_their_data(run_json, main):
    for workload in ("spmv:matrix=powerlaw,iters=2", "bfs:graph=uniform,n=2000,source=0", "kmeans:points=500,iters=2"):
        default = run_json(workload, machine="uniform")
        compute = run_json(f"{workload},data=0", machine="uniform")
        assert (default["makespan_ns"], default["events"]) == (compute["makespan_ns"], compute["events"]), workload
    # Asked for by name, data the machine cannot model is refused.
    refused(main("run", "--machine", "uniform", "--scheduler", "omp-static", "--threads", 2,
                "--workload", "spmv:matrix=powerlaw,data=1"), "machine uniform describes no memory hierarchy", "data=1")


def test_a_scheduler_without_a_data_model_runs_applications_without_their_data(run_json, main):
    default = run_json("spmv:matrix=banded,iters=2", scheduler="lbs")
    compute = run_json("spmv:matrix=banded,iters=2,data=0", scheduler="lbs")
    assert default["makespan_ns"] == compute["makespan_ns"]
    refused(main("run", "--machine", HASWELL, "--scheduler", "lbs", "--threads", 4,
                "--workload", "spmv:matrix=banded,data=1"), "scheduler lbs does not model data locality", "data=1")


def test_master_placement_puts_the_loaded_data_on_socket_0(run_json):
    spec = "spmv:rows=20000,lengths=banded,mean=20,iters=1"
    master = run_json(spec, threads=28)["counters"]
    first = run_json(f"{spec},placement=first-touch", threads=28)["counters"]
    spread = run_json(f"{spec},placement=interleave", threads=28)["counters"]
    # Workers 14..27 sit on socket 1: they read a serially loaded matrix from socket 0's DRAM.
    assert master["remote_dram"] > 0.4 * (master["local_dram"] + master["remote_dram"])
    # Pages first touched by the product itself lie where it runs (x, 160 KB, is served by the caches).
    assert first["remote_dram"] == 0 and first["local_dram"] > 0
    assert spread["remote_dram"] > 0 and spread["local_dram"] > 0


def test_the_first_touch_follows_the_first_loops_schedule(run_json):
    # Static blocks touch the rows first: the later products under static find them local and cached.
    static = run_json("spmv:rows=20000,lengths=banded,mean=20,iters=3,placement=first-touch", threads=28)
    assert static["counters"]["remote_dram"] == 0


@pytest.mark.parametrize("workload, needles", [
    ("spmv:matrix=banded,placement=nowhere", ("placement='nowhere'", "master, first-touch, interleave")),
    ("bfs:graph=uniform,n=100,placement=first-touch", ("placement='first-touch'", "master, interleave")),
    ("kmeans:points=100,placement=node1", ("placement='node1'",)),
    ("spmv:matrix=banded,data=2", ("data=2", "0 or 1")),
])
def test_bad_data_parameters_are_one_line(workload, needles, main):
    refused(main("run", "--machine", HASWELL, "--scheduler", "omp-static", "--threads", 2, "--workload", workload),
            *needles)


def test_data_larger_than_the_machines_memory_is_refused(tmp_path):
    # 120000 rows of 120000 nonzeros: 161 GiB of rows against 2 x 64 GiB.
    refused(cli("run", "--machine", HASWELL, "--scheduler", "omp-static", "--threads", 2,
                "--workload", "spmv:rows=120000,lengths=banded,mean=120000,iters=1"),
            "does not fit in the 128 GiB of DRAM of machine haswell-e5-2695v3")
    # Two nonzeros, but x has 2 x 10^10 entries: the shared vector counts too.
    (tmp_path / "wide.mtx").write_text("%%MatrixMarket matrix coordinate real general\n"
                                       "2 20000000000 2\n1 1 1.0\n2 5 2.0\n")
    refused(cli("run", "--machine", HASWELL, "--scheduler", "omp-static", "--threads", 2,
                "--workload", "spmv:matrix=wide.mtx,iters=1", cwd=tmp_path), "149 GiB", "does not fit")


def test_events_stay_per_chunk(run_json):
    for scheduler in ("omp-static", "omp-dynamic:chunk=4"):
        for workload in ("spmv:matrix=powerlaw,iters=3", "bfs:graph=uniform,n=3000,degree=8,source=0"):
            touched = run_json(workload, scheduler=scheduler, threads=8)
            compute = run_json(f"{workload},data=0", scheduler=scheduler, threads=8)
            assert (touched["events"], touched["chunks"]) == (compute["events"], compute["chunks"])
            assert touched["makespan_ns"] != compute["makespan_ns"]
    # Rows 100 times longer touch 100 times the bytes in as many events.
    short = run_json("spmv:rows=4000,lengths=banded,mean=5,iters=2", threads=8)
    long = run_json("spmv:rows=4000,lengths=banded,mean=500,iters=2", threads=8)
    assert short["events"] == long["events"]


def native_available() -> bool:
    from simsched import native
    return native.available()


@pytest.mark.skipif(not native_available(), reason="native runtime not built")
def test_native_runs_refuse_data_they_cannot_hold_or_run(main):
    def native_run(workload):
        return main("native", "run", "--scheduler", "omp-static", "--threads", 2, "--workload", workload)

    # Each of 20000 rows would stream 120 KB: more than the memory kernel may map.
    refused(native_run("spmv:rows=20000,lengths=banded,mean=10000,iters=1,data=1"),
            "the memory kernel would need 2.2 GiB", "at most 2 GiB")
    refused(native_run("spmv:matrix=banded,iters=1,data=1"), "read an array they share", "data=0")
    # Unasked, an application's data is left out: the compute runs alone, as before.
    proc = native_run("spmv:matrix=banded,iters=1")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
