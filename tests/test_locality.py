"""The data-locality model: hand-worked costs on a toy hierarchy, properties over random programs, bad input.

The toy machine has 2 sockets x 2 cores (worker w on core w; cores 0, 1 on socket 0, cores 2, 3
on socket 1) and round numbers, so that every cost below can be worked out by hand:

    level  size           latency            bandwidth -> one 64-byte line / one 8-byte element
    l1     1 KiB per core   1 ns             64 GB/s   -> 1 ns / 0.125 ns
    l2     4 KiB per core   4 ns             32 GB/s   -> 2 ns
    l3    16 KiB per socket 10 ns (50 remote) 16 GB/s  -> 4 ns
    dram   1 GiB per node  100 ns (200 remote) 8 GB/s  -> 8 ns / 1 ns
    outstanding_misses = 4, jitter_cv = 0, clock 1 GHz with no turbo (compute costs what it says)

A line costs, by access pattern: stream line / bandwidth; stride max(latency / 4, line /
bandwidth); random the full latency. A block of B bytes has ceil(B / 64) lines and B / 8
elements; the elements beyond one per line ("re-touches") cost one element access each at the
innermost level the block fits in (none for stream).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import run_batch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simsched import Machine, SimschedError, load_machine, simulate, simulate_program
from simsched.affinity import from_chunks
from simsched.footprint import Footprint
from simsched.locality import DataState
from simsched.loop import Loop
from simsched.workloads import Workload

LINE = 64


def toy_hierarchy(shared_bandwidth_gbs: float | None = None, jitter_cv: float = 0.0, **topology) -> Machine:
    """The toy machine of this file's docstring (optionally with a shared DRAM bandwidth per node, or jitter)."""
    dram = {"size_gib": 1, "latency_ns": 100, "remote_latency_ns": 200, "bandwidth_gbs": 8, "jitter_cv": jitter_cv}
    if shared_bandwidth_gbs is not None:
        dram["shared_bandwidth_gbs"] = shared_bandwidth_gbs
    return Machine.from_dict({
        "name": "toy-hierarchy",
        "topology": {"sockets": 2, "cores_per_socket": 2, **topology},
        "clock": {"base_ghz": 1.0},
        "latency_ns": {"same_socket": 100.0, "socket_hop": 100.0},
        "costs_ns": {"atomic": 10.0, "store": 1.0, "loop_setup": 0.0, "chunk": 0.0, "combine": 0.0},
        "cache": {
            "l1": {"size_kib": 1, "line_bytes": LINE, "shared_by": "core", "latency_ns": 1, "bandwidth_gbs": 64,
                   "outstanding_misses": 4},
            "l2": {"size_kib": 4, "line_bytes": LINE, "shared_by": "core", "latency_ns": 4, "bandwidth_gbs": 32},
            "l3": {"size_kib": 16, "line_bytes": LINE, "shared_by": "socket", "latency_ns": 10, "bandwidth_gbs": 16,
                   "remote_latency_ns": 50},
        },
        "dram": dram,
    })


TOY = toy_hierarchy()


def footprint(n: int, nbytes, pattern: str = "random", placement: str = "first-touch", data: str = "data"):
    return Footprint(np.broadcast_to(np.asarray(nbytes, dtype=np.int64), (n,)).copy(), pattern, placement, data)


def state(*footprints: Footprint, machine: Machine = TOY, rng=None) -> DataState:
    """A DataState with worker w on core w of ``machine``, for loops with these footprints."""
    loops = [Loop(np.zeros(fp.bytes.size), data=fp) for fp in footprints]
    return DataState(machine, list(range(machine.cores)), loops, rng)


def served(ds: DataState) -> dict[str, float]:
    """The non-zero served-by counters so far (cache lines)."""
    return {name: value for name, value in ds.counters.items() if value}


# -- residency by reuse distance: one core ------------------------------------------------------------------

def test_cold_block_comes_from_local_dram_then_from_l1():
    fp = footprint(1, 512)  # 8 lines, 64 elements: 56 re-touches, in L1 (512 B fit its 1 KiB)
    ds = state(fp)
    # Cold: 8 lines x 100 ns (local DRAM, first touch homes it on socket 0) + 56 x 1 ns = 856.
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(856.0)
    assert served(ds) == {"local_dram": 8}
    # Again on the same core: nothing went through its caches since, so 8 lines x 1 ns + 56 x 1 ns = 64.
    assert ds.chunk(0, fp, 0, 1, 1000.0) == pytest.approx(64.0)
    assert served(ds) == {"local_dram": 8, "l1_hits": 8}


def test_block_larger_than_l1_is_split_between_l1_and_l2():
    fp = footprint(1, 2048)  # 32 lines, 256 elements: 224 re-touches at L2 (2 KiB fit L2, not L1): 4 ns each
    ds = state(fp)
    # Cold: 32 x 100 + 224 x 4 = 3200 + 896 = 4096.
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(4096.0)
    # Again: LRU keeps the most recent 1 KiB in L1 (16 lines x 1 ns), the rest in L2 (16 x 4 ns): 16 + 64 + 896.
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(976.0)
    assert served(ds) == {"local_dram": 32, "l1_hits": 16, "l2_hits": 16}


