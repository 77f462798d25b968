"""Modeled cache lines: transfer costs, FIFO serialization of one line, and spinners' notification."""

import os

import numpy as np
import pytest
import simpy

from simsched.memory import Memory


def make_memory(cores=4, lat=100.0, atomic=10.0, store=1.0, serve=0.0, fraction=0.5, directory=False,
                reservations=False):
    env = simpy.Environment()
    latency = [[0.0 if a == b else lat for b in range(cores)] for a in range(cores)]
    costs = {"atomic": atomic, "store": store}
    memory = Memory(env, latency, costs, serve, fraction, directory, reservations)
    return env, memory, memory


def test_atomic_on_own_line_costs_only_the_operation():
    env, mem, _ = make_memory()
    line = mem.line("x", 0, home=2)
    old, done = mem.fetch_add(line, 2, 5)
    assert (old, done, line.value) == (0, 10.0, 5)


def test_atomic_from_another_core_pays_one_transfer():
    env, mem, counters = make_memory()
    line = mem.line("x", 7, home=0)
    old, done = mem.fetch_add(line, 3, 1)
    # transfer = 0.5 x 100 ns one-way, then the 10 ns atomic
    assert (old, done) == (7, 60.0)
    assert line.holder == 3 and counters.transfers == 1


def test_contended_atomics_serialize_first_come_first_served():
    env, mem, _ = make_memory()
    line = mem.line("counter", 0, home=0)
    finished = {}

    def worker(w):
        old, done = mem.fetch_add(line, w, 1)
        yield env.timeout(done - env.now)
        finished[w] = (old, env.now)

    for w in range(4):
        env.process(worker(w))
    env.run()
    # worker 0 holds the line: 10 ns; each later one waits its turn, then 50 + 10 ns.
    assert finished == {0: (0, 10.0), 1: (1, 70.0), 2: (2, 130.0), 3: (3, 190.0)}


def test_contention_cost_grows_linearly_with_contenders():
    ends = []
    for n in (2, 4, 8):
        env, mem, _ = make_memory(cores=8)
        line = mem.line("counter", 0, home=0)
        last = max(mem.fetch_add(line, w, 1)[1] for w in range(n))
        ends.append(last)
    assert ends == [70.0, 190.0, 430.0]


def test_contended_reservation_atomics_each_lose_a_reservation_and_retry_a_latency_after():
    env, mem, _ = make_memory(reservations=True)
    line = mem.line("counter", 0, home=0)
    ends = [mem.fetch_add(line, w, 1)[1] for w in range(4)]
    # Worker 0 holds the line: 10 ns. Each later one reserved the line while the previous write was pending:
    # it sees that write 100 ns (one way) after it lands, then its own atomic, 10 ns. Queued: 70, 130, 190.
    assert ends == [10.0, 120.0, 230.0, 340.0]
    assert line.value == 4 and line.holder == 3
    assert (mem.lost_reservations, mem.transfers, mem.atomics) == (3, 6, 4)


def test_reservation_atomics_lose_nothing_without_a_pending_write_of_another_core():
    env, mem, _ = make_memory(reservations=True)
    line = mem.line("x", 0, home=0)
    _, first = mem.fetch_add(line, 0, 1)
    _, own = mem.fetch_add(line, 0, 1, at=0.0)      # behind its own pending write: no reservation of another lost
    assert (first, own) == (10.0, 20.0)
    _, later = mem.fetch_add(line, 1, 1, at=25.0)   # the line is free again: one transfer, as a queued atomic
    assert later == 25.0 + 50.0 + 10.0
    assert mem.lost_reservations == 0 and mem.transfers == 1
    # A lock held until its unlock store: the contender retries once it sees the unlock.
    lock = mem.line("lock", 0, home=1)
    _, held = mem.exchange(lock, 1, 1, at=100.0)
    unlocked = mem.store(lock, 1, 0, at=held + 40.0)
    old, got = mem.exchange(lock, 2, 1, at=110.0)
    assert (old, got) == (0, (unlocked - 1.0) + 100.0 + 10.0) and mem.lost_reservations == 1


def test_reservation_atomics_slow_a_contended_claim_loop_on_the_cell():
    from simsched.engine import simulate

    runs = {atomics: simulate(f'cell-qs22[coherence.atomics="{atomics}"]', "omp-dynamic:chunk=1",
                              "uforall:n=4000", 16, keep_chunks=False)
            for atomics in ("locked", "reservation")}
    assert "lost_reservations" not in runs["locked"].counters
    lost = runs["reservation"].counters["lost_reservations"]
    # Sixteen SPEs claiming one counter: nearly every claim finds another's write pending.
    assert 0.9 * 4000 < lost <= 4000 + 16
    assert runs["reservation"].makespan_ns > 1.3 * runs["locked"].makespan_ns
    assert simulate("cell-qs22", "omp-dynamic:chunk=1", "uforall:n=4000", 16).counters["lost_reservations"] == lost


