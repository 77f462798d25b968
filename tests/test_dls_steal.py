"""The stealing DLS schedules: libomp's static_steal (and nonmonotonic:dynamic), oneTBB's partitioners."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

import simsched
from simsched import native
from simsched.schedulers.staticsteal import initial_range, stolen
from tests.conftest import toy_machine


def cli(*args, status=0) -> subprocess.CompletedProcess:
    """``python -m simsched.cli`` as a user runs it; insist on ``status`` and no traceback."""
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def by_worker(result, loop=0) -> dict[int, list[int]]:
    """Each worker's chunk starts (lo) in the order it ran them."""
    rows = result.chunks[result.chunks["loop"] == loop].sort_values("start", kind="stable")
    return {int(w): group["lo"].tolist() for w, group in rows.groupby("worker")}


# -- static-steal ----------------------------------------------------------------------------------------------

def test_static_steal_initial_ranges_by_hand():
    # C = 10 chunks, P = 3: 10 // 3 = 3 each, the first 10 % 3 = 1 thread one more: [0,4) [4,7) [7,10).
    assert [initial_range(10, 3, t) for t in range(3)] == [(0, 4), (4, 7), (7, 10)]
    # C = 8, P = 4: two each.
    assert [initial_range(8, 4, t) for t in range(4)] == [(0, 2), (2, 4), (4, 6), (6, 8)]


def test_static_steal_takes_a_quarter_of_more_than_seven_else_one():
    assert stolen(11, 20) == 2      # 9 remain: 9 >> 2 = 2
    assert stolen(0, 40) == 10      # 40 remain: 10
    assert stolen(13, 20) == 1      # 7 remain: one chunk
    assert stolen(14, 15) == 1


def test_static_steal_one_steal_of_a_quarter_then_single_chunks():
    # N = 20, chunk 1, P = 2: worker 0 owns chunks [0, 10) of 10 ns, worker 1 [10, 20) of 10 us.
    # Worker 0 is done while worker 1 runs chunk 10 (its pair is (11, 20)): 9 remain > 7, so it
    # takes 9 >> 2 = 2 chunks off the tail, [18, 20), running 18 and then 19 from its own range.
    # Then worker 1 is in chunk 12, pair (13, 18): 5 remain, it takes one, 17; likewise 16, then 15
    # (worker 1 in chunk 14, pair (15, 16)). Worker 1 then finds its range and worker 0's empty.
    costs = np.array([10.0] * 10 + [10000.0] * 10)
    r = simsched.simulate(toy_machine(cores=2), "static-steal", costs, 2)
    assert by_worker(r) == {0: list(range(10)) + [18, 19, 17, 16, 15], 1: [10, 11, 12, 13, 14]}
    assert r.counters["steals"] == 4
    # Each steal is a CAS on the victim's pair; each own claim one CAS on the own pair.
    assert r.counters["claims"] == 16 and r.counters["chunks"] == 20


def test_static_steal_with_fewer_chunks_than_threads_is_dynamic():
    # C = ceil(10 / 4) = 3 chunks < P = 4: libomp falls back to dynamic, no stealing.
    r = simsched.simulate(toy_machine(cores=4), "static-steal:chunk=4", "uforall:n=10,cost_ns=100", 4)
    assert sorted(r.chunks["lo"]) == [0, 4, 8]
    # Three successful fetch-and-adds, then one empty claim per worker (as the native fallback counts).
    assert r.counters["steal_attempts"] == 0
    assert (r.counters["claims"], r.counters["failed_claims"]) == (3 + 4, 4)


def test_static_steal_chunks_are_k_aligned_and_stolen_from_tails():
    r = simsched.simulate("haswell-e5-2695v3", "static-steal:chunk=4", "linear:n=5000", 16, seed=3)
    chunks = r.chunks
    assert (chunks["lo"] % 4 == 0).all() and ((chunks["hi"] - chunks["lo"]) <= 4).all()
    assert r.counters["steals"] > 0
    # Each worker starts with the first chunk of its own initial range.
    first = chunks.sort_values("start").groupby("worker")["lo"].first()
    for w, lo in first.items():
        assert lo == initial_range(1250, 16, w)[0] * 4