def test_block_that_fits_only_l3_is_served_by_all_three_levels():
    fp = footprint(1, 8192, "stream")  # 128 lines, stream: 1, 2, 4, 8 ns per line at l1, l2, l3, dram
    ds = state(fp)
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(128 * 8.0)
    # Again: l1 holds the newest 1 KiB (16 lines), l2 the newest 4 KiB (64 lines, 48 more), l3 the rest (64):
    # 16 x 1 + 48 x 2 + 64 x 4 = 16 + 96 + 256 = 368.
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(368.0)
    assert served(ds) == {"local_dram": 128, "l1_hits": 16, "l2_hits": 48, "l3_hits": 64}


def test_capacity_eviction_by_reuse_distance():
    # Three 8 KiB blocks through one core: when block 0 comes back, 16 KiB went through every cache since.
    # L3 holds 16 KiB, so under LRU none of block 0 is left: (16 - 16) / 8 = 0. All 128 lines from DRAM.
    fp = footprint(3, 8192, "stream")
    ds = state(fp)
    ds.chunk(0, fp, 0, 3, 0.0)
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(128 * 8.0)
    assert served(ds) == {"local_dram": 3 * 128 + 128}
    # Two blocks: 8 KiB went through since, so L3 still holds all of block 0 (16 - 8 >= 8): 128 x 4 ns;
    # l1 and l2 (1 and 4 KiB) hold none of it.
    fp = footprint(2, 8192, "stream")
    ds = state(fp)
    ds.chunk(0, fp, 0, 2, 0.0)
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(128 * 4.0)
    assert served(ds) == {"local_dram": 2 * 128, "l3_hits": 128}


def test_partial_eviction_keeps_the_most_recent_part():
    # Block 0 (8 KiB), then block 1 (12 KiB) on core 0: 12 KiB went through L3 since block 0, so L3 keeps
    # 16 - 12 = 4 KiB of it (64 lines at 4 ns); l1 and l2 keep none; the other 64 lines come from DRAM (8 ns).
    fp = Footprint(np.array([8192, 12288]), "stream")
    ds = state(fp)
    ds.chunk(0, fp, 0, 2, 0.0)
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(64 * 4.0 + 64 * 8.0)
    assert ds.counters["l3_hits"] == pytest.approx(64)
    assert ds.counters["local_dram"] == pytest.approx(128 + 192 + 64)


def test_reuse_distance_counts_the_chunks_own_earlier_bytes():
    # Within one chunk, iteration j sees the bytes of iterations before it go by. Blocks of 512 B, one chunk
    # [0, 3) run twice on core 0: at the second pass block 0 has 1 KiB through l1 since (blocks 1, 2), so
    # l1 holds none of it; block 1 has blocks 2 and 0 since (1 KiB): none in l1 either; likewise block 2.
    # All 24 lines come from l2 at 4 ns (random), plus 56 re-touches per block at l1 (they fit 1 KiB): 1 ns.
    fp = footprint(3, 512)
    ds = state(fp)
    ds.chunk(0, fp, 0, 3, 0.0)
    assert ds.chunk(0, fp, 0, 3, 0.0) == pytest.approx(24 * 4.0 + 3 * 56 * 1.0)
    assert ds.counters["l2_hits"] == pytest.approx(24)


# -- where a line comes from: other cores, other sockets, home nodes ------------------------------------------

def test_block_of_the_other_core_of_the_socket_comes_through_l3():
    fp = footprint(1, 512)
    ds = state(fp)
    ds.chunk(0, fp, 0, 1, 0.0)
    # Core 1 after core 0: the 8 lines sit in core 0's l1; they come through the socket's l3 at 10 ns,
    # counted as l3 hits: 8 x 10 + 56 re-touches x 1 ns = 136.
    assert ds.chunk(1, fp, 0, 1, 0.0) == pytest.approx(136.0)
    assert served(ds) == {"local_dram": 8, "l3_hits": 8}
    # Core 1 wrote them, invalidating core 0's copy: core 0 gets them back through l3 too.
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(136.0)
    assert served(ds) == {"local_dram": 8, "l3_hits": 16}


def test_block_of_the_other_socket_comes_from_its_l3_at_the_remote_latency():
    fp = footprint(1, 512)
    ds = state(fp)
    ds.chunk(0, fp, 0, 1, 0.0)
    # Core 2 (socket 1) after core 0: 8 lines from socket 0's l3, 1 hop: 8 x 50 + 56 x 1 = 456.
    assert ds.chunk(2, fp, 0, 1, 0.0) == pytest.approx(456.0)
    assert served(ds) == {"local_dram": 8, "remote_l3_hits": 8}


