"""Loaded latency: a DRAM miss waits behind the other cores' misses at its node's controller and socket link.

The queue toy has round numbers, so that every wait below can be worked out by hand:

    l1     1 KiB per core, 1 ns, 64 GB/s (an element: max(1 / 10, 8 / 64) = 0.125 ns), 10 misses in flight
    dram   100 ns (200 from the other socket), 12 GB/s per core, 16 GB/s per node: a 64-byte line is served
           in S = 64 / 16 = 4 ns

A line costs, by access pattern: stream 64 / bandwidth; stride max(latency / 10, 64 / bandwidth); random
the latency. A 64-byte block has one line and 7 more elements, which its l1 serves (7 x 0.125 = 0.875 ns).
A controller (or link) that serves a line every S ns, with N misses in flight each back ``latency`` after
it was served, takes (a closed M/D/1 queue, Schweitzer's mean-value approximation)

    L(N) = (N S + latency - S + sqrt((N S - latency)^2 + 2 S latency - S^2)) / 2

for a miss, and a chunk waits L(others' + its own misses in flight) - L(its own).
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simsched import Machine, load_machine, native
from simsched.cli import main
from simsched.loaded import Queueing, closed_latency, curve_wait, queue_wait
from simsched.footprint import Footprint
from simsched.locality import DataState
from simsched.loop import Loop
from simsched.native import calibrate, memprobe, probe_figure

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")

HEADER = """name = "queue-toy"
description = "cores on memory controllers with round numbers"

[topology]
sockets = {sockets}
cores_per_socket = {cores}

[clock]
base_ghz = 1.0

[latency_ns]
same_socket = 100.0
socket_hop = 100.0

[costs_ns]
atomic = 10.0
store = 1.0
loop_setup = 0.0
chunk = 0.0
combine = 0.0
"""
L1 = """
[cache.l1]
size_kib = 1
line_bytes = 64
shared_by = "core"
latency_ns = 1
bandwidth_gbs = 64
outstanding_misses = 10
"""


def toy_text(sockets: int = 1, cores: int = 2, **dram) -> str:
    """The queue toy as a machine file, its [dram] section with these keys changed (None: left out)."""
    keys = {"size_gib": 1, "latency_ns": 100, "bandwidth_gbs": 12, "shared_bandwidth_gbs": 16}
    if sockets > 1:
        keys["remote_latency_ns"] = 200
    keys.update(dram)
    lines = [f"{key} = {json.dumps(value)}" for key, value in keys.items() if value is not None]
    return HEADER.format(sockets=sockets, cores=cores) + L1 + "\n[dram]\n" + "\n".join(lines) + "\n"


def toy(tmp_path: Path, sockets: int = 1, cores: int = 2, **dram) -> Machine:
    path = tmp_path / f"toy-{len(list(tmp_path.glob('toy-*.toml')))}.toml"
    path.write_text(toy_text(sockets, cores, **dram), encoding="utf-8")
    return load_machine(str(path))


def footprint(n: int, nbytes: int, pattern: str, data: str, placement: str = "first-touch") -> Footprint:
    return Footprint(np.full(n, nbytes, dtype=np.int64), pattern, placement, data)


def L(n: float, service: float, latency: float) -> float:
    """The docstring's closed-queue latency, written out again."""
    return (n * service + latency - service + ((n * service - latency) ** 2 + 2 * service * latency
                                               - service ** 2) ** 0.5) / 2


def state(machine: Machine, *footprints: Footprint) -> DataState:
    """A DataState with worker w on core w, for loops with these footprints; no jitter."""
    loops = [Loop(np.zeros(fp.bytes.size), data=fp) for fp in footprints]
    return DataState(machine, list(range(machine.cores)), loops)


# -- the mechanism, worked by hand ---------------------------------------------------------------------------

