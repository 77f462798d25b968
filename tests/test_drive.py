"""Simulation.drive and Simulation.until: a worker's waits, passed or as callbacks, as SimPy's timeouts would run."""

from __future__ import annotations

import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as st

from simsched import Simulation, load_machine, memory, simulate
from simsched.chunklog import CHUNK_DTYPE, ChunkLog
from simsched.engine import PASSED
from simsched.memory import Wait
from simsched.schedulers import REGISTRY
from simsched.simpy_access import event_count


def run(waits: list[list[float]], driven: bool, queued: bool = False):
    """Each worker waits until each of its absolute times in turn, logging (time, worker, step) as it wakes.

    Workers given ``driven`` run their waits through ``Simulation.drive``; the others yield
    ``Simulation.wait`` (or, ``queued``, SimPy's own timeouts, every one through the event
    queue). Returns the log, each worker's end time and the event count.
    """
    sim = Simulation(load_machine("xeon-e7-4860v2"), len(waits))
    log, ends = [], {}
    if queued:
        sim.until = lambda when: sim.env.timeout(max(when - sim.env.now, 0))

    def steps(w):
        for k, when in enumerate(waits[w][:-1]):
            yield sim.charged(w, "schedule", when)
            log.append((sim.env.now, w, k))
        return sim.charged(w, "schedule", waits[w][-1]), f"done {w}"

    def process(w):
        if driven:
            value = yield from sim.drive(steps(w))
        else:
            for k, when in enumerate(waits[w][:-1]):
                yield sim.wait(w, "schedule", when)
                log.append((sim.env.now, w, k))
            yield sim.wait(w, "schedule", waits[w][-1])
            value = f"done {w}"
        ends[w] = (sim.env.now, value)
        log.append((sim.env.now, w, "end"))

    for w in range(len(waits)):
        sim.env.process(process(w))
    sim.env.run()
    return log, ends, event_count(sim.env), [sim.time["schedule"][w] for w in range(len(waits))]


def test_two_workers_interleave_as_their_timeouts_would():
    # Worker 0 waits until 5, then 5 again (a zero wait), then 9; worker 1 until 5, then 7.
    # At t=5 the events run in the order they were scheduled: worker 0's first (it started first).
    waits = [[5.0, 5.0, 9.0], [5.0, 7.0]]
    log, ends, events, schedule = run(waits, driven=True)
    assert log == [(5.0, 0, 0), (5.0, 1, 0), (5.0, 0, 1), (7.0, 1, "end"), (9.0, 0, "end")]
    assert ends == {0: (9.0, "done 0"), 1: (7.0, "done 1")}
    assert schedule == [9.0, 7.0]
    assert (log, ends, events, schedule) == run(waits, driven=False)
    assert (log, ends, events, schedule) == run(waits, driven=False, queued=True)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.integers(0, 6), min_size=1, max_size=6), min_size=1, max_size=4))
def test_drive_matches_the_process_step_for_step(gaps):
    # Absolute times that never go back, many of them equal: ties are where an order could differ.
    waits = [[float(sum(g[:k + 1])) for k in range(len(g))] for g in gaps]
    queued = run(waits, driven=False, queued=True)
    assert run(waits, driven=True) == queued
    assert run(waits, driven=False) == queued


def test_a_wait_that_ends_before_every_queued_event_is_passed_but_a_tie_is_not():
    # Worker 1 waits until 5. Worker 0, resumed at 1 from a wait of its own, waits until 2 and
    # then 5: the first ends before worker 1's queued 5, so it is passed without the queue; the
    # second ties with it and is queued behind it (SimPy runs ties in the order scheduled).
    sim = Simulation(load_machine("xeon-e7-4860v2"), 2)
    log = []

    def first():
        yield sim.until(1.0)
        passed = sim.until(2.0)
        log.append(("0 passes 2", passed is PASSED, sim.env.now))
        yield passed
        tied = sim.until(5.0)
        log.append(("0 queues 5", tied is PASSED, sim.env.now))
        yield tied
        log.append(("0 at", sim.env.now))

    def second():
        yield sim.until(5.0)
        log.append(("1 at", sim.env.now))

    sim.env.process(second())
    sim.env.process(first())
    sim.env.run()
    assert log == [("0 passes 2", True, 2.0), ("0 queues 5", False, 2.0), ("1 at", 5.0), ("0 at", 5.0)]
    # Two starts, four waits (1, 2, 5 and 5) and two ends: the passed wait is numbered like the others.
    assert event_count(sim.env) == 8


def test_a_kept_chunk_is_a_40_byte_record_and_the_table_keeps_its_types():
    assert CHUNK_DTYPE.itemsize == 40
    log = ChunkLog([4, 3], keep=True)
    for record in [(0, 0, 0, 2, 1.5, 3.0), (1, 1, 0, 3, 2.0, 9.25), (2, 0, 2, 4, 1.0, 2.0)]:
        log.append(record)
    log.finish()
    table = log.table()
    assert [str(t) for t in table.dtypes] == ["int64"] * 4 + ["float64"] * 2
    assert table.to_numpy().tolist() == [[0, 0, 0, 2, 1.5, 3.0], [1, 1, 0, 3, 2.0, 9.25], [2, 0, 2, 4, 1.0, 2.0]]
    assert len(log) == 3


@pytest.mark.parametrize("machine, threads", [("haswell-e5-2695v3", 4), ("cell-qs22", 3)])
def test_every_wait_event_of_every_scheduler_has_at_most_one_waiter(monkeypatch, machine, threads):
    # Passing a wait is exact only if the Wait that resumed the worker had no other callback.
    popped = []
    step = simpy.Environment.step

    def checked_step(env):
        event = env.heap[0][3] if env.heap else None
        if isinstance(event, Wait):
            popped.append(len(event.callbacks))
        step(env)

    monkeypatch.setattr(simpy.Environment, "step", checked_step)
    monkeypatch.setattr(memory, "speedups", None)   # SimPy's own loop, whose step is checked (the compiled one pops alike)
    for name in sorted(REGISTRY):
        simulate(machine, name, "exp-inc:n=400", threads, seed=1, repeat=2)
    assert popped and max(popped) == 1