def test_first_touch_homes_a_block_on_the_first_runners_socket():
    # Block "a" (512 B) first run on core 2: its page lands on node 1. Then 16 KiB of data "b" through core 2
    # evict it from every cache (reuse distance 16 KiB >= l3's 16 KiB). Core 0 then reads it from node 1:
    # 8 lines x 200 ns (1 hop) + 56 re-touches at l1 = 1656.
    a, b = footprint(1, 512, data="a"), footprint(1, 16384, "stream", data="b")
    ds = state(a, b)
    assert ds.chunk(2, a, 0, 1, 0.0) == pytest.approx(856.0)  # local to core 2's node
    ds.chunk(2, b, 0, 1, 0.0)
    assert ds.chunk(0, a, 0, 1, 0.0) == pytest.approx(8 * 200.0 + 56.0)
    assert ds.counters["remote_dram"] == pytest.approx(8)
    assert ds.counters["local_dram"] == pytest.approx(8 + 256)
    assert ds.blocks["a"].home.tolist() == [1]  # the home stays where the first touch put it


def test_interleave_deals_blocks_round_robin_over_the_nodes():
    # Four cold 512 B blocks on core 0: blocks 0, 2 live on node 0 (100 ns), blocks 1, 3 on node 1 (200 ns):
    # 2 x 8 x 100 + 2 x 8 x 200 + 4 x 56 re-touches at l1 = 1600 + 3200 + 224 = 5024.
    fp = footprint(4, 512, placement="interleave")
    ds = state(fp)
    assert ds.blocks["data"].home.tolist() == [0, 1, 0, 1]
    assert ds.chunk(0, fp, 0, 4, 0.0) == pytest.approx(5024.0)
    assert served(ds) == {"local_dram": 16, "remote_dram": 16}
    # The same blocks under first touch, cold on core 0: all on node 0, 4 x 856.
    fp = footprint(4, 512)
    ds = state(fp)
    assert ds.chunk(0, fp, 0, 4, 0.0) == pytest.approx(4 * 856.0)
    assert ds.blocks["data"].home.tolist() == [0, 0, 0, 0]


# -- access patterns and re-touches -------------------------------------------------------------------------

@pytest.mark.parametrize("pattern, expected", [
    # 8 lines from local DRAM (100 ns, 8 GB/s: 8 ns a line) and 56 re-touches at l1 (1 ns, 0.125 ns an element):
    ("stride", 8 * max(100 / 4, 8.0) + 56 * max(1 / 4, 0.125)),  # independent misses, 4 in flight: 200 + 14
    ("stream", 8 * 8.0),                                         # prefetched: bandwidth only, re-touches ride along
    ("random", 8 * 100.0 + 56 * 1.0),                            # a chain: full latency each
])
def test_access_pattern_cost_per_line(pattern, expected):
    fp = footprint(1, 512, pattern)
    assert state(fp).chunk(0, fp, 0, 1, 0.0) == pytest.approx(expected)


def test_stride_is_bandwidth_bound_where_latency_is_short():
    # In l1, a line under stride costs max(1 / 4, 64 / 64) = 1 ns: the bandwidth bound; re-touches 56 x 0.25.
    fp = footprint(1, 512, "stride")
    ds = state(fp)
    ds.chunk(0, fp, 0, 1, 0.0)
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(8 * 1.0 + 56 * 0.25)


def test_retouches_of_a_block_that_fits_no_cache_go_to_dram():
    # 32 KiB > l3's 16 KiB: 512 lines and 4096 - 512 = 3584 re-touches, all from local DRAM at 100 ns (random).
    fp = footprint(1, 32768)
    assert state(fp).chunk(0, fp, 0, 1, 0.0) == pytest.approx((512 + 3584) * 100.0)
    # Under stride a DRAM re-touch costs max(100 / 4, 8 / 8) = 25 ns; a line max(25, 8) = 25 ns.
    fp = footprint(1, 32768, "stride")
    assert state(fp).chunk(0, fp, 0, 1, 0.0) == pytest.approx((512 + 3584) * 25.0)


def test_stride_misses_by_array_size_set_the_overlap_per_iteration():
    # With stride_misses [[0.5, 2], [2, 8]] (KiB): a 512-byte block's misses overlap 2, a 2 KiB one's 8, a 1 KiB
    # one's half-way between in log2 size, 5; beyond the ends, the end values.
    machine = TOY.replace(**{"cache.l1.stride_misses": [[0.5, 2], [2, 8]]})
    assert machine.hierarchy.stride_overlap(np.array([256, 512, 1024, 2048, 32768])).tolist() == [2, 2, 5, 8, 8]
    # 512 bytes from DRAM: 8 lines at max(100 / 2, 8) = 50 and 56 re-touches at l1, max(1 / 2, 0.125) = 0.5.
    fp = footprint(1, 512, "stride")
    assert state(fp, machine=machine).chunk(0, fp, 0, 1, 0.0) == pytest.approx(8 * 50.0 + 56 * 0.5)
    # Two iterations in one chunk, 512 and 2048 bytes: each at its own overlap (2048: 32 lines at 100 / 8 = 12.5
    # and 224 re-touches at l2, where the block fits, max(4 / 8, 8 / 32) = 0.5).
    fp = Footprint(np.array([512, 2048]), "stride")
    assert state(fp, machine=machine).chunk(0, fp, 0, 2, 0.0) == pytest.approx(8 * 50.0 + 56 * 0.5
                                                                               + 32 * 12.5 + 224 * 0.5)
    # Random chains and streams take no overlap from it.
    fp = footprint(1, 512)
    assert state(fp, machine=machine).chunk(0, fp, 0, 1, 0.0) == pytest.approx(8 * 100.0 + 56 * 1.0)


