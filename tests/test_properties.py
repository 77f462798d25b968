"""Property tests over every registered scheduler: exactly-once execution, bounds, determinism, accounting.

Every invariant here is computed from the Result's public fields (chunk table, state
times, makespan) and from the workload's costs, independently of the engine's own
exactly-once check.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import simsched
from simsched import ExecutionError, Simulation, builtin_machines, load_machine, simulate
from simsched.engine import Loop
from simsched.schedulers import REGISTRY
from simsched.schedulers.static import OmpStatic
from simsched.workloads import get_workload

# Every registered scheduler with its defaults, plus parameter variants that change the algorithm.
VARIANTS = [
    "omp-static:barrier=central",
    "omp-static:barrier=tree",
    "omp-static:barrier=dissemination",
    "omp-static:barrier=numa",
    "omp-static:chunk=3",
    "omp-static:reduction=tree-barrier",
    "omp-static:reduction=sequential",
    "fg-tree:reduction=merged",
    "fg-central:reduction=merged",
    "fg-tree-full:reduction=merged",
    "omp-dynamic:chunk=4",
    "omp-dynamic:barrier=central",
    "omp-guided:chunk=2",
    "lbs:split=guided",
    "lbs:split=adapt-g",
    "lbs:split=adapt-l",
    "lbs:ppt=3",
    "offload:ls_tasks=2,swap_block=1",
]
SCHEDULERS = sorted(REGISTRY) + VARIANTS

MACHINES = {name: load_machine(name) for name in builtin_machines()}

# Floats are compared with a relative tolerance (sums of many doubles in different orders)
# plus a tiny absolute one (all-zero workloads).
REL = 1e-9
ABS = 1e-6

FAST = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- strategies ----------------------------------------------------------------------------------------------

@st.composite
def machine_and_threads(draw):
    name = draw(st.sampled_from(sorted(MACHINES)))
    machine = MACHINES[name]
    threads = draw(st.integers(min_value=1, max_value=machine.cores))
    return machine, threads


cost_value = st.one_of(
    st.just(0.0),
    st.floats(min_value=0.0, max_value=1e5, allow_nan=False, allow_infinity=False),
)
cost_lists = st.lists(cost_value, min_size=1, max_size=60)

small_n = st.integers(min_value=1, max_value=120)
spec_workloads = st.one_of(
    st.builds(lambda n, lo, width: f"uniform:n={n},low_ns={lo},high_ns={lo + width}",
              small_n, st.integers(0, 5000), st.integers(0, 5000)),
    st.builds(lambda n, mean, std: f"normal:n={n},mean_ns={mean},std_ns={std}",
              small_n, st.integers(0, 5000), st.integers(0, 3000)),
    st.builds(lambda n, beta: f"exp-dec:n={n},beta={beta}", small_n, st.sampled_from([1e3, 1e5, 1e6, 1e7])),
    st.builds(lambda n: f"exp-inc:n={n}", small_n),
    st.builds(lambda n, last: f"linear:n={n},last_ns={last}", small_n, st.integers(0, 4000)),
    st.builds(lambda n, cost: f"uforall:n={n},cost_ns={cost}", small_n, st.integers(0, 4000)),
)
workloads = st.one_of(cost_lists, spec_workloads)
seeds = st.integers(min_value=0, max_value=2**32 - 1)


def costs_of(workload, seed: int) -> np.ndarray:
    """The iteration costs the run sees: the list itself, or the spec's draw from the run's seeded generator."""
    if isinstance(workload, str):
        return get_workload(workload).costs(np.random.default_rng(seed))
    return np.asarray(workload, dtype=float)


# -- independent checks --------------------------------------------------------------------------------------

def coverage_problems(chunks: pd.DataFrame, sizes: list[int]) -> list[str]:
    """Everything wrong with the chunk table, given the iteration count of each loop (empty when all is well).

    Each loop's iterations [0, n) must be covered by the chunks exactly once: no
    iteration missing, none twice, nothing outside the range, no loop we did not run.
    """
    problems = []
    extra = sorted(set(chunks["loop"].unique()) - set(range(len(sizes))))
    if extra:
        problems.append(f"chunks for loops that do not exist: {extra}")
    for loop, n in enumerate(sizes):
        rows = chunks[chunks["loop"] == loop]
        count = np.zeros(n, dtype=np.int64)
        for lo, hi in zip(rows["lo"].tolist(), rows["hi"].tolist()):
            if not (0 <= lo <= hi <= n):
                problems.append(f"loop {loop}: chunk [{lo}, {hi}) outside [0, {n})")
                continue
            count[lo:hi] += 1
        missing = np.flatnonzero(count == 0)
        twice = np.flatnonzero(count > 1)
        if missing.size:
            problems.append(f"loop {loop}: {missing.size} iteration(s) never ran, first {int(missing[0])}")
        if twice.size:
            problems.append(f"loop {loop}: {twice.size} iteration(s) ran more than once, first {int(twice[0])}")
    return problems


def test_coverage_checker_catches_gaps_overlaps_and_strays():
    """The checker used below must itself reject bad tables, or the properties would prove nothing."""
    def table(rows):
        return pd.DataFrame(rows, columns=["worker", "loop", "lo", "hi", "start", "end"])

    good = table([(0, 0, 0, 5, 0.0, 1.0), (1, 0, 5, 10, 0.0, 1.0)])
    assert coverage_problems(good, [10]) == []
    assert coverage_problems(table([(0, 0, 0, 4, 0, 1), (1, 0, 5, 10, 0, 1)]), [10])        # gap at 4
    assert coverage_problems(table([(0, 0, 0, 6, 0, 1), (1, 0, 5, 10, 0, 1)]), [10])        # 5 twice
    assert coverage_problems(table([(0, 0, 0, 11, 0, 1)]), [10])                            # past n
    assert coverage_problems(good, [10, 3])                                                 # loop 1 never ran
    assert coverage_problems(table([(0, 0, 0, 10, 0, 1), (0, 1, 0, 10, 0, 1)]), [10])       # stray loop 1


def worker_timeline_problems(chunks: pd.DataFrame) -> list[str]:
    """Chunks of one worker must not overlap in time: a worker runs one chunk at a time."""
    problems = []
    for worker, rows in chunks.groupby("worker"):
        rows = rows.sort_values(["start", "end"])
        starts = rows["start"].to_numpy()
        ends = rows["end"].to_numpy()
        overlap = np.flatnonzero(starts[1:] < ends[:-1] - ABS)
        if overlap.size:
            problems.append(f"worker {worker}: chunks overlap in time at start {starts[overlap[0] + 1]}")
    return problems


def check_run(result, costs: np.ndarray, threads: int, repeat: int) -> None:
    """Assert every invariant of one run (properties a, b, d and chunk-table sanity)."""
    n = costs.size
    total = float(math.fsum(costs))
    chunks = result.chunks

    # (a) every iteration of every loop ran exactly once, checked from the chunk table alone.
    assert list(chunks.columns[:6]) == ["worker", "loop", "lo", "hi", "start", "end"]
    problems = coverage_problems(chunks, [n] * repeat)
    assert not problems, problems
    assert chunks["worker"].between(0, threads - 1).all()

    # The sequential time is the sum of the costs (repeat times over), not something else.
    assert result.sequential_ns == pytest.approx(total * repeat, rel=REL, abs=ABS)
    assert result.threads == threads

    # (b) no schedule beats perfect division of the work: makespan >= sum(costs) / P.
    bound = total * repeat / threads
    assert result.makespan_ns >= bound * (1 - REL) - ABS, (result.makespan_ns, bound)

    # Chunks lie inside the run, take at least their sequential cost, and a worker runs one at a time.
    tol = REL * max(total, 1.0) + ABS
    assert (chunks["start"] >= -ABS).all()
    assert (chunks["end"] <= result.makespan_ns + tol).all()
    prefix = np.concatenate(([0.0], np.cumsum(costs)))
    work = prefix[chunks["hi"].to_numpy()] - prefix[chunks["lo"].to_numpy()]
    took = (chunks["end"] - chunks["start"]).to_numpy()
    assert np.all(took >= work - tol), "a chunk finished faster than its sequential cost"
    problems = worker_timeline_problems(chunks)
    assert not problems, problems

    # (d) each worker's time over all states adds up to the makespan.
    states = result.state_ns
    assert set(states) >= {"compute", "schedule", "sync", "idle"}
    per_worker = np.zeros(threads)
    for state, times in states.items():
        times = np.asarray(times, dtype=float)
        assert times.shape == (threads,), state
        assert np.all(times >= -ABS), f"negative time in state {state}"
        per_worker += times
    np.testing.assert_allclose(per_worker, result.makespan_ns, rtol=REL, atol=ABS)
    # Compute time is at least the work itself (cores are never faster than the sequential baseline).
    assert float(np.sum(states["compute"])) >= total * repeat * (1 - REL) - ABS


# -- the properties ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("scheduler", SCHEDULERS)
@FAST
@given(mt=machine_and_threads(), workload=workloads, seed=seeds)
def test_single_loop_invariants(scheduler, mt, workload, seed):
    machine, threads = mt
    result = simulate(machine, scheduler, workload, threads, seed=seed)
    check_run(result, costs_of(workload, seed), threads, repeat=1)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mt=machine_and_threads(), workload=workloads, seed=seeds)
def test_deterministic(scheduler, mt, workload, seed):
    """(c) The same inputs and seed give the same chunk table, makespan, state times and counters."""
    machine, threads = mt
    first = simulate(machine, scheduler, workload, threads, seed=seed)
    # A freshly loaded machine and a fresh scheduler object: no state may leak between runs.
    second = simulate(machine.name, scheduler, workload, threads, seed=seed)
    pd.testing.assert_frame_equal(first.chunks, second.chunks, check_exact=True)
    assert first.makespan_ns == second.makespan_ns
    assert first.sequential_ns == second.sequential_ns
    assert first.counters == second.counters
    assert first.events == second.events
    for state in first.state_ns:
        np.testing.assert_array_equal(first.state_ns[state], second.state_ns[state])


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mt=machine_and_threads(), workload=workloads, seed=seeds, other=seeds)
def test_a_run_that_draws_nothing_from_its_generator_is_the_same_for_every_seed(scheduler, mt, workload, seed,
                                                                                other):
    """What lets a sweep simulate such a point once for all its seeds: the seed reaches a run only as its generator."""
    machine, threads = mt
    first = simulate(machine, scheduler, workload, threads, seed=seed)
    drawn_costs = isinstance(workload, str) and not workload.startswith(("uforall:", "linear:"))
    if drawn_costs:
        assert not first.seed_independent
    if not first.seed_independent:
        return
    second = simulate(machine, scheduler, workload, threads, seed=other)
    assert second.seed_independent
    pd.testing.assert_frame_equal(first.chunks, second.chunks, check_exact=True)
    assert (first.makespan_ns, first.sequential_ns, first.counters, first.events) == \
        (second.makespan_ns, second.sequential_ns, second.counters, second.events)
    for state in first.state_ns:
        np.testing.assert_array_equal(first.state_ns[state], second.state_ns[state])


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mt=machine_and_threads(), workload=workloads, seed=seeds, repeat=st.integers(2, 3))
def test_repeat_covers_each_loop_once(scheduler, mt, workload, seed, repeat):
    """(e) With repeat=r the chunk table holds r loops, each covered exactly once, and all invariants hold."""
    machine, threads = mt
    result = simulate(machine, scheduler, workload, threads, seed=seed, repeat=repeat)
    assert sorted(result.chunks["loop"].unique().tolist()) == list(range(repeat))
    assert result.repeat == repeat
    assert len(result.loop_ns) == repeat
    check_run(result, costs_of(workload, seed), threads, repeat=repeat)


LOOP_TASK_SCHEDULERS = sorted(name for name, cls in REGISTRY.items() if cls.NESTED) + [
    "lbs:split=guided", "lbs:ppt=2", "offload:ls_tasks=2,swap_block=1"]


def test_loop_task_schedulers_are_the_lbs_family():
    assert sorted(name for name, cls in REGISTRY.items() if cls.NESTED) == [
        "adapt-g", "adapt-l", "cellss", "distrib", "lbs", "offload"]


@pytest.mark.parametrize("scheduler", LOOP_TASK_SCHEDULERS)
@FAST
@given(mt=machine_and_threads(), seed=seeds, n=st.integers(1, 12), step=st.integers(0, 5),
       inner_end=st.integers(1, 40), r_max=st.integers(1, 4), repeat=st.integers(1, 2))
def test_nested_loop_invariants(scheduler, mt, seed, n, step, inner_end, r_max, repeat):
    """Nested loops: every iteration of the outer loop and of every inner loop runs exactly once, within bounds."""
    machine, threads = mt
    spec = f"nested:n={n},step={step},inner_end={inner_end},r_max={r_max},unit_us=1,inner_us=0.5"
    result = simulate(machine, scheduler, spec, threads, seed=seed, repeat=repeat)
    outer = get_workload(spec).costs(np.random.default_rng(seed))
    inner_sizes = [inner_end - step * i for i in range(n) if inner_end - step * i > 0]
    # The program's loops come first, then the nested ones in order.
    sizes = [n] * repeat + inner_sizes * repeat
    problems = coverage_problems(result.chunks, sizes)
    assert not problems, problems
    total = (float(outer.sum()) + 500.0 * sum(inner_sizes)) * repeat
    assert result.sequential_ns == pytest.approx(total, rel=REL)
    assert result.makespan_ns >= total / threads * (1 - REL) - ABS
    assert not worker_timeline_problems(result.chunks)
    per_worker = sum(np.asarray(t, dtype=float) for t in result.state_ns.values())
    np.testing.assert_allclose(per_worker, result.makespan_ns, rtol=REL, atol=ABS)
    again = simulate(machine.name, scheduler, spec, threads, seed=seed, repeat=repeat)
    pd.testing.assert_frame_equal(result.chunks, again.chunks, check_exact=True)
    assert result.counters == again.counters


def test_nested_loops_need_a_loop_task_scheduler():
    with pytest.raises(simsched.SimschedError, match="cannot run nested loops"):
        simulate("cell-qs22", "omp-dynamic", "nested:n=4,inner_end=8", 4)


@settings(max_examples=10, deadline=None)
@given(seed=seeds, n=st.integers(1, 200))
def test_seeded_workload_depends_on_seed_only(seed, n):
    """The costs a spec workload draws come from the run's seed: same seed same table, and the sum matches."""
    spec = f"uniform:n={n},low_ns=10,high_ns=1000"
    a = simulate("haswell-e5-2695v3", "omp-dynamic:chunk=3", spec, 5, seed=seed)
    b = simulate("haswell-e5-2695v3", "omp-dynamic:chunk=3", spec, 5, seed=seed)
    pd.testing.assert_frame_equal(a.chunks, b.chunks, check_exact=True)
    assert a.sequential_ns == pytest.approx(float(costs_of(spec, seed).sum()), rel=REL)


