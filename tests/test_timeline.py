"""Timelines: ``--trace`` writes Trace Event Format JSON, ``plot --timeline`` draws it as a Gantt chart."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict

import numpy as np
import pytest
from test_cli import simsched_cli

import simsched
from simsched import native

# conftest.toy_machine() with its defaults, as a machine file the command line can load.
TOY = """\
name = "toy"
[topology]
sockets = 1
cores_per_socket = 2
[clock]
base_ghz = 1.0
[latency_ns]
same_socket = 100.0
socket_hop = 0.0
transfer_fraction = 0.5
[coherence]
protocol = "snoop"
serve_ns = 0.0
[costs_ns]
atomic = 10.0
store = 1.0
loop_setup = 0.0
chunk = 0.0
combine = 0.0
"""
STATES = ("compute", "schedule", "steal", "split", "create", "sync", "idle")


def ns(us: float) -> int:
    """A trace time as Perfetto reads it: us x 1000, truncated to whole ns."""
    return int(us * 1000.0)


def check_trace(doc: dict, workers: int, pid: int) -> dict[int, list[dict]]:
    """Check the trace's structure; return each worker's slices in time order."""
    assert doc["displayTimeUnit"] == "ns"
    events = doc["traceEvents"]
    for event in events:
        assert {"ph", "ts", "pid", "tid"} <= set(event), event
        assert event["pid"] == pid
        if event["ph"] == "X":
            assert event["dur"] >= 0 and event["ts"] >= 0, event
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M" and e["name"] == "thread_name"}
    assert all(names[w] == f"worker {w}" for w in range(workers))
    tracks = defaultdict(list)
    for event in events:
        if event["ph"] == "X" and event["tid"] < workers:
            assert event["name"] in STATES
            tracks[event["tid"]].append(event)
    for slices in tracks.values():
        slices.sort(key=lambda e: (ns(e["ts"]), ns(e["dur"])))
        for before, after in zip(slices, slices[1:]):
            assert ns(before["ts"]) + ns(before["dur"]) <= ns(after["ts"]), (before, after)
    return tracks


def each_iteration_once(tracks, loops: int, n: int) -> None:
    runs = np.zeros((loops, n), dtype=np.int64)
    for slices in tracks.values():
        for event in slices:
            if event["name"] == "compute":
                args = event["args"]
                assert args["iterations"] == args["hi"] - args["lo"]
                runs[args["loop"], args["lo"]:args["hi"]] += 1
    assert (runs == 1).all()


def traced_run(tmp_path, *args):
    trace = tmp_path / "run.json"
    proc = simsched_cli("run", *args, "--json", "--trace", trace)
    return json.loads(proc.stdout), json.loads(trace.read_text())


@pytest.mark.parametrize("scheduler, workload, threads", [
    ("omp-static", "exp-dec:n=3000", 7),
    ("omp-dynamic:chunk=16", "exp-dec:n=3000", 7),
    ("stealing", "uniform:n=3000,low_ns=10,high_ns=900", 5),
    ("ich", "exp-inc:n=3000", 6),
    ("taskloop", "uforall:n=3000,cost_ns=100", 4),
    ("cilk", "exp-dec:n=3000", 7),
    ("fg-tree:reduction=merged", "uforall:n=300,cost_ns=50", 14),
])
def test_simulated_trace_is_well_formed_and_adds_up_to_the_result(tmp_path, scheduler, workload, threads):
    result, doc = traced_run(tmp_path, "--machine", "haswell-e5-2695v3", "--scheduler", scheduler,
                             "--threads", threads, "--workload", workload, "--repeat", 2, "--seed", 3)
    tracks = check_trace(doc, threads, pid=1)
    each_iteration_once(tracks, 2, 300 if "n=300" in workload else 3000)
    makespan = round(result["makespan_ns"])
    per_state = defaultdict(int)
    for w in range(threads):
        slices = tracks[w]
        # Every worker's slices tile the run, from 0 to the makespan, with no gap.
        assert ns(slices[0]["ts"]) == 0 and ns(slices[-1]["ts"]) + ns(slices[-1]["dur"]) == makespan
        assert all(ns(a["ts"]) + ns(a["dur"]) == ns(b["ts"]) for a, b in zip(slices, slices[1:]))
        for event in slices:
            per_state[event["name"]] += ns(event["dur"])
    count = sum(len(s) for s in tracks.values())   # slices are rounded to whole ns
    assert abs(per_state["compute"] - result["state_ns"]["compute"]) <= count
    if scheduler != "cilk":   # a Cilk thief starts its chunk before its unlock store drains: the steal is cut
        for state in STATES:
            assert abs(per_state[state] - result["state_ns"][state]) <= count, state
    loops = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == threads]
    assert [e["name"] for e in loops] == ["loop 0", "loop 1"]
    assert ns(loops[1]["ts"]) + ns(loops[1]["dur"]) == makespan
    counter = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert max(e["args"]["workers"] for e in counter) <= threads and counter[-1]["args"]["workers"] == 0


def test_two_thread_omp_static_timeline_on_the_toy_machine(tmp_path):
    """Worked by hand: one-way latency 100 ns, a store 1 ns, a line moved to a waiting core 50 ns, 1 GHz."""
    machine = tmp_path / "toy.toml"
    machine.write_text(TOY)
    result, doc = traced_run(tmp_path, "--machine", machine, "--scheduler", "omp-static", "--threads", 2,
                             "--workload", "uforall:n=4,cost_ns=1000")
    tracks = check_trace(doc, 2, pid=1)
    got = {w: [(e["name"], ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]), e.get("args", {}).get("lo"))
               for e in slices] for w, slices in tracks.items()}
    assert got[0] == [
        ("schedule", 0, 1, None),        # the master stores the loop descriptor
        ("sync", 1, 101, None),          # fork: worker 1's arrival (written at 0) is seen at 100, release stored
        ("compute", 101, 2101, 0),       # iterations [0, 2): 2 x 1000 ns; the descriptor is already here
        ("sync", 2101, 2351, None),      # join: worker 1's arrival at 2250 is seen at 2350, release stored
    ]
    assert got[1] == [
        ("sync", 0, 200, None),          # fork: the release, stored at 100, is seen one latency later
        ("schedule", 200, 250, None),    # reading the descriptor: the master's line moves to a waiting core
        ("compute", 250, 2250, 2),       # iterations [2, 4)
        ("sync", 2250, 2351, None),      # join: waits for the release until the run ends
    ]
    assert result["makespan_ns"] == 2351
    assert result["state_ns"]["compute"] == 4000 and result["state_ns"]["idle"] == 0


def test_recording_a_timeline_changes_nothing_and_does_not_grow_with_iterations(tmp_path):
    plain = simsched.simulate("haswell-e5-2695v3", "omp-guided", "exp-dec:n=5000", 7, seed=2)
    timed = simsched.simulate("haswell-e5-2695v3", "omp-guided", "exp-dec:n=5000", 7, seed=2, timeline=True)
    assert plain.segments is None and timed.segments is not None
    assert (plain.makespan_ns, plain.events, plain.state_totals) == (timed.makespan_ns, timed.events,
                                                                     timed.state_totals)
    sizes = []
    for n in (1_000, 1_000_000):
        result, doc = traced_run(tmp_path, "--machine", "haswell-e5-2695v3", "--scheduler", "omp-static",
                                 "--threads", 7, "--workload", f"uforall:n={n},total_us=100")
        sizes.append((result["events"], len(doc["traceEvents"])))
    # 1000 times the iterations: the same simulated events, and the same trace up to a slice or
    # counter sample per worker that rounding to whole ns makes empty or not.
    assert sizes[0][0] == sizes[1][0] and abs(sizes[0][1] - sizes[1][1]) <= 7


def test_plot_timeline_draws_a_png(tmp_path):
    result, _ = traced_run(tmp_path, "--machine", "haswell-e5-2695v3", "--scheduler", "omp-dynamic:chunk=64",
                           "--threads", 4, "--workload", "exp-dec:n=2000", "--repeat", 2)
    out = tmp_path / "gantt.png"
    proc = simsched_cli("plot", "--timeline", tmp_path / "run.json", "--out", out)
    assert proc.stdout.strip() == str(out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    # Without --out the chart lands beside the trace.
    simsched_cli("plot", "--timeline", tmp_path / "run.json")
    assert (tmp_path / "run.png").stat().st_size > 10_000


@pytest.mark.parametrize("args, message", [
    (["plot", "--timeline", "{dir}/bad.json"], "is not a JSON trace"),
    (["plot", "--timeline", "{dir}/empty.json"], "holds no worker slices"),
    (["plot", "{dir}/bad.json", "--timeline", "{dir}/empty.json"], "not both"),
    (["run", "--machine", "haswell-e5-2695v3", "--scheduler", "omp-static", "--threads", "2",
      "--workload", "uforall:n=10", "--trace", "{dir}/missing/t.json"], "--trace: folder"),
])
def test_bad_timeline_input_is_one_line(tmp_path, args, message):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "empty.json").write_text('{"traceEvents": []}')
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *(a.format(dir=tmp_path) for a in args)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(not native.available(), reason="native mode is not built")
def test_native_trace_has_the_same_format_and_adds_up(tmp_path):
    trace = tmp_path / "native.json"
    proc = simsched_cli("native", "run", "--scheduler", "omp-dynamic:chunk=25", "--threads", 2,
                        "--workload", "uniform:n=400,low_ns=100,high_ns=2000", "--repeat", 3, "--json",
                        "--trace", trace)
    result, doc = json.loads(proc.stdout), json.loads(trace.read_text())
    tracks = check_trace(doc, 2, pid=2)
    each_iteration_once(tracks, 3, 400)
    count = sum(len(s) for s in tracks.values())
    for state in ("compute", "schedule", "sync"):   # what the native runtime records
        total = sum(ns(e["dur"]) for s in tracks.values() for e in s if e["name"] == state)
        assert abs(total - result["state_ns"][state]) <= count + 1e-6 * result["state_ns"][state], state
    assert not any(e["name"] in ("steal", "split", "create") for s in tracks.values() for e in s)
    # A simulated and a native trace of one schedule draw side by side.
    sim = tmp_path / "sim.json"
    simsched_cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", "omp-dynamic:chunk=25", "--threads", 2,
                 "--workload", "uniform:n=400,low_ns=100,high_ns=2000", "--repeat", 3, "--trace", sim)
    out = tmp_path / "both.png"
    simsched_cli("plot", "--timeline", sim, trace, "--out", out)
    assert out.stat().st_size > 10_000
