"""The loop-task schedulers: split rules, lazy queue checks, counters, Offload, CellSs, distribution."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simsched import Simulation, load_machine, simulate
from simsched.cli import main
from simsched.engine import Loop
from simsched.schedulers import get_scheduler
from simsched.schedulers.looptasks import LBS_COUNTERS, Join
from simsched.schedulers.taskpool import LOOP, Task

CELL = load_machine("cell-qs22")
CONTRACT = ["tasks_created", "iterations_serialized", "splits", "steal_attempts", "steals"]


def split_once(spec: str, n: int, threads: int = 4, split_for: int = 0, idle: int | None = None,
               global_idle: int | None = None):
    """Split a fresh loop task [0, n) on worker 0: (kept task, pushed task)."""
    sim = Simulation(CELL, threads)
    sim.load([Loop(np.ones(n))])
    scheduler = get_scheduler(spec)
    scheduler.setup(sim)
    if idle is not None:
        scheduler.queues[0].idle.value = idle
    if global_idle is not None:
        scheduler.idle_all.value = global_idle
    task = Task(LOOP, 0, 0, n, Join(sim, 0, 0), split_for)
    sim.env.process(scheduler.split(sim, 0, task))
    sim.env.run()
    queue = scheduler.queues[0]
    (pushed,) = list(queue.public) + list(queue.private)
    return task, pushed


def bounds(task):
    return task.lo, task.hi, task.split_for


def test_half_keeps_the_lower_half():
    kept, pushed = split_once("lbs", 10)
    assert bounds(kept) == (0, 5, 0) and bounds(pushed) == (5, 10, 0)


def test_guided_keeps_one_pth_and_hands_on_the_split_factor():
    # First split of the loop: f = P = 4; L keeps 1/4 and later halves, L' is meant for 3 more workers.
    kept, pushed = split_once("lbs:split=guided", 100)
    assert bounds(kept) == (0, 25, 1) and bounds(pushed) == (25, 100, 3)
    # A split-off task splits by its splitFor; fewer iterations than f fall back to halves.
    kept, pushed = split_once("lbs:split=guided", 30, split_for=3)
    assert bounds(kept) == (0, 10, 1) and bounds(pushed) == (10, 30, 2)
    kept, pushed = split_once("lbs:split=guided", 3, split_for=5)
    assert bounds(kept) == (0, 1, 1) and bounds(pushed) == (1, 3, 1)


def test_adapt_g_splits_into_idle_plus_one_parts():
    kept, pushed = split_once("adapt-g", 90, global_idle=2)
    assert (kept.lo, kept.hi, pushed.lo, pushed.hi) == (0, 30, 30, 90)
    kept, pushed = split_once("adapt-g", 90, global_idle=0)   # nobody idle: halves
    assert (kept.hi, pushed.lo) == (45, 45)


def test_adapt_l_uses_and_resets_the_local_idle_estimate():
    kept, pushed = split_once("adapt-l", 60, idle=5)          # never split: f = 5 + 1
    assert bounds(kept) == (0, 10, 1) and bounds(pushed) == (10, 60, 5)
    kept, pushed = split_once("adapt-l", 60, idle=5, split_for=3)   # bounded by splitFor - 1: f = 2 + 1
    assert bounds(kept) == (0, 20, 1) and bounds(pushed) == (20, 60, 2)


def test_adapt_l_split_resets_the_counter_and_starts_a_period():
    sim = Simulation(CELL, 4)
    sim.load([Loop(np.ones(60))])
    scheduler = get_scheduler("adapt-l")
    scheduler.setup(sim)
    queue = scheduler.queues[0]
    assert queue.idle.value == 3          # at the start every other worker is idle
    sim.env.process(scheduler.split(sim, 0, Task(LOOP, 0, 0, 60, Join(sim, 0, 0))))
    sim.env.run()
    assert queue.idle.value == 0 and queue.period == 1


def test_two_workers_exact_claim_sequence():
    """Worked by hand: worker 0 splits [0,4) in halves, worker 1 steals [2,4); each check is lazy."""
    r = simulate("cell-qs22", "lbs", "uforall:n=4,cost_ns=1000000", 2)
    table = [tuple(row) for row in r.chunks[["worker", "lo", "hi"]].itertuples(index=False)]
    assert sorted(table) == [(0, 0, 1), (0, 1, 2), (1, 2, 3), (1, 3, 4)]
    # Worker 0: loop setup 47, task 33, dispatch 8, own check 0, split 16, task 33, push: lock 50 + store 4
    # + unlock 4 = 195 ns. The steal empties its queue: it stops at the first iteration boundary after
    # seeing that, 1 ms later, re-checks (one 41 ns transfer of the line worker 1 wrote) and runs the last
    # iteration unsplit (one left).
    w0 = r.chunks[r.chunks["worker"] == 0].sort_values("lo")
    assert w0["start"].tolist() == [195.0, 1_000_236.0]
    assert w0["end"].tolist() == [1_000_195.0, 2_000_236.0]
    assert r.counters["tasks_created"] == 3 and r.counters["splits"] == 2 and r.counters["steals"] == 1
    # Worker 0 ran 2 iterations of the root task: 1 serialized; worker 1's two tasks ran 1 each.
    assert r.counters["iterations_serialized"] == 1


def test_lazy_check_stops_at_the_first_boundary_after_the_steal():
    """A thief's steal interrupts a long run at an iteration boundary, found by search on the prefix sums."""
    costs = np.arange(1, 201, dtype=float) * 1000.0         # uneven iterations
    r = simulate("cell-qs22", "lbs", costs, 2)
    prefix = np.concatenate(([0.0], np.cumsum(costs)))
    for row in r.chunks.itertuples(index=False):
        # Every chunk covers whole iterations: its duration is exactly their sum.
        assert row.end - row.start == pytest.approx(prefix[row.hi] - prefix[row.lo], rel=1e-12)
    # Worker 0 was interrupted once (at the boundary after the steal became visible): its first chunk ends
    # at the first iteration boundary after the thief could have emptied its queue, well before its half.
    first = r.chunks[r.chunks["worker"] == 0].sort_values("start").iloc[0]
    assert first["lo"] == 0 and 1 <= first["hi"] < 100