def test_block_smaller_than_a_line_costs_one_line():
    fp = footprint(1, 8)  # one element: one line, no re-touch
    assert state(fp).chunk(0, fp, 0, 1, 0.0) == pytest.approx(100.0)
    fp = footprint(1, 72)  # 9 elements over 2 lines: 2 lines + 7 re-touches at l1
    assert state(fp).chunk(0, fp, 0, 1, 0.0) == pytest.approx(200.0 + 7.0)


def test_iterations_without_bytes_cost_nothing():
    fp = Footprint(np.array([0, 512, 0]), "random")
    ds = state(fp)
    assert ds.chunk(0, fp, 0, 3, 0.0) == pytest.approx(856.0)
    assert served(ds) == {"local_dram": 8}


# -- shared DRAM bandwidth ----------------------------------------------------------------------------------

def test_chunks_reading_one_node_share_its_bandwidth():
    # Per core 8 GB/s, per node 8 GB/s shared. Readers are counted when a chunk starts: the first chunk on
    # node 0 has it to itself (8 lines x 8 ns = 64, reading until t = 64); a second one starting at t = 0
    # gets 8 / 2 = 4 GB/s: 8 x 16 ns = 128, until t = 128.
    fp = footprint(5, 512, "stream")
    ds = state(fp, machine=toy_hierarchy(shared_bandwidth_gbs=8))
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(64.0)
    assert ds.chunk(1, fp, 1, 2, 0.0) == pytest.approx(128.0)
    # Node 1's controllers are its own: core 2 starting at t = 0 reads at the full 8 GB/s.
    assert ds.chunk(2, fp, 2, 3, 0.0) == pytest.approx(64.0)
    # At t = 64 the first reader of node 0 is done (its end is not after 64), the second is not: 4 GB/s.
    assert ds.chunk(0, fp, 3, 4, 64.0) == pytest.approx(128.0)
    # At t = 200 both are done: the full 8 GB/s again.
    assert ds.chunk(1, fp, 4, 5, 200.0) == pytest.approx(64.0)


def test_readers_count_at_each_chunks_own_start_when_chunks_are_recorded_ahead_of_the_clock():
    # A worker records a chunk starting at t = 1000 while the clock is at 0 (a static block's later chunk):
    # 8 lines at 8 GB/s, reading node 0 over [1000, 1064).
    fp = footprint(4, 512, "stream")
    ds = state(fp, machine=toy_hierarchy(shared_bandwidth_gbs=8))
    assert ds.chunk(0, fp, 0, 1, 1000.0, now=0.0) == pytest.approx(64.0)
    # A chunk starting at t = 0 does not share with it: the full 8 GB/s.
    assert ds.chunk(1, fp, 1, 2, 0.0, now=0.0) == pytest.approx(64.0)
    # One starting at t = 1010, asked for once the clock is at 500 (past the second chunk's end, not the
    # first's start), shares with the first: 4 GB/s, 8 x 16 ns.
    assert ds.chunk(1, fp, 2, 3, 1010.0, now=500.0) == pytest.approx(128.0)


def test_shared_bandwidth_above_the_per_core_bandwidth_does_not_speed_a_core_up():
    # 12 GB/s per node: one reader gets min(8, 12) = 8 GB/s (8 ns a line), two get min(8, 6) = 6 GB/s each.
    fp = footprint(2, 600, "stream")  # 10 lines (the last one partly used still moves 64 bytes)
    ds = state(fp, machine=toy_hierarchy(shared_bandwidth_gbs=12))
    assert ds.chunk(0, fp, 0, 1, 0.0) == pytest.approx(10 * 8.0)
    assert ds.chunk(1, fp, 1, 2, 0.0) == pytest.approx(10 * 64 / 6)