def test_the_closed_queue_is_idle_for_one_miss_and_serves_a_line_every_s_when_saturated():
    assert closed_latency(1, 100.0, 4.0) == pytest.approx(100.0)
    assert L(10, 4.0, 100.0) == pytest.approx(101.106, abs=1e-3)
    assert closed_latency(10, 100.0, 4.0) == pytest.approx(L(10, 4.0, 100.0))
    assert closed_latency(1000, 100.0, 4.0) == pytest.approx(1000 * 4.0 - 2.0, rel=1e-3)   # N S, less S / 2
    assert queue_wait(0.0, 10, 100.0, 64, 16) == 0.0


def test_a_second_core_missing_on_one_controller_waits_behind_the_firsts_misses(tmp_path):
    stream, stride = footprint(16, 64, "stream", "a"), footprint(4, 64, "stride", "b")
    ds = state(toy(tmp_path), stream, stride)
    # Core 0 streams 16 lines alone at its 12 GB/s: 16 x 64 / 12 = 85.33 ns. It keeps 16 x 100 / 85.33 =
    # 18.75 misses in flight (Little's law).
    assert ds.chunk(0, stream, 0, 16, 0.0) == pytest.approx(16 * 64 / 12)
    # Core 1 strides over 4 blocks meanwhile, 100 / max(100 / 10, 64 / (16 / 2)) = 10 misses in flight. With
    # S = 4: L(28.75) - L(10) = 121.38 - 101.11 = 20.28 ns of wait. A line: max((100 + 20.28) / 10, 8)
    # = 12.03 ns, and 0.875 ns for its elements.
    wait = L(28.75, 4, 100) - L(10, 4, 100)
    assert wait == pytest.approx(20.28, abs=0.01)
    assert ds.chunk(1, stride, 0, 4, 0.0) == pytest.approx(4 * ((100 + wait) / 10 + 0.875))
    # Without loaded latency the line costs max(100 / 10, 8) = 10 ns.
    ds = state(toy(tmp_path, queueing="none"), stream, stride)
    ds.chunk(0, stream, 0, 16, 0.0)
    assert ds.chunk(1, stride, 0, 4, 0.0) == pytest.approx(4 * (10.0 + 0.875))


def test_past_saturation_a_miss_takes_about_the_time_to_serve_everyones_misses(tmp_path):
    stream, stride = footprint(16, 64, "stream", "a"), footprint(4, 64, "stride", "b")
    ds = state(toy(tmp_path, shared_bandwidth_gbs=12), stream, stride)
    ds.chunk(0, stream, 0, 16, 0.0)   # 12 GB/s, the whole node; 18.75 misses in flight
    # Core 1 alone keeps 100 / max(100 / 10, 64 / 12) = 10 misses in flight. The node serves a line every
    # S = 64 / 12 = 5.33 ns, 28.75 x 5.33 = 153.3 ns for everyone's misses, more than the idle 100 ns: it is
    # saturated. The queue's latency is L(28.75) = 155.15 ns, less L(10) = 102.35 ns, a wait of 52.80 ns, and
    # a miss is back 152.8 ns after it left, within 1% of 153.3. A line: max(152.8 / 10, 64 / 6) = 15.28 ns.
    wait = L(28.75, 64 / 12, 100) - L(10, 64 / 12, 100)
    assert wait == pytest.approx(52.80, abs=0.01)
    assert 100 + wait == pytest.approx(28.75 * 64 / 12, rel=0.01)
    assert ds.chunk(1, stride, 0, 4, 0.0) == pytest.approx(4 * ((100 + wait) / 10 + 0.875))


def test_a_core_alone_waits_for_nothing(tmp_path):
    stride = footprint(8, 64, "stride", "b")
    ds = state(toy(tmp_path), stride)
    first = ds.chunk(0, stride, 0, 4, 0.0)
    assert first == pytest.approx(4 * (10.0 + 0.875))
    # Its own earlier chunk has ended when the next one starts: no other reader, no wait.
    assert ds.chunk(0, stride, 4, 8, first) == pytest.approx(first)


