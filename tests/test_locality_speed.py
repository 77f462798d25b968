"""The data model's ways of working a chunk out give the same results to the bit.

``DataState.chunk`` takes chunks of up to ``locality.SCALAR_ITERATIONS`` iterations one
iteration at a time in plain floats (``_few``, or its compiled copy ``simsched._locality`` where
it is built), larger ones with NumPy over all their iterations. These tests replay the same
chunks with every chunk on one path, then on another (the limit set to 0, then beyond any chunk,
with and without the compiled copy), on machines that exercise every branch of the model
(two and four sockets, shared levels with and without a bandwidth share, no shared level,
stride misses by array size, jitter, a measured loaded-latency curve, socket links), and require
the same times, counters, block states and readers; then whole runs through the CLI.
"""

from __future__ import annotations

import copy
import json
import tomllib
from contextlib import contextmanager

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simsched import Machine, footprint, load_machine, locality
from simsched.locality import scalar_iterations
from simsched.cli import main
from simsched.contention import Readers
from simsched.footprint import Footprint, Gather
from simsched.locality import DataState
from simsched.small_chunks import _sum
from simsched.loop import Loop
from simsched.machine import builtin_machine_bytes
from simsched.workloads import draw_loops, get_workload
from tests.conftest import run_with_a_stale_extension

NUMPY, PER_ITERATION = 0, 10**9   # SCALAR_ITERATIONS that put every chunk on one path
COMPILED = locality.compiled
needs_compiled = pytest.mark.skipif(COMPILED is None, reason="simsched._locality is not built")


@contextmanager
def python_only():
    """Within it, data states run the Python per-iteration path and readers (the reference)."""
    kept, locality.compiled = locality.compiled, None
    try:
        yield
    finally:
        locality.compiled = kept


def _haswell_data() -> dict:
    return tomllib.loads(builtin_machine_bytes("haswell-e5-2695v3").decode())


def _strided() -> Machine:
    """Haswell with misses in flight for a stride that grow with the array (interpolated per block size)."""
    data = _haswell_data()
    data["name"] = "haswell-stride-misses"
    data["cache"]["l1"]["stride_misses"] = [[1, 4], [16, 7], [256, 10]]
    return Machine.from_dict(data, "test")


def _no_shared_level() -> Machine:
    """Haswell without its L3: another core's line comes back from memory."""
    data = _haswell_data()
    data["name"] = "haswell-no-l3"
    del data["cache"]["l3"]
    return Machine.from_dict(data, "test")


def _measured_random_reads() -> Machine:
    """Haswell whose levels and DRAM give what an independent random read costs, as a calibration writes."""
    data = _haswell_data()
    data["name"] = "haswell-random-reads"
    for level, ns in (("l1", 0.7), ("l2", 1.9), ("l3", 4.1)):
        data["cache"][level]["random_read_ns"] = ns
    data["dram"]["random_read_ns"] = 31.0
    return Machine.from_dict(data, "test")


MACHINES = {
    "haswell": lambda: load_machine("haswell-e5-2695v3"),
    "xeon-e5-4620 (4 sockets, jitter)": lambda: load_machine("xeon-e5-4620"),
    "xeon-e7 with links": lambda: load_machine("xeon-e7-4860v2[dram.link_bandwidth_gbs=10]"),
    "haswell with a loaded-latency curve":
        lambda: load_machine("haswell-e5-2695v3[dram.loaded_latency_ns=[[0,80],[20,100],[50,200]]]"),
    "haswell without queueing": lambda: load_machine('haswell-e5-2695v3[dram.queueing="none"]'),
    "stride misses": _strided,
    "no shared level": _no_shared_level,
    "haswell with gathers added": lambda: load_machine('haswell-e5-2695v3[dram.gathers="added"]'),
    "haswell with measured random reads": lambda: _measured_random_reads(),
    "xeon-e5-4620 with its bandwidth conserved": lambda: load_machine('xeon-e5-4620[dram.bandwidth_share="conserved"]'),
}
_BUILT: dict[str, Machine] = {}


def machine(name: str) -> Machine:
    if name not in _BUILT:
        _BUILT[name] = MACHINES[name]()
    return _BUILT[name]