def test_chunks_reading_one_sockets_l3_share_its_bandwidth():
    # l3 at 16 GB/s per core, 16 GB/s shared by the socket. Blocks of 512 B (8 lines) run first on cores 0
    # and 1 (socket 0) and are then pushed out of their private levels, so the next run finds them in the l3.
    machine = toy_hierarchy().replace(**{"cache.l3.shared_bandwidth_gbs": 16})
    fp, evict = footprint(4, 512, "stream"), footprint(40, 512, "stream", data="evict")
    ds = state(fp, evict, machine=machine)
    ds.chunk(0, fp, 0, 2, 0.0)
    ds.chunk(0, evict, 0, 10, 1e6)   # 5 KiB through core 0's l1 and l2: blocks 0, 1 only in the l3 now
    ds.counters = dict.fromkeys(ds.counters, 0.0)
    # Stream from the l3: 64 B / 16 GB/s = 4 ns a line, 8 lines = 32 ns, when the chunk reads alone ...
    assert ds.chunk(0, fp, 0, 1, 2e6) == pytest.approx(32.0)
    assert served(ds) == {"l3_hits": 8}
    # ... and 64 ns for core 1 starting while it still reads (16 / 2 = 8 GB/s), though private levels are its own.
    assert ds.chunk(1, fp, 1, 2, 2e6) == pytest.approx(64.0)


def test_cache_hits_do_not_count_as_dram_readers():
    # A chunk served from l1 reads nothing from DRAM, so it does not take a share of the node's bandwidth.
    fp = footprint(2, 512, "stream")
    ds = state(fp, machine=toy_hierarchy(shared_bandwidth_gbs=8))
    ds.chunk(0, fp, 0, 1, 0.0)          # cold: reads node 0 until t = 64
    ds.chunk(0, fp, 0, 1, 100.0)        # l1 hits only: 8 x 1 ns, no DRAM
    assert ds.chunk(1, fp, 1, 2, 100.0) == pytest.approx(64.0)  # node 0 has no reader at t = 100


# -- jitter ----------------------------------------------------------------------------------------------------

def test_jitter_is_reproducible_per_seed_and_absent_without_jitter_cv():
    fp = footprint(1, 512)

    def cold(machine, seed):
        return state(fp, machine=machine, rng=None if seed is None else np.random.default_rng(seed)).chunk(
            0, fp, 0, 1, 0.0)

    jittery = toy_hierarchy(jitter_cv=0.1)
    assert cold(jittery, 7) == cold(jittery, 7)
    assert cold(jittery, 7) != cold(jittery, 8)
    # The factor is 1 + 0.1 z with z standard normal clipped at 3, so within 30% of the exact 856.
    for seed in range(20):
        assert 856.0 * 0.7 <= cold(jittery, seed) <= 856.0 * 1.3
    # Without a generator (the sequential baseline) or without jitter_cv, the time is exact.
    assert cold(jittery, None) == pytest.approx(856.0)
    assert cold(TOY, 7) == pytest.approx(856.0)
    # The draw is z = the generator's next standard normal: 856 x (1 + 0.1 z).
    z = float(np.clip(np.random.default_rng(7).standard_normal(), -3, 3))
    assert cold(jittery, 7) == pytest.approx(856.0 * (1 + 0.1 * z))


def test_jittered_runs_are_reproducible_per_seed():
    machine = toy_hierarchy(jitter_cv=0.05)
    runs = [simulate(machine, "omp-dynamic", "arrays:n=64,bytes=512", threads=4, seed=s, repeat=2) for s in (3, 3, 4)]
    assert runs[0].makespan_ns == runs[1].makespan_ns
    assert runs[0].chunks.equals(runs[1].chunks)
    assert runs[0].makespan_ns != runs[2].makespan_ns


def test_the_xeon_numbers_of_the_cost_model_page():
    # docs/cost-model.md works out a 4 KiB block (64 lines, 512 elements, 448 re-touches in l1) on xeon-e5-4620.
    xeon = load_machine("xeon-e5-4620")
    expected = {
        # cold, local DRAM: 64 x max(112.1 / 10, 64 / 8) + 448 x max(1.9 / 10, 8 / 70) = 717.44 + 85.12;
        # again on the same core: 64 x max(0.19, 64 / 70) + 85.12; then on socket 1's first core (1 hop):
        # 64 x max(173.4 / 10, 64 / 22) + 85.12.
        "stride": (802.56, 64 * 64 / 70 + 85.12, 1194.88),
        "stream": (64 * 8.0, 64 * 64 / 70, 64 * 64 / 22),
        "random": (64 * 112.1 + 448 * 1.9, 64 * 1.9 + 448 * 1.9, 64 * 173.4 + 448 * 1.9),
    }
    for pattern, (cold, again, remote) in expected.items():
        fp = footprint(1, 4096, pattern)
        ds = state(fp, machine=xeon)
        assert [ds.chunk(w, fp, 0, 1, 0.0) for w in (0, 0, 8)] == pytest.approx([cold, again, remote]), pattern


# -- whole runs: counters, the sequential baseline -------------------------------------------------------------

