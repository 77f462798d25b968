"""Runs without a chunk table: the same figures, the same exactly-once check, and a guard for tables too big to keep."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simsched
from simsched import engine
from simsched.chunklog import BLOCK, Coverage
from simsched.errors import ExecutionError, SimschedError
from test_properties import RunsEverythingEverywhere, SkipsTheLastIteration

CASES = [("xeon-e7-4860v2", "omp-dynamic:chunk=3", "exp-dec:n=5000", 48),
         ("xeon-e7-4860v2", "stealing:chunk=2", "uniform:n=3000", 24),
         ("xeon-e7-4860v2", "cilk", "uniform:n=2000", 16),
         ("haswell-e5-2695v3", "omp-static:chunk=5", "linear:n=4000", 28),
         ("cell-qs22", "distrib", "nested:n=16,inner_end=64", 16)]


@pytest.mark.parametrize("machine, scheduler, workload, threads", CASES)
def test_a_run_without_the_table_reports_the_same_figures(machine, scheduler, workload, threads):
    kept = simsched.simulate(machine, scheduler, workload, threads, seed=4, repeat=2)
    bare = simsched.simulate(machine, scheduler, workload, threads, seed=4, repeat=2, keep_chunks=False)
    assert bare.to_dict() == kept.to_dict()
    assert bare.chunk_count == len(kept.chunks) > 0
    with pytest.raises(SimschedError, match="kept no chunk table"):
        bare.chunks


def test_the_table_is_built_once_on_first_use():
    result = simsched.simulate("xeon-e7-4860v2", "omp-dynamic", "uniform:n=500", 8)
    assert result.chunks is result.chunks
    assert result.chunk_count == len(result.chunks) == 500


@pytest.mark.parametrize("keep", [True, False])
def test_exactly_once_is_checked_without_the_table_too(keep):
    with pytest.raises(ExecutionError, match=r"iteration 0 ran 2 times"):
        simsched.simulate("haswell-e5-2695v3", RunsEverythingEverywhere(), [100.0] * 10, 2, keep_chunks=keep)
    with pytest.raises(ExecutionError, match=r"iteration 9 ran 0 times"):
        simsched.simulate("haswell-e5-2695v3", SkipsTheLastIteration(), [100.0] * 10, 2, keep_chunks=keep)


def test_coverage_merges_chunks_that_come_in_any_order():
    coverage = Coverage([10, 4], "test")
    coverage.add(np.array([0, 0, 1]), np.array([6, 0, 2]), np.array([10, 3, 4]))
    coverage.add(np.array([1, 0, 0]), np.array([0, 3, 5]), np.array([2, 5, 6]))
    assert {i: (lo.tolist(), hi.tolist()) for i, (lo, hi) in coverage.intervals.items()} == {
        0: ([0], [10]), 1: ([0], [4])}
    coverage.check()
    with pytest.raises(ExecutionError, match=r"loop 0: iteration 4 ran 2 times under test"):
        coverage.add(np.array([0]), np.array([4]), np.array([5]))
    gap = Coverage([10], "test")
    gap.add(np.array([0, 0]), np.array([0, 7]), np.array([3, 10]))
    with pytest.raises(ExecutionError, match=r"iteration 3 ran 0 times under test \(4 iteration"):
        gap.check()
    with pytest.raises(ExecutionError, match=r"outside \[0, 10\)"):
        gap.add(np.array([0]), np.array([9]), np.array([11]))


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_coverage_agrees_with_counting_every_iteration(data):
    # Chunks of two loops, some repeated or missing, in blocks that are in order or shuffled: the
    # check passes exactly when every iteration ran once, and otherwise names one that did not.
    sizes = [data.draw(st.integers(1, 40)), data.draw(st.integers(1, 40))]
    chunks = []
    for index, n in enumerate(sizes):
        cuts = sorted(set(data.draw(st.lists(st.integers(1, n - 1), max_size=8)) if n > 1 else []))
        chunks += [(index, lo, hi) for lo, hi in zip([0] + cuts, cuts + [n])]
    chunks += data.draw(st.lists(st.sampled_from(chunks), max_size=2))       # repeats
    dropped = data.draw(st.sets(st.integers(0, len(chunks) - 1), max_size=2))  # missing
    chunks = [chunk for i, chunk in enumerate(chunks) if i not in dropped]
    if data.draw(st.booleans()):
        chunks = data.draw(st.permutations(chunks))
    counts = [np.zeros(n, int) for n in sizes]
    for index, lo, hi in chunks:
        counts[index][lo:hi] += 1
    coverage = Coverage(sizes, "test")
    split = data.draw(st.integers(0, len(chunks)))
    try:
        for block in (chunks[:split], chunks[split:]):
            if block:
                coverage.add(*(np.array(column) for column in zip(*block)))
        coverage.check()
    except ExecutionError as error:
        index, i, times = map(int, re.search(r"loop (\d+): iteration (\d+) ran (\d+) times", str(error)).groups())
        if times == 0:
            assert counts[index][i] == 0
        else:
            assert counts[index][i] >= times >= 2
    else:
        assert all((count == 1).all() for count in counts)


def test_a_table_passing_the_memory_limit_stops_the_run(monkeypatch):
    # The limit while recording, patched low (the estimate up front sees this machine's memory and lets it run).
    monkeypatch.setattr(engine, "chunk_limit", lambda: BLOCK + 10)
    with pytest.raises(SimschedError, match=r"the chunk table passed \d+ chunks.*--no-chunk-table"):
        simsched.simulate("xeon-e7-4860v2", "stealing:chunk=1", "uforall:n=200000,cost_ns=10", 4)
    # The limit is on the table: a run that keeps none goes on.
    bare = simsched.simulate("xeon-e7-4860v2", "stealing:chunk=1", "uforall:n=200000,cost_ns=10", 4,
                             keep_chunks=False)
    assert bare.chunk_count == 200000


def simsched_run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", "xeon-e7-4860v2", "--threads",
                           "48", *args], capture_output=True, text=True, timeout=300)


def test_run_without_the_table_prints_the_same_json():
    args = ["--scheduler", "omp-dynamic:chunk=2", "--workload", "exp-dec:n=20000", "--repeat", "2", "--json"]
    kept, bare = simsched_run(*args), simsched_run(*args, "--no-chunk-table")
    assert kept.returncode == bare.returncode == 0, kept.stderr + bare.stderr
    assert json.loads(bare.stdout) == json.loads(kept.stdout)
    assert json.loads(bare.stdout)["chunks"] == 2 * 10000