def test_nonmonotonic_dynamic_is_static_steal():
    a = simsched.simulate("haswell-e5-2695v3", "static-steal:chunk=2", "exp-dec:n=3000", 8, seed=2)
    b = simsched.simulate("haswell-e5-2695v3", "nonmonotonic-dynamic:chunk=2", "exp-dec:n=3000", 8, seed=2)
    assert a.makespan_ns == b.makespan_ns
    assert a.chunks[["worker", "lo", "hi"]].equals(b.chunks[["worker", "lo", "hi"]])


def test_static_steal_runs_through_the_cli():
    out = cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", "static-steal:chunk=8", "--threads", "8",
              "--workload", "exp-dec:n=4000", "--json").stdout
    result = json.loads(out)
    assert result["scheduler"] == "static-steal:chunk=8"
    assert result["counters"]["steals"] > 0


@pytest.mark.parametrize("spec, needle", [
    ("static-steal:chunk=0", "chunk=0 must be >= 1"),
    ("nonmonotonic-dynamic:chunk=x", "chunk='x' is not an integer"),
])
def test_bad_static_steal_parameters_are_one_line(spec, needle):
    proc = cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", spec, "--threads", "2",
               "--workload", "uforall:n=10", status=2)
    assert needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


# -- native ------------------------------------------------------------------------------------------------------

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")


@needs_native
@pytest.mark.parametrize("spec", ["static-steal:chunk=3", "nonmonotonic-dynamic:chunk=3", "static-steal:chunk=40"])
def test_native_static_steal_runs_the_simulators_chunks(spec):
    # Chunks are fixed, [ik, (i+1)k): natively and simulated, the same set, each run once (checked by the runtime).
    ran = native.run(spec, "uforall:n=200,cost_ns=100", 2, repeat=2)
    simulated = simsched.simulate("haswell-e5-2695v3", spec, "uforall:n=200,cost_ns=100", 2)
    for loop in (0, 1):
        rows = ran.chunks[ran.chunks["loop"] == loop].sort_values("lo")
        expected = simulated.chunks.sort_values("lo")
        assert rows[["lo", "hi"]].values.tolist() == expected[["lo", "hi"]].values.tolist()
    assert set(ran.counters) == set(native.simulated_counter_keys(spec))


@needs_native
def test_native_static_steal_through_the_cli():
    out = cli("native", "run", "--scheduler", "static-steal:chunk=2", "--workload", "uforall:n=400,cost_ns=200",
              "--threads", "2",
              "--repeat", "3", "--json").stdout
    result = json.loads(out)
    assert result["counters"]["chunks"] == 3 * 200


# -- oneTBB partitioners -----------------------------------------------------------------------------------------

def leaves(result, loop=0) -> list[tuple[int, int]]:
    rows = result.chunks[result.chunks["loop"] == loop].sort_values("start", kind="stable")
    return list(zip(rows["lo"].tolist(), rows["hi"].tolist()))


def test_tbb_simple_leaves_for_ten_iterations_grain_two():
    # [0,10) > 2 splits at 5, [0,5) at 2 -> leaf [0,2); [2,5) at 3 -> [2,3), [3,5); [5,10) at 7 -> [5,7);
    # [7,10) at 8 -> [7,8), [8,10). One worker runs them in that (depth-first, left-first) order.
    r = simsched.simulate(toy_machine(cores=2), "tbb-simple:grainsize=2", "uforall:n=10,cost_ns=100", 1)
    assert leaves(r) == [(0, 2), (2, 3), (3, 5), (5, 7), (7, 8), (8, 10)]
    r = simsched.simulate(toy_machine(cores=2), "tbb-simple:grainsize=2", "uforall:n=10,cost_ns=100", 2)
    assert sorted(leaves(r)) == [(0, 2), (2, 3), (3, 5), (5, 7), (7, 8), (8, 10)]


def test_tbb_auto_initial_pieces_for_two_threads():
    # divisor 4P/4 x 2 = 4 (P = 2), depth 5: splits at divisor 4 -> 2 (right child 2), 2 -> 1 (right 1),
    # then once more at 1 spending a depth level: right child 0 with depth 4; the root keeps [0, 125).
    from types import SimpleNamespace

    s = simsched.get_scheduler("tbb-auto")
    part = s.root_part(SimpleNamespace(threads=2), 0)
    assert (part.divisor, part.depth) == (4, 5)
    lo, hi, pieces = 0, 1000, []
    while hi - lo > 1 and s.is_divisible(part):
        mid, right = s.split(part, lo, hi)
        pieces.append((mid, hi, right.divisor, right.depth))
        hi = mid
    assert pieces == [(500, 1000, 2, 5), (250, 500, 1, 5), (125, 250, 0, 4)]
    assert (lo, hi, part.divisor, part.depth) == (0, 125, 0, 4)


