"""The spmv workload: row costs of a hand-made matrix, the shipped matrices and their statistics, bad matrices."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from test_cli import simsched_cli
from test_cli_errors import Case, error_line, run_args, run_cases

from simsched.errors import SimschedError
from simsched.workloads import get_workload
from simsched.workloads.sparse import KINDS, make_matrices, read_matrix, row_statistics

ROOT = Path(__file__).resolve().parents[1]
# Rows of 2, 0 and 3 nonzeros (an explicit zero is stored, so it counts).
THREE = ("%%MatrixMarket matrix coordinate real general\n% a 3 x 3 example\n3 3 5\n"
         "1 1 4.0\n1 3 -1\n3 1 2.5\n3 2 0\n3 3 1\n")
# The documented statistics of the shipped matrices: rows, nonzeros, mean, CV (docs/workloads.md).
SHIPPED = {"banded": (2048, 18432, 9.00, 0.00), "uniform": (2048, 18777, 9.17, 0.54),
           "lognormal": (2048, 18563, 9.06, 1.26), "powerlaw": (2048, 13943, 6.81, 4.26)}


def test_three_by_three_row_costs(tmp_path):
    path = tmp_path / "three.mtx"
    path.write_text(THREE)
    assert np.diff(read_matrix(path).indptr).tolist() == [2, 0, 3]
    loops = get_workload(f"spmv:matrix={path},iters=3,row_ns=10,nnz_ns=2").loops(np.random.default_rng())
    assert len(loops) == 3 and all(np.diff(loop.prefix).tolist() == [14, 10, 16] for loop in loops)
    assert get_workload(f"spmv:matrix={path},row_ns=10,nnz_ns=2").costs(np.random.default_rng()).tolist() \
        == [14, 10, 16]
    stats = row_statistics(read_matrix(path))
    assert (stats["rows"], stats["nnz"], stats["mean"], stats["min"], stats["max"]) == (3, 5, 5 / 3, 0, 3)
    assert stats["var"] == pytest.approx(((2 - 5 / 3) ** 2 + (5 / 3) ** 2 + (3 - 5 / 3) ** 2) / 3)


def test_spmv_through_the_cli(tmp_path):
    (tmp_path / "three.mtx").write_text(THREE)
    proc = simsched_cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", "omp-static", "--threads", "2",
                        "--workload", "spmv:matrix=three.mtx,iters=4,row_ns=10,nnz_ns=2,data=0", "--json",
                        cwd=tmp_path)
    # data=0: the rows cost their compute alone (with their data, the memory time comes on top).
    assert json.loads(proc.stdout)["sequential_ns"] == pytest.approx(4 * 40)
    shipped = simsched_cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", "omp-dynamic", "--threads", "28",
                           "--workload", "spmv:matrix=powerlaw,iters=1,row_ns=0,nnz_ns=1,data=0", "--json",
                           cwd=tmp_path)
    assert json.loads(shipped.stdout)["sequential_ns"] == pytest.approx(SHIPPED["powerlaw"][1])


@pytest.mark.parametrize("name", KINDS)
def test_shipped_matrices_have_the_documented_row_statistics(name):
    stats = row_statistics(read_matrix(name))
    rows, nnz, mean, cv = SHIPPED[name]
    assert (stats["rows"], stats["cols"], stats["nnz"]) == (rows, rows, nnz)
    assert (round(stats["mean"], 2), round(stats["cv"], 2)) == (mean, cv)
    documented = (ROOT / "docs" / "workloads.md").read_text(encoding="utf-8")
    assert f"| `{name}` | {rows} | {nnz} | {mean:.2f} |" in documented


def test_shipped_matrices_span_low_to_high_variance():
    cvs = [row_statistics(read_matrix(name))["cv"] for name in KINDS]
    assert cvs == sorted(cvs) and cvs[0] == 0 and cvs[-1] > 3
    powerlaw = np.diff(read_matrix("powerlaw").indptr)
    assert np.sort(powerlaw)[-3:].min() > 20 * powerlaw.mean()  # a few dense rows
    assert all((ROOT / "simsched" / "workloads" / "matrices" / f"{name}.mtx").stat().st_size < 1_000_000
               for name in KINDS)


def test_the_script_remakes_the_shipped_matrices(tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "tools" / "make_matrices.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr
    for name in KINDS:
        made, shipped = read_matrix(tmp_path / f"{name}.mtx"), read_matrix(name)
        assert (made != shipped).nnz == 0
        assert f"| `{name}` | {SHIPPED[name][0]} | {SHIPPED[name][1]} |" in proc.stdout


def test_another_seed_makes_other_matrices(tmp_path):
    make_matrices(tmp_path, seed=1)
    assert (read_matrix(tmp_path / "uniform.mtx") != read_matrix("uniform")).nnz > 0


def test_a_path_without_a_suffix_is_not_a_name(tmp_path):
    path = tmp_path / "three"
    path.write_text(THREE)
    assert read_matrix(path).shape == (3, 3)  # a Path is always a file
    assert read_matrix(f"{path}").shape == (3, 3)  # text with a folder too


# -- bad input ----------------------------------------------------------------------------------------------

def matrix_case(workload: str, *needles: str, files=None) -> Case:
    return Case(run_args(workload=workload), needles, files or {})


CASES = {
    "unknown-name": matrix_case("spmv:matrix=diagonal", "unknown matrix 'diagonal'", "banded"),
    "no-file": matrix_case("spmv:matrix=missing.mtx", "no such file", "missing.mtx"),
    "not-matrix-market": matrix_case("spmv:matrix=m.mtx", "m.mtx", "Matrix Market", files={"m.mtx": "1 2 3\n"}),
    "iters": matrix_case("spmv:matrix=banded,iters=0", "iters=0", ">= 1"),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory):
    # One case goes through a genuine ``python -m simsched.cli``, the others are forked (tests/cli_runner.py).
    return run_cases(tmp_path_factory.mktemp("matrix-errors"), CASES, real=["unknown-name"])


@pytest.mark.parametrize("name", CASES)
def test_bad_matrix_input_is_one_line_and_status_2(outcomes, name):
    error_line(outcomes[name], *CASES[name].needles)
    assert outcomes[name].proc.returncode == 2


@pytest.mark.parametrize("content, needle", [
    ("%%MatrixMarket matrix coordinate real general\n2 2 3\n1 1 1\n", "cannot read"),  # fewer entries than said
    ("%%MatrixMarket vector coordinate real general\n2 1\n1 1\n", "cannot read"),
    ("%%MatrixMarket matrix coordinate real general\n0 0 0\n", "has no rows"),
    ("", "cannot read"),
])
def test_bad_matrices_are_refused(tmp_path, content, needle):
    path = tmp_path / "bad.mtx"
    path.write_text(content)
    with pytest.raises(SimschedError, match=re.escape(needle)):
        read_matrix(path)


def test_drawn_row_lengths_follow_their_distribution_at_any_size():
    from simsched.workloads import get_workload
    rng = np.random.default_rng(5)
    loops = get_workload("spmv:rows=200000,lengths=powerlaw,mean=9,iters=2,row_ns=0,nnz_ns=1").loops(rng)
    assert len(loops) == 2 and loops[0].n == 200000
    lengths = np.diff(loops[0].prefix)
    # A power law of exponent 2.2 has a mean of 9 but a tail so heavy that samples fall short of it.
    assert lengths.min() >= 1 and 7 < lengths.mean() <= 9 and lengths.std() / lengths.mean() > 2
    banded = get_workload("spmv:rows=1000,lengths=banded,mean=4,iters=1,row_ns=1,nnz_ns=2").loops(rng)[0]
    assert np.diff(banded.prefix).tolist() == [9.0] * 1000
    again = get_workload("spmv:rows=200000,lengths=powerlaw,mean=9,iters=2,row_ns=0,nnz_ns=1").loops(
        np.random.default_rng(5))[0]
    assert np.array_equal(again.prefix, loops[0].prefix)


@pytest.mark.parametrize("spec, message", [
    ("spmv:rows=10,matrix=banded", "not both"),
    ("spmv:lengths=uniform", "give rows= too"),
    ("spmv:rows=10,lengths=zipf", "lengths"),
])
def test_drawn_rows_refuse_mixed_or_unknown_parameters(spec, message):
    from simsched.errors import SimschedError
    from simsched.workloads import get_workload
    with pytest.raises(SimschedError, match=message):
        get_workload(spec)