def test_a_measured_curve_takes_precedence_over_the_queue(tmp_path):
    stream, chase = footprint(16, 64, "stream", "a"), footprint(4, 64, "random", "b")
    # Measured: 100 ns idle, 160 ns while the other cores read 16 GB/s. At the stream's 12 GB/s:
    # 100 + 60 x 12 / 16 = 145 ns, a wait of 45 ns; a random line costs the whole latency, its 7 further
    # elements 1 ns each at the l1.
    ds = state(toy(tmp_path, loaded_latency_ns=[[0, 100], [16, 160]]), stream, chase)
    ds.chunk(0, stream, 0, 16, 0.0)
    assert ds.chunk(1, chase, 0, 4, 0.0) == pytest.approx(4 * (145.0 + 7 * 1.0))
    # The curve's own idle point is not the file's latency: only its rise is added (here to 90 ns).
    ds = state(toy(tmp_path, latency_ns=90, loaded_latency_ns=[[0, 100], [16, 160]]), stream, chase)
    ds.chunk(0, stream, 0, 16, 0.0)
    assert ds.chunk(1, chase, 0, 4, 0.0) == pytest.approx(4 * (135.0 + 7 * 1.0))


def test_remote_misses_wait_at_the_socket_link_and_local_ones_do_not(tmp_path):
    # Two sockets of two cores; the controllers have no bandwidth to queue at, the link carries 8 GB/s each
    # way (S = 8 ns). Interleaved pages: block 0 of each data set lives on node 0.
    machine = toy(tmp_path, sockets=2, shared_bandwidth_gbs=None, link_bandwidth_gbs=8)
    stream = footprint(2, 512, "stream", "a", "interleave")
    stride = footprint(2, 512, "stride", "b", "interleave")
    local = footprint(2, 512, "stride", "c", "interleave")
    ds = state(machine, stream, stride, local)
    # Core 2 (socket 1) streams 8 lines from node 0: 8 x 64 / 12 = 42.67 ns, 12 GB/s over link 0 -> 1 and
    # 8 x 200 / 42.67 = 37.5 misses in flight.
    assert ds.chunk(2, stream, 0, 1, 0.0) == pytest.approx(8 * 64 / 12)
    # Core 3 (socket 1) strides over node 0's block meanwhile, 200 / 20 = 10 misses in flight: it waits
    # L(47.5) - L(10) = 380.26 - 202.21 = 178.05 ns (S = 8); a line max(378.05 / 10, 64 / 12) = 37.8 ns,
    # and 56 elements at 0.125 ns.
    wait = L(47.5, 8, 200) - L(10, 8, 200)
    assert wait == pytest.approx(178.05, abs=0.01)
    assert ds.chunk(3, stride, 0, 1, 0.0) == pytest.approx(8 * (200 + wait) / 10 + 7.0)
    # Core 1 (socket 0) reads node 0 locally: no link, no wait (100 / 10 = 10 ns a line).
    assert ds.chunk(1, local, 0, 1, 0.0) == pytest.approx(8 * 10.0 + 7.0)


# -- properties ----------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(others_gbs=st.floats(0, 100), more_gbs=st.floats(0, 50), in_flight=st.floats(0, 500),
       more_flight=st.floats(0, 100), own=st.floats(0, 50), latency=st.floats(1, 500),
       bandwidth=st.floats(0.05, 200))
def test_the_queues_wait_never_falls_as_the_others_load_grows(others_gbs, more_gbs, in_flight, more_flight,
                                                               own, latency, bandwidth):
    wait = queue_wait(in_flight, own, latency, 64, bandwidth)
    assert 0.0 <= wait <= queue_wait(in_flight + more_flight, own, latency, 64, bandwidth) + 1e-9
    curve = ((0.0, latency), (bandwidth, latency * 1.5), (2 * bandwidth, latency * 3))
    assert 0.0 <= curve_wait(others_gbs, curve) <= curve_wait(others_gbs + more_gbs, curve)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(readers=st.lists(st.tuples(st.sampled_from(["stream", "stride", "random"]), st.integers(1, 64)),
                        min_size=1, max_size=6),
       shared=st.sampled_from([6, 16, 40]), curve=st.booleans(), probe=st.sampled_from(["stride", "random"]))