def test_different_seeds_draw_different_costs():
    """Determinism must not come from ignoring the seed."""
    spec = "uniform:n=200,low_ns=10,high_ns=1000"
    a = simulate("haswell-e5-2695v3", "omp-guided", spec, 7, seed=1)
    b = simulate("haswell-e5-2695v3", "omp-guided", spec, 7, seed=2)
    assert a.sequential_ns != b.sequential_ns


# -- the engine's own exactly-once check ---------------------------------------------------------------------

class RunsEverythingEverywhere(OmpStatic):
    """Broken on purpose: every worker runs the whole loop, so each iteration runs P times."""

    name = "broken-double"
    LISTED = False  # a test's scheduler: not among those the registry lists

    def share(self, sim, w, index):
        loop = sim.loops[index]
        yield sim.until(sim.run_chunks(w, index, [(0, loop.n)], sim.env.now))


class SkipsTheLastIteration(OmpStatic):
    """Broken on purpose: only the master runs anything, and it forgets the last iteration."""

    name = "broken-gap"
    LISTED = False

    def share(self, sim, w, index):
        loop = sim.loops[index]
        ranges = [(0, loop.n - 1)] if w == 0 else []
        yield sim.until(sim.run_chunks(w, index, ranges, sim.env.now))


def test_engine_raises_when_an_iteration_runs_twice():
    with pytest.raises(ExecutionError, match=r"ran 2 times"):
        simulate("haswell-e5-2695v3", RunsEverythingEverywhere(), [100.0] * 10, 2)