def test_tbb_auto_range_pool_leaves_on_one_thread():
    # P = 1, N = 1000: the root (divisor 2) spawns [500,1000) and, spending a depth level, [250,500);
    # its range pool splits [0,250) to depth 4: leaves [0,15) [15,31) [31,46) [46,62) ... 16 of them.
    # [250,500) (divisor 0, depth 4) spawns [375,500) at depth 3 and runs 8 leaves; that one 4 leaves of
    # [375,437), then 2 of [437,468), then [468,484) alone (depth 0), and [484,500) cannot split: 64 leaves.
    r = simsched.simulate(toy_machine(cores=2), "tbb-auto", "uforall:n=1000,cost_ns=10", 1)
    got = leaves(r)
    assert len(got) == 64
    assert got[:4] == [(0, 15), (15, 31), (31, 46), (46, 62)]
    assert got[30:32] == [(468, 484), (484, 500)]
    assert got[32] == (500, 515)


def test_tbb_affinity_splits_proportionally_into_one_task_per_thread():
    # P = 3: the root (divisor 16P = 48, slot 0) gives its right third [60,90) to slot 32 (thread 2), then
    # [30,60) to slot 16 (thread 1), and keeps [0,30) with divisor 16.
    from types import SimpleNamespace

    s = simsched.get_scheduler("tbb-affinity")
    s.slots = [None] * 48
    part = s.root_part(SimpleNamespace(threads=3), 0)
    lo, hi, pieces = 0, 90, []
    while s.is_divisible(part):
        mid, right = s.split(part, lo, hi)
        pieces.append((mid, hi, right.divisor, right.head))
        hi = mid
    assert pieces == [(60, 90, 16, 32), (30, 60, 16, 16)]
    assert (part.divisor, part.head) == (16, 0)


def test_tbb_affinity_replays_where_each_subrange_ran():
    # Two threads, the same loop twice: [32,64) is mailed to worker 1 in the first loop, and each
    # subrange recorded in the affinity array (one that ran elsewhere than mailed) is mailed to where it ran.
    sched = simsched.get_scheduler("tbb-affinity")
    r = simsched.simulate(toy_machine(cores=2), sched, "uforall:n=64,cost_ns=1000", 2, repeat=2)
    first = r.chunks[r.chunks["loop"] == 0]
    assert set(first[first["lo"] >= 32]["worker"]) == {1}
    assert set(first[first["lo"] < 32]["worker"]) == {0}
    second = r.chunks[r.chunks["loop"] == 1]
    assert second[["lo", "hi", "worker"]].sort_values("lo").values.tolist() == \
        first[["lo", "hi", "worker"]].sort_values("lo").values.tolist()
    assert r.affinity["overall"] == 1.0


def test_tbb_affinity_keeps_iterations_on_their_worker_across_loops_and_auto_does_not():
    program = "uniform:n=2048,bytes=4096,data=a"
    kept = simsched.simulate("haswell-e5-2695v3", "tbb-affinity", program, 8, repeat=3, seed=1).affinity
    auto = simsched.simulate("haswell-e5-2695v3", "tbb-auto", program, 8, repeat=3, seed=1).affinity
    assert kept["overall"] > 0.6
    assert auto["overall"] < 0.4


def test_tbb_master_starts_every_loop():
    # parallel_for returns to its caller: each loop's first chunk is the master's.
    r = simsched.simulate("haswell-e5-2695v3", "tbb-auto", "exp-dec:n=500", 4, repeat=3, seed=2)
    for loop in range(3):
        rows = r.chunks[r.chunks["loop"] == loop].sort_values("start")
        assert rows["worker"].iloc[0] == 0


def test_tbb_runs_through_the_cli():
    out = cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", "tbb-affinity", "--threads", "4",
              "--workload", "uniform:n=512,bytes=1024", "--repeat", "2", "--json").stdout
    assert json.loads(out)["scheduler"] == "tbb-affinity"
    proc = cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", "tbb-simple:grainsize=0", "--threads", "2",
               "--workload", "uforall:n=10", status=2)
    assert "grainsize=0 must be >= 1" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@needs_native