def test_spinner_sees_a_store_one_way_latency_later():
    env, mem, _ = make_memory()
    flag = mem.line("flag", 0, home=1)
    seen = {}

    def spinner():
        value = yield mem.spin_until(flag, 1, lambda v: v == 1)
        seen["at"], seen["value"] = env.now, value

    def writer():
        yield env.timeout(40)
        done = mem.store(flag, 0, 1)
        assert done == 41.0  # the writer only pays the store into its buffer

    env.process(spinner())
    env.process(writer())
    env.run()
    assert seen == {"at": 140.0, "value": 1}


def when_spinners_see_a_store(**memory):
    """Workers 1-3 spin on a flag that worker 0 sets at t=10: when each sees it."""
    env, mem, _ = make_memory(cores=4, **memory)
    flag = mem.line("flag", 0, home=0)
    seen = {}

    def spinner(w):
        yield mem.spin_until(flag, w, lambda v: v >= 1)
        seen[w] = env.now

    def writer():
        yield env.timeout(10)
        mem.store(flag, 0, 1)

    for w in (1, 2, 3):
        env.process(spinner(w))
    env.process(writer())
    env.run()
    return seen


def test_spinners_are_served_one_after_another():
    assert when_spinners_see_a_store(serve=7.0) == {1: 110.0, 2: 117.0, 3: 124.0}


def test_spin_on_a_value_already_there_costs_a_read_miss():
    env, mem, _ = make_memory()
    flag = mem.line("flag", 0, home=0)
    mem.store(flag, 0, 3)
    seen = {}

    def spinner():
        # Written at t=0: seen no sooner than the one-way latency, 100 ns.
        yield mem.spin_until(flag, 2, lambda v: v >= 3)
        seen["first"] = env.now
        yield mem.spin_until(flag, 2, lambda v: v >= 3)  # now cached: free
        seen["second"] = env.now
        yield env.timeout(500)
        mem.store(flag, 0, 4)
        yield env.timeout(500)
        # Written long ago: a read miss costs one transfer, 50 ns.
        yield mem.spin_until(flag, 2, lambda v: v >= 4)
        seen["late"] = env.now

    env.process(spinner())
    env.run()
    assert seen == {"first": 100.0, "second": 100.0, "late": 1150.0}


def test_failed_cas_reports_the_value_found():
    env, mem, counters = make_memory()
    line = mem.line("next", 4, home=0)
    ok, found, done = mem.cas(line, 0, 3, 9)
    assert (ok, found, line.value) == (False, 4, 4)
    ok, found, done2 = mem.cas(line, 1, 4, 9)
    assert (ok, found, line.value) == (True, 4, 9)
    assert done2 == done + 50 + 10
    assert counters.cas_failures == 1


def test_a_directory_serves_spinners_one_transfer_after_another():
    # Each re-read waits for the previous one's transfer (50 ns) at the directory.
    assert when_spinners_see_a_store(directory=True) == {1: 110.0, 2: 160.0, 3: 210.0}


INLINE_CASES = [
    ("xeon-e7-4860v2", "omp-dynamic:chunk=3", "exp-inc:n=3000", 48),
    ("haswell-e5-2695v3", "tss", "linear:n=2000,first_ns=0,last_ns=2000", 5),
    ("haswell-e5-2695v3", "binlpt", "exp-inc:n=3000", 12),
    ("haswell-e5-2695v3", "stealing:chunk=2", "exp-inc:n=3000", 28),
    ("haswell-e5-2695v3", "ich", "exp-dec:n=3000", 28),
    ("xeon-e7-4860v2[noise.rate_hz=1000,noise.duration_us=10,noise.late_us=20]", "ich", "exp-dec:n=3000", 8),
    ("xeon-e5-4620", "stealing", "arrays:n=512,bytes=4096", 8),
    ("xeon-e5-4620", "omp-dynamic", "arrays:n=512,bytes=4096,balance=unbalanced", 8),
    ("cell-qs22", "omp-dynamic:chunk=2", "exp-inc:n=3000", 16),   # reservation atomics: the claim calls the method
    ("cell-qs22", "stealing", "exp-inc:n=3000", 16),
    ("cell-qs22", "ich", "exp-dec:n=3000", 16),
    ("haswell-e5-2695v3", "ich:mu_every=3", "exp-dec:n=3000", 28),   # reads of the counters every third chunk
    ("haswell-e5-2695v3", "stealing:chunk=2,give_up=5", "exp-inc:n=3000", 28),   # random victims only
    ("haswell-e5-2695v3", "ich:give_up=3", "exp-dec:n=3000", 28),
    ("uniform", "ich", "exp-dec:n=3000", 16),   # no caches described: the counters are read one after another
    # Chunks with data, timed by the compiled data path and the claim or steal loop's call of chunk_time.
    ("haswell-e5-2695v3", "ich:eps=0.5", "spmv:matrix=powerlaw,iters=2", 28),
    ("haswell-e5-2695v3", "omp-dynamic:chunk=1,runtime=gnu", "bfs:graph=uniform,n=800,degree=8,source=0", 28),
]


def outcome(machine, scheduler, workload, threads):
    """Everything a run gives that the ways of running it must agree on, its timeline included."""
    from simsched.engine import simulate

    r = simulate(machine, scheduler, workload, threads, seed=5, repeat=2, timeline=True)
    return (r.makespan_ns, r.events, sorted(r.counters.items()), r.loop_ns,
            {state: list(times) for state, times in r.state_ns.items()}, r.chunks.values.tolist(),
            r.segments.values.tolist())