def test_engine_raises_through_simulation_run():
    machine = load_machine("xeon-e5-4620")
    sim = Simulation(machine, 3, [Loop([50.0] * 7)], seed=0)
    with pytest.raises(ExecutionError):
        sim.run(RunsEverythingEverywhere())


def test_engine_raises_when_an_iteration_never_runs():
    with pytest.raises(ExecutionError, match=r"iteration 9 ran 0 times"):
        simulate("haswell-e5-2695v3", SkipsTheLastIteration(), [100.0] * 10, 2)


def test_execution_error_is_a_simsched_error():
    """The CLI reports SimschedError as one line; an invariant violation must be one too."""
    assert issubclass(ExecutionError, simsched.SimschedError)


def test_correct_subclass_passes_the_same_check():
    """The broken schedulers fail because of what they do, not because subclassing breaks the engine."""
    class Fine(OmpStatic):
        name = "fine"
        LISTED = False

    result = simulate("haswell-e5-2695v3", Fine(), [100.0] * 10, 2)
    assert coverage_problems(result.chunks, [10]) == []


def test_execution_error_names_the_scheduler():
    with pytest.raises(ExecutionError) as info:
        simulate("haswell-e5-2695v3", RunsEverythingEverywhere(), [100.0] * 10, 2)
    message = str(info.value)
    assert "broken-double" in message, message
