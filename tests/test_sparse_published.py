"""SpMV row lengths fitted to statistics: the published matrices (like=), statistics given (var=)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import simsched.cli
from simsched.analysis.ranking import matrix_rows
from simsched.errors import SimschedError
from simsched.workloads import get_workload
from simsched.workloads.fitted_lengths import RowTargets, check_targets, fit, least_rows, variance_range
from simsched.workloads.published_matrices import FIGURES, scaled, targets
from simsched.workloads.sparse import NONZERO_BYTES, ROW_BYTES

ROOT = Path(__file__).resolve().parents[1]
HASWELL = "haswell-e5-2695v3"


def assert_shows(stats: dict, t: RowTargets) -> None:
    """Generated statistics against their targets: the documented tolerances."""
    assert stats["rows"] == stats["cols"] == t.rows
    assert (stats["min"], stats["max"]) == (t.min, t.max)
    assert stats["nnz"] == t.nonzeros and math.isclose(stats["mean"], t.mean, rel_tol=1e-6)
    assert math.isclose(stats["var"], t.var, rel_tol=0.01, abs_tol=4 / t.rows), (stats["var"], t.var)


def numpy_statistics(lengths: np.ndarray) -> dict:
    return {"rows": lengths.size, "cols": lengths.size, "nnz": int(lengths.sum()),
            "mean": float(lengths.mean()), "var": float(lengths.var()), "min": int(lengths.min()),
            "max": int(lengths.max())}


@pytest.fixture
def main(capsys):
    """The command line in this process: its status, stdout and stderr."""
    def call(*args) -> subprocess.CompletedProcess:
        capsys.readouterr()
        status = simsched.cli.main(list(map(str, args)))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, status, out, err)
    return call


def run(main, workload: str, threads: int = 4, status: int = 0, machine: str = HASWELL):
    proc = main("run", "--machine", machine, "--scheduler", "omp-dynamic", "--threads", threads,
                "--workload", workload, "--json")
    assert proc.returncode == status and "Traceback" not in proc.stderr, proc.stderr
    return json.loads(proc.stdout) if status == 0 else proc


def refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """One error line naming every needle, status 2, nothing on stdout."""
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("simsched: error: "), proc.stderr
    assert proc.stdout == ""
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


# -- reading the published figures ---------------------------------------------------------------------------

def test_published_figures_are_read_as_documented():
    # (min, max): the least min, then the least max, whose ratio cut to the figure's digits is the figure.
    assert (targets("FullChip").min, targets("FullChip").max) == (1, 1_100_000)
    assert (targets("AS365").min, targets("AS365").max) == (3, 14)
    assert (targets("nlpkkt240").min, targets("nlpkkt240").max) == (6, 28)
    assert (targets("road_usa").min, targets("road_usa").max) == (2, 9)
    # hugebubbles-10: a mean of 2.9 with a ratio of 1 and a variance of 0 holds only as rows of 2 and 3.
    bubbles = targets("hugebubbles-10")
    assert (bubbles.min, bubbles.max, bubbles.rows) == (2, 3, 19_400_000)
    assert bubbles.var == pytest.approx(0.09)
    for name, (rows, _, mean, ratio, var) in FIGURES.items():
        t = targets(name)
        assert t.rows == int(Fraction(rows) * 10**6) and t.mean == float(mean)
        digits = ratio.lower().partition("e")
        unit = Fraction(10) ** (int(digits[2] or 0) - len(digits[0].partition(".")[2]))
        assert Fraction(ratio) <= Fraction(t.max, t.min) < Fraction(ratio) + unit, name
        if name != "hugebubbles-10":
            assert t.var == float(var), name


def test_names_are_matched_without_regard_to_case():
    upper = get_workload("spmv:like=KMER_V1R,rows=1000")
    assert upper.params["like"] == "kmer_V1r" and upper.spec == "spmv:like=kmer_V1r,rows=1000"
    assert upper.targets == get_workload("spmv:like=kmer_v1r,rows=1000").targets


@pytest.mark.parametrize("name", FIGURES)
def test_each_published_matrix_at_its_published_rows_shows_its_statistics(name):
    t = targets(name)
    counts = fit(t)
    assert_shows(counts.statistics(), t)
    # The generator's state is the count per length, not the rows.
    assert counts.values.size <= 30_000 and counts.rows == t.rows


def test_a_full_size_matrix_made_block_by_block_has_the_counted_statistics():
    t = targets("FullChip")
    counts = fit(t)
    lengths = counts.lengths(seed=7)
    assert lengths.size == 2_900_000 and counts.block_count == 45
    made = numpy_statistics(lengths)
    assert_shows(made, t)
    assert made["var"] == pytest.approx(counts.statistics()["var"], rel=1e-9)
    # The longest rows are few and scattered: the lengths are dealt, not sorted.
    assert np.count_nonzero(lengths == 1_100_000) >= 1 and not np.all(np.diff(lengths) >= 0)


def test_any_block_can_be_made_alone_in_any_order():
    counts = fit(scaled("road_usa", 1_000_000))
    whole = counts.lengths(seed=3)
    backwards = [counts.block(b, seed=3) for b in reversed(range(counts.block_count))][::-1]
    assert np.array_equal(np.concatenate(backwards), whole)
    # The last block is short, and blocks differ from each other.
    assert backwards[-1].size == 1_000_000 - (counts.block_count - 1) * 65536
    assert not np.array_equal(backwards[0], backwards[1])
    # Another seed deals the same rows otherwise.
    other = counts.lengths(seed=4)
    assert not np.array_equal(other, whole) and np.array_equal(np.sort(other), np.sort(whole))


def test_a_block_of_the_largest_matrix_is_made_without_the_rest():
    counts = fit(targets("kmer_V1r"))
    assert counts.rows == 214_000_000 and counts.values.tolist() == [1, 2, 3, 4]
    block = counts.block(2000, seed=1)
    assert block.size == 65536 and block.min() >= 1 and block.max() <= 4
    assert abs(block.mean() - 2.1) < 0.02


@pytest.mark.parametrize("name, rows", [("patents", 20_000), ("AS365", 10_000), ("kmer_P1a", 10_000),
                                        ("hugebubbles-10", 10_000), ("wb-edu", 400_000),
                                        ("nlpkkt240", 10_000)])
def test_scaled_matrices_keep_the_statistics_per_row(name, rows):
    t = scaled(name, rows)
    assert (t.mean, t.var, t.min, t.max) == (targets(name).mean, targets(name).var, targets(name).min,
                                             targets(name).max)
    lengths = fit(t).lengths(seed=11)
    assert_shows(numpy_statistics(lengths), t)


def test_the_fewest_rows_that_keep_the_statistics():
    assert least_rows(targets("FullChip")) == 1_100_000  # as many columns as its longest row
    least = least_rows(targets("wikipedia"))
    assert least == 517_285  # as documented: its longest row alone outweighs its variance below that
    scaled("wikipedia", least)
    with pytest.raises(SimschedError, match="from rows=517285 up"):
        scaled("wikipedia", least - 1)


# -- statistics given ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("rows, mean, var, least, most", [
    (10_000, 8.9, 3000.0, 1, 2000), (10_000, 3.0, 0.5, 2, 5), (1000, 50.0, 2000.0, 0, 400),
    (100_000, 2.5, 0.25, 2, 3), (5000, 7.25, 40.0, 1, 200), (200, 20.0, 150.0, 3, 60), (12, 4.0, 3.0, 1, 9),
])
def test_given_statistics_are_fitted(rows, mean, var, least, most):
    t = RowTargets(rows, mean, var, least, most)
    assert_shows(numpy_statistics(fit(t).lengths(seed=0)), t)


def test_variance_bounds_are_the_extreme_matrices():
    # 10 rows of 1..9 summing to 40, each extreme at least once: the rest as equal, or as spread, as can be.
    low, high = variance_range(10, 40, 1, 9)
    assert low == pytest.approx(np.var([1, 9, 4, 4, 4, 4, 4, 4, 3, 3]))
    assert high == pytest.approx(np.var([1, 9, 9, 9, 7, 1, 1, 1, 1, 1]))
    with pytest.raises(SimschedError, match="between"):
        check_targets(RowTargets(10, 4.0, high * 1.2, 1, 9), "t")
    with pytest.raises(SimschedError, match="between"):
        check_targets(RowTargets(10, 4.0, low / 2, 1, 9), "t")
    for var in (low, high):
        t = RowTargets(10, 4.0, var, 1, 9)
        assert_shows(fit(t).statistics(), t)


# -- through the command line -------------------------------------------------------------------------------

def test_a_published_matrix_through_the_cli():
    # A process of its own: one nnz_ns per nonzero, so the sequential time is the matrix's nonzeros.
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", HASWELL, "--scheduler",
                           "omp-dynamic", "--threads", "8", "--workload",
                           "spmv:like=Patents,rows=20000,iters=3,row_ns=0,nnz_ns=1,data=0", "--json"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["workload"] == "spmv:like=patents,rows=20000,iters=3,row_ns=0,nnz_ns=1,data=0"
    assert result["sequential_ns"] == 3 * round(3.9 * 20_000)


def test_given_statistics_through_the_cli_and_the_seed(main):
    spec = "spmv:rows=5000,mean=8.9,var=3000,min=1,max=2000,iters=2,row_ns=0,nnz_ns=1,data=0"
    first = run(main, spec)
    assert first["sequential_ns"] == 2 * 44_500 and run(main, spec) == first
    # The run's seed deals the rows: the same seed the same rows, another seed the same rows otherwise.
    workload = get_workload(spec)
    rows = [np.diff(workload.loops(np.random.default_rng(seed))[0].prefix) for seed in (0, 0, 1)]
    assert np.array_equal(rows[0], rows[1]) and not np.array_equal(rows[0], rows[2])
    assert np.array_equal(np.sort(rows[0]), np.sort(rows[2]))


def test_fitted_rows_touch_their_data(main):
    spec = "spmv:like=road_usa,rows=20000,iters=2"
    loops = get_workload(spec).loops(np.random.default_rng(0))
    footprint = loops[0].data
    lengths = np.asarray(np.diff(get_workload(f"{spec},row_ns=0,nnz_ns=1").loops(np.random.default_rng(0))[0]
                                 .prefix), dtype=np.int64)
    assert np.array_equal(footprint.bytes, ROW_BYTES + NONZERO_BYTES * lengths)
    # x has a column per row (square), read once per nonzero.
    assert footprint.gather.size == 20_000 * 8 and np.array_equal(footprint.gather.reads, lengths)
    with_data = run(main, spec, threads=28)
    compute = run(main, f"{spec},data=0", threads=28)
    assert compute["sequential_ns"] == 2 * (5 * 20_000 + 2 * round(2.4 * 20_000))
    # The memory time comes on top.
    assert with_data["sequential_ns"] > compute["sequential_ns"]
    assert with_data["makespan_ns"] > compute["makespan_ns"]
    assert with_data["counters"]["local_dram"] + with_data["counters"]["remote_dram"] > 0


@pytest.mark.parametrize("workload, needles", [
    ("spmv:like=nope", ("unknown like='nope'", "FullChip", "kmer_V1r")),
    ("spmv:like=FullChip,rows=100000", ("like=FullChip at rows=100000", "max=1100000", "columns",
                                        "from rows=1100000 up")),
    ("spmv:like=wikipedia,rows=200000", ("var=62000 is not reachable", "from rows=517285 up")),
    ("spmv:like=patents,mean=3", ("like= gives the row statistics", "mean=")),
    ("spmv:like=patents,matrix=banded", ("matrix=", "like=", "not both")),
    ("spmv:like=kmer_V1r,rows=2000000000", ("rows=2000000000", "at most 999999999")),
    ("spmv:rows=1000,mean=8.9,var=30", ("give rows=, mean=, var=, min= and max= together", "min=, max=")),
    ("spmv:rows=1000,mean=8.9,var=30,min=1,max=20,lengths=uniform", ("lengths=", "var=")),
    ("spmv:rows=1000,mean=20,var=1,min=1,max=10", ("mean=20 lies outside [min, max] = [1, 10]",)),
    ("spmv:rows=1000,mean=8.9,var=1e6,min=1,max=900",
     ("var=1e+06 is not reachable", "between 794.918 and 6904.46")),
    ("spmv:rows=100,mean=8.9,var=30,min=1,max=900", ("max=900", "columns", "rows=100")),
    ("spmv:rows=1000,mean=3,var=0.5,min=3,max=3", ("min = max = 3", "variance 0")),
    ("spmv:rows=1000,mean=1.5,var=0,min=1,max=2", ("var=0 is not reachable", "of 0.25")),
    ("spmv:rows=1000,mean=2.5", ("mean=2.5", "whole number")),
    # Within the variances 10 rows of 0 to 10 can have (up to 24), but no 10 whole lengths come within 1%.
    ("spmv:rows=10,mean=6,var=23.2,min=0,max=10", ("cannot fit var=23.2", "nearest fit has")),
    ("spmv:rows=1000,mean=9,var=-1,min=1,max=20", ("var=-1", ">= 0")),
])
def test_impossible_statistics_are_one_line_and_status_2(main, workload, needles):
    refused(run(main, workload, status=2), *needles)


def test_a_refusal_in_a_process_of_its_own():
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", HASWELL, "--scheduler",
                           "omp-static", "--threads", "2", "--workload", "spmv:like=uk-2005,rows=1000000"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        ("simsched: error: workload spmv: like=uk-2005 at rows=1000000: a row of max=1700000 nonzeros "
         "needs as many columns, and the matrix is square with rows=1000000 rows; these statistics hold "
         "from rows=1700000 up")]


def test_the_ranking_shows_fitted_statistics():
    found = matrix_rows(["spmv:like=patents,rows=20000", "spmv:rows=100,lengths=uniform", "uniform:n=10"])
    assert list(found) == ["spmv:like=patents,rows=20000"]
    assert found["spmv:like=patents,rows=20000"]["var"] == pytest.approx(31.5, rel=0.01)


def test_the_documented_table_is_what_the_script_prints():
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "published_matrices.py")],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    table = proc.stdout.strip()
    assert table in (ROOT / "docs" / "workloads.md").read_text(encoding="utf-8")
    assert len(table.splitlines()) == 2 + len(FIGURES)


def test_a_full_size_matrix_whose_data_cannot_fit_is_refused_before_anything_is_drawn(monkeypatch, capsys):
    # 214 million rows with their data need about 250 bytes each; without it about 25.
    from simsched import budget, chunklog

    monkeypatch.setattr(chunklog, "memory_room", lambda: (16 * 2**30, "more than the 16.0 GiB allowed here"))
    monkeypatch.setattr(budget, "memory_room", chunklog.memory_room)
    args = ["run", "--machine", "haswell-e5-2695v3", "--scheduler", "omp-static", "--threads", "28"]
    assert simsched.cli.main(args + ["--workload", "spmv:like=kmer_V1r"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "needs at least" in err and "GiB for its loops alone" in err
    with pytest.raises(SimschedError):
        budget.check_memory(simsched.schedulers.get_scheduler("omp-static"), [(214_000_000, 1)], 28, data=True)
    budget.check_memory(simsched.schedulers.get_scheduler("omp-static"), [(214_000_000, 1)], 28)
