"""``simsched advise TRACE``: a trace file as the program, and the OpenMP schedule clause per loop site."""

from __future__ import annotations

import json

import numpy as np
import pytest

from simsched.analysis.advice import advise, openmp_schedule
from simsched.workloads.trace import write_trace

HASWELL = "haswell-e5-2695v3"


@pytest.mark.parametrize("spec, expected", [
    ("omp-static", ("static", "schedule(static)")),
    ("omp-static:chunk=8", ("static,8", "schedule(static, 8)")),
    ("omp-dynamic", ("dynamic", "schedule(dynamic)")),
    ("omp-dynamic:chunk=64,runtime=llvm", ("dynamic,64", "schedule(dynamic, 64)")),
    ("omp-guided:chunk=1,runtime=llvm", ("guided", "schedule(guided)")),
    ("omp-guided:chunk=4", ("guided,4", "schedule(guided, 4)")),
    ("stealing", None),
    ("binlpt", None),
])
def test_openmp_schedule_of_a_scheduler(spec, expected):
    assert openmp_schedule(spec) == expected


def recorded_like(path, metadata=None):
    """Two instances of a skewed loop at one site (one heavy iteration at the end), and a uniform loop."""
    skewed = np.full(400, 100.0)
    skewed[-1] = 40_000.0
    loops = [skewed, skewed, np.full(400, 100.0)]
    return write_trace(path, loops, names=["a.c:10#0", "a.c:10#1", "b.c:7#0"], serial_ns=[0.0, 500.0, 500.0],
                       metadata=metadata or {})


def test_sites_group_instances_and_pick_the_fastest_openmp_clause(tmp_path):
    trace = recorded_like(tmp_path / "t.csv")
    candidates = ["omp-static", "omp-dynamic:chunk=1", "omp-dynamic:chunk=64"]
    advice = advise(HASWELL, f"trace:path={trace}", 4, candidates, seeds=1)
    sites = {site["site"]: site for site in advice.sites()}
    assert list(sites) == ["a.c:10", "b.c:7"]
    assert sites["a.c:10"]["instances"] == 2 and sites["b.c:7"]["instances"] == 1
    for site, loops in (("a.c:10", advice.loops[:2]), ("b.c:7", advice.loops[2:])):
        totals = {spec: sum(loop.times_ns[spec] for loop in loops) for spec in candidates}
        fastest = min(candidates, key=totals.get)
        assert sites[site]["openmp_scheduler"] == fastest
        assert sites[site]["openmp_ns"] == pytest.approx(totals[fastest])
        assert sites[site]["clause"] == openmp_schedule(fastest)[1]
    # With one heavy last iteration, a static block leaves one thread with it and a quarter of the rest:
    # dynamic chunks spread the rest over the other threads while it runs.
    assert sites["a.c:10"]["omp_schedule"].startswith("dynamic")
    whole = advice.program_openmp()
    single = advice.single_ns()
    assert whole["scheduler"] == min(single, key=single.get)


def test_advise_takes_a_trace_file_and_prints_clauses(tmp_path, main):
    trace = recorded_like(tmp_path / "t.parquet")
    proc = main("advise", trace, "--machine", HASWELL, "--threads", 4, "--seeds", 1,
                "--schedulers", "omp-static,omp-dynamic:chunk=1,stealing")
    assert proc.returncode == 0, proc.stderr
    assert "OpenMP schedule per loop site" in proc.stdout
    assert "one schedule for every schedule(runtime) loop: OMP_SCHEDULE=" in proc.stdout
    proc = main("advise", trace, "--machine", HASWELL, "--threads", 4, "--seeds", 1, "--json",
                "--schedulers", "omp-static,omp-dynamic:chunk=1,stealing")
    report = json.loads(proc.stdout)
    assert report["program"] == f"trace:path={trace}"
    assert [site["site"] for site in report["sites"]] == ["a.c:10", "b.c:7"]
    assert report["program_openmp"]["omp_schedule"] in ("static", "dynamic")


def test_a_recorded_trace_gets_the_recording_runtimes_schedules(tmp_path, main):
    trace = recorded_like(tmp_path / "t.npz", metadata={"runtime": "libiomp5"})
    proc = main("advise", trace, "--machine", HASWELL, "--threads", 4, "--seeds", 1, "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["baseline"] == "omp-static:runtime=llvm"
    assert "omp-dynamic:chunk=64,runtime=llvm" in report["schedulers"]


def test_a_missing_trace_file_is_a_workload_spec_refused(tmp_path, main):
    proc = main("advise", tmp_path / "nothing.parquet", "--machine", HASWELL, "--threads", 4)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("simsched: error: trace ") and "no such file" in lines[0]


def test_an_explicit_baseline_is_kept_for_a_recorded_trace(tmp_path, main):
    trace = recorded_like(tmp_path / "t.npz", metadata={"runtime": "libiomp5"})
    proc = main("advise", trace, "--machine", HASWELL, "--threads", 4, "--seeds", 1, "--json",
                "--baseline", "omp-static")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["baseline"] == "omp-static"