def test_a_chunk_never_gets_faster_as_readers_join_its_node(tmp_path, readers, shared, curve, probe):
    dram = {"shared_bandwidth_gbs": shared}
    if curve:
        dram["loaded_latency_ns"] = [[0, 100], [10, 130], [30, 250]]
    machine = toy(tmp_path, cores=8, **dram)
    data = [footprint(64, 64, pattern, f"r{i}") for i, (pattern, _) in enumerate(readers)]
    target = footprint(8, 64, probe, "probe")
    times = []
    for k in range(len(readers) + 1):
        ds = state(machine, *data, target)
        for i, (_, lines) in enumerate(readers[:k]):
            ds.chunk(i + 1, data[i], 0, lines, 0.0)
        times.append(ds.chunk(0, target, 0, 8, 0.0))
    assert all(b >= a - 1e-9 for a, b in itertools.pairwise(times)), times


def test_no_wait_without_a_resource_to_queue_at(tmp_path):
    assert Queueing.of(toy(tmp_path, shared_bandwidth_gbs=None).hierarchy) is None
    assert Queueing.of(toy(tmp_path, queueing="none", loaded_latency_ns=[[0, 1], [1, 2]]).hierarchy) is None
    assert Queueing.of(toy(tmp_path).hierarchy).controller


# -- through the command line --------------------------------------------------------------------------------

STRIDE_RUN = ["--scheduler", "omp-dynamic:chunk=4", "--workload", "arrays:n=256,bytes=512,pattern=stride",
              "--repeat", "2", "--json"]


def makespan(capsys, *args) -> float:
    assert main(["run", *args]) == 0
    return json.loads(capsys.readouterr().out)["makespan_ns"]


def test_without_a_resource_to_queue_at_or_with_queueing_none_machines_simulate_as_before(tmp_path, capsys):
    # The figures of the simulator before loaded latency, for the same commands.
    bare = tmp_path / "bare.toml"   # no shared bandwidth, curve or link: nothing to queue at
    bare.write_text(toy_text(shared_bandwidth_gbs=None), encoding="utf-8")
    plain = tmp_path / "plain.toml"
    plain.write_text(toy_text(), encoding="utf-8")
    off = ["--set", 'dram.queueing="none"']
    for machine, settings_ in ((bare, []), (plain, off)):
        for threads, before in (("1", 45846.0), ("2", 27033.0)):
            args = ["--machine", str(machine), "--threads", threads, *settings_, *STRIDE_RUN]
            assert makespan(capsys, *args) == before
    e3 = ["--scheduler", "hybrid", "--threads", "16", "--workload",
          "arrays:n=2048,bytes=19296,balance=unbalanced", "--repeat", "3", "--seed", "3", "--json"]
    # (Its ramp's blocks are no whole lines: a chunk brings in the distinct lines of its bytes.)
    assert makespan(capsys, "--machine", "xeon-e5-4620", *off, *e3) == 2478565.873779516
    # With its shared bandwidth to queue at, the same machine's two cores wait for each other's misses.
    assert makespan(capsys, "--machine", str(plain), "--threads", "1", *STRIDE_RUN) == 45846.0
    assert 27033.0 < makespan(capsys, "--machine", str(plain), "--threads", "2", *STRIDE_RUN) < 1.1 * 27033.0


