"""Trapezoid, factoring, taskloop and BinLPT: hand-worked claim sequences, task publication, LPT, events."""

import numpy as np
import pytest

import simsched
from simsched import Machine
from simsched.schedulers import get_scheduler
from simsched.schedulers.base import block
from simsched.schedulers.binlpt import cut, lpt
from tests.conftest import toy_machine


def claimed(result, loop=0):
    """The chunk table of one loop in claim order (claims on one line are served one at a time)."""
    rows = result.chunks[result.chunks["loop"] == loop]
    return rows.sort_values("start")


def sizes(result):
    rows = claimed(result)
    return (rows["hi"] - rows["lo"]).tolist()


def machine_with(cores, **costs):
    """The toy machine with extra software costs (e.g. task_create)."""
    data = dict(toy_machine(cores=cores).data)
    data["costs_ns"] = {**data["costs_ns"], **costs}
    return Machine.from_dict(data)


# -- tss -----------------------------------------------------------------------------------------------------

def test_tss_chunk_sequence():
    # N = 100, P = 4: f = ceil(100/8) = 13, l = 1, C = ceil(200/14) = 15, step 12/14 = 0.857.
    # Sizes round(13 - i * 0.857): 13 12 11 10 10 9 8 7 6 5 4 4 3 2 1; they add up to 99 after
    # twelve chunks, so the thirteenth is cut to the one iteration left and the last two are never made.
    r = simsched.simulate(toy_machine(cores=4), "tss", "uforall:n=100,cost_ns=1000", 4)
    assert sizes(r) == [13, 12, 11, 10, 10, 9, 8, 7, 6, 5, 4, 4, 1]
    assert claimed(r)["lo"].tolist() == sorted(claimed(r)["lo"])
    assert r.counters["chunks"] == 13
    # One fetch-and-add per chunk plus one failed claim per worker.
    assert r.counters["atomics"] == 13 + 4


def test_tss_last_chunk_takes_what_rounding_leaves():
    # N = 10, P = 2: f = 3, C = ceil(20/4) = 5, step 0.5: sizes 3, 2.5->3, 2, 1.5->2, 1 = 11 >= 10.
    r = simsched.simulate(toy_machine(cores=2), "tss", "uforall:n=10,cost_ns=1000", 2)
    assert sizes(r) == [3, 3, 2, 2]
    # N = 7, P = 1: f = 4, C = ceil(14/5) = 3, step 1.5: sizes 4, 2.5->3, 1 = 8: cut to 4, 3.
    r = simsched.simulate(toy_machine(cores=2), "tss", "uforall:n=7,cost_ns=1000", 1)
    assert sizes(r) == [4, 3]


def test_tss_minimum_chunk_is_a_floor():
    r = simsched.simulate(toy_machine(cores=4), "tss:chunk=6", "uforall:n=100,cost_ns=1000", 4)
    # Sizes max(6, ...): 13 12 11 10 10 9 8 7 6 6 6 reach 98; the next is cut to the 2 left.
    assert sizes(r) == [13, 12, 11, 10, 10, 9, 8, 7, 6, 6, 6, 2]


# -- fac2 ----------------------------------------------------------------------------------------------------

def test_fac2_chunk_sequence():
    # Batches of P = 4 chunks of ceil(R/8): R = 100 -> 13, R = 48 -> 6, R = 24 -> 3, R = 12 -> 2, R = 4 -> 1.
    r = simsched.simulate(toy_machine(cores=4), "fac2", "uforall:n=100,cost_ns=1000", 4)
    assert sizes(r) == [13] * 4 + [6] * 4 + [3] * 4 + [2] * 4 + [1] * 4
    assert claimed(r)["lo"].tolist() == sorted(claimed(r)["lo"])
    assert r.counters["chunks"] == 20


def test_fac2_minimum_chunk_and_a_cut_last_batch():
    # chunk=5: R = 100 -> 13 x 4, R = 48 -> 6 x 4, R = 24 -> 5 x 4, R = 4 -> one chunk of the 4 left.
    r = simsched.simulate(toy_machine(cores=4), "fac2:chunk=5", "uforall:n=100,cost_ns=1000", 4)
    assert sizes(r) == [13] * 4 + [6] * 4 + [5] * 4 + [4]


