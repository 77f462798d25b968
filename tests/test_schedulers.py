"""Scheduler algorithms: who runs which iterations, claim sequences, reductions, and what costs what."""

import numpy as np
import pytest

import simsched
from tests.conftest import toy_machine


def chunks_of(result, loop=0):
    rows = result.chunks[result.chunks["loop"] == loop]
    return rows.sort_values("start")


def test_omp_static_near_equal_blocks():
    r = simsched.simulate(toy_machine(cores=4), "omp-static", "uforall:n=10,cost_ns=1", 4)
    blocks = sorted(zip(r.chunks["worker"], r.chunks["lo"], r.chunks["hi"]))
    assert blocks == [(0, 0, 2), (1, 2, 5), (2, 5, 7), (3, 7, 10)]


def test_omp_static_round_robin_chunks():
    r = simsched.simulate(toy_machine(cores=2), "omp-static:chunk=3", "uforall:n=10,cost_ns=1", 2)
    owned = sorted(zip(r.chunks["worker"], r.chunks["lo"], r.chunks["hi"]))
    assert owned == [(0, 0, 3), (0, 6, 9), (1, 3, 6), (1, 9, 10)]


def test_fine_grain_runs_the_same_blocks_as_static():
    a = simsched.simulate("xeon-e7-4860v2", "fg-tree", "uniform:n=1000", 48, seed=3)
    b = simsched.simulate("xeon-e7-4860v2", "omp-static", "uniform:n=1000", 48, seed=3)
    cols = ["worker", "lo", "hi"]
    assert a.chunks[cols].sort_values(cols).values.tolist() == b.chunks[cols].sort_values(cols).values.tolist()


def test_guided_claim_sequence():
    # Chunks of ceil(R/P) with P = 4 from R = 100, in the order they are claimed.
    r = simsched.simulate(toy_machine(cores=4), "omp-guided", "uforall:n=100,cost_ns=1000", 4)
    claimed = chunks_of(r)
    assert (claimed["hi"] - claimed["lo"]).tolist() == [25, 19, 14, 11, 8, 6, 5, 3, 3, 2, 1, 1, 1, 1]
    assert claimed["lo"].tolist() == sorted(claimed["lo"])


def test_guided_respects_minimum_chunk():
    r = simsched.simulate(toy_machine(cores=4), "omp-guided:chunk=5", "uforall:n=100,cost_ns=1000", 4)
    sizes = (chunks_of(r)["hi"] - chunks_of(r)["lo"]).tolist()
    assert sizes[:6] == [25, 19, 14, 11, 8, 6] and min(sizes[:-1]) == 5


def test_dynamic_claims_fixed_chunks_in_counter_order():
    r = simsched.simulate(toy_machine(cores=2), "omp-dynamic:chunk=2", "uforall:n=7,cost_ns=1000", 2)
    claimed = chunks_of(r)
    assert claimed["lo"].tolist() == [0, 2, 4, 6]
    assert (claimed["hi"] - claimed["lo"]).tolist() == [2, 2, 2, 1]
    assert r.counters["chunks"] == 4
    # One atomic per chunk, plus one failed claim per worker at the end.
    assert r.counters["atomics"] >= 4 + 2


def test_contention_on_the_counter_serializes_dynamic_claims():
    # Zero-cost iterations: the loop is nothing but claims on one line, served one at a time,
    # so doubling the iterations doubles the time however many workers there are.
    machine = toy_machine(cores=8)
    t = [simsched.simulate(machine, "omp-dynamic", f"uforall:n={n},cost_ns=0", 8).makespan_ns for n in (400, 800)]
    claim = 0.5 * 100 + 10  # one transfer plus the atomic
    assert t[1] - t[0] == pytest.approx(400 * claim, rel=0.02)


def test_half_barriers_cost_about_half_of_full_barriers():
    for machine in ("xeon-e7-4860v2", toy_machine(cores=16)):
        half = simsched.simulate(machine, "fg-tree", "uforall:n=64,cost_ns=0", 16, repeat=4).loop_ns[-1]
        full = simsched.simulate(machine, "fg-tree-full", "uforall:n=64,cost_ns=0", 16, repeat=4).loop_ns[-1]
        assert 0.4 < half / full < 0.65


@pytest.mark.parametrize("scheduler, phases, combines", [
    ("fg-tree", 2, 0),
    ("fg-tree:reduction=merged", 2, 47),
    ("fg-central:reduction=merged", 2, 47),
    ("omp-static", 4, 0),
    ("omp-static:reduction=sequential", 4, 47),
    ("omp-static:reduction=tree-barrier", 6, 47),
])
def test_reductions_cost_exactly_p_minus_one_combines(scheduler, phases, combines):
    r = simsched.simulate("xeon-e7-4860v2", scheduler, "uforall:n=480,cost_ns=100", 48)
    assert r.counters.get("combines", 0) == combines
    assert r.counters["barrier_phases"] == phases


def test_reductions_make_loops_slower():
    plain = simsched.simulate("xeon-e7-4860v2", "omp-static", "uforall:n=480,cost_ns=1", 48).makespan_ns
    gcc = simsched.simulate("xeon-e7-4860v2", "omp-static:reduction=sequential", "uforall:n=480,cost_ns=1",
                            48).makespan_ns
    intel = simsched.simulate("xeon-e7-4860v2", "omp-static:reduction=tree-barrier", "uforall:n=480,cost_ns=1",
                              48).makespan_ns
    merged = simsched.simulate("xeon-e7-4860v2", "fg-tree:reduction=merged", "uforall:n=480,cost_ns=1",
                               48).makespan_ns
    assert plain < intel and plain < gcc
    assert merged < intel