def replay(m: Machine, loops: list[Loop], plan, limit: int, threads: int | None = None, compiled: bool = False):
    """Run ``plan`` ((loop, lo, hi, worker, start), ...) through a fresh DataState with chunks of up to
    ``limit`` iterations on the per-iteration path (``compiled``: its compiled copy, where built); everything
    the state holds afterwards, and each chunk's time."""
    threads = threads or m.cores
    if compiled:
        state = DataState(m, m.placement(threads), loops, np.random.default_rng(7))
        assert state.small is not None
    else:
        with python_only():
            state = DataState(m, m.placement(threads), loops, np.random.default_rng(7))
    with scalar_iterations(limit):
        # Each chunk's work, under which its gathers run: a share of its compute, so some outlast it.
        times = [state.chunk(worker, loops[k].data, lo, hi, start,
                             work=0.25 * float(loops[k].prefix[hi] - loops[k].prefix[lo]))
                 for k, lo, hi, worker, start in plan]
    return {
        "times": times,
        "counters": dict(state.counters),
        "blocks": {name: (blocks.holder.tolist(), blocks.stamp.tolist(), blocks.home.tolist())
                   for name, blocks in state.blocks.items()},
        "through": copy.deepcopy(state.through),
        "calendars": [(calendar.times, calendar.committed) for calendar in state.calendars],
        "readers": {key: [r.spans for r in group] for key, group in state.readers.items()},
    }


def random_plan(loops: list[Loop], threads: int, rng: np.random.Generator, chunks: int, largest: int = 48):
    """Chunks over the loops in order, of 1 to ``largest`` iterations (a few bigger), to workers in turn
    as they free up, starting a little apart so that their readers overlap."""
    plan, start = [], 0.0
    for k, loop in enumerate(loops):
        lo = 0
        while lo < loop.n and len(plan) < chunks * (k + 1):
            size = int(rng.integers(1, largest + 1)) if rng.random() < 0.9 else int(rng.integers(40, 400))
            hi = min(lo + size, loop.n)
            plan.append((k, lo, hi, int(rng.integers(threads)), start))
            start += float(rng.exponential(300.0))
            lo = hi
    return plan


def assert_same(a: dict, b: dict) -> None:
    assert a["times"] == b["times"]
    assert a["counters"] == b["counters"]
    assert a["blocks"] == b["blocks"]
    assert a["through"] == b["through"]
    assert a["readers"] == b["readers"]
    assert a["calendars"] == b["calendars"]


APPS = ["spmv:matrix=lognormal,iters=2", "bfs:graph=scale-free,n=1500,gamma=2.3,source=0",
        "kmeans:points=600,clusters=8,iters=2,placement=interleave",
        "spmv:matrix=banded,iters=2,placement=master",
        # Arrays of 0.1 to 60 KiB, twice over: blocks partly left in a cache, so that sums of fractions of
        # lines are rounded, and differ with the order of their terms.
        "arrays:n=300,bytes=30000,balance=unbalanced,pattern=random"]


@pytest.mark.parametrize("name", list(MACHINES))
@pytest.mark.parametrize("app", APPS)
def test_application_chunks_cost_the_same_on_both_paths(name, app):
    m = machine(name)
    loops = draw_loops(get_workload(app), np.random.default_rng(0))
    loops = loops if len(loops) > 1 else loops * 2   # a loop again over the data it left in the caches
    plan = random_plan(loops, m.cores, np.random.default_rng(len(name) + len(app)), chunks=60)
    numpy_path = replay(m, loops, plan, NUMPY)
    per_iteration = replay(m, loops, plan, PER_ITERATION)
    assert_same(numpy_path, per_iteration)
    assert sum(numpy_path["counters"].values()) > 0 and min(numpy_path["times"]) > 0
    if COMPILED is not None:
        assert_same(per_iteration, replay(m, loops, plan, PER_ITERATION, compiled=True))


@settings(max_examples=40, deadline=None)
@given(name=st.sampled_from(list(MACHINES)), pattern=st.sampled_from(footprint.PATTERNS),
       placement=st.sampled_from(footprint.PLACEMENTS), n=st.integers(1, 120),
       sizes=st.lists(st.integers(0, 40_000), min_size=1, max_size=7), gather=st.booleans(),
       seed=st.integers(0, 2**32 - 1), threads=st.integers(1, 8))
