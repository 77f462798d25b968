"""What-if machines: latency matrices from hop counts and core groups, scaled machines, --set, core speeds, noise."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simsched.analysis.latency import compare_latency, read_latency_csv
from simsched.analysis.whatif import burden_by_threads, inflation_table, noise_inflation, winners
from simsched.cli import main
from simsched.engine import simulate
from simsched.errors import SimschedError
from simsched.machine import Machine, load_machine
from simsched.noise import Interruptions

TINY = {"topology": {"sockets": 1, "cores_per_socket": 2}, "clock": {"base_ghz": 1.0},
        "latency_ns": {"same_socket": 100}, "costs_ns": {"atomic": 0, "store": 0, "loop_setup": 0, "chunk": 0,
                                                          "combine": 0}}


def shortest_paths(machine: Machine) -> np.ndarray:
    """The latency matrix by Dijkstra over the machine's topology graph, pair by pair."""
    n = machine.cores
    out = np.zeros((n, n))
    for a in range(n):
        row = machine.links.distances(("core", a))
        for b in range(n):
            if a != b:
                out[a, b] = row[("core", b)]
    return out


@settings(max_examples=40, deadline=None)
@given(sockets=st.integers(1, 6), per=st.integers(1, 7), layout=st.sampled_from(["crossbar", "ring"]),
       links=st.sampled_from(["full", "ring"]), same=st.floats(0, 300), hop=st.floats(0, 300))
def test_latency_matrix_equals_shortest_paths_exactly(sockets, per, layout, links, same, hop):
    data = json.loads(json.dumps(TINY))
    data["topology"].update(sockets=sockets, cores_per_socket=per, core_layout=layout, socket_links=links)
    data["latency_ns"].update(same_socket=same, ring_hop=same / 3, socket_hop=hop)
    machine = Machine.from_dict(data)
    assert np.array_equal(machine.latency, shortest_paths(machine))


def test_core_groups_set_the_latency_of_the_innermost_level_two_cores_share():
    epyc = load_machine("epyc-7742-2s")
    lat = epyc.latency
    assert (lat[0, 1], lat[0, 3], lat[0, 4], lat[5, 63], lat[0, 64], lat[127, 0]) == (
        25.3, 25.3, 184.6, 184.6, 184.6 + 81.0, 184.6 + 81.0)
    data = json.loads(json.dumps(TINY))
    data["topology"].update(cores_per_socket=8, core_groups={"pair": 2, "quad": 4})
    data["latency_ns"].update(pair=10, quad=30, same_socket=50)
    lat = Machine.from_dict(data).latency
    assert (lat[0, 1], lat[0, 2], lat[0, 3], lat[0, 4], lat[6, 7], lat[5, 7]) == (10, 30, 30, 50, 10, 30)
    data["latency_ns"].update(quad=60)
    with pytest.raises(SimschedError, match="latency_ns.same_socket = 50 is below latency_ns.quad"):
        Machine.from_dict(data)


def test_a_scaled_machine_keeps_the_base_and_resizes_it():
    machine = load_machine("scaled:base=xeon-e7-4860v2,sockets=16,cores_per_socket=64")
    assert machine.cores == 1024 and machine.name == "scaled:base=xeon-e7-4860v2,sockets=16,cores_per_socket=64"
    base = load_machine("xeon-e7-4860v2")
    assert machine.costs == base.costs and machine.latency[0, 1] == base.latency[0, 1]
    assert machine.latency[0, 1023] == base.latency[0, 47]   # every two sockets one hop apart, as the base
    assert load_machine("scaled:base=xeon-e7-4860v2,sockets=8,socket_links=ring").latency[0, 4 * 12] == 60 + 4 * 60
    for spec, message in (("scaled:sockets=2", "give the machine to scale"),
                          ("scaled:base=epyc-7742-2s,sockets=257", "16448 cores"),
                          ("scaled:base=epyc-7742-2s,cores_per_socket=6", "core_groups.ccx")):
        with pytest.raises(SimschedError, match=message):
            load_machine(spec)


