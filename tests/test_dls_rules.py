"""The chunk-rule DLS techniques (fsc, mfsc, fac, tfss, fiss, viss, rnd, pls, tss's rounding): hand-worked chunk
tables from the published formulas, the same tables in simulated runs and natively, and bad parameters."""

from __future__ import annotations

import json

import numpy as np
import pytest
from cli_runner import run_batch

import simsched
import simsched.native as native
from simsched.loop import Loop
from simsched.schedulers import get_scheduler
from simsched.schedulers.dls import claim_ns
from tests.conftest import toy_machine

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")
THREADS = min(2, len(native.cores())) if native.available() else 2


def table_sizes(spec: str, n: int, threads: int, costs=None, seed: int = 0) -> list[int]:
    """The chunk sizes of ``spec``'s table for a loop of ``costs`` (default: n iterations of 1000 ns)."""
    loop = Loop(np.full(n, 1000.0) if costs is None else costs)
    bounds = get_scheduler(spec).bounds(n, threads, loop, np.random.default_rng(seed))
    assert bounds[0] == 0 and bounds[-1] == n
    return np.diff(bounds).tolist()


def simulated_sizes(spec: str, workload: str, threads: int, seed: int = 0) -> list[int]:
    """The chunk sizes a simulated run of ``spec`` ran, in iteration order."""
    r = simsched.simulate(toy_machine(cores=4), spec, workload, threads, seed=seed)
    rows = r.chunks.sort_values("lo")
    return (rows["hi"] - rows["lo"]).tolist()