@pytest.mark.parametrize("grain", [1, 7])
def test_native_tbb_simple_runs_the_simulators_leaves(grain):
    spec = f"tbb-simple:grainsize={grain}"
    ran = native.run(spec, "uforall:n=300,cost_ns=100", 2, repeat=2)
    simulated = simsched.simulate("haswell-e5-2695v3", spec, "uforall:n=300,cost_ns=100", 2, repeat=2)
    for loop in (0, 1):
        mine = ran.chunks[ran.chunks["loop"] == loop]
        expected = simulated.chunks[simulated.chunks["loop"] == loop]
        assert sorted(zip(mine["lo"], mine["hi"])) == sorted(zip(expected["lo"], expected["hi"]))
    # One spawn per split: leaves - 1 per loop, as simulated.
    assert ran.counters["tasks_created"] == simulated.counters["tasks_created"] == 2 * (len(expected) - 1)


@needs_native
@pytest.mark.parametrize("spec", ["tbb-auto", "tbb-affinity", "tbb-auto:grainsize=4", "tbb-affinity:grainsize=3"])
def test_native_tbb_partitioners_run_the_simulators_leaves_on_one_thread(spec):
    # One thread: no thief, no mail, so both modes split deterministically; the same leaves in the same order
    # (e.g. tbb-auto on 1000 iterations: the 64 leaves worked out in test_tbb_auto_range_pool_leaves_on_one_thread).
    ran = native.run(spec, "uforall:n=1000,cost_ns=10", 1, repeat=2)
    simulated = simsched.simulate("haswell-e5-2695v3", spec, "uforall:n=1000,cost_ns=10", 1, repeat=2)
    for loop in (0, 1):
        assert leaves(ran, loop) == leaves(simulated, loop)
    assert ran.counters["tasks_created"] == simulated.counters["tasks_created"] > 0
    if spec == "tbb-auto":
        assert len(leaves(ran)) == 64


@needs_native
@pytest.mark.parametrize("spec", ["tbb-auto", "tbb-affinity", "tbb-auto:grainsize=5", "tbb-affinity:grainsize=2"])
@pytest.mark.parametrize("n", [1, 3, 700])
def test_native_tbb_partitioners_run_every_iteration_once_on_two_threads(spec, n):
    # native.run checks exactly-once itself; check it here too, and that the counters are the simulator's.
    ran = native.run(spec, f"uforall:n={n},cost_ns=100", 2, repeat=3)
    for loop in range(3):
        rows = ran.chunks[ran.chunks["loop"] == loop].sort_values("lo")
        assert rows["lo"].tolist()[0] == 0 and rows["hi"].tolist()[-1] == n
        assert rows["lo"].tolist()[1:] == rows["hi"].tolist()[:-1]
    assert set(ran.counters) == set(native.simulated_counter_keys(spec.split(":")[0]))


@needs_native
def test_native_tbb_affinity_replays_each_subrange_on_its_worker():
    # Loop 1 mails [500, 1000) to worker 1 (slot 16); what ran elsewhere than mailed is recorded in the affinity
    # array, so later loops mail each subrange to the worker that ran it: most iterations stay put.
    ran = native.run("tbb-affinity", "uforall:n=1000,cost_ns=1000", 2, repeat=3)
    owner = np.full((3, 1000), -1)
    for worker, loop, lo, hi in ran.chunks[["worker", "loop", "lo", "hi"]].itertuples(index=False):
        owner[loop, lo:hi] = worker
    assert set(owner[0]) == {0, 1}
    # Thieves still move some subranges (and the recorded slot with them): most, not all, stay.
    assert (owner[1:] == owner[0]).mean() > 0.5


@needs_native
@pytest.mark.parametrize("name", ["tbb-auto", "tbb-affinity"])
def test_native_tbb_partitioners_through_the_cli(name):
    out = cli("native", "run", "--scheduler", name, "--workload", "uforall:n=400,cost_ns=200",
              "--threads", "2", "--repeat", "3", "--json").stdout
    result = json.loads(out)
    assert result["scheduler"] == name
    assert result["counters"]["tasks_created"] > 0
