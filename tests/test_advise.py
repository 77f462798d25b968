"""Per-loop scheduler advice: a program whose answer is known by hand, through ``simsched advise``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simsched import SimschedError, simulate
from simsched.analysis.advice import DEFAULT_SCHEDULERS, advise, split_schedulers

HASWELL = "haswell-e5-2695v3"
# Loop 0: 400 equal iterations of 1 us, 100 per worker: static splits it perfectly with one claim
# each, while dynamic pays a claim per iteration. Loop 1: a ramp over 40 iterations from 0 to 1 ms:
# static gives the last worker iterations 30..39, (30 + ... + 39) / 39 ms = 8.85 ms, while dynamic
# deals them out to within the total over 4 (5 ms) plus one iteration (1 ms).
PROGRAM = "uforall:n=400,cost_ns=1000 ; linear:n=40,first_ns=0,last_ns=1000000"
STATIC_LAST_BLOCK_NS = sum(range(30, 40)) / 39 * 1e6


def advise_cli(*args, status=0) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "advise", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == status, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def test_advice_by_hand_through_the_cli():
    proc = advise_cli(PROGRAM, "--machine", HASWELL, "--threads", 4, "--schedulers", "omp-static,omp-dynamic:chunk=1")
    lines = proc.stdout.splitlines()
    assert "2 loop(s); baseline omp-static" in lines[0]
    rows = [line.split() for line in lines[2:4]]
    assert [row[:2] for row in rows] == [["0", "omp-static"], ["1", "omp-dynamic:chunk=1"]]
    assert rows[0][4] == "1.00x"
    static_us, dynamic_us = float(rows[1][3]), float(rows[1][2])
    assert static_us > STATIC_LAST_BLOCK_NS / 1e3 and dynamic_us < 6000
    assert lines[4].startswith("program: baseline") and "best single scheduler omp-dynamic:chunk=1" in lines[4]


def test_advice_json_adds_up():
    proc = advise_cli(PROGRAM, "--machine", HASWELL, "--threads", 4, "--schedulers", "omp-dynamic:chunk=1",
                      "--baseline", "omp-static", "--json")
    advice = json.loads(proc.stdout)
    assert advice["schedulers"] == ["omp-dynamic:chunk=1", "omp-static"]  # the baseline is always a candidate
    first, second = advice["loops"]
    assert (first["best"], second["best"]) == ("omp-static", "omp-dynamic:chunk=1")
    assert first["times_ns"]["omp-dynamic:chunk=1"] > first["times_ns"]["omp-static"] == first["best_ns"]
    assert second["baseline_ns"] == second["times_ns"]["omp-static"] > STATIC_LAST_BLOCK_NS
    assert second["gain"] == pytest.approx(second["baseline_ns"] / second["best_ns"]) and second["gain"] > 1.4
    assert advice["program_baseline_ns"] == pytest.approx(first["baseline_ns"] + second["baseline_ns"])
    assert advice["program_best_ns"] == pytest.approx(first["best_ns"] + second["best_ns"])
    assert advice["program_gain"] == pytest.approx(advice["program_baseline_ns"] / advice["program_best_ns"])
    # Per-loop selection beats any one scheduler for the whole program.
    assert advice["best_single"] == "omp-dynamic:chunk=1"
    assert advice["program_best_ns"] < advice["best_single_ns"] < advice["program_baseline_ns"]


def test_each_loop_is_simulated_alone_in_a_fresh_run():
    advice = advise(HASWELL, PROGRAM, 4, ["omp-dynamic:chunk=1"], seed=2, seeds=1)
    alone = simulate(HASWELL, "omp-dynamic:chunk=1", "linear:n=40,first_ns=0,last_ns=1000000", 4, seed=2)
    assert advice.loops[1].times_ns["omp-dynamic:chunk=1"] == alone.makespan_ns


def test_kmeans_is_a_program_and_the_default_candidates_all_run():
    advice = advise(HASWELL, "kmeans:points=300,iters=2", 4)
    assert advice.schedulers == list(DEFAULT_SCHEDULERS)
    assert [loop.index for loop in advice.loops] == [0, 1]
    assert all(t is not None for loop in advice.loops for t in loop.times_ns.values())
    assert all(loop.best_ns == min(loop.times_ns.values()) for loop in advice.loops)


def test_a_scheduler_that_cannot_run_a_loop_is_skipped():
    advice = advise("cell-qs22", "nested:n=2,inner_end=8", 4, ["omp-static", "lbs"], baseline="distrib")
    (loop,) = advice.loops
    assert loop.times_ns["omp-static"] is None and loop.best in ("lbs", "distrib")
    assert advice.single_ns().keys() == {"lbs", "distrib"}


def test_repeated_loops_are_simulated_once_and_counted_each_time():
    advice = advise(HASWELL, "matmul:d=64,b=32,block_us=10", 4, ["omp-static"])
    assert len(advice.loops) == 2 and advice.baseline_ns == 2 * advice.loops[0].baseline_ns


def test_scheduler_lists_split_on_commas_keeping_parameters():
    assert split_schedulers("omp-static,omp-dynamic:chunk=4,barrier=tree, ich") == [
        "omp-static", "omp-dynamic:chunk=4,barrier=tree", "ich"]
    with pytest.raises(SimschedError, match="empty item"):
        split_schedulers("omp-static,,ich")