# Hand-worked tables: (spec, n, P, sizes). The arithmetic is in the comments.
HAND_WORKED = [
    # fsc with h = 50 ns, sigma = 100 ns, N = 1000, P = 4: sqrt(2) 1000 50 = 70710.7; 100 * 4 * sqrt(ln 4) =
    # 400 * 1.17741 = 470.96; (70710.7 / 470.96)^(2/3) = 150.14^(2/3) = 28.25 -> 28: 35 chunks of 28 = 980, then 20.
    ("fsc:h=50,sigma=100", 1000, 4, [28] * 35 + [20]),
    # sigma = 0 (equal iterations): the formula is unbounded, k = ceil(N/P) = ceil(100/3) = 34: 34, 34, 32.
    ("fsc", 100, 3, [34, 34, 32]),
    # mfsc, N = 100, P = 4: T = 25, 25 ln 2 / ln 25 = 17.33 / 3.219 = 5.38; floor(0.55 + 5.38) = 5: 20 chunks of 5.
    ("mfsc", 100, 4, [5] * 20),
    # T = ceil(1000 / 3) = 334: 334 * 0.6931 / 5.811 = 39.84; floor(40.39) = 40: 25 chunks of 40.
    ("mfsc", 1000, 3, [40] * 25),
    # fac, N = 100, P = 2, mu = 1000 (the loop's), sigma = 1000: P sigma / (2 mu) = 1.
    #   batch 0: b = 1/sqrt(100) = 0.1, x0 = 1 + 0.01 + 0.1 sqrt(2.01) = 1.1518, ceil(100 / 2.3035) = 44, 44 (88)
    #   batch 1: R = 12, b = 0.2887, x = 2 + 0.0833 + 0.2887 * 2.0207 = 2.6667, ceil(12 / 5.333) = 3, 3 (94)
    #   batch 2: R = 6, b = 0.4082, x = 2 + 0.1667 + 0.4082 * 2.0412 = 3.0, ceil(6 / 6) = 1, 1 (96)
    #   then R = 4 and R = 2 give ceil(0.61) = ceil(0.25) = 1: four more chunks of 1.
    ("fac:sigma=1000", 100, 2, [44, 44, 3, 3, 1, 1, 1, 1, 1, 1]),
    # sigma = 0: x0 = 1, one batch of ceil(N/P): 25 each.
    ("fac", 100, 4, [25] * 4),
    # tfss, N = 100, P = 4: TSS f = 13, C = ceil(200/14) = 15, d = 12/14 = 0.857; batch j is the mean of TSS
    # chunks 4j..4j+3: 13 - (4j + 1.5) d = 11.71 -> 12, 8.29 -> 9, 4.86 -> 5; 48 + 36 + 15 = 99, then 1.
    ("tfss", 100, 4, [12] * 4 + [9] * 4 + [5, 5, 5, 1]),
    # fiss, N = 100, P = 4, B = P - 1 = 3, X = 5: c0 = floor(100/20) = 5, bump = floor(2*100*(1 - 3/5) / (4*3*2))
    # = floor(80/24) = 3: stages of 5, 8, 11 (20 + 32 + 44 = 96), then 14 cut to the 4 left.
    ("fiss", 100, 4, [5] * 4 + [8] * 4 + [11] * 3 + [11, 4]),
    # B = 2 given, N = 100, P = 2, X = 4: c0 = floor(100/8) = 12, bump = floor(200 * 0.5 / (2*2*1)) = 25:
    # 12, 12, 37, 37 (98), then 62 cut to 2.
    ("fiss:stages=2", 100, 2, [12, 12, 37, 37, 2]),
    # viss, N = 100, P = 4, X = P = 4: c0 = floor(100/16) = 6; stages 6, floor(6 * 1.5) = 9, floor(6 * 1.75) = 10:
    # 24 + 36 + 40 = 100.
    ("viss", 100, 4, [6] * 4 + [9] * 4 + [10] * 4),
    # X = 1, N = 100, P = 2: c0 = 50: one stage of 50, 50.
    ("viss:x=1", 100, 2, [50, 50]),
    # pls, N = 100, P = 4, SWR = 0.5: static blocks of ceil(50/4) = 13 (52), then GSS ceil(R/4) of R = 48, 36,
    # 27, 20, 15, 11, 8, 6, 4, 3, 2, 1: 12, 9, 7, 5, 4, 3, 2, 2, 1, 1, 1, 1.
    ("pls", 100, 4, [13] * 4 + [12, 9, 7, 5, 4, 3, 2, 2, 1, 1, 1, 1]),
    # SWR = 0: no static part (P empty blocks), all GSS: N = 10, P = 2: 5, 3, 1, 1.
    ("pls:swr=0", 10, 2, [0, 0, 5, 3, 1, 1]),
    # tss, N = 100, P = 2: f = 25, C = ceil(200/26) = 8. Rounded step 24/7 = 3.43: 25, 22, 18, 15, 11, 8 (99), 1.
    ("tss", 100, 2, [25, 22, 18, 15, 11, 8, 1]),
    # Truncated step floor(24/7) = 3: 25, 22, 19, 16, 13 (95), then 10 cut to 5.
    ("tss:rounding=truncate", 100, 2, [25, 22, 19, 16, 13, 5]),
]


@pytest.mark.parametrize("spec, n, threads, expected", HAND_WORKED)
def test_chunk_tables_follow_the_published_rules(spec, n, threads, expected):
    assert table_sizes(spec, n, threads) == expected
    # A simulated run runs exactly that table (pls's empty static blocks run nothing).
    assert simulated_sizes(spec, f"uforall:n={n}", threads) == [s for s in expected if s]


def test_fsc_defaults_to_the_loops_deviation_and_the_modeled_claim():
    # Toy machine: one-way latency 100, transfer fraction 0.5 (a transfer is 50), atomic 10, chunk 0:
    # a claim from another worker costs 50 + 10 = 60 ns; with one worker, no transfer: 10 ns.
    sim = simsched.engine.Simulation(toy_machine(cores=4), 4)
    assert claim_ns(sim) == 60.0
    assert claim_ns(simsched.engine.Simulation(toy_machine(cores=4), 1)) == 10.0
    # Costs alternating 0 and 2000 ns: sigma = 1000. N = 1000, P = 4, h = 60:
    # sqrt(2) 1000 60 / (1000 * 4 * 1.17741) = 84852.8 / 4709.6 = 18.02; 18.02^(2/3) = 6.87 -> 6.
    costs = np.tile([0.0, 2000.0], 500)
    r = simsched.simulate(toy_machine(cores=4), "fsc", costs, 4)
    assert set((r.chunks["hi"] - r.chunks["lo"]).tolist()) == {6, 4}   # 166 chunks of 6, then 4
    assert r.counters["chunks"] == 167
    # The same with h and sigma given.
    assert table_sizes("fsc:h=60,sigma=1000", 1000, 4) == [6] * 166 + [4]


