"""Loop affinity: the share of iterations that run on the same worker as in the loop before, from chunk intervals."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simsched import simulate, simulate_program
from simsched.affinity import AffinityTracker, from_chunks, same_owner, summarize


def chunks(*triples):
    """(lo, hi, worker) triples as the three arrays ``same_owner`` takes."""
    lo, hi, worker = (np.array(column, dtype=np.int64) for column in zip(*triples))
    return lo, hi, worker


# Loop A over 10 iterations: worker 0 runs [0, 5), worker 1 [5, 10).
A = [(0, 5, 0), (5, 10, 1)]
# Loop B over 10: worker 0 [0, 3), worker 1 [3, 8) and [8, 10).
B = [(0, 3, 0), (3, 8, 1), (8, 10, 1)]
# Loops C and D over 6: worker 1 [0, 2), worker 0 [2, 6).
C = [(0, 2, 1), (2, 6, 0)]


def test_same_owner_counts_the_iterations_whose_workers_agree():
    # A against B, piece by piece: [0, 3) 0 = 0, [3, 5) 0 != 1, [5, 8) 1 = 1, [8, 10) 1 = 1: 3 + 3 + 2 = 8.
    assert same_owner(chunks(*A), chunks(*B), 10) == 8
    assert same_owner(chunks(*B), chunks(*A), 10) == 8
    assert same_owner(chunks(*A), chunks(*A), 10) == 10


def test_same_owner_does_not_depend_on_the_order_chunks_are_listed():
    assert same_owner(chunks(*A[::-1]), chunks(B[2], B[0], B[1]), 10) == 8


def test_same_owner_of_loops_of_different_sizes_compares_the_common_iterations():
    # A (10 iterations) against C (6): j < 6 only. A: [0, 5) 0, [5, 6) 1; C: [0, 2) 1, [2, 6) 0.
    # They agree on [2, 5): 3 iterations.
    assert same_owner(chunks(*A), chunks(*C), 6) == 3


def test_same_owner_ignores_empty_chunks():
    # An empty chunk [5, 5) of worker 3 owns nothing: B's [3, 8) stays worker 1's. (Chunk tables reaching
    # same_owner cover every iteration exactly once, the runs check it, so only empty chunks can be odd.)
    assert same_owner(chunks(*A), chunks(*B, (5, 5, 3)), 10) == 8
    assert same_owner(chunks(*A), chunks((5, 5, 0), *B), 10) == 8


def rows(loop, triples):
    """Chunk rows (worker, loop, lo, hi, start, end) as the chunk log hands them over."""
    return np.array([(w, loop, lo, hi, 0.0, 0.0) for lo, hi, w in triples], dtype=float)


# The program A, B, C, C: f1 = 8/10 (above); f2 = B against C on j < 6: B [0, 3) 0, [3, 6) 1; C [0, 2) 1,
# [2, 6) 0: they agree on [2, 3) only, 1/6; f3 = C against C = 1. Overall, weighted by the iterations compared
# (10, 6, 6): (8 + 1 + 6) / 22 = 15/22.
PROGRAM = [A, B, C, C]
SIZES = [10, 10, 6, 6]
EXPECTED = {"per_loop": [None, 0.8, 1 / 6, 1.0], "overall": 15 / 22}


def check(summary):
    assert summary["per_loop"][0] is None
    assert summary["per_loop"][1:] == pytest.approx(EXPECTED["per_loop"][1:])
    assert summary["overall"] == pytest.approx(EXPECTED["overall"])


def test_tracker_of_a_program_of_four_loops_of_different_sizes():
    tracker = AffinityTracker(SIZES)
    for loop, triples in enumerate(PROGRAM):
        tracker.add(rows(loop, triples))
    check(tracker.result())


def test_tracker_takes_chunks_out_of_loop_order_within_its_window():
    # Loop i - 2's chunks are all in once loop i + 1 begins; until then they may arrive late, mixed with
    # later loops' chunks. Here a chunk of loop 0 arrives after loop 1's and with loop 2's.
    tracker = AffinityTracker(SIZES)
    tracker.add(np.concatenate([rows(1, B), rows(0, A[1:])]))
    tracker.add(np.concatenate([rows(2, C[::-1]), rows(0, A[:1])]))
    assert tracker.settled == 0  # nothing is settled before loop 3 begins
    tracker.add(rows(3, C[:1]))
    assert tracker.settled == 1 and 0 not in tracker.pending  # pair (0, 1) settled, loop 0's chunks dropped
    tracker.add(rows(3, C[1:]))
    check(tracker.result())


def test_tracker_ignores_loops_nested_after_the_program():
    # Nested loops take indices after the program's loops: they have no place in the affinity.
    tracker = AffinityTracker(SIZES)
    for loop, triples in enumerate(PROGRAM):
        tracker.add(rows(loop, triples))
        tracker.add(rows(4 + loop, [(0, 3, 1)]))
    check(tracker.result())


def test_from_chunks_agrees_with_the_tracker():
    table = pd.DataFrame(np.concatenate([rows(loop, t) for loop, t in enumerate(PROGRAM)]),
                         columns=["worker", "loop", "lo", "hi", "start", "end"])
    check(from_chunks(table, SIZES))


def test_a_single_loop_has_no_affinity():
    assert summarize([None], [10]) is None
    assert from_chunks(pd.DataFrame(rows(0, A), columns=["worker", "loop", "lo", "hi", "start", "end"]), [10]) is None


# -- simulated runs --------------------------------------------------------------------------------------------

def test_static_schedule_gives_affinity_one_with_a_fixed_thread_count():
    r = simulate("xeon-e5-4620", "omp-static", "arrays:n=103,bytes=1024", threads=5, repeat=4)
    assert r.affinity == {"per_loop": [None, 1.0, 1.0, 1.0], "overall": 1.0}


def test_static_blocks_of_loops_of_different_sizes():
    # 4 workers, static blocks: loop 0 (100) [0, 25) [25, 50) [50, 75) [75, 100); loop 1 (60) [0, 15) [15, 30)
    # [30, 45) [45, 60). Same worker on [0, 15) (worker 0) and [25, 30) (worker 1): 20 of 60.
    r = simulate_program("xeon-e5-4620", "omp-static", ["uniform:n=100", "uniform:n=60"], threads=4)
    assert r.affinity["per_loop"][1] == pytest.approx(1 / 3)
    assert r.affinity["overall"] == pytest.approx(1 / 3)


def test_single_loop_runs_have_no_affinity():
    assert simulate("xeon-e5-4620", "omp-dynamic", "arrays:n=100,bytes=512", threads=4).affinity is None
    assert simulate("xeon-e5-4620", "omp-static", "uniform:n=100", threads=4).affinity is None


@pytest.mark.parametrize("scheduler", ["omp-dynamic", "cilk", "ich", "omp-guided"])
def test_affinity_is_the_same_with_and_without_the_chunk_table(scheduler):
    runs = [simulate("xeon-e5-4620", scheduler, "arrays:n=300,bytes=2048,balance=unbalanced", threads=6, seed=2,
                     repeat=3, keep_chunks=keep) for keep in (True, False)]
    assert runs[0].affinity is not None and 0 <= runs[0].affinity["overall"] <= 1
    assert runs[0].affinity == runs[1].affinity
    # And it is what the kept table says.
    assert from_chunks(runs[0].chunks, [300] * 3) == runs[0].affinity


def test_affinity_in_the_json_of_the_cli():
    def run(*extra):
        proc = subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", "xeon-e5-4620",
                               "--scheduler", "omp-static", "--threads", "4", "--workload",
                               "arrays:n=64,bytes=4096", "--json", *extra], capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    assert run("--repeat", "3")["affinity"] == {"per_loop": [None, 1.0, 1.0], "overall": 1.0}
    assert run()["affinity"] is None


@pytest.mark.parametrize("scheduler", ["omp-static:chunk=3", "omp-dynamic", "omp-guided", "tss", "binlpt", "fg-tree",
                                       "cilk", "hybrid", "ich", "stealing"])
def test_affinity_worked_out_in_small_blocks_is_what_the_whole_table_gives(scheduler, monkeypatch):
    # The chunk log hands its chunks to the tracker in blocks (of 65,536: a whole small run at once). In blocks of
    # 3 the tracker settles each pair of loops two loops later and drops their chunks: this holds only if every
    # chunk of loop i - 2 is logged before any of loop i + 1, whatever the scheduler.
    monkeypatch.setattr("simsched.chunklog.BLOCK", 3)
    r = simulate("xeon-e5-4620", scheduler, "uniform:n=200", threads=8, seed=1, repeat=5)
    assert r.affinity == from_chunks(r.chunks, [200] * 5)
    assert r.affinity["per_loop"][1:] != [None] * 4