def test_a_measured_curve_slows_cores_that_miss_together_and_queueing_none_turns_it_off(tmp_path, capsys):
    path = tmp_path / "curve.toml"
    path.write_text(toy_text(loaded_latency_ns=[[0, 100], [8, 180]]), encoding="utf-8")
    alone = makespan(capsys, "--machine", str(path), "--threads", "1", *STRIDE_RUN)
    together = makespan(capsys, "--machine", str(path), "--threads", "2", *STRIDE_RUN)
    off = makespan(capsys, "--machine", str(path), "--threads", "2", "--set", 'dram.queueing="none"',
                   *STRIDE_RUN)
    assert alone == 45846.0            # one core waits for nobody
    assert off == 27033.0              # as before loaded latency
    assert together > 1.2 * off        # each core's misses wait behind the other's


def test_the_loaded_latency_shows_in_the_machine_description(tmp_path, capsys):
    path = tmp_path / "curve.toml"
    path.write_text(toy_text(loaded_latency_ns=[[0, 100], [8, 180]]), encoding="utf-8")
    assert main(["machines", str(path)]) == 0
    expected = "loaded latency: controller measured, 100 ns at 0 GB/s, 180 ns at 8 GB/s"
    assert expected in capsys.readouterr().out
    assert main(["machines", "xeon-e5-4620"]) == 0
    assert "loaded latency: controller queue at the node's shared bandwidth" in capsys.readouterr().out


BAD = [
    ({"queueing": "md1"}, "dram.queueing must be closed or none, got 'md1'"),
    ({"loaded_latency_ns": [[1, 100], [8, 180]]}, "dram.loaded_latency_ns must be a list of at least two"),
    ({"loaded_latency_ns": [[0, 100], [8, 90]]}, "the ns (> 0) not falling"),
    ({"loaded_latency_ns": [[0, 100], [8, 180], [8, 190]]}, "the GB/s rising"),
    ({"loaded_latency_ns": [[0, 100]]}, "at least two"),
    ({"loaded_latency_ns": [[0, 100], [8, "fast"]]}, "dram.loaded_latency_ns must be"),
    ({"loaded_latency_ns": 120}, "dram.loaded_latency_ns must be"),
    ({"link_bandwidth_gbs": 8}, "dram.link_bandwidth_gbs is for machines of more than one socket"),
]


@pytest.mark.parametrize("dram, message", BAD, ids=[next(iter(d)) + str(i) for i, (d, _) in enumerate(BAD)])
def test_bad_loaded_latency_keys_are_refused_in_one_line(tmp_path, capsys, dram, message):
    path = tmp_path / "bad.toml"
    path.write_text(toy_text(**dram), encoding="utf-8")
    assert main(["run", "--machine", str(path), "--threads", "2", *STRIDE_RUN]) == 2
    err = capsys.readouterr().err
    assert err.startswith("simsched: error: ") and err.count("\n") == 1 and message in err


