"""simsched native overhead: EPCC schedbench's protocol natively, on the host OpenMP runtime and simulated."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import simsched.native as native
from simsched import SimschedError, simulate
from simsched.cli import main
from simsched.native import openmp
from simsched.native.overhead import (SIMULATED_LOOPS, block_stats, default_schedulers, format_overhead,
                                      openmp_schedule, overhead, plot_overhead)

needs_native = pytest.mark.skipif(not native.available(), reason="native runtime not built")
MACHINE = Path(__file__).resolve().parent.parent / "machines" / "haswell-e5-2695v3.toml"
THREADS = min(2, len(native.cores()))


def test_the_default_schedules_are_static_then_dynamic_and_guided_at_doubling_chunks():
    assert default_schedulers(8) == ["omp-static", "omp-dynamic:chunk=1", "omp-dynamic:chunk=2",
                                     "omp-dynamic:chunk=4", "omp-dynamic:chunk=8", "omp-guided:chunk=1",
                                     "omp-guided:chunk=2", "omp-guided:chunk=4", "omp-guided:chunk=8"]
    assert len(default_schedulers(128)) == 17


def test_each_openmp_scheduler_maps_to_its_schedule_clause_and_no_other_does():
    assert openmp_schedule("omp-static") == ("static", 0)
    assert openmp_schedule("omp-dynamic:chunk=4") == ("dynamic", 4)
    assert openmp_schedule("omp-guided") == ("guided", 1)
    assert openmp_schedule("fg-tree") is None and openmp_schedule("stealing:chunk=2") is None


def test_block_statistics_are_schedbenchs():
    stats = block_stats([4.0, 1.0, 3.0, 2.0])
    assert stats["mean_us"] == 2.5 and stats["median_us"] == 2.5
    assert stats["min_us"] == 1.0 and stats["max_us"] == 4.0
    assert stats["sd_us"] == pytest.approx(np.sqrt(5 / 3))  # the sample deviation, n - 1 in the denominator


def table_rows():
    return [{"scheduler": "omp-static", "threads": 2, "iters_per_thread": 128, "delay_ns": 100.0,
             "loops_per_block": 70, "native_us": 1.0, "native_mean_us": 1.1, "native_ci_us": 0.2, "sim_us": 0.9,
             "native_loop_us": 0.75, "error": -0.1, "openmp_us": 2.0, "openmp_mean_us": 2.5, "openmp_ci_us": 1.0},
            {"scheduler": "fg-tree", "threads": 2, "iters_per_thread": 128, "delay_ns": 100.0,
             "loops_per_block": 70, "native_us": 1.0, "native_mean_us": 1.0, "native_ci_us": 0.1, "sim_us": 0.5,
             "native_loop_us": 0.8, "error": -0.5, "openmp_us": None, "openmp_mean_us": None, "openmp_ci_us": None}]


def test_the_table_counts_the_rows_within_15_percent():
    text = format_overhead(pd.DataFrame(table_rows()))
    assert "2.500 +/- 1.000" in text and "0.750" in text and "-10.0%" in text and "-50.0%" in text
    assert "median |error| 30.0%, largest 50.0%, 1 of 2 within 15%" in text


@needs_native
def test_overhead_measures_natively_and_simulates_the_same_loop(tmp_path):
    table = overhead(MACHINE, THREADS, iters_per_thread=8, delay_ns=200.0, outer=3, test_time_us=100.0,
                     schedulers=["omp-static", "omp-dynamic:chunk=1", "fg-tree"])
    assert list(table["scheduler"]) == ["omp-static", "omp-dynamic:chunk=1", "fg-tree"]
    workload = f"uforall:n={8 * THREADS},cost_ns=200"
    for row in table.itertuples(index=False):
        # Every native iteration busy-waits its deadline: a loop never beats its work.
        assert row.native_us >= 0 and row.native_loop_us >= 0 and row.native_ci_us >= 0 and row.loops_per_block >= 1
        loops = simulate(MACHINE.as_posix(), row.scheduler, workload, THREADS, repeat=SIMULATED_LOOPS + 1).loop_ns
        assert row.sim_us == pytest.approx(np.mean(loops[1:]) / 1e3 - 8 * 0.2)
        assert row.error == pytest.approx((row.sim_us - row.native_us) / row.native_us)
    # fg-tree has no OpenMP counterpart; the OpenMP rows are measured wherever this host compiles OpenMP.
    assert pd.isna(table["openmp_us"].iloc[2])
    if openmp.build("omp_schedbench", tmp_path) is not None:
        assert np.isfinite(table["openmp_us"].iloc[:2]).all() and (table["openmp_ci_us"].iloc[:2] >= 0).all()
    else:
        assert table["openmp_us"].isna().all()


@needs_native
def test_overhead_prints_json_rows_and_draws_them(tmp_path, capsys):
    assert main(["native", "overhead", "--machine", str(MACHINE), "--threads", str(THREADS), "--iters-per-thread",
                 "4", "--outer", "2", "--test-time-us", "50", "--schedulers", "omp-guided:chunk=2", "--no-openmp",
                 "--json", "--plot", str(tmp_path / "overhead.png")]) == 0
    [row] = json.loads(capsys.readouterr().out)
    assert row["scheduler"] == "omp-guided:chunk=2" and row["openmp_us"] is None and row["delay_ns"] == 100.0
    assert (tmp_path / "overhead.png").read_bytes()[:4] == b"\x89PNG"


@needs_native
@pytest.mark.parametrize("args, message", [
    (["--outer", "1"], "--outer must be an integer in [2, 1000]"),
    (["--delay-ns", "-1"], "--delay-ns must be a number in [0, 1e7]"),
    (["--iters-per-thread", "0"], "--iters-per-thread must be an integer"),
    (["--schedulers", "cilk"], "native mode runs"),
    (["--machine", "absent.toml"], "simsched native calibrate"),
])
def test_overhead_refuses_bad_input_in_one_line(args, message, capsys):
    base = ["native", "overhead", "--no-openmp", "--threads", str(THREADS)]
    machine = [] if "--machine" in args else ["--machine", str(MACHINE)]
    assert main(base + machine + args) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@needs_native
def test_a_block_longer_than_the_runtime_allows_is_refused():
    with pytest.raises(SimschedError, match="loops per run"):
        overhead(MACHINE, THREADS, iters_per_thread=1, delay_ns=0.0, outer=1000, test_time_us=1e7,
                 schedulers=["omp-static"], openmp=False)


def test_a_missing_openmp_reference_is_a_broken_install_not_a_missing_compiler(tmp_path):
    with pytest.raises(SimschedError, match="missing from this install"):
        openmp.build("omp_absent", tmp_path)


def test_the_plot_draws_dynamic_and_guided_against_chunk_with_static_as_lines():
    rows = table_rows()[:1] + [dict(table_rows()[0], scheduler=f"omp-{kind}:chunk={c}", native_us=c, sim_us=c / 2)
                               for kind in ("dynamic", "guided") for c in (1, 2, 4)]
    fig = plot_overhead(pd.DataFrame(rows))
    dynamic, guided = fig.axes
    assert dynamic.get_title() == "omp-dynamic" and guided.get_title() == "omp-guided"
    simulated = [line for line in dynamic.get_lines() if line.get_label() == "simulated"][0]
    assert list(simulated.get_xdata()) == [1, 2, 4] and list(simulated.get_ydata()) == [0.5, 1.0, 2.0]
    # omp-static's native and simulated overheads as flat lines in each panel.
    assert {line.get_label() for line in guided.get_lines()} >= {"static: native", "static: simulated"}


@needs_native
def test_a_plot_that_cannot_be_written_is_refused_before_measuring(tmp_path, capsys):
    assert main(["native", "overhead", "--machine", str(MACHINE), "--no-openmp",
                 "--plot", str(tmp_path / "absent" / "o.png")]) == 2
    err = capsys.readouterr().err
    assert "--plot: folder" in err and err.count("\n") == 1
