"""Native mode: the schedulers on real threads of this machine, the watchdog, calibration, the fallback."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import simsched.native as native
from simsched import SimschedError, load_machine
from simsched.cli import main
from simsched.result import CHUNK_COLUMNS

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")
THREADS = min(2, len(native.cores()))
SCHEDULERS = ["omp-static", "omp-static:barrier=central", "omp-static:chunk=3", "fg-tree", "fg-central",
              "fg-tree-full", "omp-dynamic:chunk=2", "omp-guided", "stealing:chunk=2", "ich", "ich:eps=0.5",
              "hybrid"]


def test_without_the_extension_native_mode_says_so_in_one_line(monkeypatch, capsys):
    from simsched.native import extension

    monkeypatch.setattr(extension, "_native", None)
    assert not native.available()
    with pytest.raises(SimschedError, match="native mode is not built"):
        native.run("omp-static", "uforall:n=10", 1)
    assert main(["native", "run", "--scheduler", "omp-static", "--threads", "1", "--workload", "uforall:n=10"]) == 2
    assert capsys.readouterr().err.count("\n") == 1


@needs_native
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_each_iteration_runs_once_and_the_trace_has_the_result_shape(scheduler):
    costs = np.random.default_rng(1).uniform(0, 2000, 301)
    r = native.run(scheduler, costs, THREADS, repeat=3)
    assert list(r.chunks.columns) == CHUNK_COLUMNS
    for loop in range(3):   # every iteration of every loop exactly once, from the chunk table alone
        rows = r.chunks[r.chunks["loop"] == loop]
        count = np.zeros(301, dtype=int)
        for lo, hi in zip(rows["lo"], rows["hi"]):
            count[lo:hi] += 1
        assert (count == 1).all()
    assert set(r.chunks["worker"]) <= set(range(THREADS))
    # A chunk takes at least its busy-wait, lies inside the run, and the states add up per worker.
    prefix = np.concatenate(([0.0], np.cumsum(costs)))
    work = prefix[r.chunks["hi"].to_numpy()] - prefix[r.chunks["lo"].to_numpy()]
    assert np.all((r.chunks["end"] - r.chunks["start"]).to_numpy() >= work - 1e-6)
    assert r.chunks["end"].max() <= r.makespan_ns
    assert len(r.loop_ns) == 3 and all(t > 0 for t in r.loop_ns)
    total = sum(np.asarray(t) for t in r.state_ns.values())
    np.testing.assert_allclose(total, r.makespan_ns, rtol=1e-6)
    assert r.sequential_ns == pytest.approx(3 * costs.sum())
    assert r.counters.get("chunks", len(r.chunks)) == len(r.chunks)


@needs_native
def test_dynamic_claims_one_chunk_at_a_time():
    r = native.run("omp-dynamic:chunk=5", "uforall:n=100,cost_ns=100", THREADS)
    assert len(r.chunks) == 20
    assert (r.chunks["hi"] - r.chunks["lo"] == 5).all()
    assert r.counters["chunks"] == 20


@needs_native
def test_hybrid_claims_every_partition_once():
    r = native.run("hybrid", "uforall:n=640,cost_ns=200", THREADS, repeat=2)
    partitions = 1 << (THREADS - 1).bit_length()
    # Each loop: R successful claims, and a worker gives up after at most log2 R + 1 failed ones.
    successes = r.counters["claims"] - r.counters["failed_claims"]
    assert successes == 2 * partitions
    assert r.counters["failed_claims"] <= 2 * THREADS * (partitions.bit_length() + 1)


def test_hybrid_takes_its_grain_from_its_own_range():
    # 640 iterations on 2 threads: the owner takes grain=16 at a time; without it, cilk_for's grain 640 / 16 = 40.
    from simsched.schedulers import get_scheduler

    assert native.native_config(get_scheduler("hybrid:grain=16"), 640, 2)[-1] == 16
    assert native.native_config(get_scheduler("hybrid"), 640, 2)[-1] == 40


def test_native_refuses_a_sleep_its_idle_workers_never_take():
    from simsched.schedulers import get_scheduler

    with pytest.raises(SimschedError, match="spin and never sleep, so sleep_after=5 has no native counterpart"):
        native.native_config(get_scheduler("hybrid:sleep_after=5"), 640, 2)
    native.native_config(get_scheduler("hybrid:sleep_after=128"), 640, 2)   # the default: nothing asked


def test_a_simulation_beside_a_native_run_never_sleeps():
    # Cilk's thieves sleep after 128 failed steals and pay the OS wake-up when work appears; the native
    # runtime's spin. Two workers, iterations of 200 and 1 us: the one with the short one fails far more
    # than 128 steals before the next loop, so in the plain simulation it sleeps, and is woken, every loop.
    from simsched import simulate

    workload = np.array([200_000.0, 1_000.0])
    plain = simulate("haswell-e5-2695v3", "hybrid", workload, 2, repeat=3)
    native_like = simulate("haswell-e5-2695v3", native.as_run_natively("hybrid"), workload, 2, repeat=3)
    assert plain.counters["wakeups"] > 0 and native_like.counters["wakeups"] == 0
    assert native.as_run_natively("hybrid:grain=4").params["grain"] == 4
    assert native.as_run_natively("omp-static:chunk=3").spec == "omp-static:chunk=3"


@needs_native
def test_the_validations_simulate_the_schedulers_as_run_natively(monkeypatch):
    from simsched.engine import simulate
    from simsched.native import overhead, validate

    seen = []

    def spy(machine, scheduler, *args, **kwargs):
        seen.append(scheduler)
        return simulate(machine, scheduler, *args, **kwargs)

    machine = Path(__file__).resolve().parents[1] / "machines" / "haswell-e5-2695v3.toml"
    for module in (validate, overhead):
        monkeypatch.setattr(module, "simulate", spy)
    validate.validate(machine, 1, points=2, repeat=2, schedulers=["hybrid"], openmp=False)
    overhead.overhead(machine, 1, iters_per_thread=4, outer=2, test_time_us=10, schedulers=["tbb-simple"],
                      openmp=False)
    assert {s.name for s in seen} == {"hybrid", "tbb-simple"}
    assert all(s.params["sleep_after"] == native.NEVER_SLEEPS["sleep_after"] for s in seen)


@needs_native
def test_static_blocks_are_the_simulators_blocks():
    r = native.run("fg-tree", "uforall:n=10,cost_ns=10", THREADS)
    from simsched.schedulers.base import block

    for w in range(THREADS):
        lo, hi = block(10, THREADS, w)
        row = r.chunks[r.chunks["worker"] == w]
        assert (row["lo"].tolist(), row["hi"].tolist()) == ([lo], [hi])


@needs_native
def test_watchdog_stops_a_run_that_passes_its_bound():
    with pytest.raises(SimschedError, match="time bound"):
        native.run("omp-static", "uforall:n=1000000,cost_ns=1000", THREADS, timeout_s=0.2)
    # The process is fine afterwards: the threads were torn down.
    assert native.run("omp-static", "uforall:n=10", THREADS).makespan_ns > 0


def test_more_threads_than_cpus_is_refused():
    with pytest.raises(SimschedError, match="must not share a CPU"):
        native.check_threads(len(native.cores()) + 1)


@needs_native
def test_unsupported_scheduler_is_one_clear_error():
    with pytest.raises(SimschedError, match="native mode runs"):
        native.run("cilk", "uforall:n=10", 1)


@needs_native
def test_native_run_json_reports_median_and_spread(capsys):
    assert main(["native", "run", "--scheduler", "omp-dynamic", "--threads", str(THREADS), "--workload",
                 "uforall:n=100,cost_ns=500", "--repeat", "5", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["machine"] == "host" and data["repeat"] == 5 and len(data["loop_ns"]) == 5
    assert data["makespan_ns"] == pytest.approx(float(np.median(data["loop_ns"])))
    spread = data["makespan_spread_ns"]
    assert spread["min"] <= spread["q1"] <= data["makespan_ns"] <= spread["q3"] <= spread["max"]
    assert {"chunks", "barrier_phases"} <= set(data["counters"])


@needs_native
def test_calibrate_writes_a_loadable_machine_with_plausible_values(tmp_path, capsys):
    out = tmp_path / "host.toml"
    code = main(["native", "calibrate", "--out", str(out), "--rounds", "2000"])
    err = capsys.readouterr().err
    if code == 2 and ("too busy to calibrate" in err or "figures are doubtful" in err):
        # Plausible figures need a quiet host; test_native_trust.py checks the refusal and the robust figures.
        assert not out.exists()
        pytest.skip(f"this host was too busy to calibrate: {err.strip().splitlines()[-1]}")
    assert code == 0, err
    machine = load_machine(out)
    text = out.read_text()
    assert "simsched native calibrate" in text and "Measured by" in text
    p = machine.cores
    assert p == len(native.cores())
    off_diagonal = machine.latency[~np.eye(p, dtype=bool)]
    assert off_diagonal.size == 0 or ((off_diagonal > 5) & (off_diagonal < 10_000)).all()
    assert 0 < machine.costs["atomic"] < 1000
    assert machine.wakeup_ns > 0
    assert "transfer_fraction = " in text and 0.05 <= machine.transfer_fraction <= 1
    # The simulator runs on the measured machine.
    from simsched import simulate

    assert simulate(machine, "fg-tree", "uforall:n=100", p).makespan_ns > 0


def test_calibrate_states_the_atomics_of_the_cpu_architecture():
    import platform
    import tomllib

    from simsched.machine import Machine
    from simsched.native.calibrate import atomics_line

    UNIFORM = Path(__file__).resolve().parent.parent / "machines" / "uniform.toml"

    assert atomics_line("x86_64").startswith('atomics = "locked"')
    assert atomics_line("aarch64", "processor : 0\nFeatures : fp asimd atomics crc32\n").startswith('atomics = "locked"')
    assert atomics_line("aarch64", "processor : 0\nFeatures : fp asimd crc32\n").startswith('atomics = "reservation"')
    assert atomics_line("ppc64le").startswith('atomics = "reservation"')
    assert atomics_line("mips").startswith("# atomics: not known for mips")
    # The line this host gets is valid TOML that the machine file's checks accept.
    line = atomics_line()
    if not line.startswith("#"):
        data = tomllib.loads(f"[coherence]\n{line}\n")
        machine = Machine.from_dict({**tomllib.loads(UNIFORM.read_text(encoding="utf-8")), **data}, "host.toml")
        assert machine.atomics == data["coherence"]["atomics"], platform.machine()


def test_transfer_fraction_is_the_cas_ping_pong_less_an_atomic_over_the_read_spin_one():
    from simsched.native.calibrate import transfer_fraction

    handoff = np.array([[0.0, 100.0, 200.0], [100.0, 0.0, 100.0], [200.0, 100.0, 0.0]])
    cas = np.array([[0.0, 56.0, 86.0], [56.0, 0.0, 46.0], [86.0, 46.0, 0.0]])
    # Per pair (56-6)/100 = 0.5, (86-6)/200 = 0.4, (46-6)/100 = 0.4: the median.
    assert transfer_fraction(handoff, cas, 6.0) == pytest.approx(0.4)
    assert transfer_fraction(np.zeros((1, 1)), np.zeros((1, 1)), 6.0) == 0.5  # one CPU: no pair, the default
    assert transfer_fraction(handoff, np.full((3, 3), 6.0), 6.0) == 0.05  # never zero: a transfer costs something


def test_calibrate_refuses_a_folder_as_output(tmp_path):
    if not native.available():
        pytest.skip("native runtime not built")
    assert main(["native", "calibrate", "--out", str(tmp_path)]) == 2


@needs_native
def test_replay_runs_exactly_the_simulated_chunks_in_order(tmp_path, capsys):
    from simsched import simulate

    sim = simulate("haswell-e5-2695v3", "omp-dynamic:chunk=7", "uniform:n=150,low_ns=100,high_ns=900", THREADS,
                   seed=3, repeat=2)
    measured, table = native.replay(sim.chunks, "uniform:n=150,low_ns=100,high_ns=900", seed=3)
    keys = ["worker", "loop", "lo", "hi"]
    # The same chunks, each on the worker that ran it in the simulation ...
    assert sorted(map(tuple, measured.chunks[keys].to_numpy())) == sorted(map(tuple, sim.chunks[keys].to_numpy()))
    # ... and in the same order on each worker.
    for w in range(THREADS):
        mine = lambda frame: frame[frame["worker"] == w].sort_values("start")[["loop", "lo"]].to_numpy().tolist()
        assert mine(measured.chunks) == mine(sim.chunks)
    assert table["measured_ns"].notna().all() and (table["measured_ns"] > 0).all()
    # The CLI reads the table simsched run --chunks wrote.
    chunks = tmp_path / "sim.csv"
    sim.chunks.to_csv(chunks, index=False)
    assert main(["native", "replay", str(chunks), "--workload", "uniform:n=150,low_ns=100,high_ns=900",
                 "--seed", "3", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chunks"] == len(sim.chunks) and data["median_abs_chunk_error"] >= 0


@needs_native
def test_replay_refuses_a_table_that_does_not_fit_the_workload(tmp_path):
    from simsched import simulate

    sim = simulate("haswell-e5-2695v3", "omp-static", "uforall:n=50", THREADS)
    with pytest.raises(SimschedError, match="does not fit"):
        native.replay(sim.chunks, "uforall:n=40")
    with pytest.raises(SimschedError, match="lacks column"):
        native.replay(sim.chunks.drop(columns=["hi"]), "uforall:n=50")


@needs_native
def test_validate_reports_native_and_simulated_burden(tmp_path, capsys):
    machine = tmp_path / "host.toml"
    assert main(["native", "calibrate", "--out", str(machine), "--rounds", "1000", "--force"]) == 0
    capsys.readouterr()
    assert main(["native", "validate", "--machine", str(machine), "--points", "3", "--repeat", "3",
                 "--json"]) == 0
    records = json.loads(capsys.readouterr().out)
    names = [r["scheduler"] for r in records]
    assert names[:len(native.NATIVE)] == list(native.NATIVE)
    for record in records:
        assert {"scheduler", "threads", "native_d_us", "sim_d_us", "median_abs_error"} <= set(record)
        assert record["threads"] == len(native.cores())
        assert record["native_d_us"] >= 0 and record["sim_d_us"] >= 0 and record["median_abs_error"] >= 0


def test_validate_without_a_calibrated_machine_is_one_clear_error(tmp_path, capsys):
    if not native.available():
        pytest.skip("native runtime not built")
    assert main(["native", "validate", "--machine", str(tmp_path / "absent.toml")]) == 2
    assert "simsched native calibrate" in capsys.readouterr().err


@needs_native
def test_memory_kernel_touches_each_iterations_array():
    plain = native.run("omp-static", "uforall:n=32,cost_ns=0", THREADS, repeat=3)
    touched = native.run("omp-static", "uforall:n=32,cost_ns=0", THREADS, repeat=3, array_bytes=1 << 18)
    assert len(touched.chunks) == len(plain.chunks)
    # 32 iterations x 32,768 strided doubles take far longer than 32 empty iterations. Each side's fastest loop:
    # other work on the host only ever slows a loop, so a descheduled thread in an empty loop decides nothing.
    assert min(touched.loop_ns) > 10 * min(plain.loop_ns[1:])
    with pytest.raises(SimschedError, match="at most 2 GiB"):
        native.run("omp-static", "uforall:n=1000", THREADS, array_bytes=1 << 22)
    with pytest.raises(SimschedError, match="at least 8"):
        native.run("omp-static", "uforall:n=10", THREADS, array_bytes=4)


def test_median_confidence_interval_brackets_the_median():
    from simsched.native.validate import median_ci

    times = [999.0] + list(range(1, 22))          # the first loop is discarded
    lo, hi = median_ci(times)
    assert lo <= np.median(range(1, 22)) <= hi and lo >= 1 and hi <= 21


@needs_native
@pytest.mark.parametrize("array_bytes", [8, 16, 40, 56, 104, 96])
def test_memory_kernel_stays_inside_small_arrays(array_bytes):
    r = native.run("omp-static", "uforall:n=3,cost_ns=0", 1, repeat=3, array_bytes=array_bytes)
    assert len(r.chunks) == 3


@needs_native
def test_watchdog_stops_a_run_that_never_waits():
    # One thread and empty iterations: no wait ever spins, and the bound must still hold.
    with pytest.raises(SimschedError, match="time bound"):
        native.run("omp-static", "uforall:n=1000000,cost_ns=0", 1, repeat=1000, timeout_s=0.3)


@needs_native
@pytest.mark.parametrize("scheduler", ["hybrid", "omp-static:barrier=central", "stealing"])
def test_each_workers_states_fit_inside_the_makespan(scheduler):
    for seed in range(5):
        r = native.run(scheduler, "exp-dec:n=2000", THREADS, seed=seed, repeat=6)
        busy = r.state_ns["compute"] + r.state_ns["schedule"] + r.state_ns["sync"]
        assert (busy <= r.makespan_ns * (1 + 1e-9)).all()
        assert sum(r.loop_ns) == pytest.approx(r.makespan_ns)


@needs_native
@pytest.mark.parametrize("args, message", [
    (["run", "--scheduler", "omp-dynamic:chunk=3000000000", "--threads", "1", "--workload", "uforall:n=10"],
     "chunk must be an integer"),
    (["run", "--scheduler", "omp-static", "--threads", "1", "--workload", "uforall:n=10", "--repeat", "3000000000"],
     "repeat must be an integer"),
    (["run", "--scheduler", "omp-static", "--threads", "1", "--workload", "uforall:n=10", "--seed", "-1"],
     "seed must be an integer"),
    (["run", "--scheduler", "omp-static", "--threads", "1", "--workload", "uforall:n=10", "--timeout", "nan"],
     "timeout must be"),
    (["run", "--scheduler", "omp-static", "--threads", "1", "--workload", "uforall:n=3000000000"],
     "at most 2147483647 iterations"),
    (["calibrate", "--rounds", "0"], "rounds must be an integer"),
    (["validate", "--n", "64", "--machine", "absent.toml"], "give --locality too"),
    (["validate", "--sweeps", "3", "--machine", "absent.toml"], "give --locality too"),
    (["validate", "--locality", "--sweeps", "0", "--machine",
      str(Path(__file__).resolve().parents[1] / "machines" / "haswell-e5-2695v3.toml")],
     "--sweeps must be an integer in [1, 1000]"),
    (["validate", "--workload", "trace:path=t.npz", "--sweeps", "3"], "--sweeps belong to the other validations"),
    (["run", "--scheduler", "tbb-simple:sleep_after=5", "--threads", "1", "--workload", "uforall:n=10"],
     "tbb-simple's idle workers spin and never sleep"),
    (["validate", "--locality", "--points", "3"], "--points and --no-openmp belong to the uforall validation"),
])
def test_bad_native_input_is_one_line(args, message, capsys, tmp_path):
    if args[0] == "calibrate":
        args = args + ["--out", str(tmp_path / "host.toml")]
    assert main(["native", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err


@needs_native
def test_replay_refuses_malformed_chunk_tables():
    from simsched import simulate

    chunks = simulate("haswell-e5-2695v3", "omp-static", "uforall:n=4", 1).chunks
    backwards = pd.concat([chunks, pd.DataFrame([{"worker": 0, "loop": 0, "lo": 2, "hi": 0,
                                                  "start": 0.0, "end": 1.0}])])
    with pytest.raises(SimschedError, match="lo >= hi"):
        native.replay(backwards, "uforall:n=4")
    with pytest.raises(SimschedError, match="integers"):
        native.replay(chunks.assign(worker=0.5), "uforall:n=4")
    with pytest.raises(SimschedError, match="timeout"):
        native.replay(chunks, "uforall:n=4", timeout_s=0)


def _native_cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", "native", *map(str, args)], capture_output=True,
                          text=True, cwd=cwd, timeout=300)


@needs_native
@pytest.mark.parametrize("workload, message", [
    ("nested", "workload nested nests loops in its iterations"),
    ("nested:n=4,step=0", "nests loops"),
    ("matmul:b=128", "workload matmul:b=128 is a program of 16 loops"),
])
def test_native_run_refuses_what_is_not_one_flat_loop(workload, message, tmp_path):
    chunks = tmp_path / "chunks.csv"
    proc = _native_cli("run", "--scheduler", "omp-static", "--threads", 1, "--workload", workload,
                       "--chunks", chunks)
    assert proc.returncode == 2 and proc.stdout == "" and not chunks.exists()
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


@needs_native
def test_calibrate_and_validate_share_a_default_that_works_outside_a_checkout(tmp_path):
    # tmp_path has no machines/ folder: calibrate writes host.toml there and says where.
    proc = _native_cli("calibrate", "--threads", 1, "--rounds", 100, "--force", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    written = tmp_path / "host.toml"
    assert proc.stdout.strip() == str(written.resolve()) and load_machine(written).cores == 1
    proc = _native_cli("validate", "--threads", 1, "--points", 2, "--repeat", 1, "--no-openmp", "--json",
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r["scheduler"] for r in json.loads(proc.stdout)] == list(native.NATIVE)
    proc = _native_cli("validate", "--threads", 1, "--points", 2, "--repeat", 1, "--no-openmp", "--json",
                       "--schedulers", "omp-dynamic:chunk=2,omp-guided", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert [r["scheduler"] for r in json.loads(proc.stdout)] == ["omp-dynamic:chunk=2", "omp-guided"]
    proc = _native_cli("validate", "--threads", 1, "--schedulers", "omp-static,cilk", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == "" and "not cilk" in proc.stderr, proc.stderr


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout)


@needs_native
def test_native_run_figures_are_per_loop_in_json_and_text():
    args = ["run", "--scheduler", "omp-static", "--threads", THREADS, "--workload", "uforall:n=100,cost_ns=500",
            "--repeat", 7]
    data = _json(_native_cli(*args, "--json"))
    assert data["makespan_ns"] == pytest.approx(float(np.median(data["loop_ns"])))
    assert data["sequential_ns"] == pytest.approx(100 * 500)   # one loop, not all seven
    assert data["speedup"] == pytest.approx(data["sequential_ns"] / data["makespan_ns"])
    assert data["total_ns"] == pytest.approx(sum(data["loop_ns"]), rel=1e-9)
    assert data["repeat"] == 7 and data["chunks"] == 7 * THREADS
    proc = _native_cli(*args)
    assert proc.returncode == 0, proc.stderr
    figure = {name: float(re.search(rf"^  {name} +([0-9.]+)", proc.stdout, flags=re.M).group(1))
              for name in ("makespan", "sequential", "speedup", "whole run")}
    assert figure["sequential"] == pytest.approx(50.0)
    assert figure["speedup"] == pytest.approx(figure["sequential"] / figure["makespan"], rel=2e-3)
    assert figure["whole run"] > 6 * figure["makespan"]


@needs_native
@pytest.mark.parametrize("scheduler", ["omp-static", "fg-tree", "fg-central", "omp-static:barrier=central",
                                       "omp-dynamic:chunk=2",
                                       "omp-guided", "stealing", "ich", "hybrid"])
def test_native_counters_are_the_simulators_keys(scheduler):
    common = ["--scheduler", scheduler, "--threads", THREADS, "--workload", "uforall:n=64,cost_ns=100", "--json"]
    simulated = subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", "haswell-e5-2695v3",
                                *map(str, common)], capture_output=True, text=True, timeout=120)
    measured = _json(_native_cli("run", *common))
    memory_model = {"atomics", "transfers", "cas_failures"}   # modeled coherence traffic: no native counterpart
    assert set(measured["counters"]) == set(_json(simulated)["counters"]) - memory_model
    assert all(isinstance(v, int) and v >= 0 for v in measured["counters"].values())


def test_the_last_level_holds_up_to_the_chase_before_the_first_nearer_drams_latency():
    from simsched.native.memprobe import held_bytes

    mib = 1 << 20
    # First chase 15 ns, DRAM 150 ns: 12 MiB at 83 ns is nearer DRAM (68 above 15, 67 below 150), so 8 MiB holds.
    assert held_bytes([(4 * mib, 15.0), (8 * mib, 18.0), (12 * mib, 83.0), (16 * mib, 120.0)], 150.0, 32 * mib) \
        == 8 * mib
    # 12 MiB at 82 ns is still nearer the first chase (67 above, 68 below): it holds; then 16 MiB does not.
    assert held_bytes([(4 * mib, 15.0), (12 * mib, 82.0), (16 * mib, 120.0)], 150.0, 32 * mib) == 12 * mib
    # No chase nearer DRAM: all sysfs lists; no chase at all (a level no larger than the one inside): the same.
    assert held_bytes([(4 * mib, 15.0), (32 * mib, 40.0)], 150.0, 32 * mib) == 32 * mib
    assert held_bytes([], 150.0, 32 * mib) == 32 * mib


def test_misses_in_flight_stop_where_the_bandwidth_limits():
    from simsched.native.memprobe import misses_in_flight

    assert misses_in_flight(150.0, 5.0, 2.0) == 30       # latency over the time a miss costs
    assert misses_in_flight(150.0, 0.5, 2.0) == 75       # misses cheaper than a line's transfer: the transfer
    assert misses_in_flight(150.0, -1.0, 2.0) == 75      # ... also where noise makes them look free
    assert misses_in_flight(1.0, 5.0, 2.0) == 1          # never below one


@needs_native
def test_calibrate_writes_a_loadable_hierarchy_with_increasing_sizes(tmp_path):
    from simsched.native.hostinfo import caches

    out = tmp_path / "host.toml"
    proc = _native_cli("calibrate", "--threads", 1, "--rounds", 100, "--out", out, "--force")
    assert proc.returncode == 0, proc.stderr
    hierarchy = load_machine(out).hierarchy
    assert hierarchy is not None
    levels, listed = hierarchy.levels, caches()
    # Sizes as sysfs lists them, but the last level's: as much of it as the pointer chases found holding data.
    assert [lv.size_bytes for lv in levels[:-1]] == [c.size_bytes for c in listed[:-1]]
    assert levels[-1].size_bytes <= listed[-1].size_bytes
    assert all(a.size_bytes < b.size_bytes for a, b in zip(levels, levels[1:]))
    latencies = [lv.latency_ns for lv in levels] + [hierarchy.dram.latency_ns]
    assert all(0 < a <= b for a, b in zip(latencies, latencies[1:])) and latencies[-1] < 10_000
    assert all(lv.bandwidth_gbs > 0 for lv in levels) and hierarchy.dram.shared_bandwidth_gbs > 0
    # Independent loads at random lines of each level and of DRAM, never faster outward.
    reads = [lv.random_read_ns for lv in levels] + [hierarchy.dram.random_read_ns]
    assert all(0 < a <= b for a, b in zip(reads, reads[1:])) and reads[-1] < 10_000
    assert hierarchy.outstanding_misses >= 1
    text = out.read_text()
    assert "pointer chase" in text and "Independent random loads" in text and "sysfs" in text
    # The misses in flight are what the stride kernel overlaps: DRAM latency over what the model must charge a line
    # from DRAM (the kernel's time a line there, less its time where the core's caches hold the data, plus what the
    # model charges a line there), or over a line's transfer at the DRAM bandwidth where that is longer.
    latency, miss, transfer = map(float, re.search(r"DRAM chase latency ([0-9.]+) ns / max\((-?[0-9.]+) ns, "
                                                   r"([0-9.]+) ns\)\): the misses in flight", text).groups())
    cold, hot, charged = map(float, re.search(r"takes ([0-9.]+) ns a line where over [0-9.]+ [KM]iB in this core's "
                                              r"caches it takes ([0-9.]+) ns and the model charges ([0-9.]+) ns",
                                              text).groups())
    assert abs(miss - (cold - hot + charged)) <= 0.015 and transfer > 0
    # The file prints the latency to 0.1 ns and the times to 0.01 ns: a quotient that close to a half may round
    # either way from the printed figures.
    per_line = max(miss, transfer)
    quotients = ((latency - 0.05) / (per_line + 0.005), (latency + 0.05) / max(per_line - 0.005, 1e-9))
    assert hierarchy.outstanding_misses in {max(1, round(q)) for q in quotients}
    assert [size for size, _ in hierarchy.stride_misses] == [1024, 4096, 16384, 65536]
    assert dict(hierarchy.stride_misses)[16384] == hierarchy.outstanding_misses
    assert "reading every word" in text


@needs_native
def test_a_memory_probe_past_its_bound_stops():
    from simsched.native import _native

    with pytest.raises(TimeoutError, match="did not finish"):
        _native.memory("chase", [native.cores()[0]], 8 << 20, 64, 10**12, 1, 0.2)


@needs_native
@pytest.mark.parametrize("pattern", ["stride", "stream", "random"])
@pytest.mark.parametrize("placement", ["first-touch", "interleave"])
def test_native_run_follows_the_footprint_and_reports_affinity(pattern, placement, tmp_path):
    workload = f"arrays:n=96,bytes=2048,balance=unbalanced,pattern={pattern},placement={placement}"
    chunks = tmp_path / "chunks.csv"
    data = _json(_native_cli("run", "--scheduler", "omp-static", "--threads", THREADS, "--workload", workload,
                             "--repeat", 4, "--json", "--chunks", chunks))
    table = pd.read_csv(chunks, comment="#")
    for loop in range(4):   # every iteration of every loop exactly once
        count = np.zeros(96, dtype=int)
        for lo, hi in table.loc[table["loop"] == loop, ["lo", "hi"]].itertuples(index=False):
            count[lo:hi] += 1
        assert (count == 1).all()
    assert data["affinity"]["per_loop"] == [None, 1.0, 1.0, 1.0] and data["affinity"]["overall"] == 1.0


@needs_native
def test_the_memory_kernel_takes_each_iterations_own_bytes():
    # One iteration per chunk on one thread: the unbalanced ramp's last 16 iterations touch about 7x the data of
    # the first 16 (medians, so that one iteration slowed by another process does not decide).
    r = native.run("omp-dynamic:chunk=1", "arrays:n=64,bytes=65536,balance=unbalanced", 1, repeat=3)
    last = r.chunks[r.chunks["loop"] == 2].sort_values("lo")
    took = (last["end"] - last["start"]).to_numpy()
    assert np.median(took[-16:]) > 3 * np.median(took[:16])
    # The cost busy-waits after the kernel: a loop of 20 us iterations takes at least its 20 x 64 us.
    timed = native.run("omp-static", "arrays:n=64,bytes=512,cost_ns=20000", 1, repeat=2)
    assert min(timed.loop_ns) >= 64 * 20000
    # --array-bytes still gives every iteration of a workload without bytes an array (stride).
    plain = native.run("omp-static", "uforall:n=64,cost_ns=0", 1, repeat=3)
    touched = native.run("omp-static", "uforall:n=64,cost_ns=0", 1, repeat=3, array_bytes=65536)
    assert min(touched.loop_ns) > 10 * max(plain.loop_ns[1:])


@needs_native
@pytest.mark.parametrize("args, message", [
    (["--workload", "uforall:n=10,bytes=64,pattern=zigzag"], "pattern"),
    (["--workload", "arrays:n=10,bytes=-8"], "bytes"),
    (["--workload", "uforall:n=10,bytes=-8"], "bytes"),
    (["--workload", "arrays:n=1000,bytes=4000000"], "at most 2 GiB"),
    (["--workload", "arrays:n=10,bytes=64", "--array-bytes", "64"], "--array-bytes"),
    (["--workload", "uforall:n=10,bytes=64", "--array-bytes", "64"], "--array-bytes"),
])
def test_bad_footprints_are_one_line(args, message):
    proc = _native_cli("run", "--scheduler", "omp-static", "--threads", 1, *args)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr


@needs_native
def test_validate_locality_prints_its_table(tmp_path):
    from simsched.native.hostinfo import caches

    if len(caches()) < 2:
        pytest.skip("sysfs lists fewer than two cache levels here")
    machine = tmp_path / "host.toml"
    assert _native_cli("calibrate", "--threads", THREADS, "--rounds", 100, "--out", machine,
                       "--force").returncode == 0
    # A small last level keeps the working sets (8x it at most) small, so the check takes seconds.
    text = machine.read_text()
    last = re.findall(r"^size_kib = (\d+)", text, flags=re.M)
    small = int(last[-2]) * 2
    machine.write_text(re.sub(rf"^size_kib = {last[-1]}\b", f"size_kib = {small}", text, flags=re.M))
    args = ["validate", "--locality", "--machine", machine, "--threads", THREADS, "--n", 64, "--repeat", 2,
            "--sweeps", 3]
    proc = _native_cli(*args)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:2] == ["scheduler", "working"] and len(lines) == 1 + 3 * 4 + 2
    assert lines[0].split()[4:10] == ["body", "ns", "native", "us", "worst", "sim"]
    assert lines[-2].startswith("native: the best of 3 sweeps over the working sets (worst: the slowest); body: "
                                "each iteration's cost_ns") and "the native kernel's own cost" in lines[-2]

    assert lines[-1].startswith("median |error| over working sets: omp-static")
    assert f"8x l{len(caches())}" in proc.stdout and "hybrid" in proc.stdout
    data = _json(_native_cli(*args, "--json"))
    dynamic = f"omp-dynamic:chunk={max(1, 64 // (8 * THREADS))}"   # cilk_for's grain
    assert [row["scheduler"] for row in data["rows"][:3]] == ["omp-static", dynamic, "hybrid"]
    assert {row["total_bytes"] for row in data["rows"]} >= {8 * small * 1024}
    for row in data["rows"]:
        assert row["native_us"] > 0 and row["sim_us"] > 0 and row["threads"] == THREADS and row["body_ns"] >= 0
        assert len(row["sweeps_native_us"]) == 3 == len(row["sweeps_body_ns"])
        assert row["native_us"] == min(row["sweeps_native_us"]) and row["body_ns"] == min(row["sweeps_body_ns"])
        assert row["native_affinity"] is not None and 0 <= row["native_affinity"] <= 1
        if row["scheduler"] == "omp-static":
            assert row["native_affinity"] == 1.0 == row["sim_affinity"]
    assert set(data["median_abs_error"]) == {"omp-static", dynamic, "hybrid"}


def test_locality_validation_keeps_each_figures_best_sweep(monkeypatch):
    """Three sweeps of stand-in native runs: each row's native time, affinity and body come from its best sweep."""
    from types import SimpleNamespace

    from simsched.native import validate

    sweep_ns = {0: 300.0, 1: 100.0, 2: 200.0}   # the second sweep is the fastest everywhere
    calls = {"run": 0, "body": 0}
    per_sweep = 4 * 3   # four working sets, three schedulers

    def fake_run(name, workload, threads, repeat):
        sweep = calls["run"] // per_sweep
        calls["run"] += 1
        return SimpleNamespace(loop_ns=[1e9] + [sweep_ns[sweep]] * (repeat - 1),
                               affinity={"overall": 0.1 * (sweep + 1)})

    def fake_body(model, nbytes, n):
        calls["body"] += 1
        return 5.0 + calls["body"]   # rises with each sweep: the first sweep's is the least

    monkeypatch.setattr(validate, "require", lambda: None)
    monkeypatch.setattr(validate, "run", fake_run)
    monkeypatch.setattr(validate, "loop_body_ns", fake_body)
    machine = Path(__file__).resolve().parents[1] / "machines" / "xeon-e5-4620.toml"
    table = validate.validate_locality(machine, threads=1, n=8, repeat=3, sweeps=3)
    assert calls == {"run": 3 * per_sweep, "body": 3 * 4} and len(table) == per_sweep
    for row in table.itertuples(index=False):
        assert row.sweeps_native_us == [0.3, 0.1, 0.2] and row.native_us == 0.1
        assert row.native_affinity == pytest.approx(0.2)   # the best sweep's, not the median's or the first's
        assert row.body_ns == min(row.sweeps_body_ns) == row.sweeps_body_ns[0]
    text = validate.format_locality(table).splitlines()
    assert [line.split()[-6:-4] for line in text[1:-2]] == [["0.1", "0.3"]] * per_sweep   # native: the best; worst
    assert text[-2].startswith("native: the best of 3 sweeps over the working sets (worst: the slowest)")
    one = validate.format_locality(table.assign(sweeps_native_us=[[0.1]] * per_sweep)).splitlines()[-2]
    assert one.startswith("native: the best of 1 sweep over")


