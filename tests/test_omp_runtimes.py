"""OpenMP runtime profiles: runtime=gnu|llvm|mixed, their guided rules and barriers, refusals, native mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import simsched
import simsched.native as native
from simsched.analysis.publications import CENTRAL, E4_BASELINE, e3_label
from simsched.cli import main
from simsched.native import expected_chunks, native_config
from simsched.schedulers import get_scheduler
from simsched.schedulers.runtimes import guided_sizes
from simsched.sweep import load_experiment

ROOT = Path(__file__).resolve().parents[1]
MACHINE = "haswell-e5-2695v3"

# N = 100, P = 4, k = 1 under libgomp: each claim takes max(1, ceil(R/4)) of the R left.
# R = 100 -> 25, 75 -> 19, 56 -> 14, 42 -> 11, 31 -> 8, 23 -> 6, 17 -> 5, 12 -> 3, 9 -> 3, 6 -> 2,
# then 4, 3, 2 and 1 -> 1.
GNU_100_4 = [25, 19, 14, 11, 8, 6, 5, 3, 3, 2, 1, 1, 1, 1]
# The same loop under libomp: (2k + 1)P = 12 < 100, so guided; while R >= 2P(k + 1) = 16 a claim takes
# floor(R * 0.5/4) = floor(R/8): 100 -> 12, 88 -> 11, 77 -> 9, 68 -> 8, 60 -> 7, 53 -> 6, 47 -> 5, 42 -> 5,
# 37 -> 4, 33 -> 4, 29 -> 3, 26 -> 3, 23 -> 2, 21 -> 2, 19 -> 2, 17 -> 2; then R = 15 < 16: chunks of k = 1.
LLVM_100_4 = [12, 11, 9, 8, 7, 6, 5, 5, 4, 4, 3, 3, 2, 2, 2, 2] + [1] * 15


def chunk_sizes(result) -> list[int]:
    """The sizes of a one-loop result's chunks in iteration order."""
    rows = result.chunks.sort_values("lo")
    return (rows["hi"] - rows["lo"]).tolist()


def run(spec: str, threads: int = 4, workload: str = "exp-inc:n=100", seed: int = 3):
    return simsched.simulate(MACHINE, spec, workload, threads, seed=seed)


def same_run(a, b) -> bool:
    """Whether two results are the same simulation, bit for bit."""
    columns = ["worker", "lo", "hi", "start", "end"]
    return (a.makespan_ns == b.makespan_ns and a.counters == b.counters and a.state_totals == b.state_totals
            and a.chunks[columns].equals(b.chunks[columns]))


# Guided claim sequences, worked by hand


@pytest.mark.parametrize("spec", ["omp-guided:runtime=gnu", "omp-guided", "omp-guided:runtime=mixed"])
def test_libgomp_guided_claims_ceil_r_over_p(spec):
    assert chunk_sizes(run(spec)) == GNU_100_4
    assert guided_sizes("gnu", 100, 4, 1) == GNU_100_4


def test_libomp_guided_claims_r_over_2p_then_chunks_of_k():
    result = run("omp-guided:runtime=llvm")
    assert chunk_sizes(result) == LLVM_100_4
    assert guided_sizes("llvm", 100, 4, 1) == LLVM_100_4
    assert result.counters["chunks"] == len(LLVM_100_4)


def test_libomp_guided_with_a_chunk_switches_earlier():
    # k = 3: (2k + 1)P = 28 < 100; guided while R >= 2P(k + 1) = 32: 100 -> 12, 88 -> 11, 77 -> 9, 68 -> 8,
    # 60 -> 7, 53 -> 6, 47 -> 5, 42 -> 5, 37 -> 4, 33 -> 4; then R = 29: chunks of 3, the last one 2.
    expected = [12, 11, 9, 8, 7, 6, 5, 5, 4, 4] + [3] * 9 + [2]
    assert chunk_sizes(run("omp-guided:chunk=3,runtime=llvm")) == expected == guided_sizes("llvm", 100, 4, 3)


def test_libomp_runs_a_guided_loop_with_a_large_chunk_as_dynamic_and_one_thread_as_one_chunk():
    # k = 20: (2k + 1)P = 164 >= 100: libomp's dynamic schedule, chunks of 20 by fetch-and-add.
    assert chunk_sizes(run("omp-guided:chunk=20,runtime=llvm")) == [20] * 5
    # One thread: static_greedy, the whole loop with no atomic (libgomp still claims it by CAS).
    alone, gnu = run("omp-guided:runtime=llvm", threads=1), run("omp-guided:runtime=gnu", threads=1)
    assert chunk_sizes(alone) == chunk_sizes(gnu) == [100]
    assert alone.counters.get("atomics", 0) == 0 < gnu.counters["atomics"]