def test_static_repeat_reuses_each_cores_blocks_and_the_baseline_runs_on_one_core():
    # Two 512 B blocks, random, 100 ns of compute each, two workers (one block each), the loop twice.
    r = simulate_program(TOY, "omp-static", ["arrays:n=2,bytes=512,pattern=random,cost_ns=100"], threads=2,
                         repeat=2)
    # Loop 1: each block cold from local DRAM (8 lines); loop 2: each on the same core, from l1.
    assert {k: r.counters[k] for k in ("l1_hits", "l2_hits", "l3_hits", "remote_l3_hits", "local_dram",
                                       "remote_dram")} == {"l1_hits": 16, "l2_hits": 0, "l3_hits": 0,
                                                           "remote_l3_hits": 0, "local_dram": 16, "remote_dram": 0}
    # Each worker computes 100 + 856 (loop 1) + 100 + 64 (loop 2) = 1120 ns.
    assert r.state_ns["compute"].tolist() == pytest.approx([1120.0, 1120.0])
    # The baseline runs everything as one chunk per loop on one core: loop 1, two cold blocks: 2 x 856;
    # loop 2: block 0 has seen block 1 (512 B) since, block 1 has seen block 0 go by in this very chunk:
    # reuse distance 512 each, so both still in l1's 1 KiB: 2 x (8 + 56). Plus 4 x 100 ns of compute.
    assert r.sequential_ns == pytest.approx(4 * 100 + 2 * 856 + 2 * 64)


def test_cyclic_sweep_larger_than_l3_misses_every_time():
    # One worker, three 8 KiB blocks, the loop twice: LRU evicts each block just before it comes back
    # (16 KiB through l3 since), so loop 2 reads all 3 x 128 lines from DRAM again.
    r = simulate(TOY, "omp-static", "arrays:n=3,bytes=8192,pattern=stream", threads=1, repeat=2)
    assert r.counters["local_dram"] == 2 * 3 * 128
    assert r.counters["l3_hits"] == 0
    # Two blocks fit: loop 2 reads both from l3.
    r = simulate(TOY, "omp-static", "arrays:n=2,bytes=8192,pattern=stream", threads=1, repeat=2)
    assert (r.counters["local_dram"], r.counters["l3_hits"]) == (2 * 128, 2 * 128)
    assert r.sequential_ns == pytest.approx(2 * 128 * 8 + 2 * 128 * 4)


def test_sequential_baseline_is_compute_plus_the_serial_memory_time():
    # The baseline is the same whatever the scheduler and thread count: one core, no jitter.
    runs = [simulate(toy_hierarchy(jitter_cv=0.1), s, "arrays:n=8,bytes=512,pattern=random,cost_ns=50", threads=t,
                     seed=seed, repeat=2) for s, t, seed in (("omp-static", 4, 0), ("omp-dynamic", 3, 1),
                                                            ("cilk", 2, 2))]
    # Loop 1: 8 cold blocks, 8 x 856. Loop 2 in one chunk: each block has the 7 others (3.5 KiB) through core 0
    # since, so l1 (1 KiB) holds none and l2 (4 KiB) all: 8 lines x 4 ns + 56 re-touches at l1, per block.
    expected = 16 * 50 + 8 * 856 + 8 * (8 * 4 + 56)
    assert [r.sequential_ns for r in runs] == pytest.approx([expected] * 3)


def test_aggregate_cache_of_a_parallel_run_gives_superlinear_speedup():
    # 32 arrays of 200 KiB (6.4 MiB): run sequentially, they share one core's 256 KiB l2 and live in one
    # socket's l3 (18.8 ns); with 32 workers each array sits in its own core's l1/l2 (1.9/5.5 ns) from the
    # second loop on. This is why (compute + sequential memory time) / P is no lower bound of a makespan.
    r = simulate("xeon-e5-4620", "omp-static", "arrays:n=32,bytes=204800,pattern=random", threads=32, repeat=10)
    assert r.speedup > 32
    assert r.speedup == pytest.approx(37.2, abs=0.05)  # the figure docs/cost-model.md quotes
    assert r.counters["l3_hits"] == 0 and r.counters["l2_hits"] > 0


# -- properties over random programs on xeon-e5-4620 ----------------------------------------------------------

SCHEDULERS = ["omp-static", "omp-dynamic", "omp-guided", "cilk", "hybrid", "fg-tree", "ich", "stealing", "binlpt",
              "tss"]
SIZES = [0, 8, 64, 100, 512, 4096, 40_000, 300_000, 2_000_000]  # from less than a line to more than l2
SERVED = ("l1_hits", "l2_hits", "l3_hits", "remote_l3_hits", "local_dram", "remote_dram")


class Given(Workload):
    """One loop with the costs and footprint given (for property tests: any bytes vector, any data set)."""

    name = "given"
    LISTED = False  # a test's workload: not among those the registry lists

    def __init__(self, costs, data):
        self.given, self.params = {}, {}
        self.costs_ns, self.data = np.asarray(costs, dtype=float), data

    @property
    def spec(self):
        return f"given:n={self.costs_ns.size}"

    def loops(self, rng):
        return [Loop(self.costs_ns, data=self.data)]


