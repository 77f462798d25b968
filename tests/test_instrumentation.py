"""uforall's instrumentation, the Xeon E7's turbo clock, and LB3D's code outside loops.

The ceiling of AV21's uforall curves is the benchmark's: only a loop that says it is
instrumented pays per ns of work ``instrumentation x share`` more (share: the other busy
cores of the worker's socket over its other cores), and the machine's clock is its turbo
table, with no throughput factor fitted to a benchmark.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

import simsched
from simsched.cli import main
from simsched.sweep import load_experiment
from simsched.workloads import get_workload
from simsched.workloads.apps import app_statistics, published_statistics

ROOT = Path(__file__).resolve().parents[1]
E1 = ROOT / "experiments" / "e1-burden-xeon-e7.toml"
E5 = ROOT / "experiments" / "e5-apps-xeon-e7.toml"
XEON_E7 = ROOT / "machines" / "xeon-e7-4860v2.toml"


def run_json(capsys, machine: str, scheduler: str, threads: int, workload: str) -> dict:
    """``simsched run ... --json`` in-process: the run's JSON object."""
    assert main(["run", "--machine", machine, "--scheduler", scheduler, "--threads", str(threads),
                 "--workload", workload, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("threads, share", [(1, 0.0), (3, 0.5), (5, 1.0)])
def test_hand_worked_cost_on_one_socket(capsys, threads, share):
    # uniform:cores=5 is one socket of 5 cores at one clock. With `threads` busy, each worker's socket has
    # threads - 1 of its 4 other cores busy: share 0, 2/4, 4/4. One iteration of 1 ms per worker, instrumented
    # at 0.4, then computes for 1 ms x (1 + 0.4 x share): 1.0, 1.2 and 1.4 ms.
    out = run_json(capsys, "uniform:cores=5", "omp-static", threads,
                   f"uforall:n={threads},cost_ns=1e6,instrumentation=0.4")
    assert out["state_ns"]["compute"] == pytest.approx(threads * 1e6 * (1 + 0.4 * share), rel=1e-12)
    assert out["sequential_ns"] == threads * 1e6  # the sequential baseline is the work itself


def test_uninstrumented_uforall_and_other_workloads_pay_nothing(capsys):
    machine = "uniform:cores=5"
    plain = run_json(capsys, machine, "omp-static", 5, "uforall:n=5,cost_ns=1e6")
    explicit = run_json(capsys, machine, "omp-static", 5, "uforall:n=5,cost_ns=1e6,instrumentation=0")
    other = run_json(capsys, machine, "omp-static", 5, "linear:n=5,first_ns=1e6,last_ns=1e6")
    computes = {plain["state_ns"]["compute"], explicit["state_ns"]["compute"], other["state_ns"]["compute"]}
    assert computes == {5e6}
    assert get_workload("uforall:n=8").params["instrumentation"] == 0.0


def test_an_instrumented_loop_leaves_the_next_loop_of_a_program_alone():
    # A program of an instrumented loop, then an uninstrumented one: only the first one's compute grows.
    machine = "uniform:cores=4"
    instrumented = simsched.simulate_program(machine, "omp-static", [
        "uforall:n=4,cost_ns=1e6,instrumentation=0.5", "uforall:n=4,cost_ns=2e6"], 4)
    plain = simsched.simulate_program(machine, "omp-static",
                                      ["uforall:n=4,cost_ns=1e6", "uforall:n=4,cost_ns=2e6"], 4)
    assert instrumented.state_ns["compute"].sum() == pytest.approx(4 * 1e6 * 1.5 + 4 * 2e6, rel=1e-12)
    assert plain.state_ns["compute"].sum() == pytest.approx(4 * 1e6 + 4 * 2e6, rel=1e-12)
    assert instrumented.loop_ns[1] == pytest.approx(plain.loop_ns[1], rel=1e-9)
    assert instrumented.loop_ns[0] > plain.loop_ns[0] + 0.4e6


def test_the_e1_plateau_is_the_instrumentation_and_the_turbo_clock(capsys):
    # 48 workers fill the four sockets: the clock falls from 3.2 to 3.0 GHz (factor 16/15) and the
    # instrumentation adds 0.6 per ns of work, so a long loop's speedup nears 48 / (16/15) = 45 plain
    # and 45 / 1.6 = 28.1 instrumented.
    long_loop = "uforall:n=480,total_us=100000"
    plain = run_json(capsys, "xeon-e7-4860v2", "fg-tree", 48, long_loop)
    instrumented = run_json(capsys, "xeon-e7-4860v2", "fg-tree", 48, long_loop + ",instrumentation=0.6")
    assert plain["speedup"] == pytest.approx(45.0, rel=0.005)
    assert instrumented["speedup"] == pytest.approx(45.0 / 1.6, rel=0.005)
    assert instrumented["state_ns"]["compute"] == pytest.approx(1.6 * plain["state_ns"]["compute"], rel=1e-9)


def test_the_xeon_e7_clock_is_its_turbo_table_with_no_fitted_throughput():
    machine = simsched.load_machine("xeon-e7-4860v2")
    clock = machine.data["clock"]
    assert "all_core_throughput" not in clock
    assert (clock["turbo_max_ghz"], clock["turbo_all_ghz"]) == (3.2, 3.0)
    assert np.allclose(machine.speed_factors(48), 3.2 / 3.0)
    assert machine.speed_factors(1).tolist() == [1.0]
    # Between one busy core and a full socket the clock is interpolated: 7 busy cores share 6/11 of the drop.
    assert np.allclose(machine.speed_factors(7), 3.2 / (3.2 - 0.2 * 6 / 11))
    # No clock value of the file is fitted to an experiment: the lines of [clock] cite or assume.
    text = XEON_E7.read_text(encoding="utf-8")
    section = text.split("[clock]", 1)[1].split("\n[", 1)[0]
    assert "fitted" not in section.lower()
    assert "all_core_throughput" in simsched.machine.SCHEMA["clock"]  # still a key other machines may use


def test_the_xeon_e7_file_says_fitted_less_often():
    # The E1 plateau moved from the machine file to the benchmark: one "fitted" fewer than the 7 it had.
    assert XEON_E7.read_text(encoding="utf-8").lower().count("fitted") <= 6


def test_e1_turns_the_instrumentation_on_explicitly():
    experiment = load_experiment(E1)
    workloads = {point["workload"] for point in experiment.points}
    assert len(workloads) == 30
    assert all("instrumentation" in get_workload(w).given and get_workload(w).params["instrumentation"] == 0.6
               for w in workloads)
    grid = tomllib.loads(E1.read_text(encoding="utf-8"))["grid"]
    assert grid["workload"] == "uforall:n=480,instrumentation=0.6"


def refusal(capsys, tmp_path, workload: str, threads: int = 48) -> str:
    """``simsched run`` in-process on ``workload``: it must exit 2 with one error line and write nothing."""
    assert main(["run", "--machine", "xeon-e7-4860v2", "--scheduler", "fg-tree", "--threads", str(threads),
                 "--workload", workload]) == 2
    out, err = capsys.readouterr()
    assert out == "" and list(tmp_path.iterdir()) == []
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("simsched: error: "), err
    return lines[0]


@pytest.mark.parametrize("value, needle", [
    ("-0.1", "workload uforall: parameter instrumentation=-0.1 must be >= 0"),
    ("abc", "workload uforall: parameter instrumentation='abc' is not a number"),
    ("inf", "workload uforall: parameter instrumentation='inf' must be finite"),
    ("1e300", "the iteration costs of all the program's loops, with their instrumentation, add up to"),
])
def test_a_bad_instrumentation_is_refused_in_one_line(capsys, tmp_path, monkeypatch, value, needle):
    monkeypatch.chdir(tmp_path)
    assert needle in refusal(capsys, tmp_path, f"uforall:n=480,total_us=1000,instrumentation={value}")


def test_the_console_refuses_a_bad_instrumentation_without_a_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "simsched.cli", "run", "--machine", "xeon-e7-4860v2", "--scheduler", "fg-tree",
         "--threads", "48", "--workload", "uforall:n=480,total_us=1000,instrumentation=-1"],
        check=False, capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2 and proc.stdout == "" and list(tmp_path.iterdir()) == []
    assert proc.stderr == "simsched: error: workload uforall: parameter instrumentation=-1.0 must be >= 0\n"


# -- LB3D's code outside loops ------------------------------------------------------------------------------


def test_lb3d_outside_loops_serial_caps_the_speedup_and_parallel_lifts_it(capsys):
    # LB3D spends 5.15% of its time outside loops: run serially it caps 48 workers at
    # 1 / (0.0515 + 0.9485 / 48) = 14.0; run in parallel nothing caps it but the turbo clock (45).
    serial = run_json(capsys, "xeon-e7-4860v2", "fg-tree", 48, "app:name=lb3d,scale=0.005")
    parallel = run_json(capsys, "xeon-e7-4860v2", "fg-tree", 48, "app:name=lb3d,scale=0.005,outside=parallel")
    assert serial["sequential_ns"] == pytest.approx(parallel["sequential_ns"], rel=1e-9)
    assert serial["speedup"] < 1 / (0.0515 + 0.9485 / 48)
    assert 35 < parallel["speedup"] < 45
    # Serial: the master runs it before each step's first loop; parallel: a loop of class `outside` per step.
    assert serial["serial_ns"] > 0 and "outside" not in serial["loop_class_ns"]
    assert parallel["serial_ns"] == 0 and parallel["loop_class_ns"]["outside"] > 0
    assert len(parallel["loop_names"]) == 3 * 5 and len(serial["loop_names"]) == 2 * 5


def test_lb3d_parallel_outside_keeps_the_published_statistics():
    program = get_workload("app:name=lb3d,outside=parallel").build(np.random.default_rng(0))
    stats = app_statistics(program)
    for key, published in published_statistics("lb3d").items():
        assert stats[key] == pytest.approx(published, rel=0.01), key
    # The other loops are those of the serial reading: the outside loop is drawn last.
    serial = get_workload("app:name=lb3d").build(np.random.default_rng(0))
    assert [loop.total for loop in program.loops[:2]] == [loop.total for loop in serial.loops]
    assert program.loops[2].name == "outside/lb3d.2" and program.serial_total_ns() == 0


def test_e5_runs_lb3d_outside_loops_in_parallel_and_the_other_codes_serially():
    workloads = tomllib.loads(E5.read_text(encoding="utf-8"))["grid"]["workload"]
    outside = {get_workload(w).params["name"]: get_workload(w).params["outside"] for w in workloads}
    assert outside == {"cloverleaf": "serial", "mpdata": "serial", "lb3d": "parallel"}


@pytest.mark.parametrize("workload, needle", [
    ("app:name=bfs,outside=parallel",
     "workload app: outside= is for the codes (cloverleaf, mpdata, lb3d); bfs has no code outside its loops"),
    ("app:name=lb3d,outside=both", "workload app: parameter outside='both' must be one of serial, parallel"),
])
def test_a_bad_outside_is_refused_in_one_line(capsys, tmp_path, monkeypatch, workload, needle):
    monkeypatch.chdir(tmp_path)
    assert refusal(capsys, tmp_path, workload, threads=4) == f"simsched: error: {needle}"
