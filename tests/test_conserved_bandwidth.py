"""A node that never serves more than its bandwidth: ``[dram] bandwidth_share = "conserved"``.

Each chunk takes what the chunks before it left of the node's shared bandwidth, from its start on,
at most its core's bandwidth (``contention.Calendar``); worked out by hand, as an invariant over
random requests, on both of the data model's paths, and over a whole loop.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simsched
from simsched import load_machine, locality
from simsched.cli import main
from simsched.contention import Calendar

CALENDARS = [Calendar] + ([] if locality.compiled is None else [locality.compiled.Calendar])
from simsched.locality import DataState
from simsched.workloads import draw_loops, get_workload


@pytest.mark.parametrize("Calendar", CALENDARS)
def test_a_chunk_takes_what_the_earlier_ones_leave_and_more_as_they_end(Calendar):
    node = Calendar(10.0)   # 10 GB/s shared, 8 GB/s a core
    # Alone: 800 bytes at 8 GB/s.
    assert node.take(0.0, 800.0, 8.0) == 100.0
    # Together with it: 2 GB/s left until 100 ns (200 bytes), then 8 GB/s for the other 600 (75 ns).
    assert node.take(0.0, 800.0, 8.0) == 175.0
    # From 50 ns: nothing left until 100 ns, then 2 GB/s until 175 ns (150 bytes), then 8 GB/s for 250 bytes.
    assert node.take(50.0, 400.0, 8.0) == pytest.approx(156.25)
    assert max(node.committed) <= 10.0


@pytest.mark.parametrize("Calendar", CALENDARS)
def test_a_node_forgets_what_ended_before_the_clock(Calendar):
    node = Calendar(10.0)
    node.take(0.0, 800.0, 8.0)
    node.take(200.0, 80.0, 8.0)
    node.forget(150.0)
    assert node.times[0] >= 100.0
    # At 200 ns the second chunk holds 8 of the 10 GB/s until 210 ns: 2 GB/s for 20 bytes.
    assert node.take(200.0, 20.0, 10.0) == pytest.approx(10.0)


@settings(max_examples=200, deadline=None)
@given(requests=st.lists(st.tuples(st.floats(0, 1000), st.floats(1, 1e5), st.floats(0.5, 30)), min_size=1,
                         max_size=25),
       shared=st.floats(1, 60))
def test_the_node_never_commits_more_than_its_bandwidth_and_serves_every_byte(requests, shared):
    nodes = [kind(shared) for kind in CALENDARS]
    for offset, nbytes, cap in sorted(requests):
        taken = [node.take(offset, nbytes, cap) for node in nodes]
        # Never faster than the core, nor than the node alone; the compiled calendar to the bit.
        assert taken[0] >= nbytes / min(cap, shared) * (1 - 1e-9) and len(set(taken)) == 1
    node = nodes[0]
    assert all(rate <= shared * (1 + 1e-9) for rate in node.committed)
    assert all((other.times, other.committed) == (node.times, node.committed) for other in nodes)
    # Every byte was committed somewhere: the rates over time add up to what was asked.
    served = sum(rate * (b - a) for rate, a, b in zip(node.committed, node.times, node.times[1:]))
    assert served == pytest.approx(sum(n for _, n, _ in requests), rel=1e-6)


def _machine(share: str):
    return load_machine(f'haswell-e5-2695v3[dram.bandwidth_share="{share}"]')


def test_a_loop_never_reads_a_node_faster_than_its_bandwidth_when_it_is_conserved():
    # E4's SpMV, its matrix loaded by the master: all 28 threads stream it from node 0 (51 GB/s).
    workload = "spmv:like=AS365,rows=30000,iters=1"
    for share, at_most in (("at-start", None), ("conserved", 51.0)):
        result = simsched.simulate(_machine(share), "omp-guided:chunk=3,runtime=gnu", workload, 28,
                                   keep_chunks=False)
        lines = result.counters["local_dram"] + result.counters["remote_dram"]
        gbs = lines * 64 / result.makespan_ns
        if at_most is None:
            assert gbs > 51.0   # shares fixed at each chunk's start let the node serve more than it has
        else:
            assert gbs <= at_most


def test_every_path_of_the_data_model_shares_a_conserved_node_alike(monkeypatch):
    from simsched.locality import scalar_iterations
    m = _machine("conserved")
    loops = draw_loops(get_workload("spmv:matrix=lognormal,iters=2"), np.random.default_rng(0))
    times = []
    for limit, compiled in ((0, None), (10**9, None), (10**9, locality.compiled)):
        monkeypatch.setattr(locality, "compiled", compiled)
        state = DataState(m, m.placement(28), loops, np.random.default_rng(7))
        with scalar_iterations(limit):
            start, lo, seen = 0.0, 0, []
            while lo < loops[0].n:
                hi = min(lo + 3, loops[0].n)
                seen.append(state.chunk(lo % 28, loops[0].data, lo, hi, start, work=10.0))
                start += 40.0
                lo = hi
        times.append(seen)
    assert times[0] == times[1]


def test_an_unknown_bandwidth_share_is_refused_in_one_line(capsys):
    code = main(["run", "--machine", 'haswell-e5-2695v3[dram.bandwidth_share="fair"]', "--scheduler", "omp-static",
                 "--threads", "2", "--workload", "spmv:matrix=banded,iters=1"])
    err = capsys.readouterr().err
    assert code == 2 and "bandwidth_share must be at-start or conserved" in err and len(err.strip().splitlines()) == 1
