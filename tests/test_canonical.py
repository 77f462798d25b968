"""Small canonical experiments with recorded expected output (regenerate with SIMSCHED_RECORD=1)."""

import json
import os
from pathlib import Path

import pytest

import simsched

RECORD = Path(__file__).parent / "data" / "canonical.json"
CASES = {
    f"{sched} | {machine} | {threads} | {workload}": (machine, sched, workload, threads)
    for machine, threads in (("xeon-e7-4860v2", 48), ("haswell-e5-2695v3", 28))
    for sched, workload in (
        ("fg-tree", "uforall:n=480,total_us=10"),
        ("fg-central", "uforall:n=480,total_us=10"),
        ("fg-tree-full", "uforall:n=480,total_us=10"),
        ("omp-static", "uforall:n=480,total_us=10"),
        ("omp-static:barrier=central,reduction=sequential", "uforall:n=480,total_us=10"),
        ("omp-dynamic:chunk=4", "exp-dec:n=2000"),
        ("omp-guided:chunk=2", "exp-inc:n=2000"),
    )
}


def observe(machine, sched, workload, threads):
    r = simsched.simulate(machine, sched, workload, threads, seed=7, repeat=2)
    return {"makespan_ns": round(r.makespan_ns, 6), "chunks": len(r.chunks),
            "counters": r.counters, "state_ns": {k: round(v, 6) for k, v in r.state_totals.items()}}


def test_canonical_outputs_match_the_record():
    observed = {name: observe(*case) for name, case in CASES.items()}
    if os.environ.get("SIMSCHED_RECORD"):
        RECORD.write_text(json.dumps(observed, indent=1, sort_keys=True) + "\n")
        pytest.skip("recorded")
    expected = json.loads(RECORD.read_text())
    assert sorted(expected) == sorted(observed)
    for name in CASES:
        assert observed[name]["counters"] == expected[name]["counters"], name
        assert observed[name]["chunks"] == expected[name]["chunks"], name
        assert observed[name]["makespan_ns"] == pytest.approx(expected[name]["makespan_ns"], rel=1e-9), name
        for state, ns in expected[name]["state_ns"].items():
            assert observed[name]["state_ns"][state] == pytest.approx(ns, rel=1e-9, abs=1e-6), (name, state)