def test_random_chunks_cost_the_same_on_both_paths(name, pattern, placement, n, sizes, gather, seed, threads):
    m = machine(name)
    rng = np.random.default_rng(seed)
    nbytes = np.array(sizes)[rng.integers(len(sizes), size=n)] // 8 * 8   # blocks of 0 bytes among them
    reads = Gather(rng.integers(0, 30, size=n), int(rng.integers(8, 10**7)), 8, "x") if gather else None
    shared = Footprint(nbytes, pattern, placement, "a", gather=reads)
    other = Footprint(nbytes[::-1].copy(), pattern, placement, "b")
    # The same data twice (the second loop finds the first one's blocks in some core's caches), then other
    # data.
    loops = [Loop(np.zeros(n), data=shared), Loop(np.zeros(n), data=shared), Loop(np.zeros(n), data=other)]
    threads = min(threads, m.cores)
    plan = random_plan(loops, threads, rng, chunks=40, largest=int(rng.integers(1, 40)))
    plan.insert(len(plan) // 2, (0, n // 2, n // 2, 0, plan[len(plan) // 2][4]))   # an empty chunk too
    per_iteration = replay(m, loops, plan, PER_ITERATION, threads)
    assert_same(replay(m, loops, plan, NUMPY, threads), per_iteration)
    if COMPILED is not None:
        assert_same(per_iteration, replay(m, loops, plan, PER_ITERATION, threads, compiled=True))


def test_small_chunks_take_the_per_iteration_path(monkeypatch):
    """The limit routes chunks: up to SCALAR_ITERATIONS iterations per iteration, larger ones with NumPy."""
    m = machine("haswell")
    loops = draw_loops(get_workload("spmv:matrix=uniform,iters=1"), np.random.default_rng(0))
    with python_only():
        state = DataState(m, m.placement(28), loops, None)
    taken = []
    few = DataState._few
    monkeypatch.setattr(DataState, "_few",
                        lambda self, *args: taken.append(args[3] - args[2]) or few(self, *args))
    limit = locality.SCALAR_ITERATIONS
    for lo, hi in ((0, 1), (1, 1 + limit), (1 + limit, 2 + 2 * limit)):
        state.chunk(0, loops[0].data, lo, hi, 0.0)
    assert taken == [1, limit]


@needs_compiled
def test_small_chunks_take_the_compiled_path_where_it_is_built(monkeypatch):
    """Compiled, chunks of up to COMPILED_ITERATIONS iterations take the per-iteration path."""
    monkeypatch.setattr(locality, "COMPILED_ITERATIONS", 8)
    m = machine("haswell")
    loops = draw_loops(get_workload("spmv:matrix=uniform,iters=1"), np.random.default_rng(0))
    state = DataState(m, m.placement(28), loops, None)
    taken = []

    class Recording:
        def __init__(self, small):
            self.small = small

        def run(self, state, worker, fp, lo, hi, *rest):
            taken.append(hi - lo)
            return self.small.run(state, worker, fp, lo, hi, *rest)

    state.small = Recording(state.small)
    for lo, hi in ((0, 1), (1, 9), (9, 18)):
        state.chunk(0, loops[0].data, lo, hi, 0.0)
    assert taken == [1, 8]
    assert isinstance(state.readers["dram"][0], COMPILED.Readers)


@needs_compiled
@pytest.mark.parametrize("name", ["haswell", "xeon-e5-4620 (4 sockets, jitter)", "haswell with gathers added"])
def test_large_chunks_cost_the_same_compiled_as_with_numpy(name):
    # Chunks of thousands of iterations (sums of many blocks of NumPy's pairwise order) over blocks of 0 to 3 KB
    # with a gather, twice over the same data.
    m = machine(name)
    rng = np.random.default_rng(3)
    n = 40_000
    reads = Gather(rng.integers(0, 20, size=n), 5_000_000, 8, "x")
    fp = Footprint(rng.integers(0, 3000, size=n) // 8 * 8, "stride", "first-touch", "a", gather=reads)
    loops = [Loop(np.zeros(n), data=fp), Loop(np.zeros(n), data=fp)]
    plan, start = [], 0.0
    for k in range(2):
        lo = 0
        while lo < n:
            hi = min(lo + int(rng.integers(1_000, 20_000)), n)
            plan.append((k, lo, hi, int(rng.integers(m.cores)), start))
            start += 5e4
            lo = hi
    assert_same(replay(m, loops, plan, NUMPY), replay(m, loops, plan, PER_ITERATION, compiled=True))


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.floats(0, 1e12, allow_nan=False) | st.integers(0, 10**6).map(float), max_size=300))
def test_plain_sums_add_as_numpy_adds(values):
    """``_sum`` of a list is NumPy's sum of the array of it, to the bit (its pairwise order, not Python's)."""
    assert _sum(list(values)) == float(np.sum(np.array(values, dtype=float)))


@needs_compiled
@settings(max_examples=300, deadline=None)
@given(in_flight=st.floats(0, 200), latency=st.floats(1, 500), fraction=st.floats(0.001, 1))
def test_the_compiled_queue_latency_rounds_as_pythons(in_flight, latency, fraction):
    from simsched.loaded import closed_latency
    service = fraction * latency   # a line is never served slower than it comes back (queue_wait)
    assert COMPILED.closed_latency(in_flight, latency, service) == closed_latency(in_flight, latency, service)


