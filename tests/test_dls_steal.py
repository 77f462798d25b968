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
    assert r.counters["steal_attempts"] == 0 and r.counters["claims"] == 0


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