def test_fsc_on_one_worker_takes_the_loop_in_one_chunk():
    # ln 1 = 0: the formula is unbounded; k = ceil(N/1) = N.
    assert table_sizes("fsc:h=50,sigma=100", 37, 1) == [37]


def test_fac_defaults_to_the_loops_mean_and_deviation():
    # mu = 1000, sigma = 1000 from the costs, as fac:sigma=1000 on equal costs of 1000.
    costs = np.tile([0.0, 2000.0], 50)
    assert table_sizes("fac", 100, 2, costs) == table_sizes("fac:sigma=1000", 100, 2)
    assert table_sizes("fac:mu=1000,sigma=1000", 100, 2, costs) == [44, 44, 3, 3, 1, 1, 1, 1, 1, 1]


def test_tss_rounds_by_default_with_the_same_spec():
    assert get_scheduler("tss:rounding=round").spec == "tss"
    assert get_scheduler("tss:rounding=truncate").spec == "tss:rounding=truncate"


def test_rnd_draws_sizes_within_range_from_the_runs_generator():
    sizes = table_sizes("rnd:min=3,max=9", 1000, 4, seed=7)
    assert sum(sizes) == 1000 and all(3 <= s <= 9 for s in sizes[:-1]) and 1 <= sizes[-1] <= 9
    # They are the generator's draws, in order.
    assert sizes[:-1] == np.random.default_rng(7).integers(3, 10, size=len(sizes) - 1).tolist()
    # The run's seed decides them: same seed, same table; another seed, another.
    a = simulated_sizes("rnd:min=3,max=9", "uforall:n=1000", 4, seed=1)
    assert a == simulated_sizes("rnd:min=3,max=9", "uforall:n=1000", 4, seed=1)
    assert a != simulated_sizes("rnd:min=3,max=9", "uforall:n=1000", 4, seed=2)
    # Default max = N - 1 (LB4OMP): never one chunk of the whole loop.
    assert all(len(table_sizes("rnd", 50, 2, seed=s)) >= 2 for s in range(20))


def test_rnd_draws_a_new_table_for_each_loop_of_a_run():
    r = simsched.simulate(toy_machine(cores=2), "rnd:min=1,max=40", "uforall:n=200", 2, repeat=2)
    first, second = (r.chunks[r.chunks["loop"] == k].sort_values("lo") for k in (0, 1))
    assert first["lo"].tolist() != second["lo"].tolist()


def test_pls_static_blocks_are_run_by_their_workers_without_a_claim():
    r = simsched.simulate(toy_machine(cores=4), "pls", "uforall:n=100", 4)
    for w in range(4):
        block = r.chunks[r.chunks["lo"] == 13 * w]
        assert block["hi"].tolist() == [13 * (w + 1)] and block["worker"].tolist() == [w]
    # Only the 12 dynamic chunks are claimed: 12 fetch-and-adds plus one failed claim per worker;
    # the chunks counted are those 12 and the 4 static blocks.
    assert r.counters["chunks"] == 12 + 4
    assert r.counters["atomics"] == r.counters["claims"] == 12 + 4
    assert r.counters["failed_claims"] == 4


def test_pls_with_the_whole_loop_static_is_omp_static_blocks():
    r = simsched.simulate(toy_machine(cores=4), "pls:swr=1", "uforall:n=100", 4)
    assert sorted(zip(r.chunks["lo"], r.chunks["hi"], r.chunks["worker"])) == [
        (0, 25, 0), (25, 50, 1), (50, 75, 2), (75, 100, 3)]