def test_set_changes_the_machine_of_a_run_and_names_it(capsys):
    assert main(["run", "--machine", "uniform:cores=4", "--scheduler", "omp-static", "--threads", "2",
                 "--workload", "uforall:n=2,cost_ns=1000", "--set", "clock.core_speed=[1.0, 0.5, 1.0, 1.0]",
                 "--set", "latency_ns.same_socket=50", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["machine"] == "uniform:cores=4,latency_ns=100[clock.core_speed=[1.0, 0.5, 1.0, 1.0]," \
                             "latency_ns.same_socket=50]"


def test_a_slow_core_takes_longer_for_the_same_work():
    """Worker 1 on a core of speed 0.5 runs its one 1,000 ns iteration in 2,000 ns; worker 0 in 1,000 ns."""
    machine = load_machine("uniform:cores=2[clock.core_speed=[[1, 1.0], [1, 0.5]]]")
    chunks = simulate(machine, "omp-static", "uforall:n=2,cost_ns=1000", 2).chunks
    assert list(chunks["end"] - chunks["start"]) == [1000.0, 2000.0]


def timeline(stretches, start, work):
    """When ``work`` ends from ``start``, walking the stretches one by one (the definition ``finish`` computes)."""
    t, left = start, work
    for begin, end in stretches:
        if end <= t:
            continue
        if begin > t:
            run = min(left, begin - t)
            t, left = t + run, left - run
            if left <= 0:
                return t
        t = max(t, end)
    return t + left


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), rate=st.sampled_from([0.0, 1e5, 5e5]), duration=st.floats(0.01, 1.0),
       period=st.floats(1.0, 5.0), tick=st.sampled_from([0.0, 0.3]), exponential=st.booleans(),
       start=st.floats(0, 20000), work=st.one_of(st.just(0.0), st.floats(1e-3, 20000)))
def test_work_resumes_after_each_interruption(seed, rate, duration, period, tick, exponential, start, work):
    if rate == 0 and tick == 0:
        tick = 0.3
    table = {"rate_hz": rate, "duration_us": duration, "tick_period_us": period, "tick_us": tick,
             "duration": "exponential" if exponential else "fixed"}
    core = Interruptions(np.random.default_rng(seed), table)
    end = core.finish(start, work)
    stretches = list(zip(core.start, core.end))
    assert all(b >= a for (_, a), (b, _) in zip(stretches, stretches[1:]))   # never overlapping
    assert end == pytest.approx(timeline(stretches, start, work), rel=1e-9, abs=1e-6)
    assert end >= (start + work) * (1 - 1e-12)


def test_a_timer_tick_delays_a_chunk_by_exactly_its_ticks():
    base = simulate("uniform:cores=1", "omp-static", "uforall:n=1,cost_ns=25000", 1)
    noisy = simulate("uniform:cores=1[noise.tick_period_us=10,noise.tick_us=1]", "omp-static",
                     "uforall:n=1,cost_ns=25000", 1)
    chunk, plain = noisy.chunks.iloc[0], base.chunks.iloc[0]
    assert chunk["start"] == plain["start"]
    ticks = chunk["end"] - chunk["start"] - 25000
    assert ticks in (2000.0, 3000.0)   # 25 us of work spans two or three 1 us ticks 10 us apart, by phase
    assert noisy.counters["noise_ns"] == ticks and noisy.makespan_ns == base.makespan_ns + ticks
    assert "noise_ns" not in base.counters


def test_noise_adds_no_events_and_each_seed_is_one_history():
    plain = simulate("xeon-e7-4860v2", "omp-dynamic", "uniform:n=5000", 8, seed=3)
    spec = "xeon-e7-4860v2[noise.rate_hz=20000,noise.duration_us=5]"
    noisy = simulate(spec, "omp-dynamic", "uniform:n=5000", 8, seed=3)
    assert noisy.events == plain.events and noisy.makespan_ns > plain.makespan_ns
    again = simulate(spec, "omp-dynamic", "uniform:n=5000", 8, seed=3)
    assert again.makespan_ns == noisy.makespan_ns and again.counters == noisy.counters
    assert simulate(spec, "omp-dynamic", "uniform:n=5000", 8, seed=4).makespan_ns != noisy.makespan_ns


NOISE_SEEDS = """
[experiment]
name = "noise-seeds"

[grid]
machine = ["uniform:cores=4", "uniform:cores=4[noise.rate_hz=20000,noise.duration_us=5]",
           "uniform:cores=4[noise.late_us=20,noise.late=\\"exponential\\"]"]
scheduler = "omp-static"
threads = 4
workload = "uforall:n=400,cost_ns=1000"
seed = [0, 1, 2]
"""