def test_a_bad_link_bandwidth_is_refused_by_the_command_in_one_line(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text(toy_text(sockets=2, link_bandwidth_gbs=-8), encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", str(path), "--threads",
                           "2", *STRIDE_RUN], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1
    assert "dram.link_bandwidth_gbs must be a number > 0" in proc.stderr and "Traceback" not in proc.stderr


# -- the calibration -----------------------------------------------------------------------------------------

def point(readers: int, gbs: float, ns: float) -> dict:
    return {"readers": readers, "gbs": gbs, "figure": probe_figure.Figure(ns, ns * 1.1, ns * 2, 300, 1.02)}


def measured(points: list[dict]) -> dict:
    """What ``measure_hierarchy`` returns for a host with no caches in sysfs, with these loaded-latency steps."""
    return {"line_bytes": 64, "levels": [], "knee": [], "listed_bytes": 0, "dram_bytes": 256 << 20,
            "dram_latency_ns": 100.0, "independent_ns": 20.0, "stride": [], "hot_bytes": 0,
            "hot_line_ns": 0.0,
            "dram_bandwidth_gbs": 12.0, "shared_gbs": [12.0, 16.0, 17.0], "jitter_cv": 0.01,
            "memory_bytes": 1 << 30, "cpu": 0, "loaded": points, "loaded_stream_bytes": 128 << 20}


def test_the_curve_rises_in_gbs_and_never_falls_in_latency():
    pairs, notes = memprobe.loaded_curve([point(0, 0.0, 100.0), point(1, 9.5, 130.0), point(2, 9.1, 150.0),
                                          point(4, 16.0, 125.0)])
    assert pairs == [(0.0, 100.0), (9.5, 130.0), (16.0, 130.0)]
    assert notes == ["2 reading CPU(s) left out: 9.1 GB/s, no more than the step before",
                     "4 reading CPU(s): 125.0 ns raised to the step before's"]
    assert memprobe.loaded_counts(1) == [] and memprobe.loaded_counts(2) == [0, 1]
    assert memprobe.loaded_counts(16) == [0, 1, 2, 4, 8, 15]


def test_the_calibrated_keys_load(tmp_path):
    text = HEADER.format(sockets=1, cores=3) + memprobe.hierarchy_text(
        measured([point(0, 0.0, 101.0), point(1, 9.5, 130.0), point(2, 16.5, 190.0)]))
    path = tmp_path / "host.toml"
    path.write_text(text, encoding="utf-8")
    dram = load_machine(str(path)).hierarchy.dram
    assert dram.loaded_latency_ns == ((0.0, 101.0), (9.5, 130.0), (16.5, 190.0))
    assert dram.queueing == "closed"
    line = next(line for line in text.splitlines() if line.startswith("loaded_latency_ns"))
    assert "pointer chase" in line and "10th percentile" in line and "2 CPU(s) 16.5 GB/s" in line
    # One CPU has no one to load it: no curve.
    assert "loaded_latency_ns" not in memprobe.hierarchy_text(measured([]))


@needs_native
def test_the_loaded_probe_times_a_chase_for_each_count_of_readers(monkeypatch):
    cpus = sorted(os.sched_getaffinity(0))[:2]
    cpus = cpus if len(cpus) == 2 else cpus * 2
    monkeypatch.setattr(memprobe, "LOADED_BATCHES", 5)
    monkeypatch.setattr(memprobe, "LOADED_BATCH_LOADS", 200)
    points = memprobe.loaded_latency(cpus, 1 << 20, 1 << 20, 64)
    assert [p["readers"] for p in points] == [0, 1]
    assert all(np.isfinite(p["figure"].value) and p["figure"].value > 0 for p in points)
    assert points[0]["figure"].samples == 3 * 5   # every try's batches
    assert points[0]["gbs"] == 0.0 and points[1]["gbs"] > 0.0
    with pytest.raises(ValueError):
        native._native.loaded(cpus, 1 << 20, 1 << 20, 64, [0, 2], 5, 200, 1, 10.0)


@needs_native
def test_calibrate_writes_the_loaded_curve(tmp_path, capsys, monkeypatch):
    from simsched.native import hostload

    profile = calibrate.noise_profile
    monkeypatch.setattr(memprobe, "measure_hierarchy", lambda cpus, progress: measured(
        [point(0, 0.0, 101.0), point(1, 9.5, 130.0)]))
    monkeypatch.setattr(calibrate, "noise_profile", lambda cpus: profile(cpus, samples=2000))
    monkeypatch.setattr(hostload, "look", lambda cpus: None)
    monkeypatch.setattr(hostload.Meter, "read", lambda self: None)
    out = tmp_path / "host.toml"
    # --force: on a busy host the real probes beside the stand-in may come out doubtful, which is not this
    # test's business; the file is written either way.
    assert main(["native", "calibrate", "--out", str(out), "--threads", "1", "--rounds", "100", "--force"]) == 0
    assert "chase with 1 other CPU(s) reading (9.5 GB/s): 130.0 ns" in capsys.readouterr().err
    assert load_machine(str(out)).hierarchy.dram.loaded_latency_ns == ((0.0, 101.0), (9.5, 130.0))
