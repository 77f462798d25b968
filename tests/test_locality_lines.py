"""The data model counts the cache lines a chunk touches, not a line per iteration.

A data set's blocks lie one after another in memory, so a chunk of k iterations of 1 byte
brings in about k / 64 lines of 64 bytes, while k chunks of one iteration each bring in a
line each. These tests work cases out by hand through the command line, compare the count with
the distinct lines of a chunk's byte range for any bytes and any chunk, require the per-iteration
path of small chunks to agree with NumPy's to the bit where blocks straddle lines, and check
that blocks of whole lines from aligned offsets cost what they cost a line per iteration.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simsched import footprint, load_machine
from simsched.locality import scalar_iterations
from simsched.cli import main
from simsched.footprint import Footprint, Gather
from simsched.locality import DataState
from simsched.loop import Loop

SERVED = ("l1_hits", "l2_hits", "l3_hits", "remote_l3_hits", "local_dram", "remote_dram")
HASWELL = "haswell-e5-2695v3"  # 64-byte lines
_MACHINE = {}


def haswell():
    if "m" not in _MACHINE:
        _MACHINE["m"] = load_machine(HASWELL)
    return _MACHINE["m"]


def run_json(capsys, workload: str, scheduler: str, threads: int = 1) -> dict:
    """``simsched run ... --json`` through the command line, its JSON object."""
    status = main(["run", "--machine", HASWELL, "--threads", str(threads), "--scheduler", scheduler,
                   "--workload", workload, "--json"])
    out = capsys.readouterr().out
    assert status == 0
    return json.loads(out)


def served(result: dict) -> int:
    """Lines served from anywhere: every line the run's chunks brought in, counted once."""
    return sum(result["counters"][name] for name in SERVED)