def test_a_sweep_gives_each_seed_its_own_noise_history(tmp_path):
    """A static schedule draws nothing itself, but its noise is drawn from the seed: no seed is a copy."""
    config = tmp_path / "noise-seeds.toml"
    config.write_text(NOISE_SEEDS, encoding="utf-8")
    assert main(["sweep", str(config), "--out", str(tmp_path / "r"), "--jobs", "1", "--quiet"]) == 0
    rows = pd.read_csv(tmp_path / "r" / "results.csv", keep_default_na=False)
    quiet, noisy = rows[rows["machine"] == "uniform:cores=4"], rows[rows["machine"] != "uniform:cores=4"]
    # The quiet machine's seeds are one run, copied; each noisy seed is simulated and draws its own history.
    assert (quiet["reused_from"] != "").sum() == 2 and quiet["makespan_ns"].nunique() == 1
    assert (noisy["reused_from"] == "").all() and set(noisy["seed_independent"].astype(str)) == {"False"}
    for machine, runs in noisy.groupby("machine"):
        assert runs["makespan_ns"].nunique() == 3, f"{machine}: seeds gave {list(runs['makespan_ns'])}"


def test_a_late_worker_starts_its_static_block_late_but_stealing_absorbs_it():
    late = "uniform:cores=4[noise.late_us=50,noise.late_workers=1]"
    work = "uforall:n=400,cost_ns=1000"
    static = simulate(late, "omp-static", work, 4)
    first = static.chunks.groupby("worker")["start"].min()
    published = simulate("uniform:cores=4", "omp-static", work, 4).chunks.groupby("worker")["start"].min()
    assert first[3] >= 50000 > first[2] and first[2] == published[2]
    # The late worker waits out the rest of its 50 us after it sees the release, and then runs as it would have.
    waited = static.counters["late_ns"]
    assert 49000 < waited < 50000 and first[3] == pytest.approx(published[3] + waited, rel=1e-12)
    plain_cilk = simulate("uniform:cores=4", "cilk", work, 4).makespan_ns
    late_cilk = simulate(late, "cilk", work, 4).makespan_ns
    assert late_cilk - plain_cilk < 0.5 * (static.makespan_ns - simulate("uniform:cores=4", "omp-static", work,
                                                                         4).makespan_ns)


def test_measured_latencies_compare_by_class(tmp_path):
    csv = tmp_path / "m.csv"
    csv.write_text(",,,\n22,,,\n110,100,,\n100,100,20,\n")   # lower-triangular, as ping-pong tools write
    matrix = read_latency_csv(csv)
    assert matrix[0, 1] == matrix[1, 0] == 22 and matrix[2, 3] == 20
    data = json.loads(json.dumps(TINY))
    data["topology"].update(cores_per_socket=4, core_groups={"pair": 2})
    data["latency_ns"].update(pair=20, same_socket=100)
    rows = {row["pairs"]: row for row in compare_latency(Machine.from_dict(data), matrix)}
    assert rows["within a pair"]["count"] == 2 and rows["within a pair"]["max_error"] == pytest.approx(2 / 22)
    assert rows["within a socket"]["max_error"] == pytest.approx(10 / 110)
    assert rows["all pairs"]["median_error"] == pytest.approx(0.0)


def test_noise_inflation_and_winners_tables():
    rows = []
    for machine, factor in (("m", 1.0), ("m[noise.late_us=5]", 1.5)):
        for scheduler, ns in (("a", 100.0), ("b", 200.0)):
            for seed in (0, 1):
                rows.append({"machine": machine, "scheduler": scheduler, "workload": "w", "threads": 4,
                             "makespan_ns": ns * factor * (1 + seed), "error": ""})
    table = inflation_table(noise_inflation(pd.DataFrame(rows)), "w")
    assert list(table.columns) == ["late_us=5"] and table.loc["a", "late_us=5"] == pytest.approx(1.5)
    curves = pd.DataFrame([{"machine": "m", "scheduler": s, "threads": 4, "workload": f"uforall:n=8,total_us={t}",
                            "sequential_ns": t * 1e3, "speedup": t / (d + t / 4), "error": "", "repeat": 1}
                           for s, d in (("a", 1.0), ("b", 10.0)) for t in (1, 10, 100, 1000)])
    assert burden_by_threads(curves).loc[:, 4].round(6).to_dict() == {"a": 1.0, "b": 10.0}
    assert list(winners(curves)["best"]) == ["a"] * 4