# -- taskloop ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, threads, n, tasks", [
    ("taskloop", 4, 100, 4),
    ("taskloop:num_tasks=7", 4, 100, 7),
    ("taskloop:num_tasks=10", 4, 3, 3),  # never more tasks than iterations
])
def test_taskloop_creates_num_tasks_tasks_covering_the_loop(spec, threads, n, tasks):
    r = simsched.simulate(toy_machine(cores=4), spec, f"uforall:n={n},cost_ns=100", threads)
    assert r.counters["tasks_created"] == tasks
    assert r.counters["chunks"] == tasks
    ranges = sorted(zip(r.chunks["lo"], r.chunks["hi"]))
    assert ranges == [block(n, tasks, i) for i in range(tasks)]


def test_taskloop_task_never_starts_before_it_is_published():
    # Creating a task costs 1000 ns on the master; tasks are cheap, so without waiting for the
    # tail line a worker would run task i long before the master has made it.
    create = 1000.0
    r = simsched.simulate(machine_with(8, task_create=create), "taskloop:num_tasks=16",
                          "uforall:n=64,cost_ns=1", 8)
    rows = claimed(r)
    task = (rows["lo"] // 4).to_numpy()
    assert (rows["hi"] - rows["lo"] == 4).all()
    assert np.all(rows["start"].to_numpy() >= (task + 1) * create)
    # Tasks are taken in creation order, and the last one only after all 16 creations.
    assert task.tolist() == list(range(16))
    assert rows["start"].iloc[-1] >= 16 * create
    # The master does most of the creating but also runs tasks once it is done.
    assert r.state_ns["schedule"][0] >= 16 * create


# -- binlpt --------------------------------------------------------------------------------------------------

HEAVY = [500.0] * 8 + [4000.0, 4000.0]


def test_binlpt_cuts_near_equal_estimated_load():
    prefix = np.concatenate(([0.0], np.cumsum(HEAVY)))
    # Targets 3000, 6000, 9000: the first prefix reaching each is at 6, 9 and 10.
    assert cut(prefix, 4) == [0, 6, 9, 10]
    assert cut(prefix, 1) == [0, 10]
    # At most one chunk per iteration, however large K is.
    assert cut(np.arange(6.0), 100) == [0, 1, 2, 3, 4, 5]


def test_binlpt_deals_longest_chunk_first_to_least_loaded_thread():
    prefix = np.concatenate(([0.0], np.cumsum(HEAVY)))
    # Loads 3000, 5000, 4000: [6,9) to thread 0, [9,10) to thread 1, then [0,6) to thread 1 (4000 < 5000).
    assert lpt([0, 6, 9, 10], prefix, 2) == [[(6, 9)], [(9, 10), (0, 6)]]
    # With three threads, each gets one chunk, biggest to thread 0.
    assert lpt([0, 6, 9, 10], prefix, 3) == [[(6, 9)], [(9, 10)], [(0, 6)]]


def test_binlpt_runs_the_lpt_queues():
    r = simsched.simulate(toy_machine(cores=2), "binlpt:chunks=4", HEAVY, 2)
    runs = sorted(zip(r.chunks["worker"], r.chunks["start"], r.chunks["lo"], r.chunks["hi"]))
    assert [(w, lo, hi) for w, _, lo, hi in runs] == [(0, 6, 9), (1, 9, 10), (1, 0, 6)]
    assert r.counters["chunks"] == 3


def test_binlpt_idle_threads_take_unstarted_chunks():
    # Noisy estimates unbalance the queues; the thread that runs dry takes chunks from the others.
    sched = get_scheduler("binlpt:chunks=16,estimate_noise=2")
    r = simsched.simulate(toy_machine(cores=4), sched, "uforall:n=64,cost_ns=1000", 4, seed=1)
    owner = {chunk: q for q, queue in enumerate(sched.queues) for chunk in queue}
    ran = list(zip(r.chunks["worker"], zip(r.chunks["lo"], r.chunks["hi"])))
    assert sorted(chunk for _, chunk in ran) == sorted(owner)
    assert any(owner[chunk] != w for w, chunk in ran)
    # A thread takes others' chunks only once its own queue is empty, and runs its own in dealt order.
    for w, rows in r.chunks.sort_values("start").groupby("worker"):
        mine = [owner[chunk] == w for chunk in zip(rows["lo"], rows["hi"])]
        assert mine == sorted(mine, reverse=True)
        own = [chunk for chunk, m in zip(zip(rows["lo"], rows["hi"]), mine) if m]
        assert own == [chunk for chunk in sched.queues[w] if chunk in own]


def test_binlpt_noise_is_deterministic_per_seed_and_covers_every_iteration():
    def run(seed):
        return simsched.simulate("xeon-e7-4860v2", "binlpt:chunks=64,estimate_noise=0.8",
                                 "uniform:n=2000", 16, seed=seed)

    a, b, c = run(5), run(5), run(6)
    cols = ["worker", "lo", "hi", "start", "end"]
    assert a.chunks[cols].values.tolist() == b.chunks[cols].values.tolist()
    assert sorted(zip(a.chunks["lo"], a.chunks["hi"])) != sorted(zip(c.chunks["lo"], c.chunks["hi"]))
    for r in (a, c):
        count = np.zeros(2000, dtype=int)
        for lo, hi in zip(r.chunks["lo"], r.chunks["hi"]):
            count[lo:hi] += 1
        assert (count == 1).all()
        assert r.counters["chunks"] <= 64


def test_binlpt_noise_changes_the_chunks():
    exact = simsched.simulate("xeon-e7-4860v2", "binlpt:chunks=64", "uniform:n=2000", 16, seed=5)
    noisy = simsched.simulate("xeon-e7-4860v2", "binlpt:chunks=64,estimate_noise=0.8", "uniform:n=2000", 16,
                              seed=5)
    assert exact.sequential_ns == noisy.sequential_ns  # the noise is drawn after the costs
    assert sorted(zip(exact.chunks["lo"], exact.chunks["hi"])) != sorted(zip(noisy.chunks["lo"],
                                                                             noisy.chunks["hi"]))


# -- parameters ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("spec, message", [
    ("tss:chunk=0", "tss: parameter chunk=0 must be >= 1"),
    ("fac2:chunk=-2", "fac2: parameter chunk=-2 must be >= 1"),
    ("taskloop:num_tasks=0", "taskloop: parameter num_tasks=0 must be >= 1"),
    ("taskloop:num_tasks=2.5", "taskloop: parameter num_tasks='2.5' is not an integer"),
    ("binlpt:chunks=0", "binlpt: parameter chunks=0 must be >= 1"),
    ("binlpt:estimate_noise=-1", "binlpt: parameter estimate_noise=-1.0 must be from 0 to 10"),
    ("binlpt:estimate_noise=nan", "binlpt: parameter estimate_noise='nan' must be finite"),
    ("tss:num_tasks=4", "tss: unknown parameter 'num_tasks'"),
    ("binlpt:foo=1", "binlpt: unknown parameter 'foo'"),
])
def test_bad_parameters_are_rejected(spec, message):
    with pytest.raises(simsched.SimschedError) as info:
        get_scheduler(spec)
    assert message in str(info.value)


def test_defaults_are_documented_in_the_spec():
    assert get_scheduler("taskloop").spec == "taskloop"
    assert get_scheduler("binlpt").params["chunks"] == 384
    assert get_scheduler("binlpt:estimate_noise=0.5").spec == "binlpt:estimate_noise=0.5"


# -- cost: events grow with chunks and synchronization, not iterations ---------------------------------------

@pytest.mark.parametrize("scheduler", ["tss", "fac2", "taskloop", "binlpt"])
def test_event_count_follows_chunks_not_iterations(scheduler):
    small = simsched.simulate("xeon-e7-4860v2", scheduler, "exp-dec:n=100000", 48)
    large = simsched.simulate("xeon-e7-4860v2", scheduler, "exp-dec:n=1000000", 48)
    for r in (small, large):
        assert r.events < 4 * r.counters["chunks"] + 2000, (r.events, r.counters["chunks"])
    # Ten times the iterations: only the (few) extra chunks add events.
    grown = large.counters["chunks"] - small.counters["chunks"]
    assert abs(large.events - small.events) <= 4 * abs(grown) + 20
