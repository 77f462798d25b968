"""Gathers: independent reads of a shared array, priced per read at the level that holds it, under the chunk's work.

Worked by hand on Haswell's numbers: an array of 8 KiB sits in the 32 KiB L1, so a read costs
max(1.4 ns / 10 misses in flight, 8 B / 179 GB/s) = 0.14 ns, or a measured ``random_read_ns``.
"""

from __future__ import annotations

import tomllib

import numpy as np
import pytest

import simsched.cli
from simsched import Machine, load_machine
from simsched.footprint import Footprint, Gather
from simsched.locality import DataState, held_by_lru
from simsched.loop import Loop
from simsched.machine import builtin_machine_bytes

HASWELL = "haswell-e5-2695v3"
READS = 400                       # over 4 iterations
L1_READ_NS = max(1.4 / 10, 8 / 179)  # Haswell's L1 latency over its fill buffers, against a read's transfer


def _footprint(gather: bool) -> Footprint:
    """Four iterations of a line each, streamed; with ``gather``, 100 reads each of an 8 KiB array."""
    reads = Gather(np.full(4, READS // 4), 8192, 8, "table") if gather else None
    return Footprint(np.full(4, 64), "stream", "first-touch", "rows", gather=reads)


def _memory(machine: Machine, gather: bool, work: float) -> float:
    """The memory time of the whole footprint as one chunk of worker 0, from a fresh state."""
    fp = _footprint(gather)
    state = DataState(machine, [0], [Loop(np.ones(4), data=fp)])
    return state.chunk(0, fp, 0, 4, 0.0, work=work)


def _with(**values) -> Machine:
    """Haswell with these [dram] keys or cache.l1 random_read_ns set."""
    data = tomllib.loads(builtin_machine_bytes(HASWELL).decode())
    data["name"] = "haswell-variant"
    if "l1_random_read_ns" in values:
        data["cache"]["l1"]["random_read_ns"] = values.pop("l1_random_read_ns")
    data["dram"].update(values)
    return Machine.from_dict(data, "test")


def test_the_rule_takes_the_longer_of_the_gathers_and_the_rest():
    assert DataState.with_gathers(10.0, 50.0, 15.0) == 35.0   # 10 + (50 - 15 - 10)
    assert DataState.with_gathers(10.0, 50.0, 100.0) == 10.0  # hidden under the work
    assert DataState.with_gathers(10.0, None, 0.0) == 10.0    # no gathers (or added already)


def test_gathers_run_under_the_chunks_work_and_own_data():
    haswell = load_machine(HASWELL)
    own = _memory(haswell, gather=False, work=0.0)
    gathers = READS * L1_READ_NS  # 56 ns
    assert 0 < own < gathers
    # No work: the chunk lasts as long as its reads; some work hides part of them; much work, all of them.
    assert _memory(haswell, gather=True, work=0.0) == pytest.approx(gathers, rel=1e-12)
    assert _memory(haswell, gather=True, work=30.0) == pytest.approx(gathers - 30.0, rel=1e-12)
    assert _memory(haswell, gather=True, work=1e3) == own


def test_added_gathers_come_after_the_rest():
    added = _with(gathers="added")
    own = _memory(added, gather=False, work=0.0)
    assert _memory(added, gather=True, work=1e3) == pytest.approx(own + READS * L1_READ_NS, rel=1e-12)


def test_a_measured_random_read_replaces_latency_over_misses_in_flight():
    measured = _with(l1_random_read_ns=0.5)
    assert _memory(measured, gather=True, work=0.0) == pytest.approx(READS * 0.5, rel=1e-12)
    # Not below a read's transfer: 8 B at 179 GB/s.
    floor = _with(l1_random_read_ns=0.01)
    assert _memory(floor, gather=True, work=0.0) == pytest.approx(READS * 8 / 179, rel=1e-12)


def test_a_measured_dram_read_replaces_latency_over_misses_in_flight():
    # A 1 GiB array: each cache level holds its size's share of it, DRAM the rest at the measured 30 ns a read.
    machine = _with(random_read_ns=30.0)
    # Iterations of no data of their own: the array has the levels to itself.
    fp = Footprint(np.zeros(4), "stream", "master", "rows", gather=Gather(np.full(4, 100), 2**30, 8, "big"))
    state = DataState(machine, [0], [Loop(np.ones(4), data=fp)])
    sizes = [32 << 10, 256 << 10, 35840 << 10]
    shares = np.diff([0, *sizes]) / 2**30
    levels = [max(1.4 / 10, 8 / 179), max(4.3 / 10, 64 / 65), max(21 / 10, 64 / 34)]
    expected = float(shares @ levels) + (1 - sizes[-1] / 2**30) * 30.0
    assert state._gather(0, fp, float(READS), 0.0, []) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize("key, value, message", [
    ("gathers", '"sometimes"', "dram.gathers must be overlapped or added"),
    ("random_read_ns", "-1", "dram.random_read_ns must be a number > 0"),
])
def test_a_bad_gather_key_is_one_line_and_exit_2(tmp_path, capsys, key, value, message):
    text = builtin_machine_bytes(HASWELL).decode().replace("[dram]\n", f"[dram]\n{key} = {value}\n", 1)
    path = tmp_path / "bad.toml"
    path.write_text(text)
    assert simsched.cli.main(["machines", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err


def test_an_array_alone_is_held_in_proportion_to_the_level():
    assert held_by_lru(1 << 20, 4 << 20, 64) == 0.25
    assert held_by_lru(8 << 20, 4 << 20, 64) == 1.0
    assert held_by_lru(8 << 20, 4 << 20, 64, own_per_read=0.0, own=1e9) == 1.0


def test_own_data_read_between_two_reads_of_a_line_pushes_it_out():
    # A 4 MB array in a 4 MiB level with 4 B of own data a read (128 MB in all): held while the lines read
    # in between fit, (1 - exp(-u)) + u x 4 / 64 = 4 MiB / 4 MB, and a line is read again at u ~ Exp(1).
    held = held_by_lru(4 << 20, 4e6, 64, 4.0, 128e6)
    u = -np.log1p(-held)
    assert (1 - np.exp(-u)) + u * 4 / 64 == pytest.approx((4 << 20) / 4e6, rel=1e-9)
    assert held == pytest.approx(0.9029, abs=1e-4)
    # More own data a read, less held; own data that stays small (fits beside the array) pushes out no more
    # than itself: a level of twice the array holds it all beside 1 MB of own data, not beside 8 MB.
    assert held_by_lru(4 << 20, 4e6, 64, 12.0, 128e6) < held
    assert held_by_lru(8e6, 4e6, 64, 4.0, 1e6) == 1.0
    assert held_by_lru(8e6, 4e6, 64, 4.0, 8e6) < 1.0


def test_a_chunks_gathers_miss_more_where_its_rows_stream_through_the_same_level():
    haswell = load_machine(HASWELL)
    lone = Footprint(np.zeros(4), "stream", "master", "a", gather=Gather(np.full(4, 100), 40 << 20, 8, "x"))
    streaming = Footprint(np.full(4, 1 << 24), "stream", "master", "b",
                          gather=Gather(np.full(4, 100), 40 << 20, 8, "x"))
    state = DataState(haswell, [0], [Loop(np.ones(4), data=lone), Loop(np.ones(4), data=streaming)])
    assert state._gather_plan(streaming, 0)["dram"] > state._gather_plan(lone, 0)["dram"]

