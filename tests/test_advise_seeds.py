"""``simsched advise`` over several seeds: means, spreads, wins, runner-ups, and candidates given exact costs."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from simsched.analysis.advice import DEFAULT_SEEDS
from simsched.cli import main

HASWELL = "haswell-e5-2695v3"
# Random iteration costs: the seeds move the candidates, and in loop 0 the best mean (binlpt) is
# not the fastest with most seeds (omp-guided is), so the ranking there is within the spread.
PROGRAM = "uniform:n=200 ; exp-dec:n=100"
CANDIDATES = "omp-static,omp-dynamic:chunk=1,omp-guided:chunk=1,binlpt,stealing"
OLD_KEYS = {"machine", "program", "threads", "seed", "baseline", "schedulers", "loops", "program_baseline_ns",
            "program_best_ns", "program_gain", "best_single", "best_single_ns"}
OLD_LOOP_KEYS = {"loop", "name", "iterations", "best", "best_ns", "baseline_ns", "gain", "times_ns"}


def advise_json(capsys, *args) -> dict:
    assert main(["advise", PROGRAM, "--machine", HASWELL, "--threads", "4", "--json", *map(str, args)]) == 0
    return json.loads(capsys.readouterr().out)


def advise_text(capsys, *args) -> list[str]:
    assert main(["advise", PROGRAM, "--machine", HASWELL, "--threads", "4", *map(str, args)]) == 0
    return capsys.readouterr().out.splitlines()


def test_times_are_means_of_the_single_seed_runs(capsys):
    advice = advise_json(capsys, "--schedulers", CANDIDATES, "--seed", 3, "--seeds", 3)
    assert advice["seed"] == 3 and advice["seeds"] == [3, 4, 5]
    assert OLD_KEYS <= advice.keys() and all(OLD_LOOP_KEYS <= loop.keys() for loop in advice["loops"])
    singles = [advise_json(capsys, "--schedulers", CANDIDATES, "--seed", seed, "--seeds", 1) for seed in (3, 4, 5)]
    assert [single["seeds"] for single in singles] == [[3], [4], [5]]
    specs = advice["schedulers"]
    moved = False
    for index, loop in enumerate(advice["loops"]):
        for spec in specs:
            runs = [single["loops"][index]["times_ns"][spec] for single in singles]
            assert loop["times_ns"][spec] == pytest.approx(sum(runs) / 3)
            assert (loop["times_min_ns"][spec], loop["times_max_ns"][spec]) == (min(runs), max(runs))
            moved |= min(runs) < max(runs)
        # The best is the fastest mean; the runner-ups are every other candidate, fastest mean first.
        assert loop["best"] == min(specs, key=lambda s: loop["times_ns"][s])
        assert loop["runner_ups"] == sorted((s for s in specs if s != loop["best"]), key=loop["times_ns"].get)
        assert loop["wins"] == {s: sum(single["loops"][index]["best"] == s for single in singles) for s in specs}
        assert loop["gain"] == pytest.approx(loop["baseline_ns"] / loop["best_ns"])
    assert moved, "the seeds should move these loops' times"
    programs = {s: [sum(loop["times_ns"][s] for loop in single["loops"]) for single in singles] for s in specs}
    assert advice["single_ns"] == pytest.approx({s: sum(runs) / 3 for s, runs in programs.items()})
    assert advice["single_min_ns"] == pytest.approx({s: min(runs) for s, runs in programs.items()})
    assert advice["single_max_ns"] == pytest.approx({s: max(runs) for s, runs in programs.items()})
    assert list(advice["single_ns"]) == sorted(specs, key=advice["single_ns"].get)
    assert advice["best_single"] == next(iter(advice["single_ns"]))
    assert advice["best_single_runner_ups"] == list(advice["single_ns"])[1:]
    assert sum(advice["single_wins"].values()) == 3


def test_default_is_several_seeds_from_seed(capsys):
    advice = advise_json(capsys, "--schedulers", "omp-static,omp-guided:chunk=1", "--seed", 2)
    assert DEFAULT_SEEDS > 1 and advice["seeds"] == list(range(2, 2 + DEFAULT_SEEDS))
    assert all(sum(loop["wins"].values()) == DEFAULT_SEEDS for loop in advice["loops"])


def test_text_shows_spread_wins_runner_ups_and_unsettled_loops(capsys):
    lines = advise_text(capsys, "--schedulers", CANDIDATES, "--seeds", 3)
    advice = advise_json(capsys, "--schedulers", CANDIDATES, "--seeds", 3)
    assert "seeds 0-2 (times are means, spread_us their min-max)" in lines[0]
    assert lines[1].split() == ["loop", "best", "best_us", "baseline_us", "gain", "spread_us", "wins", "runner-up",
                                "runner_up_us", "spread_us"]
    for row, loop in zip(lines[2:4], advice["loops"]):
        fields = row.split()
        assert fields[1] == loop["best"] and float(fields[2]) == pytest.approx(loop["best_ns"] / 1e3, abs=1e-3)
        low, high = map(float, fields[5].split("-"))
        assert (low, high) == pytest.approx((loop["times_min_ns"][loop["best"]] / 1e3,
                                             loop["times_max_ns"][loop["best"]] / 1e3), abs=1e-3)
        assert fields[6] == f"{loop['wins'][loop['best']]}/3"
        assert fields[7] == loop["runner_ups"][0]
    assert lines[4].startswith("program: baseline")
    assert lines[5] == "each scheduler for the whole program, fastest first:"
    ranking = [line.split()[0] for line in lines[7:7 + len(advice["single_ns"])]]
    assert ranking == list(advice["single_ns"])
    unsettled = [loop["loop"] for loop in advice["loops"] if loop["wins"][loop["best"]] < 3]
    assert unsettled == [0]  # binlpt has the best mean of loop 0, omp-guided is faster with most seeds
    assert "note: the best of loop(s) 0 is not the fastest with every seed: there the seeds move the candidates " \
           "more than their gaps" in lines


def test_one_seed_prints_no_spread(capsys):
    lines = advise_text(capsys, "--schedulers", CANDIDATES, "--seeds", 1, "--seed", 4)
    assert "seed 4:" in lines[0] and "spread" not in "\n".join(lines) and "wins" not in lines[1]
    assert lines[1].split()[-2:] == ["runner-up", "runner_up_us"]
    assert not any(line.startswith("note: the best") for line in lines)


@pytest.mark.parametrize("candidates, oracle", [
    ("omp-static,binlpt", "binlpt"),
    ("omp-static,binlpt:estimate_noise=0.5", None),
    ("omp-static,fac", "fac"),
    ("omp-static,fac:mu=1000,sigma=100", None),
])
def test_a_candidate_given_exact_costs_is_named_an_oracle(capsys, candidates, oracle):
    advice = advise_json(capsys, "--schedulers", candidates, "--seeds", 2)
    lines = advise_text(capsys, "--schedulers", candidates, "--seeds", 2)
    notes = [line for line in lines if "is an oracle here" in line]
    if oracle is None:
        assert advice["oracles"] == {} and notes == []
    else:
        assert list(advice["oracles"]) == [oracle] and "exact cost" in advice["oracles"][oracle]
        assert notes == [f"note: {oracle} is an oracle here: it is given {advice['oracles'][oracle]}"]


def test_default_candidates_name_binlpt_an_oracle(capsys):
    advice = advise_json(capsys, "--seeds", 1)
    assert list(advice["oracles"]) == ["binlpt"]
    assert advice["oracles"]["binlpt"] == "each iteration's exact cost (estimate_noise= makes its estimates noisy)"


def run_cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", "advise", *map(str, args)],
                          capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("args, words", [
    (["--seeds", "0"], ("seeds must be an integer from 1 to 1000", "0")),
    (["--seeds", "-2"], ("seeds must be an integer from 1 to 1000", "-2")),
    (["--seeds", "100000000"], ("seeds must be an integer from 1 to 1000", "100000000")),
    (["--seeds", "two"], ("--seeds", "expected an integer", "two")),
    (["--seed", "-1", "--seeds", "2"], ("seed must be an integer >= 0", "-1")),
])
def test_bad_seeds_are_one_line_and_status_2(capsys, args, words):
    argv = ["advise", PROGRAM, "--machine", HASWELL, "--threads", "2", "--schedulers", "omp-static", *args]
    try:
        status = main(argv)
    except SystemExit as stop:  # argparse refuses a non-integer
        status = stop.code
    out, err = capsys.readouterr()
    assert status == 2 and out == ""
    (line,) = err.splitlines()
    assert "error" in line and all(word in line for word in words), line


@pytest.mark.parametrize("program, words", [
    # A BFS's levels (the loops) and their sizes follow the random graph.
    ("bfs:graph=scale-free,n=200,gamma=2.3,source=0", "loop 1 of the program has 4 iterations with seed 0 and 3 "),
    ("bfs:graph=uniform,n=2000,degree=4,source=0", "the program has 9 loop(s) with seed 0 and 10 with seed 1"),
])
def test_a_program_whose_loops_change_with_the_seed_is_refused_several_seeds(capsys, program, words):
    assert main(["advise", program, "--machine", HASWELL, "--threads", "2", "--schedulers", "omp-static",
                 "--seeds", "3"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"simsched: error: {words}") and line.endswith("give --seeds 1"), line


def test_by_default_a_program_whose_loops_change_with_the_seed_is_advised_from_one_seed_with_a_warning(capsys):
    program = "bfs:graph=scale-free,n=200,gamma=2.3,source=0"
    assert main(["advise", program, "--machine", HASWELL, "--threads", "2", "--schedulers", "omp-static",
                 "--json"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["seeds"] == [0]
    (line,) = err.splitlines()
    assert line.startswith("simsched: warning: loop 1 of the program has 4 iterations with seed 0 and 3 ")
    assert "the advice is seed 0's alone" in line


def test_a_program_whose_loops_change_with_the_seed_runs_with_one_seed():
    proc = run_cli("bfs:graph=scale-free,n=200,gamma=2.3,source=0", "--machine", HASWELL, "--threads", 2,
                   "--schedulers", "omp-static,omp-guided:chunk=1", "--seed", 1, "--seeds", 1, "--json")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    advice = json.loads(proc.stdout)
    assert advice["seeds"] == [1] and [loop["iterations"] for loop in advice["loops"]] == [1, 3, 36, 141, 19]