def test_libomp_guided_retries_by_reading_the_counter_again():
    # 28 threads racing for a short loop's guided chunks: CASes fail, and every chunk is still claimed once.
    result = run("omp-guided:runtime=llvm", threads=28, workload="uforall:n=2000,cost_ns=50")
    assert result.counters["cas_failures"] > 0
    assert chunk_sizes(result) == guided_sizes("llvm", 2000, 28, 1)


def test_the_chunk_lower_bound_holds_under_each_rule():
    for spec in ("omp-guided:runtime=gnu", "omp-guided:runtime=llvm", "omp-guided:chunk=20,runtime=llvm"):
        scheduler = get_scheduler(spec)
        k = scheduler.params["chunk"]
        for n, threads in ((100, 4), (100, 1), (5000, 28), (7, 3)):
            chunks = guided_sizes(scheduler.runtime.name, n, threads, k)
            assert 1 <= scheduler.min_chunks(n, threads) <= len(chunks)


# Barriers: the profile's, unless barrier= names one


def test_each_profile_names_its_barrier_and_an_explicit_one_wins():
    assert get_scheduler("omp-static:runtime=gnu").barrier_kind == "central"
    assert get_scheduler("omp-dynamic:runtime=llvm").barrier_kind == "hyper"
    assert get_scheduler("omp-guided").barrier_kind == "hyper"
    assert get_scheduler("taskloop:runtime=gnu").barrier_kind == "central"
    assert get_scheduler("omp-guided:runtime=gnu,barrier=tree").barrier_kind == "tree"
    assert get_scheduler("omp-static:runtime=llvm,barrier=central").barrier_kind == "central"


def test_the_gnu_profile_runs_the_central_barrier():
    for spec, central in (("omp-static:runtime=gnu", "omp-static:barrier=central"),
                          ("omp-dynamic:chunk=4,runtime=gnu", "omp-dynamic:chunk=4,barrier=central"),
                          ("omp-guided:chunk=2,runtime=gnu", "omp-guided:chunk=2,barrier=central"),
                          ("taskloop:runtime=gnu", "taskloop:barrier=central")):
        assert same_run(run(spec, threads=8, workload="exp-dec:n=800"),
                        run(central, threads=8, workload="exp-dec:n=800")), spec
    # ... which is not the hyper barrier: the same loop takes a different time.
    assert run("omp-static:runtime=gnu", threads=8).makespan_ns != run("omp-static", threads=8).makespan_ns


def test_an_explicit_barrier_overrides_the_profile():
    # libgomp's guided rule between hyper barriers is the mixed profile, bit for bit.
    assert same_run(run("omp-guided:runtime=gnu,barrier=hyper", threads=8), run("omp-guided", threads=8))
    assert same_run(run("omp-static:runtime=gnu,barrier=hyper", threads=8), run("omp-static", threads=8))


def test_the_default_is_unchanged_and_named_mixed():
    # Without runtime=, omp-static and omp-dynamic are libomp's (the hyper barrier, the same claims) and
    # omp-guided is libgomp's rule between hyper barriers: all bit for bit.
    for default, named in (("omp-static", "omp-static:runtime=llvm"),
                           ("omp-dynamic:chunk=3", "omp-dynamic:chunk=3,runtime=llvm"),
                           ("omp-guided:chunk=2", "omp-guided:chunk=2,runtime=mixed"),
                           ("taskloop", "taskloop:runtime=mixed")):
        assert same_run(run(default, threads=8), run(named, threads=8)), default
    # Canonical specs without runtime= read as they always did; a barrier= the profile has anyway drops out.
    assert get_scheduler("omp-static:barrier=hyper").spec == "omp-static"
    assert get_scheduler("omp-dynamic:barrier=central").spec == "omp-dynamic:barrier=central"
    assert get_scheduler("omp-guided:runtime=gnu,barrier=central").spec == "omp-guided:runtime=gnu"
    explicit = get_scheduler("omp-guided:runtime=gnu,barrier=hyper")
    assert explicit.spec == "omp-guided:barrier=hyper,runtime=gnu"
    assert get_scheduler("static-steal:runtime=llvm").spec == "static-steal"
    assert run("omp-guided:chunk=2,runtime=llvm").scheduler == "omp-guided:chunk=2,runtime=llvm"