def test_events_grow_with_splits_not_iterations():
    small = simulate("cell-qs22", "lbs", "uforall:n=10000,cost_ns=1000", 16)
    large = simulate("cell-qs22", "lbs", "uforall:n=1000000,cost_ns=10", 16)
    # Same loop duration, 100x the iterations: the event count stays the same order.
    assert large.events < 3 * small.events
    assert large.events < 50_000


@pytest.mark.parametrize("spec", ["lbs", "lbs:split=guided", "adapt-g", "adapt-l", "distrib", "offload", "cellss"])
def test_counter_contract_in_result_and_json(spec, capsys):
    r = simulate("cell-qs22", spec, "uforall:n=200,cost_ns=500", 4)
    assert set(CONTRACT) <= set(r.counters)
    assert set(LBS_COUNTERS) <= set(r.counters)
    assert main(["run", "--machine", "cell-qs22", "--scheduler", spec, "--threads", "4",
                 "--workload", "uforall:n=200,cost_ns=500", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert set(CONTRACT) <= set(data["counters"])
    assert {"split", "create"} <= set(data["state_ns"])


@pytest.mark.parametrize("spec", ["offload", "cellss"])
def test_one_task_per_iteration(spec):
    r = simulate("cell-qs22", spec, "uforall:n=500,cost_ns=1000", 8)
    assert r.counters["tasks_created"] == 500
    assert r.counters["iterations_serialized"] == 0
    assert r.counters["splits"] == 0


def test_offload_swaps_blocks_when_the_local_store_is_full():
    r = simulate("cell-qs22", "offload:ls_tasks=16,swap_block=4", "uforall:n=2000,cost_ns=1000", 4)
    assert r.counters["swaps"] > 0
    assert simulate("cell-qs22", "offload", "uforall:n=100,cost_ns=1000", 4).counters["swaps"] == 0


def test_offload_creators_create_and_the_others_execute():
    r = simulate("cell-qs22", "offload", "uforall:n=2000,cost_ns=1000", 8)
    creators = set(range(4))
    assert set(r.chunks["worker"]) == set(range(8)) - creators
    assert (r.state_ns["create"][:4] > 0).all() and (r.state_ns["create"][4:] == 0).all()


def test_cellss_master_is_the_bottleneck_for_fine_tasks():
    r = simulate("cell-qs22", "cellss", "uforall:n=2000,cost_ns=1000", 16)
    # Each hand-out costs the master two MMIO accesses and a task creation: 2 x 150 + 33 ns.
    assert r.makespan_ns == pytest.approx(2000 * 333, rel=0.02)


def test_distrib_spreads_an_idle_start_evenly():
    r = simulate("cell-qs22", "distrib", "uforall:n=64,cost_ns=10000000", 16)
    per_worker = r.chunks.assign(n=r.chunks["hi"] - r.chunks["lo"]).groupby("worker")["n"].sum()
    assert per_worker.tolist() == [4] * 16
    assert r.counters["steals"] == 0
    assert r.makespan_ns < 40.01e6


def test_one_worker_never_splits():
    for spec in ["lbs", "lbs:split=guided", "adapt-g", "adapt-l", "distrib"]:
        r = simulate("cell-qs22", spec, "uforall:n=1000,cost_ns=100", 1)
        assert r.counters["splits"] == 0 and len(r.chunks) == 1


def test_nested_inner_loops_run_inside_their_iteration():
    r = simulate("cell-qs22", "adapt-l", "nested:n=4,inner_end=16,step=4,unit_us=1,inner_us=1", 4)
    # The inner loop of outer iteration i is loop 1 + i; its chunks start after that iteration ran.
    outer = r.chunks[r.chunks["loop"] == 0]
    for i in range(4):
        (ran,) = outer[outer["hi"] == i + 1].itertuples(index=False)   # a run stops after iteration i
        inner = r.chunks[r.chunks["loop"] == 1 + i]
        assert inner["start"].min() >= ran.end
        assert inner["hi"].max() == 16 - 4 * i
        # The task holding iteration i goes on (on the same worker) only when its inner loop is done.
        later = outer[(outer["lo"] == i + 1) & (outer["worker"] == ran.worker)]
        assert later.empty or later["start"].min() >= inner["end"].max()


def test_bad_split_strategy_is_one_clear_error():
    with pytest.raises(Exception, match="split"):
        get_scheduler("lbs:split=thirds")


BREAKDOWN_EXPERIMENT = """
[experiment]
name = "e2-small"

[grid]
machine = "cell-qs22"
scheduler = ["lbs", "distrib", "cellss"]
threads = 8
workload = ["uforall:n=2000,cost_ns=1000", "uforall:n=16,cost_ns=100000"]
seed = [0, 1]

[breakdown]
baseline = "lbs"
published = "for the test"
"""


@pytest.fixture(scope="module")
def breakdown_sweep(tmp_path_factory):
    folder = tmp_path_factory.mktemp("breakdown")
    (folder / "experiment.toml").write_text(BREAKDOWN_EXPERIMENT, encoding="utf-8")
    out = folder / "out"
    assert main(["sweep", str(folder / "experiment.toml"), "--out", str(out), "--jobs", "1", "--quiet"]) == 0
    return out


def test_sweep_writes_the_breakdown(breakdown_sweep, capsys):
    import pandas as pd

    table = pd.read_csv(breakdown_sweep / "breakdown.csv")
    assert len(table) == 6 and (table["seeds"] == 2).all()
    # The categories stack up to the normalized time: every worker-ns is in exactly one.
    stacked = table[["computing", "searching", "splitting", "creating", "scheduling"]].sum(axis=1)
    np.testing.assert_allclose(stacked, table["normalized"], rtol=1e-9)
    # Computing is the work over T1, which adds one worker's loop and task overheads to it.
    assert table["computing"].between(0.99, 1.0).all()
    cellss = table[table["scheduler"] == "cellss"]
    assert (cellss["tasks_created"] == [2000, 16]).all() and (cellss["serialized_pct"] == 0).all()
    assert main(["breakdown", str(breakdown_sweep), "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    assert {"normalized", "searching", "tasks_created", "serialized_pct", "steals"} <= set(records[0])


def test_plot_draws_the_stacked_bars(breakdown_sweep, capsys):
    assert main(["plot", str(breakdown_sweep)]) == 0
    image = breakdown_sweep / "breakdown.png"
    assert image.is_file() and image.stat().st_size > 10_000
