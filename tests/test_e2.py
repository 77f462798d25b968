"""E2 on the Cell, at test size: the published shape of the loop-task results (docs/experiments.md, E2).

The full experiment is ``experiments/e2-lbs-cell.toml``; here the fine loop has 200,000
iterations instead of 1,000,000 and fewer seeds run, which keeps every published relation.
"""

from __future__ import annotations

import numpy as np
import pytest

from simsched import simulate

SPLITTING = ["lbs", "lbs:split=guided", "adapt-g", "adapt-l", "distrib"]
FINE = "uforall:n=200000,cost_ns=1000"
COARSE = "uforall:n=64,cost_ns=10000000"


def normalized(spec: str, workload: str, seeds) -> float:
    """Mean of P x makespan / T1, T1 being one SPE running the loop under lbs (which never splits alone)."""
    values = []
    for seed in seeds:
        t1 = simulate("cell-qs22", "lbs", workload, 1, seed=seed).makespan_ns
        values.append(16 * simulate("cell-qs22", spec, workload, 16, seed=seed).makespan_ns / t1)
    return float(np.mean(values))


@pytest.fixture(scope="module")
def fine():
    return {spec: normalized(spec, FINE, [0]) for spec in SPLITTING + ["offload", "cellss"]}


def test_fine_splitting_strategies_within_three_percent(fine):
    values = [fine[s] for s in SPLITTING]
    assert max(values) / min(values) < 1.03


def test_fine_one_task_per_iteration_is_several_times_slower(fine):
    best = min(fine[s] for s in SPLITTING)
    assert fine["offload"] > 2 * best
    assert fine["cellss"] > 4 * best


def test_fine_plain_lbs_serializes_nearly_everything():
    r = simulate("cell-qs22", "lbs", FINE, 16)
    assert r.counters["iterations_serialized"] / 200_000 > 0.99
    assert r.counters["tasks_created"] < 5000


@pytest.fixture(scope="module")
def coarse():
    return {spec: normalized(spec, COARSE, range(5)) for spec in SPLITTING}


def test_coarse_every_other_strategy_beats_plain_lbs(coarse):
    for spec in SPLITTING[1:]:
        assert coarse[spec] < coarse["lbs"], spec


def test_coarse_plain_lbs_overhead_is_searching():
    r = simulate("cell-qs22", "lbs", COARSE, 16, seed=0)
    states = r.state_totals
    overhead = sum(ns for state, ns in states.items() if state != "compute")
    searching = states["steal"] + states["idle"] + states["sync"]
    assert overhead > 0.1 * states["compute"]
    assert searching > 0.99 * overhead


def test_distrib_is_the_best_splitting_strategy(fine, coarse):
    nested = {spec: normalized(spec, "nested", range(3)) for spec in SPLITTING}
    for table in (fine, coarse, nested):
        assert table["distrib"] == min(table[s] for s in SPLITTING), table