def test_one_thread_speedup_is_below_one_but_close():
    r = simsched.simulate("xeon-e7-4860v2", "omp-static", "uforall:n=100,total_us=1000", 1)
    assert 0.99 < r.speedup < 1.0


def test_all_core_clock_caps_the_peak_speedup():
    m = simsched.load_machine("xeon-e7-4860v2")
    factors = m.speed_factors(48)
    clock = m.data["clock"]
    expected = clock["turbo_max_ghz"] / clock["turbo_all_ghz"]
    assert np.allclose(factors, expected)
    assert m.speed_factors(1)[0] == 1.0
    r = simsched.simulate(m, "fg-tree", "uforall:n=480,total_us=100000", 48)
    assert r.speedup == pytest.approx(48 / expected, rel=0.01)


def test_all_core_throughput_still_lowers_a_machine_s_peak():
    # A machine file may still give the throughput a full socket keeps: it multiplies the clock's factor.
    m = simsched.load_machine("xeon-e7-4860v2").replace(**{"clock.all_core_throughput": 0.8})
    clock = m.data["clock"]
    assert np.allclose(m.speed_factors(48), clock["turbo_max_ghz"] / clock["turbo_all_ghz"] / 0.8)
    assert m.speed_factors(1)[0] == 1.0


def test_event_count_does_not_grow_with_iterations():
    small = simsched.simulate("xeon-e7-4860v2", "fg-tree", "uniform:n=480", 48)
    large = simsched.simulate("xeon-e7-4860v2", "fg-tree", "uniform:n=480000", 48)
    assert large.events == small.events


def test_event_count_grows_with_chunks_not_iterations():
    a = simsched.simulate("xeon-e7-4860v2", "omp-dynamic:chunk=100", "uniform:n=10000", 48)
    b = simsched.simulate("xeon-e7-4860v2", "omp-dynamic:chunk=1000", "uniform:n=100000", 48)
    assert a.counters["chunks"] == b.counters["chunks"] == 100
    assert abs(a.events - b.events) <= 0.05 * a.events


def test_unknown_scheduler_parameter_is_rejected():
    with pytest.raises(simsched.SimschedError, match="unknown parameter 'foo'"):
        simsched.get_scheduler("omp-dynamic:foo=1")
    with pytest.raises(simsched.SimschedError, match="chunk=0 must be >= 1"):
        simsched.get_scheduler("tss:chunk=0")
    with pytest.raises(simsched.SimschedError, match="chunk=-1 must be >= 0"):
        simsched.get_scheduler("omp-dynamic:chunk=-1")


@pytest.mark.parametrize("name", ["omp-dynamic", "omp-guided"])
def test_omp_chunk_0_is_cilk_for_grain(name):
    # 16384 iterations on 32 threads: grain min(2048, 16384 / 256) = 64.
    auto = simsched.simulate("xeon-e5-4620", f"{name}:chunk=0", "uforall:n=16384", 32)
    fixed = simsched.simulate("xeon-e5-4620", f"{name}:chunk=64", "uforall:n=16384", 32)
    assert auto.chunks[["lo", "hi"]].sort_values("lo").values.tolist() == \
        fixed.chunks[["lo", "hi"]].sort_values("lo").values.tolist()
    if name == "omp-dynamic":
        assert auto.chunk_count == 256


def test_iteration_owner_maps_each_iteration_to_its_worker():
    r = simsched.simulate(toy_machine(cores=4), "omp-static", "uforall:n=10,cost_ns=1", 4, repeat=2)
    assert r.iteration_owner(0).tolist() == [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]
    assert r.iteration_owner(1).tolist() == r.iteration_owner(0).tolist()


def test_a_worker_still_waiting_when_the_run_ends_is_in_sync_not_idle():
    r = simsched.simulate("xeon-e7-4860v2", "omp-static", "uforall:n=480,total_us=50", 48)
    # Workers finish their blocks, then wait in the join barrier until the master lets go.
    assert r.state_ns["idle"][1:].max() == pytest.approx(0.0, abs=1e-6)
    assert (r.state_ns["sync"][1:] > 0).all()


def test_program_arguments_are_checked():
    with pytest.raises(simsched.SimschedError, match="repeat must be an integer >= 1"):
        simsched.simulate_program("xeon-e7-4860v2", "cilk", ["uforall:n=10"], 4, repeat=0)
    with pytest.raises(simsched.SimschedError, match="more than a float can hold"):
        simsched.simulate("xeon-e7-4860v2", "fg-tree", "uforall:n=10,cost_ns=1e308", 4)
    with pytest.raises(simsched.SimschedError, match="estimate_noise=1e\\+308 must be from 0 to 10"):
        simsched.get_scheduler("binlpt:estimate_noise=1e308")


def test_binlpt_never_cuts_more_chunks_than_iterations():
    r = simsched.simulate("haswell-e5-2695v3", "binlpt:chunks=100000000000", "uniform:n=50", 4)
    assert 1 <= len(r.chunks) <= 50  # at most one chunk per iteration, however many were asked for


def test_binlpt_counts_as_steals_exactly_the_chunks_taken_from_other_queues():
    # Workers finish their own queues at different times and then claim from others concurrently:
    # each worker counts its own steals, not the chunks other workers claim meanwhile.
    sched = simsched.get_scheduler("binlpt:chunks=64,estimate_noise=1")
    r = simsched.simulate("haswell-e5-2695v3", sched, "exp-dec:n=4000", 8, seed=3)
    owner = {start: q for q, queue in enumerate(sched.queues) for start, _ in queue}
    taken = sum(owner[lo] != w for lo, w in zip(r.chunks["lo"], r.chunks["worker"]))
    assert taken > 0
    assert r.counters["steals"] == taken