def distinct_lines(nbytes, lo: int, hi: int, line: int = 64) -> int:
    """The lines a chunk's byte range touches, by listing every byte's line."""
    offsets = np.concatenate(([0], np.cumsum(nbytes)))
    return len({b // line for b in range(int(offsets[lo]), int(offsets[hi]))})


def test_one_chunk_of_1_byte_iterations_brings_in_a_line_per_64(capsys):
    # 130 bytes from offset 0 in one chunk: 64 + 64 + 2 bytes, 3 lines; one chunk per iteration, 130 lines.
    static = run_json(capsys, "uniform:n=130,bytes=1", "omp-static")
    one_by_one = run_json(capsys, "uniform:n=130,bytes=1", "omp-dynamic:chunk=1")
    assert static["chunks"] == 1 and one_by_one["counters"]["chunks"] == 130
    assert served(static) == 3
    assert served(one_by_one) == 130
    # The cold lines come from DRAM; a line brought in per iteration costs the chunk-per-iteration run more.
    assert static["counters"]["local_dram"] == 3 and one_by_one["counters"]["local_dram"] == 130
    assert static["makespan_ns"] < one_by_one["makespan_ns"]


def test_blocks_straddling_lines_count_each_line_they_touch(tmp_path, capsys):
    # Five blocks of 100 bytes: 500 bytes, lines 0..7 in one chunk (8 lines); alone, blocks [100, 200) and
    # [300, 400) straddle three lines each, the others two: 2 + 3 + 2 + 3 + 2 = 12.
    path = tmp_path / "costs.csv"
    path.write_text("cost_ns,bytes\n" + "100,100\n" * 5, encoding="utf-8")
    assert served(run_json(capsys, f"file:path={path}", "omp-static")) == 8
    assert served(run_json(capsys, f"file:path={path}", "omp-dynamic:chunk=1")) == 12
    # Two chunks of 3 and 2 blocks: [0, 300) is lines 0..4, [300, 500) lines 4..7: line 4 counted by both.
    assert served(run_json(capsys, f"file:path={path}", "omp-dynamic:chunk=3")) == 5 + 4


def test_blocks_of_whole_lines_cost_the_same_in_any_chunks(capsys):
    # Blocks of 128 bytes from offset 0 share no line: 2 lines each, however the loop is cut.
    static = run_json(capsys, "uniform:n=130,bytes=128", "omp-static")
    one_by_one = run_json(capsys, "uniform:n=130,bytes=128", "omp-dynamic:chunk=1")
    assert served(static) == served(one_by_one) == 260


def _state(nbytes, pattern="stream", gather=None, threads=4) -> tuple[DataState, Footprint]:
    m = haswell()
    fp = Footprint(np.asarray(nbytes, dtype=np.int64), pattern, "first-touch", "a", gather=gather)
    return DataState(m, m.placement(threads), [Loop(np.zeros(len(nbytes)), data=fp)]), fp


@settings(max_examples=150, deadline=None)
@given(nbytes=st.lists(st.integers(0, 300) | st.sampled_from([0, 1, 63, 64, 65, 128]), min_size=1, max_size=60),
       data=st.data())
def test_a_chunk_brings_in_the_distinct_lines_of_its_byte_range(nbytes, data):
    lo = data.draw(st.integers(0, len(nbytes)))
    hi = data.draw(st.integers(lo, len(nbytes)))
    state, fp = _state(nbytes)
    lines = state._lines(fp, lo, hi)
    assert lines.shape == (hi - lo,) and np.all(lines >= 0)
    assert lines.sum() == distinct_lines(nbytes, lo, hi)
    # An iteration of 0 bytes brings in nothing; one alone in its chunk, every line its block touches.
    assert np.all(lines[np.asarray(nbytes[lo:hi]) == 0] == 0)
    for i in range(lo, hi):
        assert state._lines(fp, i, i + 1).sum() == distinct_lines(nbytes, i, i + 1) >= lines[i - lo]


@settings(max_examples=60, deadline=None)
@given(lines=st.lists(st.integers(0, 40), min_size=1, max_size=80), data=st.data())
def test_blocks_of_whole_lines_count_a_line_per_64_bytes_as_before(lines, data):
    # Whole lines from aligned offsets: each iteration's own lines, ceil(bytes / 64), in any chunk.
    nbytes = np.asarray(lines) * 64
    lo = data.draw(st.integers(0, len(lines)))
    hi = data.draw(st.integers(lo, len(lines)))
    state, fp = _state(nbytes)
    assert state._lines(fp, lo, hi).tolist() == np.ceil(nbytes[lo:hi] / 64).tolist()




def _replay(nbytes, pattern, gather, plan, limit: int) -> dict:
    state, fp = _state(nbytes, pattern, gather, threads=8)
    state.rng = np.random.default_rng(3)
    with scalar_iterations(limit):
        times = [state.chunk(worker, fp, lo, hi, start) for lo, hi, worker, start in plan]
    blocks = state.blocks["a"]
    return {"times": times, "counters": dict(state.counters), "through": state.through,
            "blocks": (blocks.holder.tolist(), blocks.stamp.tolist(), blocks.home.tolist())}


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(0, 5000), min_size=1, max_size=6), n=st.integers(1, 150),
       pattern=st.sampled_from(footprint.PATTERNS), gather=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_both_paths_count_lines_alike_where_blocks_straddle_them(sizes, n, pattern, gather, seed):
    # Bytes of any size (not whole elements or lines), chunks from anywhere, each chunk on one path, then on
    # the other: the same times, counters and block states to the bit.
    rng = np.random.default_rng(seed)
    nbytes = np.asarray(sizes)[rng.integers(len(sizes), size=n)]
    reads = Gather(rng.integers(0, 20, size=n), int(rng.integers(8, 10**6)), 8, "x") if gather else None
    plan, start = [], 0.0
    for _ in range(2):  # the loop twice: the second time over what the first left in the caches
        lo = 0
        while lo < n:
            hi = min(n, lo + int(rng.integers(1, 50)))
            plan.append((lo, hi, int(rng.integers(8)), start))
            start += float(rng.exponential(200.0))
            lo = hi
    numpy_path = _replay(nbytes, pattern, reads, plan, 0)
    per_iteration = _replay(nbytes, pattern, reads, plan, 10**9)
    assert numpy_path == per_iteration


def test_iterations_sharing_a_line_pay_their_access_at_the_level_holding_it():
    # A stride loop of 1-byte blocks in one chunk: 3 lines from DRAM, the other 127 accesses where a 1-byte
    # block fits (l1), not 127 more lines from memory.
    state, fp = _state([1] * 130, "stride")
    together = state.chunk(0, fp, 0, 130, 0.0)
    assert state.counters["local_dram"] == 3
    apart, fp_apart = _state([1] * 130, "stride")
    alone = sum(apart.chunk(0, fp_apart, i, i + 1, 1000.0 * i) for i in range(130))
    assert apart.counters["local_dram"] == 130
    l1 = haswell().hierarchy.levels[0]
    dram_line = state.access(haswell().hierarchy.dram.latency_ns, haswell().hierarchy.dram.bandwidth_gbs, "stride",
                             64, state.h.outstanding_misses)
    element = state.access(l1.latency_ns, l1.bandwidth_gbs, "stride", 8, state.h.outstanding_misses)
    assert together == pytest.approx(3 * dram_line + 127 * element, rel=1e-9)
    assert alone > 10 * together
