"""Workload generators: the registry names, their parameters and their costs."""

import numpy as np
import pytest

from simsched import SimschedError, get_workload
from simsched.workloads import REGISTRY

RNG = lambda: np.random.default_rng(1)  # noqa: E731


def test_registry_names_are_the_contract():
    assert sorted(REGISTRY) == ["app", "arrays", "bfs", "cc", "exp-dec", "exp-inc", "file", "kmeans", "lavamd",
                                "linear", "matmul", "nested", "normal", "pagerank", "spmv", "trace", "uforall",
                                "uniform"]


def test_uforall_by_cost_or_by_total():
    assert np.all(get_workload("uforall:n=4,cost_ns=25").costs(RNG()) == 25)
    costs = get_workload("uforall:n=8,total_us=2").costs(RNG())
    assert costs.sum() == pytest.approx(2000) and np.all(costs == 250)
    with pytest.raises(SimschedError, match="either cost_ns or total_us"):
        get_workload("uforall:n=4,cost_ns=1,total_us=1")


def test_exponential_synth_is_sorted_with_the_requested_scale():
    inc = get_workload("exp-inc:n=20000").costs(RNG())
    dec = get_workload("exp-dec:n=20000").costs(RNG())
    assert np.all(np.diff(inc) >= 0) and np.all(np.diff(dec) <= 0)
    assert inc.mean() == pytest.approx(1e6 * 1e-3, rel=0.05)
    assert np.array_equal(inc[::-1], dec)


def test_linear_uniform_normal():
    lin = get_workload("linear:n=5,first_ns=0,last_ns=100").costs(RNG())
    assert lin.tolist() == [0, 25, 50, 75, 100]
    uni = get_workload("uniform:n=1000,low_ns=10,high_ns=20").costs(RNG())
    assert 10 <= uni.min() and uni.max() < 20
    nor = get_workload("normal:n=1000,mean_ns=5,std_ns=50").costs(RNG())
    assert nor.min() >= 0


def test_same_seed_same_costs():
    a = get_workload("uniform:n=100").costs(np.random.default_rng(9))
    b = get_workload("uniform:n=100").costs(np.random.default_rng(9))
    assert np.array_equal(a, b)


def test_a_process_reuses_the_loops_it_drew_from_the_same_generator_state(monkeypatch):
    from simsched import workloads
    monkeypatch.setattr(workloads, "_RECENT", type(workloads._RECENT)())
    spec = get_workload("exp-dec:n=1000")
    first_rng, again_rng, fresh_rng = (np.random.default_rng(4) for _ in range(3))
    first = workloads.draw_loops(spec, first_rng)
    again = workloads.draw_loops(get_workload("exp-dec:n=1000"), again_rng)
    assert again[0] is first[0]
    # The generator ends where drawing would leave it, so what the run draws next is unchanged.
    drawn = spec.loops(fresh_rng)
    assert again_rng.bit_generator.state == fresh_rng.bit_generator.state
    assert np.array_equal(again[0].prefix, drawn[0].prefix)
    assert not first[0].prefix.flags.writeable
    # Another generator state, other parameters, or a class that does not declare itself reusable: drawn anew.
    assert workloads.draw_loops(spec, np.random.default_rng(5))[0] is not first[0]
    assert workloads.draw_loops(get_workload("exp-inc:n=1000"), np.random.default_rng(4))[0] is not first[0]

    class Jittered(type(spec)):
        calls = 0

        def generate(self, rng):
            Jittered.calls += 1
            return super().generate(rng)

    for _ in range(2):
        workloads.draw_loops(Jittered(n=1000), np.random.default_rng(4))
    assert Jittered.calls == 2
    # Loops with data, or more iterations than the bound, are not kept.
    for other in ("uforall:n=10,bytes=64", f"uforall:n={workloads.RECENT_ITERATIONS + 1}"):
        loops = workloads.draw_loops(get_workload(other), np.random.default_rng(4))
        assert workloads.draw_loops(get_workload(other), np.random.default_rng(4))[0] is not loops[0]


def test_runs_on_reused_loops_equal_runs_on_fresh_ones(monkeypatch):
    from simsched import simulate, workloads
    monkeypatch.setattr(workloads, "_RECENT", type(workloads._RECENT)())
    runs = [simulate("haswell-e5-2695v3", "stealing:chunk=4", "exp-inc:n=3000", 6, seed=2) for _ in range(2)]
    assert len(workloads._RECENT) == 1
    monkeypatch.setattr(workloads, "_RECENT", type(workloads._RECENT)())
    monkeypatch.setattr(workloads, "RECENT_ITERATIONS", 0)
    fresh = simulate("haswell-e5-2695v3", "stealing:chunk=4", "exp-inc:n=3000", 6, seed=2)
    for run in runs:
        assert run.makespan_ns == fresh.makespan_ns and run.counters == fresh.counters
        assert run.chunks.equals(fresh.chunks)


def test_file_workloads(tmp_path):
    csv = tmp_path / "c.csv"
    csv.write_text("cost_ns\n1\n2\n3\n")
    assert get_workload(f"file:path={csv}").costs(RNG()).tolist() == [1, 2, 3]
    bare = tmp_path / "bare.csv"
    bare.write_text("4\n5\n")
    assert get_workload(f"file:path={bare}").costs(RNG()).tolist() == [4, 5]
    npy = tmp_path / "c.npy"
    np.save(npy, np.array([7.0, 8.0]))
    assert get_workload(f"file:path={npy}").costs(RNG()).tolist() == [7, 8]
    bad = tmp_path / "bad.csv"
    bad.write_text("cost_ns\n1\n-2\n")
    with pytest.raises(SimschedError, match=">= 0"):
        get_workload(f"file:path={bad}").costs(RNG())