@needs_compiled
def test_the_compiled_queue_latency_squares_with_the_library_pow():
    # Here the library's pow and x * x square differently, and the latency differs in its last bit.
    from simsched.loaded import closed_latency
    case = (63.56817394911564, 293.54704201415905, 9.938861797635592)
    assert COMPILED.closed_latency(*case) == closed_latency(*case)


@needs_compiled
def test_a_data_state_with_the_compiled_path_is_freed_with_its_run():
    import gc
    import weakref
    m = machine("haswell")
    loops = draw_loops(get_workload("spmv:matrix=uniform,iters=1"), np.random.default_rng(0))
    state = DataState(m, m.placement(28), loops, None)
    state.chunk(0, loops[0].data, 0, 4, 0.0)
    gone = weakref.ref(state)
    del state
    gc.collect()
    assert gone() is None


READERS = [Readers] + ([] if COMPILED is None else [COMPILED.Readers])


def _forgetting(steps, kind) -> None:
    """Add spans ((start, length)) and forget at times (a float: how far the clock moves), as ``steps`` say;
    the readers must hold exactly the spans that have not ended, in the order they came."""
    readers, kept, now = kind(), [], 0.0
    for step in steps:
        if isinstance(step, tuple):
            start, length = step
            readers.add(now + start, now + start + length, 1.0, 2.0)
            kept.append((now + start, now + start + length, 1.0, 2.0))
        else:
            now += step
            readers.forget(now)
            kept = [span for span in kept if span[1] > now]
        assert readers.spans == kept
        assert readers.count(now) == sum(1 for span in kept if span[0] <= now < span[1])
        assert readers.load(now) == (sum(1.0 for span in kept if span[0] <= now < span[1]),
                                     sum(2.0 for span in kept if span[0] <= now < span[1]))


@pytest.mark.parametrize("kind", READERS)
def test_readers_forget_exactly_those_that_ended(kind):
    # Two left after a forget, the sooner one ending before the next forget: only it goes.
    _forgetting([(0.0, 5.0), (0.0, 10.0), (0.0, 7.0), 6.0, 2.0, (1.0, 0.5), 1.4, 10.0], kind)


@settings(max_examples=100, deadline=None)
@given(steps=st.lists(st.tuples(st.floats(0, 50), st.floats(0, 50)) | st.floats(0, 30), max_size=30),
       kind=st.sampled_from(READERS))
def test_readers_forget_exactly_those_that_ended_whatever_the_order(steps, kind):
    _forgetting(steps, kind)


def _run_json(capsys, *args: str) -> dict:
    assert main(["run", *args, "--json", "--no-chunk-table"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("args", [
    # One-iteration chunks over the same points loop after loop (each finds what the last one left).
    ("--machine", "haswell-e5-2695v3", "--scheduler", "omp-dynamic:chunk=1,runtime=gnu", "--threads", "28",
     "--workload", "kmeans:points=600,clusters=8,iters=3"),
    # iCh's chunks, from dozens of rows down to one: both paths in one run.
    ("--machine", "xeon-e5-4620", "--scheduler", "ich:eps=0.25", "--threads", "32",
     "--workload", "spmv:matrix=powerlaw,iters=3", "--seed", "3"),
    # Chunks of 12 iterations (sums of more than 8 terms) over arrays of 0.1 to 60 KiB, twice over.
    ("--machine", "xeon-e5-4620", "--scheduler", "omp-dynamic:chunk=12", "--threads", "32",
     "--workload", "arrays:n=3000,bytes=30000,balance=unbalanced,pattern=random", "--repeat", "2"),
])
def test_a_whole_run_is_the_same_whichever_path_its_chunks_take(capsys, args):
    shipped = _run_json(capsys, *args)
    with scalar_iterations(NUMPY):
        numpy_only = _run_json(capsys, *args)
    with python_only():
        python_only_run = _run_json(capsys, *args)
    assert shipped == numpy_only == python_only_run
    assert shipped["counters"]["local_dram"] + shipped["counters"]["remote_dram"] > 0


def test_a_compiled_data_model_built_from_an_older_source_gives_way_to_the_python_path_with_a_warning():
    first, second = run_with_a_stale_extension("_locality", "locality", "compiled", "spmv:matrix=uniform,iters=1")
    assert first.startswith("True|simsched's compiled data model is out of date")
    assert second == "True"