# -- through the command line ---------------------------------------------------------------------------------

TECHNIQUES = ["fsc", "mfsc", "fac", "tfss", "fiss", "viss", "rnd", "pls", "tss", "fac2"]

BAD = {
    "rnd:min=9,max=3": "min=9 must be <= max=3",
    "rnd:min=0": "min=0 must be >= 1",
    "fac:mu=0": "mu=0.0 must be > 0",
    "fac:sigma=-1": "sigma=-1.0 must be >= 0",
    "fsc:h=-5": "h=-5.0 must be >= 0",
    "fiss:stages=1": "stages=1 must be >= 2",
    "viss:x=0": "x=0 must be >= 1",
    "pls:swr=1.5": "swr=1.5 must be in [0, 1]",
    "tss:rounding=floor": "rounding='floor' must be one of round, truncate",
}


def commands() -> dict[tuple[str, str], tuple]:
    """Every command line of this section by key: each bad parameter, and a native run of each technique."""
    lines = {("bad", spec): ("run", "--machine", "haswell-e5-2695v3", "--scheduler", spec, "--threads", 2,
                             "--workload", "uforall:n=100") for spec in BAD}
    if native.available():
        lines.update({("native", spec): ("native", "run", "--scheduler", spec, "--threads", THREADS, "--workload",
                                         "uniform:n=500,high_ns=400", "--seed", 3, "--json") for spec in TECHNIQUES})
    return lines


@pytest.fixture(scope="module")
def outcomes():
    """Every command line of this section, run concurrently up front (an interpreter start costs most of a second)."""
    lines = commands()  # forked from one warm interpreter (tests/cli_runner.py), the first as a genuine subprocess
    return run_batch({key: (args,) for key, args in lines.items()}, real=[next(iter(lines))])


@pytest.mark.parametrize("spec", BAD)
def test_bad_parameters_are_one_named_line(outcomes, spec):
    proc = outcomes[("bad", spec)]
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr
    assert BAD[spec] in proc.stderr and spec.split(":")[0] in proc.stderr


@needs_native
@pytest.mark.parametrize("spec", TECHNIQUES)
def test_native_run_runs_each_technique(outcomes, spec):
    proc = outcomes[("native", spec)]
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["counters"]["chunks"] >= 1
    # Exactly the simulator's counter keys, less the memory model's.
    assert set(result["counters"]) == set(native.simulated_counter_keys(spec))
    assert result["counters"]["failed_claims"] == THREADS   # each worker's last claim finds the table spent


@needs_native
@pytest.mark.parametrize("spec", ["fsc:h=20", "fsc:h=20,sigma=5", "mfsc", "fac", "fac:mu=100,sigma=300", "tfss",
                                  "fiss", "fiss:stages=4", "viss", "rnd", "rnd:min=2,max=30", "pls",
                                  "pls:swr=0.2,chunk=3", "tss", "tss:rounding=truncate", "fac2"])
def test_native_chunk_tables_are_the_simulated_ones(spec):
    workload = "uniform:n=400,high_ns=200"
    measured = native.run(spec, workload, THREADS, seed=5, repeat=2)
    simulated = simsched.simulate("haswell-e5-2695v3", spec, workload, THREADS, seed=5, repeat=2)
    for loop in range(2):
        mine, theirs = (r.chunks[r.chunks["loop"] == loop].sort_values("lo") for r in (measured, simulated))
        assert mine["lo"].tolist() == theirs["lo"].tolist() and mine["hi"].tolist() == theirs["hi"].tolist()
    if spec == "pls":   # the static blocks stay with their workers natively too
        block = -(-400 // (2 * THREADS))
        for w in range(THREADS):
            assert measured.chunks[measured.chunks["lo"] == w * block]["worker"].tolist() == [w, w]