def test_a_scheduler_rebuilt_with_another_runtime_takes_that_runtimes_barrier():
    rebuilt = get_scheduler(get_scheduler("omp-guided:chunk=2"), runtime="gnu")
    assert (rebuilt.barrier_kind, rebuilt.runtime.guided) == ("central", "gnu")
    kept = get_scheduler(get_scheduler("omp-guided:barrier=tree"), runtime="gnu")
    assert kept.barrier_kind == "tree"


# Refusals, in one line through the CLI


def cli(*args):
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-m", "simsched.cli", *args], capture_output=True, text=True,
                          timeout=120, env=env)


def test_an_unknown_runtime_is_refused_in_one_line():
    proc = cli("run", "--machine", MACHINE, "--scheduler", "omp-guided:runtime=foo", "--threads", "4",
               "--workload", "uforall:n=100")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == ("simsched: error: scheduler omp-guided: parameter runtime='foo' must be one of "
                           "mixed, gnu, llvm\n")


@pytest.mark.parametrize("spec, why", [
    ("static-steal:runtime=gnu", "libgomp has no static_steal schedule"),
    ("nonmonotonic-dynamic:runtime=gnu", "use omp-dynamic:runtime=gnu"),
    ("taskloop:runtime=llvm", "libomp's taskloop"),
    ("static-steal:runtime=mixed", "must be one of llvm, gnu"),
])
def test_a_runtime_without_the_schedule_is_refused_in_one_line(capsys, spec, why):
    code = main(["run", "--machine", MACHINE, "--scheduler", spec, "--threads", "2",
                 "--workload", "uforall:n=10"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("simsched: error: ") and err.count("\n") == 1 and why in err


# Native mode runs each profile's rule


def test_native_mode_runs_the_profiles_rule_and_barrier():
    assert native_config(get_scheduler("omp-guided:runtime=llvm"), 100, 4)[:2] == ("guided_llvm", "tree")
    assert native_config(get_scheduler("omp-guided:runtime=gnu"), 100, 4)[:2] == ("guided", "central")
    assert native_config(get_scheduler("omp-guided"), 100, 4)[:2] == ("guided", "tree")
    assert native_config(get_scheduler("static-steal"), 100, 4)[:2] == ("static_steal", "tree")
    assert expected_chunks("guided_llvm", 1, [100], 1, 4) == len(LLVM_100_4)


@pytest.mark.skipif(not native.available(), reason="native runtime not built")
@pytest.mark.parametrize("spec, k", [("omp-guided:runtime=llvm", 1), ("omp-guided:chunk=20,runtime=llvm", 20),
                                     ("omp-guided:runtime=gnu", 1)])
def test_native_guided_claims_the_simulators_chunks(spec, k):
    threads = min(2, len(native.cores()))
    result = native.run(spec, "uforall:n=100,cost_ns=100", threads, repeat=2)
    for loop in (0, 1):
        rows = result.chunks[result.chunks["loop"] == loop].sort_values("lo")
        assert (rows["hi"] - rows["lo"]).tolist() == guided_sizes(spec.split("runtime=")[1], 100, threads, k)


# The experiments run their publications' runtimes


def test_e4_runs_every_method_on_libgomp():
    for name in ("e4-ich-haswell", "e4-apps-haswell"):
        experiment = load_experiment(ROOT / "experiments" / f"{name}.toml")
        schedulers = [get_scheduler(s) for s in dict.fromkeys(p["scheduler"] for p in experiment.points)]
        assert {s.barrier_kind for s in schedulers} == {"central"}, name
        assert all(s.runtime.name == "gnu" for s in schedulers if hasattr(s, "runtime")), name
        assert experiment.rank["baseline"] == E4_BASELINE


def test_e3_labels_the_libgomp_runs_by_their_central_barrier():
    assert e3_label("omp-guided:chunk=0,runtime=gnu") == "omp-guided" + CENTRAL
    assert e3_label("omp-guided:chunk=0,barrier=central") == "omp-guided" + CENTRAL
    assert e3_label("omp-guided:chunk=0,runtime=llvm") == "omp-guided"
    assert e3_label("hybrid") == "hybrid"
