"""Chunked work stealing and iCh: hand-worked steals, iCh's first chunks and adaptation, costs, errors."""

import numpy as np
import pandas as pd
import pytest
from hypothesis import given

import simsched
from simsched import SimschedError, Simulation
from simsched.engine import Loop
from simsched.schedulers.base import block
from tests.conftest import toy_machine
from tests.test_properties import FAST, check_run, costs_of, machine_and_threads, seeds, workloads

HASWELL = "haswell-e5-2695v3"


def owned(result):
    """(worker, lo, hi) of every chunk, in start order."""
    rows = result.chunks.sort_values(["start", "worker"])
    return list(zip(rows["worker"], rows["lo"], rows["hi"]))


def test_idle_worker_steals_back_half_of_unstarted_iterations():
    # Worker 0's block [0, 10) is expensive, worker 1's [10, 20) nearly free: worker 1 runs its
    # five chunks of 2 while worker 0 is still in its first chunk [0, 2), so worker 0's
    # unstarted iterations are [2, 10) and worker 1 must get exactly the back half, [6, 10).
    r = simsched.simulate(toy_machine(cores=2), "stealing:chunk=2", [1000.0] * 10 + [1.0] * 10, 2)
    chunks = r.chunks
    mine = chunks[chunks["worker"] == 1].sort_values("start")
    assert list(zip(mine["lo"], mine["hi"])) == [(10, 12), (12, 14), (14, 16), (16, 18), (18, 20),
                                                 (6, 8), (8, 10)]
    first_steal_at = mine["end"].iloc[4]
    started = chunks[(chunks["worker"] == 0) & (chunks["start"] <= first_steal_at)]
    begin, end = int(started["hi"].max()), 10
    assert (begin, end) == (2, 10)
    stolen = chunks[(chunks["worker"] == 1) & (chunks["lo"] < 10)]
    assert (int(stolen["lo"].min()), int(stolen["hi"].max())) == (begin + (end - begin) // 2, end)
    # Worker 0 keeps the front of what was left; a later attempt on its last chunk fails.
    assert [(w, lo, hi) for w, lo, hi in owned(r) if w == 0] == [(0, 0, 2), (0, 2, 4), (0, 4, 6)]
    assert r.counters["steals"] == 1
    assert r.counters["steal_attempts"] > r.counters["steals"]
    # Termination: each worker ends with P - 1 random failures and a failed sweep of P - 1 queues.
    assert r.counters["steal_attempts"] == 1 + 2 * 2 * (2 - 1)
    assert r.counters["chunks"] == len(chunks) == 10


def test_with_give_up_a_thief_stops_after_that_many_failures_in_a_row():
    # The same loop as above: worker 1's one steal, then K failed attempts in a row on each worker.
    r = simsched.simulate(toy_machine(cores=2), "stealing:chunk=2,give_up=3", [1000.0] * 10 + [1.0] * 10, 2)
    assert r.counters["steals"] == 1
    assert r.counters["steal_attempts"] == 1 + 2 * 3
    assert sorted((lo, hi) for _, lo, hi in owned(r)) == [(i, i + 2) for i in range(0, 20, 2)]


@pytest.mark.parametrize("scheduler", ["stealing:chunk=1,give_up=8", "ich:give_up=8"])
def test_with_give_up_a_loops_end_costs_events_linear_in_the_threads(scheduler):
    # Against 2P(P - 1) failed attempts with the default rule (10,224 at 72 threads, 41,184 at 144).
    events = {}
    for threads in (36, 72, 144):
        r = simsched.simulate("uniform:cores=144", scheduler, f"uforall:n={16 * threads}", threads, seed=2)
        covered = np.zeros(16 * threads, dtype=int)
        for lo, hi in zip(r.chunks["lo"], r.chunks["hi"]):
            covered[lo:hi] += 1
        assert (covered == 1).all()
        events[threads] = r.events / threads
    assert events[144] < 1.3 * events[36]
    default = simsched.simulate("uniform:cores=144", scheduler.split(",")[0].split(":")[0], "uforall:n=2304", 144,
                                seed=2)
    assert default.events > 5 * events[144] * 144


def test_give_up_must_be_a_positive_count():
    for spec in ("stealing:give_up=0", "ich:give_up=-1"):
        with pytest.raises(SimschedError, match="give_up=.* must be >= 1"):
            simsched.get_scheduler(spec)


def test_steal_costs_come_from_line_traffic():
    # Toy latencies: one transfer 50 ns, atomic 10, store 1, no chunk or steal cost.
    r = simsched.simulate(toy_machine(cores=2), "stealing:chunk=2", [1000.0] * 10 + [1.0] * 10, 2)
    c = r.chunks.sort_values("start")
    w0, w1 = c[c["worker"] == 0], c[c["worker"] == 1]
    # Thief, from the end of its last own chunk: failed own take (lock 10, unlock 1), lock the
    # victim (transfer 50 + atomic 10), read its bounds (transfer 50), store them, unlock and
    # store its own queue (1 each), then take the first stolen chunk locally (10 + 1 + 1).
    assert w1["start"].iloc[5] - w1["end"].iloc[4] == pytest.approx(11 + 60 + 50 + 3 + 12)
    # The victim's next take finds its lock and its bounds last written by the thief: two
    # transfers on top of the local 12 ns.
    assert w0["start"].iloc[1] - w0["end"].iloc[0] == pytest.approx(2 * 50 + 12)
    own_take = w1["start"].iloc[1] - w1["end"].iloc[0]
    assert own_take == pytest.approx(12)


def test_no_stealing_on_one_thread():
    r = simsched.simulate(HASWELL, "stealing:chunk=3", "uforall:n=10,cost_ns=5", 1)
    assert owned(r) == [(0, 0, 3), (0, 3, 6), (0, 6, 9), (0, 9, 10)]
    assert r.counters.get("steal_attempts", 0) == 0


def test_ich_first_chunk_is_block_over_p():
    r = simsched.simulate(HASWELL, "ich", "uforall:n=1600,cost_ns=100", 4)
    first = r.chunks.sort_values("start").groupby("worker").first()
    for w in range(4):
        lo, hi = block(1600, 4, w)
        assert (first.loc[w, "lo"], first.loc[w, "hi"]) == (lo, lo + 100)


def test_ich_keeps_d_on_a_balanced_loop_and_adapts_on_exp_dec():
    threads = 28
    balanced = simsched.simulate(HASWELL, "ich", "uforall:n=100000,cost_ns=1000", threads)
    changes = balanced.counters.get("d_halved", 0) + balanced.counters.get("d_doubled", 0)
    # At most the early reporters' one-off doubling (they read counters the others have not written yet).
    assert changes <= 2 * threads
    assert balanced.counters["steals"] < balanced.counters["chunks"] / 50

    n = 200000
    skewed = simsched.simulate(HASWELL, "ich", f"exp-dec:n={n}", threads)
    static = simsched.simulate(HASWELL, "omp-static", f"exp-dec:n={n}", threads)
    assert skewed.counters["d_halved"] > 0 and skewed.counters["d_doubled"] > 100 * threads
    assert skewed.counters["steals"] > 0
    lo, hi = block(n, threads, 0)
    heavy = skewed.chunks[(skewed.chunks["lo"] >= lo) & (skewed.chunks["hi"] <= hi)]
    assert (heavy["worker"] != 0).any(), "nobody stole from the heaviest block"
    assert skewed.makespan_ns < 0.5 * static.makespan_ns


def ich_on(threads, eps=0.33):
    """An iCh scheduler set up on a toy machine, its first loop prepared, at time 0."""
    sim = Simulation(toy_machine(cores=threads), threads, [Loop([1.0] * 1000)])
    sched = simsched.get_scheduler("ich", eps=eps)
    sched.setup(sim)
    sched.prepare(sim, 0)
    return sim, sched


def test_ich_classifies_against_the_mean_of_every_counter_and_pays_for_reading_them():
    sim, ich = ich_on(2)
    assert ich.d == [2, 2]
    # Toy machine: one-way latency 100, a transfer 50, a store 1; no caches described, so one read at a time.
    # Worker 0 ends a chunk of 100 at time 0: it stores k0 = 100 on its own line (done at 1), reads its own
    # (a hit) and worker 1's, homed at core 1 and never written (one transfer: 51). mu = 100 / 2 = 50,
    # 100 > 50 * 1.33: high, d doubles.
    assert ich.report(sim, 0, 100) == 51
    assert ich.d[0] == 4
    # Worker 1 ends a chunk of 10: its store (done at 1), then worker 0's line, written at 0, which it sees no
    # sooner than one latency after that write (100). mu = 110 / 2 = 55, 10 < 55 * 0.67: low, d halves.
    assert ich.report(sim, 1, 10) == 100
    assert ich.d[1] == 1
    # Nothing rewrote worker 0's line since worker 1 read it: the mean costs no transfer now. Still low
    # (20 < 60 * 0.67), but d never drops below 1: the whole queue is one chunk.
    assert ich.report(sim, 1, 10) == 1
    assert ich.d[1] == 1 and ich.chunk_size(1, 37) == 37
    # Within the band nothing changes: k1 = 120 against mu = 220 / 2 = 110 +- 36.3.
    ich.report(sim, 1, 100)
    assert ich.d == [4, 1] and ich.k == [100, 120]
    assert sim.counters["d_doubled"] == 1 and sim.counters["d_halved"] == 2
    # No atomic anywhere: each report is a plain store and reads.
    assert sim.memory.atomics == 0 and sim.memory.transfers == 2


def test_ich_thief_averages_k_and_d_with_its_victim():
    sim, ich = ich_on(4)
    ich.k, ich.d = [10, 30, 0, 0], [2, 9, 4, 4]
    ich.stolen(0, (100, 112, 30, 9))           # the victim's line: begin, end, k, d
    assert (ich.k[0], ich.d[0]) == (20, 5)
    assert ich.chunk_size(0, 6) == 1 and ich.chunk_size(0, 12) == 2   # at most what it stole


def test_stealing_beats_static_on_exp_dec():
    static = simsched.simulate(HASWELL, "omp-static", "exp-dec:n=20000", 28)
    steal = simsched.simulate(HASWELL, "stealing:chunk=8", "exp-dec:n=20000", 28)
    assert steal.makespan_ns < 0.5 * static.makespan_ns
    assert steal.counters["steals"] > 0


@pytest.mark.parametrize("scheduler", ["stealing:chunk=2", "ich"])
def test_deterministic_per_seed_and_victims_depend_on_seed(scheduler):
    costs = np.sort(np.random.default_rng(7).exponential(1000.0, 3000))[::-1]
    runs = {seed: simsched.simulate(HASWELL, scheduler, costs, 16, seed=seed) for seed in (1, 2, 3)}
    again = simsched.simulate(HASWELL, scheduler, costs, 16, seed=1)
    pd.testing.assert_frame_equal(runs[1].chunks, again.chunks, check_exact=True)
    assert runs[1].counters == again.counters
    tables = [runs[s].chunks[["worker", "lo", "hi"]].values.tolist() for s in (1, 2, 3)]
    assert tables[0] != tables[1] or tables[0] != tables[2]


@pytest.mark.parametrize("spec, message", [
    ("ich:eps=0", r"eps=0\.0 must be > 0"),
    ("ich:eps=-1", r"eps=-1\.0 must be > 0"),
    ("ich:eps=x", r"eps='x' is not a number"),
    ("ich:chunk=2", r"unknown parameter 'chunk'"),
    ("stealing:chunk=0", r"chunk=0 must be >= 1"),
    ("stealing:chunk=1.5", r"chunk='1\.5' is not an integer"),
    ("stealing:victim=3", r"unknown parameter 'victim'"),
])
def test_bad_parameters(spec, message):
    with pytest.raises(SimschedError, match=message):
        simsched.simulate(HASWELL, spec, "uforall:n=10", 2)


def test_events_grow_with_chunks_and_attempts_not_iterations():
    n, threads = 200000, 28
    for spec in ("stealing:chunk=64", "ich"):
        r = simsched.simulate(HASWELL, spec, "uforall:n=200000,cost_ns=1000", threads)
        assert r.events < n / 10, spec
    for spec in ("stealing:chunk=64", "ich"):
        r = simsched.simulate(HASWELL, spec, f"exp-dec:n={n}", threads)
        # One event per chunk and per steal attempt, plus the barriers.
        assert r.events <= r.counters["chunks"] + r.counters["steal_attempts"] + 20 * threads, spec
    assert simsched.simulate(HASWELL, "stealing:chunk=64", f"exp-dec:n={n}", threads).events < n / 10


@pytest.mark.parametrize("scheduler", ["stealing:chunk=3", "stealing:chunk=64,barrier=central", "ich:eps=0.5",
                                       "ich:eps=0.01,barrier=tree"])
@FAST
@given(mt=machine_and_threads(), workload=workloads, seed=seeds)
def test_variants_keep_the_run_invariants(scheduler, mt, workload, seed):
    machine, threads = mt
    result = simsched.simulate(machine, scheduler, workload, threads, seed=seed, repeat=2)
    check_run(result, costs_of(workload, seed), threads, repeat=2)