@st.composite
def programs(draw):
    """A program of 1-3 loops over 1-2 data sets (each of its own n and placement), or no data for some loops."""
    sets = draw(st.lists(st.tuples(st.integers(1, 48), st.sampled_from(["first-touch", "interleave"])),
                         min_size=1, max_size=2))
    loops = []
    for _ in range(draw(st.integers(1, 3))):
        which = draw(st.integers(-1, len(sets) - 1))  # -1: a loop without data
        n = sets[which][0] if which >= 0 else draw(st.integers(1, 48))
        costs = draw(st.lists(st.sampled_from([0.0, 50.0, 1000.0, 20_000.0]), min_size=n, max_size=n))
        data = None
        if which >= 0:
            nbytes = draw(st.lists(st.sampled_from(SIZES), min_size=n, max_size=n))
            data = Footprint(np.array(nbytes), draw(st.sampled_from(["stride", "stream", "random"])),
                             sets[which][1], f"set{which}")
        loops.append(Given(costs, data))
    if all(w.data is None for w in loops):  # the model needs one loop with data at least
        w = loops[0]
        w.data = Footprint(np.full(w.costs_ns.size, 4096), "stride")
    return loops


def lines(program, table):
    """Cache lines the run's chunks touch: each chunk the distinct 64-byte lines of its blocks, which lie one
    after another in memory."""
    total = 0
    for loop, lo, hi in zip(table["loop"], table["lo"], table["hi"]):
        data = program[loop % len(program)].data
        if data is not None:
            offsets = np.concatenate(([0], np.cumsum(data.bytes)))
            start, end = int(offsets[lo]), int(offsets[hi])
            total += -(-end // 64) - start // 64 if end > start else 0
    return total


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs(), scheduler=st.sampled_from(SCHEDULERS), threads=st.integers(1, 8),
       repeat=st.integers(2, 4), seed=st.integers(0, 2**16))
def test_random_programs_keep_the_invariants(program, scheduler, threads, repeat, seed):
    run = simulate_program("xeon-e5-4620", scheduler, program, threads, seed=seed, repeat=repeat)
    sizes = [w.costs_ns.size for w in program] * repeat
    # Every iteration exactly once (the run checks it and would raise; here again from the table).
    table = run.chunks
    for loop, n in enumerate(sizes):
        mine = table[(table["loop"] == loop) & (table["hi"] > table["lo"])].sort_values("lo")  # empty claims aside
        assert int((mine["hi"] - mine["lo"]).sum()) == n
        assert mine["lo"].tolist() == [0] + mine["hi"].tolist()[:-1] and mine["hi"].iloc[-1] == n
    # The same seed gives the same run, jitter included.
    again = simulate_program("xeon-e5-4620", scheduler, program, threads, seed=seed, repeat=repeat)
    assert (again.makespan_ns, again.counters, again.affinity) == (run.makespan_ns, run.counters, run.affinity)
    # Each worker's state times add up to the makespan.
    for w in range(threads):
        assert sum(times[w] for times in run.state_ns.values()) == pytest.approx(run.makespan_ns, rel=1e-9)
    # Affinity is a share; the static schedule of equal loops repeats itself exactly.
    values = [run.affinity["overall"], *run.affinity["per_loop"][1:]]
    assert all(0.0 <= v <= 1.0 for v in values)
    if scheduler == "omp-static" and len(set(sizes)) == 1:
        assert values == [1.0] * len(values)
    # Worked out as the chunks came, a few loops at a time, it is what the whole table gives.
    assert from_chunks(table, sizes) == run.affinity
    # (compute + the sequential memory time) / P bounds nothing: P cores have P private caches and more l3
    # between them than the one core of the sequential run (see the superlinear test above), and the memory
    # time of a chunk depends on where its data was left. The compute alone still has to be done by P workers,
    # none faster than the single-core clock.
    compute = sum(float(w.costs_ns.sum()) for w in program) * repeat
    assert run.makespan_ns >= compute / threads * (1 - 1e-12)
    # Every line touched is served from exactly one place (each counter is rounded to whole lines).
    total = sum(run.counters[name] for name in SERVED)
    assert abs(total - lines(program, table)) <= len(SERVED) / 2


def test_events_per_chunk_do_not_grow_with_the_iterations():
    # The same 100 chunks per loop, over 1,000 or 100,000 iterations with data: a chunk's memory time is worked
    # out in one go, so the events stay the same.
    small, large = (simulate("xeon-e5-4620", f"omp-dynamic:chunk={c}", f"arrays:n={n},bytes=64", threads=8,
                             repeat=2) for n, c in ((1000, 10), (100_000, 1000)))
    assert small.chunk_count == large.chunk_count == 200
    assert large.events == small.events


# -- bad input through the command line --------------------------------------------------------------------

NO_HIERARCHY = """\
name = "flat"
[topology]
sockets = 1
cores_per_socket = 4
[clock]
base_ghz = 2.0
[latency_ns]
same_socket = 50
[costs_ns]
atomic = 10
store = 1
loop_setup = 50
chunk = 10
combine = 5
"""


def cli_run(workload, machine="xeon-e5-4620", scheduler="omp-static", *extra):
    return ["run", "--machine", machine, "--scheduler", scheduler, "--threads", "4", "--workload", workload, *extra]