@pytest.mark.parametrize("machine, scheduler, workload, threads", INLINE_CASES)
def test_hot_loops_issue_their_line_operations_as_memory_does(monkeypatch, machine, scheduler, workload, threads):
    from simsched import locality, memory

    def run():
        return outcome(machine, scheduler, workload, threads)

    inline = run()
    if locality.compiled is not None:   # the data model's compiled path, then its Python one
        monkeypatch.setattr(locality, "compiled", None)
        assert run() == inline
    monkeypatch.setattr(memory, "INLINE", False)   # the Python loops calling every method (in the compiled event loop)
    assert run() == inline
    if memory.speedups is not None:     # and in SimPy's own loop
        monkeypatch.setattr(memory, "speedups", None)
        assert run() == inline
        monkeypatch.setattr(memory, "INLINE", True)   # the inline Python loops, in SimPy's loop
        assert run() == inline


def test_the_compiled_loops_are_built():
    # Where a C compiler is at hand (CI, a development install) the optional extension must build:
    # otherwise the comparison above would quietly test the Python loops against themselves.
    from simsched import locality, memory
    required = os.environ.get("SIMSCHED_REQUIRE_SPEEDUPS") or os.environ.get("CI")
    if locality.compiled is None and required:
        pytest.fail("simsched._locality did not build")
    if memory.speedups is None and required:
        pytest.fail("simsched._speedups did not build")
    if memory.speedups is None:
        pytest.skip("simsched._speedups is not built here")


def test_compiled_loops_refuse_what_is_not_a_line():
    from simsched import memory
    if memory.speedups is None:
        pytest.skip("simsched._speedups is not built here")
    with pytest.raises(TypeError):
        memory.speedups.claims(None, 0, 0, object(), [], 1.0, 1, 1, [], 1, np.zeros(2), 0.0, [], 1.0, list, 6,
                               None, print, print)


def test_a_policy_that_overrides_ichs_hooks_is_not_run_by_the_compiled_copy():
    from simsched.engine import Simulation
    from simsched.machine import load_machine
    from simsched.schedulers.ich import ICh
    from simsched.workloads import draw_loops, get_workload

    class Halving(ICh):
        def chunk_size(self, w, left):
            return max(1, left // (2 * self.d[w]))

    sim = Simulation(load_machine("haswell-e5-2695v3"), 4)
    sim.load(draw_loops(get_workload("exp-dec:n=100"), sim.rng))
    for policy, compiled in ((ICh(), True), (Halving(), False)):
        policy.setup(sim)
        policy.prepare(sim, 0)
        assert (policy.adaptive(sim, 0) is not None) is compiled


def test_a_cores_columns_are_its_column_of_the_tables_and_made_once():
    # An asymmetric table, so a row would not pass for a column.
    latency = [[0.0, 10.0, 20.0], [30.0, 0.0, 40.0], [50.0, 60.0, 0.0]]
    mem = Memory(simpy.Environment(), latency, {"atomic": 1.0, "store": 1.0}, 0.0, 0.25)
    assert mem.latencies_to(1) == [10.0, 0.0, 60.0] == [row[1] for row in mem.lat]
    assert mem.transfers_to(2) == [5.0, 10.0, 0.0] == [row[2] for row in mem.transfer]
    assert mem.transfers_to(2) is mem.transfers_to(2) and mem.latencies_to(2) is not mem.transfers_to(2)


# Every scheduler family, on each kind of latencies: the run that works each latency out from the topology
# (as a run of more than Memory.TABLE_CORES threads does) is the run with a table of every pair.
UNTABLED_CASES = INLINE_CASES + [
    ("cell-qs22", "lbs", "exp-inc:n=3000", 16),
    ("cell-qs22", "distrib", "exp-inc:n=3000", 16),
    ("scaled:base=epyc-7742-2s,sockets=1", "cilk", "exp-inc:n=3000", 40),
    ("scaled:base=epyc-7742-2s,sockets=1", "hybrid", "exp-inc:n=3000", 24),
    ("xeon-e5-4620", "fac2", "exp-dec:n=3000", 32),
    ("xeon-e5-4620", "fg-tree", "exp-dec:n=3000", 32),
    ("xeon-e7-4860v2", "static-steal", "exp-dec:n=3000", 48),
]


@pytest.mark.parametrize("machine, scheduler, workload, threads", UNTABLED_CASES)
def test_latencies_worked_out_when_asked_charge_what_the_table_charges(monkeypatch, machine, scheduler, workload,
                                                                        threads):
    from simsched import memory

    table = outcome(machine, scheduler, workload, threads)
    monkeypatch.setattr(memory.Memory, "TABLE_CORES", 0)
    assert outcome(machine, scheduler, workload, threads) == table
    if memory.speedups is not None:   # the Python columns, in SimPy's loop
        monkeypatch.setattr(memory, "speedups", None)
        assert outcome(machine, scheduler, workload, threads) == table
