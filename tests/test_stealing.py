"""Work stealing: cilk's splitting and stealing, hybrid's claiming guarantees, cilk-fg's fine-grain loops."""

import math

import numpy as np
import pytest

import simsched
from simsched import SimschedError
from simsched import memory as memory_module
from tests.conftest import toy_machine

COUNTERS = {"steal_attempts", "steals", "tasks_created"}


def test_cilk_grain_follows_the_cilk_plus_rule():
    r = simsched.simulate("xeon-e7-4860v2", "cilk", "uforall:n=100000,cost_ns=10", 48)
    grain = max(1, min(2048, 100000 // (8 * 48)))
    sizes = r.chunks["hi"] - r.chunks["lo"]
    assert sizes.max() <= grain and sizes.min() >= grain // 2
    # A binary splitting tree over n leaves spawns n - 1 times.
    assert r.counters["tasks_created"] == len(r.chunks) - 1


def test_cilk_spreads_work_by_stealing():
    r = simsched.simulate("xeon-e7-4860v2", "cilk", "uforall:n=48000,total_us=5000", 48)
    assert COUNTERS <= set(r.counters)
    assert r.counters["steals"] >= 47  # every worker got work from someone
    assert r.counters["steal_attempts"] >= r.counters["steals"]
    assert r.chunks["worker"].nunique() == 48
    assert r.speedup > 20


def test_cilk_is_deterministic_per_seed_and_seeds_matter():
    runs = [simsched.simulate("haswell-e5-2695v3", "cilk", "uniform:n=5000", 28, seed=s) for s in (1, 1, 2)]
    assert runs[0].chunks.equals(runs[1].chunks)
    assert not runs[0].chunks.equals(runs[2].chunks)


def test_sleeping_thieves_are_woken_and_pay_the_wakeup_latency():
    # At the end of each loop the thieves run out of work; given up quickly they sleep, and the
    # next loop must wake them (one per spawn) before they can steal again.
    machine = simsched.load_machine("haswell-e5-2695v3")
    workload = "uforall:n=8000,total_us=2000"
    eager = simsched.simulate(machine, "cilk:sleep_after=1000000", workload, 8, repeat=3)
    sleepy = simsched.simulate(machine, "cilk:sleep_after=4", workload, 8, repeat=3)
    assert eager.counters.get("wakeups", 0) == 0
    assert sleepy.counters["wakeups"] >= 7
    assert sleepy.loop_ns[1] > eager.loop_ns[1] + machine.wakeup_ns
    assert eager.counters["steal_attempts"] > 2 * sleepy.counters["steal_attempts"]


@pytest.mark.parametrize("spec, message", [
    ("cilk:grain=0", "grain=0 must be >= 1"),
    ("cilk:sleep_after=0", "sleep_after=0 must be >= 1"),
    ("hybrid:grain=-2", "grain=-2 must be >= 1"),
    ("cilk:chunk=4", "unknown parameter 'chunk'"),
])
def test_bad_parameters(spec, message):
    with pytest.raises(SimschedError, match=message):
        simsched.get_scheduler(spec)


@pytest.mark.parametrize("threads", [1, 2, 3, 5, 8, 13, 16, 31, 32, 47, 64])
def test_hybrid_claims_every_partition_once_with_few_failures(threads):
    machine = toy_machine(cores=64, sockets=4, same_socket=60.0, socket_hop=60.0, transfer_fraction=0.2,
                          atomic=5.0)
    partitions = 1 << (threads - 1).bit_length()
    for seed in range(6):
        r = simsched.simulate(machine, "hybrid", "uniform:n=3000", threads, seed=seed, repeat=2)
        # Each loop claims every partition exactly once (claims that succeed = partitions).
        assert r.counters["claims"] - r.counters.get("failed_claims", 0) == 2 * partitions
        assert r.counters.get("max_failed_claims", 0) <= max(math.log2(partitions), 1)


def test_hybrid_keeps_iterations_on_the_same_worker_loop_after_loop():
    r = simsched.simulate("xeon-e5-4620", "hybrid", "uforall:n=32000,total_us=3000", 32, repeat=2)
    same = np.mean(r.iteration_owner(0) == r.iteration_owner(1))
    c = simsched.simulate("xeon-e5-4620", "cilk", "uforall:n=32000,total_us=3000", 32, repeat=2)
    cilk_same = np.mean(c.iteration_owner(0) == c.iteration_owner(1))
    assert same > 0.8 and same > cilk_same + 0.3


def test_cilk_fg_runs_loops_like_half_barriers():
    fg = simsched.simulate("xeon-e7-4860v2", "fg-tree", "uforall:n=480,total_us=2", 48, repeat=4)
    cfg = simsched.simulate("xeon-e7-4860v2", "cilk-fg", "uforall:n=480,total_us=2", 48, repeat=4)
    cilk = simsched.simulate("xeon-e7-4860v2", "cilk", "uforall:n=480,total_us=2", 48, repeat=4)
    assert fg.makespan_ns <= cfg.makespan_ns < 1.3 * fg.makespan_ns
    assert cfg.makespan_ns < cilk.makespan_ns / 3
    assert sorted(zip(cfg.chunks["worker"], cfg.chunks["lo"])) == sorted(zip(fg.chunks["worker"], fg.chunks["lo"]))


def test_cilk_fg_master_wakes_sleeping_workers():
    r = simsched.simulate("xeon-e7-4860v2", "cilk-fg:sleep_after=2", "uforall:n=480,total_us=200", 48, repeat=3)
    assert r.counters["wakeups"] >= 47


def _marked_program(marks, threads=8, name="cilk-fg", seed=1):
    """A program of two 800-iteration loops, marked fine-grain or not by ``marks``, run under ``name``."""
    from simsched.engine import Simulation
    from simsched.loop import Loop

    sim = Simulation(simsched.load_machine("xeon-e7-4860v2"), threads, seed=seed)
    sim.load([Loop(np.full(800, 500.0), serial_ns=3000.0, fine_grain=marks[0]),
              Loop(np.full(800, 500.0), fine_grain=marks[1])])
    return sim.run(simsched.get_scheduler(name))


@pytest.mark.parametrize("marks", [(False, True), (True, False)])
def test_cilk_fg_runs_a_loop_not_marked_fine_grain_as_a_cilk_loop(marks):
    from simsched.engine import verify_exactly_once

    r = _marked_program(marks)
    cilk, fine = marks.index(False), marks.index(True)
    chunks = r.chunks
    # The marked loop: one static block per worker. The other: cilk_for's leaves, spread by stealing.
    static = chunks[chunks["loop"] == fine].sort_values("lo")
    assert len(static) == 8 and static["worker"].tolist() == list(range(8))
    assert (static["hi"] - static["lo"]).tolist() == [100] * 8
    split = chunks[chunks["loop"] == cilk]
    grain = max(1, min(2048, 800 // (8 * 8)))
    assert len(split) > 8 and (split["hi"] - split["lo"]).max() <= grain
    assert split["worker"].nunique() == 8
    assert r.counters["steals"] >= 7 and r.counters["tasks_created"] == len(split) - 1
    assert r.counters["barrier_phases"] == 2  # one release and one join half-barrier, for the marked loop only
    verify_exactly_once(chunks, [800, 800], r.scheduler)
    total = sum(float(v.sum()) for v in r.state_ns.values())
    assert total == pytest.approx(r.makespan_ns * r.threads)
    # The master continues the program only when the Cilk loop is complete.
    assert r.makespan_ns == pytest.approx(3000.0 + sum(r.loop_ns))
    if cilk == 0:
        assert static["start"].min() >= split["end"].max()


def test_every_other_scheduler_ignores_the_fine_grain_mark():
    for name in ("cilk", "fg-tree", "hybrid"):
        marked, unmarked = _marked_program((True, True), name=name), _marked_program((False, False), name=name)
        assert marked.chunks.equals(unmarked.chunks) and marked.makespan_ns == unmarked.makespan_ns


def test_cilk_fg_with_every_loop_marked_is_unchanged_by_the_mark():
    # The default marks every loop: the same run as before the mark existed (figures recorded then, on the
    # machine's clock of then: 2.6 GHz with all cores busy and a throughput of 0.72, now E1's benchmark's).
    machine = simsched.load_machine("xeon-e7-4860v2").replace(
        **{"clock.turbo_all_ghz": 2.6, "clock.all_core_throughput": 0.72})
    r = simsched.simulate(machine, "cilk-fg", "uforall:n=480,total_us=2", 48, repeat=2, seed=3)
    assert r.makespan_ns == pytest.approx(1778.4501424501423, abs=1e-6)
    assert r.counters["steals"] == 0 and r.counters["barrier_phases"] == 4


def test_a_bad_fine_grain_mark_is_refused():
    from simsched.loop import Loop

    with pytest.raises(SimschedError, match="fine_grain"):
        Loop([1.0], fine_grain="yes")


@pytest.mark.parametrize("scheduler", ["cilk", "hybrid", "cilk-fg", "stealing", "ich", "tss", "fac2",
                                       "taskloop", "binlpt"])
def test_every_new_scheduler_reports_the_contract_counters(scheduler):
    r = simsched.simulate("haswell-e5-2695v3", scheduler, "exp-dec:n=5000", 8)
    contract = {"steal_attempts", "steals", "tasks_created", "claims", "failed_claims", "wakeups"}
    assert contract <= set(r.counters)
    assert all(r.counters[k] >= 0 for k in contract)
    assert r.counters["steals"] <= r.counters["steal_attempts"]


@pytest.mark.skipif(memory_module.speedups is None, reason="the compiled loops are not built")
@pytest.mark.parametrize("n", [1, 2, 3, 27, 47, 64, 1023, 4095, 16383, 2**31 - 1, 2**31 + 5, 2**32 - 1])
def test_a_compiled_thief_draws_its_victims_as_the_generator_does(n):
    # The compiled steal attempts draw from the run's bit generator with numpy's own method, so a run's
    # stream is the same whether Python or C draws: interleaved, each continues where the other left off.
    ours, theirs = np.random.default_rng(7), np.random.default_rng(7)
    drawn, expected = [], []
    for _ in range(50):
        drawn += memory_module.speedups.draws(ours.bit_generator, n, 37)
        drawn.append(int(ours.integers(n)))
        expected += [int(theirs.integers(n)) for _ in range(38)]
    assert drawn == expected