# name -> (command line, files in its folder, words the one error line must hold); {dir} is the case's folder.
CLI_CASES = {
    "negative-bytes": (cli_run("uniform:n=10,bytes=-1"), {}, ("bytes", "-1", ">= 0")),
    "arrays-bytes-below-an-element": (cli_run("arrays:n=10,bytes=-8"), {}, ("bytes", "-8", ">= 8")),
    "unknown-pattern": (cli_run("uniform:n=10,bytes=64,pattern=zigzag"), {}, ("pattern", "zigzag", "stride")),
    "unknown-placement": (cli_run("uniform:n=10,bytes=64,placement=everywhere"), {},
                          ("placement", "everywhere", "first-touch")),
    "data-beyond-memory": (cli_run("arrays:n=100000,bytes=100000000"), {}, ("does not fit", "512 GiB", "xeon-e5-4620")),
    "machine-file-without-hierarchy": (cli_run("uniform:n=10,bytes=64", "{dir}/flat.toml"),
                                       {"flat.toml": NO_HIERARCHY}, ("flat", "memory hierarchy")),
    "scheduler-without-locality": (cli_run("arrays:n=10", "xeon-e5-4620", "lbs"), {}, ("lbs", "locality")),
    "nested-takes-no-bytes": (cli_run("nested:n=4,bytes=64"), {}, ("nested", "bytes")),
    "bytes-column-and-parameter": (cli_run("file:path={dir}/costs.csv,bytes=64"),
                                   {"costs.csv": "cost_ns,bytes\n100,512\n"}, ("bytes column", "not both")),
    "bytes-column-negative": (cli_run("file:path={dir}/costs.csv"), {"costs.csv": "cost_ns,bytes\n100,-512\n"},
                              ("bytes column", ">= 0")),
    "bytes-column-fraction": (cli_run("file:path={dir}/costs.csv"), {"costs.csv": "cost_ns,bytes\n100,1.5\n"},
                              ("bytes column", "whole numbers")),
}
# A CSV with a bytes column that runs: 512 B (8 lines) and 4 KiB (64 lines) and nothing; the loop twice, so
# 144 lines in all: cold from local DRAM in the first loop, from l1 (32 KiB) in the second (static schedule).
GOOD_FILE = (cli_run("file:path={dir}/costs.csv", "xeon-e5-4620", "omp-static", "--repeat", "2", "--json"),
             {"costs.csv": "cost_ns,bytes\n100,512\n200,4096\n300,0\n"})


def prepare_in(folder, args, files) -> list[str]:
    """The case's folder, made with its files: its command line, ``{dir}`` filled in."""
    folder.mkdir(parents=True)
    for name, text in files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return [a.replace("{dir}", str(folder)) for a in args]


@pytest.fixture(scope="module")
def cli_outcomes(tmp_path_factory):
    """Every command line of this file run once, concurrently (each starts an interpreter)."""
    base = tmp_path_factory.mktemp("locality-cli")
    cases = {name: (args, files) for name, (args, files, _) in CLI_CASES.items()}
    cases["good-file"] = GOOD_FILE
    # Forked from one warm interpreter (tests/cli_runner.py); the good file as a genuine subprocess.
    return run_batch({name: (prepare_in(base / name, *case), base / name) for name, case in cases.items()},
                     real=["good-file"])


@pytest.mark.parametrize("name", sorted(CLI_CASES))
def test_bad_data_input_is_one_line_and_exit_2(cli_outcomes, name):
    proc = cli_outcomes[name]
    assert proc.returncode == 2, (proc.returncode, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("simsched: error:"), lines[0]
    for needle in CLI_CASES[name][2]:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"
    assert proc.stdout == ""


def test_a_csv_bytes_column_gives_each_iteration_its_footprint(cli_outcomes):
    proc = cli_outcomes["good-file"]
    assert proc.returncode == 0, proc.stderr
    counters = json.loads(proc.stdout)["counters"]
    assert (counters["local_dram"], counters["l1_hits"]) == (72, 72)
    assert counters["remote_dram"] == counters["l2_hits"] == counters["l3_hits"] == counters["remote_l3_hits"] == 0


def test_loops_over_one_data_set_must_have_the_same_size():
    with pytest.raises(SimschedError, match=r"loops over data 'grid' have 10 and 20 iterations"):
        simulate_program(TOY, "omp-static", ["uniform:n=10,bytes=64,data=grid", "uniform:n=20,bytes=64,data=grid"],
                         threads=2)
    # Different names are different data: fine.
    r = simulate_program(TOY, "omp-static", ["uniform:n=10,bytes=64,data=a", "uniform:n=20,bytes=64,data=b"],
                         threads=2)
    assert r.counters["local_dram"] == 30


def test_loops_over_one_data_set_must_agree_on_its_placement():
    with pytest.raises(SimschedError, match="different page placements"):
        simulate_program(TOY, "omp-static", ["uniform:n=10,bytes=64", "uniform:n=10,bytes=64,placement=interleave"],
                         threads=2)
