"""E5's fine-grain programs: cilk-fg's idle loop worked out by hand, and what decides the Ligra gains.

cilk-fg's idle workers alternate one steal attempt with one poll of their release flag,
sleep after ``sleep_after`` failed attempts, and are woken by the master when a
fine-grain loop starts. On a loop alone its half-barriers beat ``cilk_for`` by far; on a
long loop of skewed iterations its static blocks lose to stealing, and on equal
iterations they do not.
"""

import json

import numpy as np
import pytest

from simsched.cli import main
from simsched.engine import Simulation
from simsched.loop import Loop
from simsched.schedulers import get_scheduler
from tests.conftest import toy_machine


def _one_loop(scheduler, machine=None, serial_ns=0.0):
    """Two workers run one fine-grain loop of two 1000 ns iterations on the toy machine, with a timeline."""
    loops = [Loop(np.full(2, 1000.0), serial_ns=serial_ns)]
    sim = Simulation(machine or toy_machine(), 2, loops, timeline=True)
    return sim.run(get_scheduler(scheduler))


def _segments(result, worker):
    rows = result.segments[result.segments["worker"] == worker]
    return [(state, start, end) for state, start, end in zip(rows["state"], rows["start"], rows["end"])]


def _starts(result):
    return dict(zip(result.chunks["worker"], result.chunks["start"]))


def test_cilk_fg_two_workers_poll_steal_alternation_hand_worked():
    # Toy machine: one-way latency 100 ns, a transfer 50, atomics 10, stores 1, no set-up or chunk cost.
    # w0 stores the descriptor (retires at 1), sets w1's go flag at 1 (retires at 2), runs [0, 1) from 2
    # to 1002.
    # w1 polls its own flag at 0 (in its cache: nothing yet), then makes one steal attempt on w0: the lock's
    # exchange pulls the line (50) and runs (10), reading w0's tail is one transfer (110), the unlock store
    # retires at 111. Its next poll re-fetches the flag w0 wrote at 1: one transfer, 161 (a spinner would have
    # seen it at 101). The descriptor is one more transfer (211); [1, 2) runs from 211 to 1211, and w0,
    # spinning on w1's arrival flag, sees it one-way latency later: the loop ends at 1311.
    r = _one_loop("cilk-fg")
    assert r.makespan_ns == 1311.0 and r.loop_ns == [1311.0]
    assert _starts(r) == {0: 2.0, 1: 211.0}
    assert _segments(r, 1)[:3] == [("steal", 0.0, 111.0), ("sync", 111.0, 161.0), ("schedule", 161.0, 211.0)]
    assert r.counters["steals"] == 0 and r.counters["barrier_phases"] == 2
    # fg-tree's w1 spins on the flag instead: it sees it at 101, so the same loop ends 60 ns sooner, the
    # steal attempt it was in (10 ns past 101) and the poll's re-fetch (50).
    fg = _one_loop("fg-tree")
    assert fg.makespan_ns == 1251.0 and _starts(fg) == {0: 2.0, 1: 151.0}


def test_cilk_fg_master_wakes_a_sleeping_worker_hand_worked():
    # With sleep_after=1, w1 sleeps after its first failed attempt (at 111, before any release). The master
    # runs 1000 ns of serial code, stores the descriptor (1001), wakes w1 at 1001 and releases it. w1 runs
    # again after the 5000 ns wake-up, at 6001: its poll re-fetches the flag (6051), the descriptor (6101),
    # its block runs to 7101, and the master sees its arrival at 7201; the loop took 7201 - 1000 ns.
    machine = toy_machine().replace(**{"os.wakeup_ns": 5000.0})
    r = _one_loop("cilk-fg:sleep_after=1", machine, serial_ns=1000.0)
    assert r.counters["wakeups"] == 1
    assert _starts(r) == {0: 1002.0, 1: 6101.0}
    assert r.makespan_ns == 7201.0 and r.loop_ns == [6201.0]
    assert _segments(r, 1)[:3] == [("steal", 0.0, 111.0), ("sync", 6001.0, 6051.0),
                                   ("schedule", 6051.0, 6101.0)]
    # Never asleep (the default 128 failed attempts take longer than the serial code), it starts at 1151.
    awake = _one_loop("cilk-fg", machine, serial_ns=1000.0)
    assert awake.counters["wakeups"] == 0 and _starts(awake)[1] == 1151.0


def _run_json(capsys, *args):
    assert main(["run", "--json", "--no-chunk-table", *args]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("scheduler", ["fg-tree", "cilk-fg"])
def test_a_fine_grain_loop_waits_for_a_late_worker_through_the_cli(capsys, scheduler):
    # The last of 4 workers arrives 20 us after each loop is published: a static block cannot start before
    # its worker arrives, under cilk-fg as under fg-tree, whose fine-grain loops are the same.
    out = _run_json(capsys, "--machine", "xeon-e7-4860v2", "--set", "noise.late_us=20", "--set",
                    "noise.late_workers=1", "--scheduler", scheduler, "--threads", "4",
                    "--workload", "uforall:n=4,total_us=4")
    assert out["counters"]["late_ns"] > 19_000
    assert 21_000 < out["makespan_ns"] < 22_000


def test_a_short_fine_grain_loop_alone_is_far_faster_under_cilk_fg_than_cilk(capsys):
    # A 3 us loop of 12 iterations, the size of BFS's short loops: two half-barriers against cilk_for's
    # spawns and steals.
    common = ["--machine", "xeon-e7-4860v2", "--threads", "48", "--workload", "uforall:n=12,total_us=3"]
    cilk = _run_json(capsys, "--scheduler", "cilk", *common)
    fine = _run_json(capsys, "--scheduler", "cilk-fg", *common)
    assert fine["counters"]["steals"] == 0 and cilk["counters"]["steals"] > 0
    assert fine["makespan_ns"] < cilk["makespan_ns"] / 2


@pytest.mark.parametrize("workload, fine_grain_loses", [
    ("normal:n=4096,mean_ns=50000,std_ns=25000", True),  # cv 0.5, as the Ligra programs draw them
    ("uforall:n=4096,cost_ns=50000", False),             # equal iterations
])
def test_static_blocks_lose_a_long_loop_to_stealing_only_when_its_iterations_are_skewed(capsys, workload,
                                                                                       fine_grain_loses):
    common = ["--machine", "xeon-e7-4860v2", "--threads", "48", "--workload", workload]
    cilk = _run_json(capsys, "--scheduler", "cilk", *common)
    fine = _run_json(capsys, "--scheduler", "cilk-fg", *common)
    # cilk-fg ends with its slowest static block (85 or 86 iterations; their sums vary by
    # 0.5 / sqrt(85) = 5.4% with cv 0.5), which no idle worker can take over; Cilk's thieves even the
    # loop out.
    assert fine["counters"]["steals"] == 0 and fine["chunks"] == 48
    assert (fine["makespan_ns"] > 1.03 * cilk["makespan_ns"]) is fine_grain_loses
    assert (fine["makespan_ns"] <= cilk["makespan_ns"]) is not fine_grain_loses