@needs_native
@pytest.mark.skipif(THREADS < 2, reason="a late worker needs two threads")
def test_a_late_worker_holds_a_static_loop_up_by_its_delay():
    """The last worker spins 300 us after each release: a static loop of 20 us blocks lasts at least that long."""
    late = native.run("omp-static", "uforall:n=200,total_us=40", 2, repeat=5, late_us=300)
    # Lower bounds only: a busy host can make any native run slower, never the late worker earlier.
    assert late.makespan_ns >= 300e3 + 20e3
    assert late.chunks.groupby("worker")["start"].min()[1] >= 300e3   # times count from the first loop's start
    for bad, message in ((-1, "late_us"), (2e6, "late_us"), (True, "late_us")):
        with pytest.raises(SimschedError, match=message):
            native.run("omp-static", "uforall:n=20", 2, late_us=bad)
    with pytest.raises(SimschedError, match="at least 2 threads"):
        native.run("omp-static", "uforall:n=20", 1, late_us=5)


@needs_native
def test_the_noise_probe_reports_a_profile_and_calibrate_writes_it_commented_out():
    from simsched.native.calibrate import noise_profile, noise_text

    profile = noise_profile(native.cores()[:1], quantum_ns=10_000, samples=2_000)
    assert profile["samples"] == 2_000 and profile["rate_hz"] >= 0 and 0 <= profile["share"] < 1
    assert profile["duration_us"] >= 0 and profile["max_us"] >= 0
    text = noise_text({**profile, "rate_hz": 100.0, "duration_us": 12.5})
    assert "# [noise]\n# rate_hz = 100.0" in text and "# duration_us = 12.50" in text
    # Uncommented, the section is a valid [noise] of a machine file.
    section = "\n".join(line[2:].split("#")[0] for line in text.splitlines() if line.startswith(("# [", "# rate",
                                                                                             "# duration")))
    import tomllib

    from simsched.noise import check_noise

    parsed = tomllib.loads(section)["noise"]
    assert parsed == {"rate_hz": 100.0, "duration_us": 12.5, "duration": "exponential"}
    check_noise(parsed, 2, "host.toml")   # raises on a section a machine file would refuse
