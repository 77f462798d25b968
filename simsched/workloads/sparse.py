"""Sparse matrix-vector products (SpMV): one loop over a matrix's rows per solver iteration.

Matrices come from Matrix Market files, or by name from the four shipped under
``simsched/workloads/matrices/``; ``python tools/make_matrices.py DIR`` regenerates those from
a fixed seed and prints their row statistics. Without a file, row lengths are drawn from a
distribution (``rows=``), or fitted to the statistics of a published matrix (``like=``) or to
statistics given (``mean=``, ``var=``, ``min=``, ``max=``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # SciPy loads where a graph or matrix is built, not with the command line
    import scipy.sparse as sp

from ..errors import SimschedError
from ..footprint import ELEMENT_BYTES, Footprint, Gather
from ..spec import Param
from . import _cost
from .fitted_lengths import RowTargets, check_targets, fit
from .program import ProgramWorkload, data_name, data_params

MATRICES = Path(__file__).resolve().parent / "matrices"
# The shipped matrices: row-length distributions from no variance to a heavy tail.
KINDS = ("banded", "uniform", "lognormal", "powerlaw")
# How the shipped matrices were made: rows (= columns), mean nonzeros per row, seed.
SHIPPED_ROWS, SHIPPED_MEAN, SHIPPED_SEED = 2048, 9, 20240601
LOGNORMAL_SIGMA = 1.0  # of log(row length): a CV of about 1.3, a moderate tail
POWERLAW_GAMMA = 2.2   # P(length >= k) ~ k**-(gamma - 1): a few rows hold hundreds or thousands of nonzeros
# What a row of a CSR product y = A x touches of its own: its row pointer (8 bytes), its y entry (8, written)
# and per nonzero an 8-byte value and a 4-byte column index; and per nonzero one 8-byte read of x.
ROW_BYTES = 8 + ELEMENT_BYTES
NONZERO_BYTES = ELEMENT_BYTES + 4


def names_shipped(text: str) -> bool:
    """Whether a ``matrix=`` value names a shipped matrix (no folder, no suffix) rather than a file."""
    path = Path(text)
    return len(path.parts) == 1 and not path.suffix


def rows_footprint(lengths, cols: int, placement: str, name: str, optional: bool = False) -> Footprint:
    """What the rows of a sparse product touch: row i streams its row pointers, its y and its nonzeros' values
    and columns, and gathers x (``cols`` doubles) at those columns."""
    lengths = np.asarray(lengths, dtype=np.int64)  # no copy where they are already (fitted lengths are)
    x = Gather(lengths, max(int(cols), 1) * ELEMENT_BYTES, ELEMENT_BYTES, f"{name} x")
    return Footprint(ROW_BYTES + NONZERO_BYTES * lengths, "stream", placement, name, gather=x, optional=optional)


def read_matrix(path_or_name: "str | Path") -> sp.csr_matrix:
    """A Matrix Market file as CSR, or a shipped matrix by name (a value with no folder and no suffix)."""
    import scipy.sparse as sp
    text = str(path_or_name)
    if not text:
        raise SimschedError("matrix: empty name (give a shipped matrix, " + ", ".join(KINDS) + ", or a .mtx file)")
    path = Path(text)
    if isinstance(path_or_name, str) and names_shipped(text):
        if text not in KINDS:
            raise SimschedError(f"matrix: unknown matrix {text!r} (shipped: {', '.join(KINDS)}; or the path of "
                                "a Matrix Market file)")
        path = MATRICES / f"{text}.mtx"
    if not path.is_file():
        raise SimschedError(f"matrix: no such file {path}")
    import scipy.io

    try:
        matrix = scipy.io.mmread(str(path))
    except Exception as exc:  # scipy raises several kinds on a malformed file
        raise SimschedError(f"matrix: cannot read {path} as Matrix Market: {exc}".splitlines()[0]) from None
    if not (sp.issparse(matrix) or isinstance(matrix, np.ndarray)) or np.ndim(matrix) != 2:
        raise SimschedError(f"matrix: {path} does not hold a 2-D matrix")
    if matrix.shape[0] < 1:
        raise SimschedError(f"matrix: {path} has no rows")
    return sp.csr_matrix(matrix)


def row_statistics(matrix: sp.spmatrix) -> dict[str, float]:
    """Rows, columns, nonzeros and the spread of nonzeros per row: mean, variance, CV, min, max."""
    import scipy.sparse as sp
    lengths = np.diff(sp.csr_matrix(matrix).indptr)
    mean = float(lengths.mean())
    var = float(lengths.var())
    return {"rows": int(matrix.shape[0]), "cols": int(matrix.shape[1]), "nnz": int(lengths.sum()),
            "mean": mean, "var": var, "cv": float(np.sqrt(var) / mean) if mean else 0.0,
            "min": int(lengths.min()), "max": int(lengths.max())}


def row_lengths(kind: str, rows: int, mean: int, rng: np.random.Generator) -> np.ndarray:
    """Nonzeros per row for ``rows`` rows of about ``mean`` each, spread as ``kind`` says, within [1, rows]."""
    if kind == "banded":
        lengths = np.full(rows, mean)
    elif kind == "uniform":
        lengths = rng.integers(1, 2 * mean, size=rows)
    elif kind == "lognormal":
        # The log's mean is set so that the lengths' mean is ``mean``.
        lengths = np.round(rng.lognormal(np.log(mean) - LOGNORMAL_SIGMA**2 / 2, LOGNORMAL_SIGMA, rows))
    elif kind == "powerlaw":
        least = mean * (POWERLAW_GAMMA - 2) / (POWERLAW_GAMMA - 1)
        lengths = np.round(least * (1.0 - rng.random(rows)) ** (-1.0 / (POWERLAW_GAMMA - 1)))
    else:
        raise SimschedError(f"matrix: unknown row-length distribution {kind!r} (known: {', '.join(KINDS)})")
    return np.clip(lengths, 1, rows).astype(np.int64)


def make_matrix(kind: str, rows: int, mean: int, rng: np.random.Generator) -> sp.csr_matrix:
    """A square matrix with ``kind`` row lengths and normal values (``banded``: a circulant band of ``mean`` diagonals)."""
    import scipy.sparse as sp
    lengths = row_lengths(kind, rows, mean, rng)
    if kind == "banded":
        offsets = np.arange(mean) - mean // 2
        cols = (np.arange(rows)[:, None] + offsets) % rows
    else:
        # Distinct columns per row, drawn row by row: meant for the small matrices shipped.
        cols = [np.sort(rng.choice(rows, size=k, replace=False)) for k in lengths]
    indices = np.concatenate([np.sort(c) for c in cols])
    indptr = np.concatenate([[0], np.cumsum(lengths)])
    values = np.round(rng.standard_normal(indices.size), 3)
    return sp.csr_matrix((values, indices, indptr), shape=(rows, rows))


def make_matrices(folder: "str | Path", seed: int = SHIPPED_SEED) -> dict[str, dict[str, float]]:
    """Write the shipped matrices into ``folder`` from one seeded generator; return their row statistics."""
    import scipy.io

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    stats = {}
    for kind in KINDS:
        matrix = make_matrix(kind, SHIPPED_ROWS, SHIPPED_MEAN, rng)
        scipy.io.mmwrite(str(folder / f"{kind}.mtx"), matrix, precision=3,
                         comment=f" {kind} row lengths: python tools/make_matrices.py (seed {seed})")
        stats[kind] = row_statistics(matrix)
    return stats


def statistics_table(stats: dict[str, dict[str, float]]) -> str:
    """Row statistics as a Markdown table."""
    lines = ["| matrix | rows | nonzeros | mean per row | variance | CV | min | max |",
             "|---|---|---|---|---|---|---|---|"]
    for name, s in stats.items():
        lines.append(f"| `{name}` | {s['rows']} | {s['nnz']} | {s['mean']:.2f} | {s['var']:.1f} | {s['cv']:.2f} "
                     f"| {s['min']} | {s['max']} |")
    return "\n".join(lines)


class SpMV(ProgramWorkload):
    """SpMV in an iterative solver: ``iters`` loops over the rows, ``row_ns`` plus ``nnz_ns`` per nonzero each.

    The rows are a matrix's (``matrix=``), or ``rows`` row lengths drawn from the ``lengths``
    distribution the shipped matrices were made with (no file: any size), or row lengths fitted
    to a published matrix's statistics (``like=``, scaled by ``rows=``) or to the statistics
    given (``rows``, ``mean``, ``var``, ``min``, ``max``).
    """

    name = "spmv"
    summary = "iters loops over a matrix's rows, row_ns + nnz_ns x the row's nonzeros each"
    PARAMS = {"matrix": Param("matrix", str, "lognormal",
                              help="a shipped matrix (" + ", ".join(KINDS) + ") or a Matrix Market file"),
              "like": Param("like", str, "",
                            help="row lengths fitted to a published matrix's statistics (Booth & Lane's 15 "
                                 "SuiteSparse matrices, e.g. FullChip; any case)"),
              "rows": Param("rows", int, 0, lambda v: v >= 1, ">= 1",
                            help="draw this many row lengths instead of reading a matrix (with like=: scale "
                                 "the published matrix to this many rows)"),
              "lengths": Param("lengths", str, "lognormal", choices=KINDS,
                               help="distribution of the drawn row lengths (with rows=)"),
              "mean": Param("mean", float, SHIPPED_MEAN, lambda v: v >= 1, ">= 1",
                            help="mean nonzeros per drawn row (with rows=; whole unless var= is given)"),
              "var": Param("var", float, 0.0, lambda v: v >= 0, ">= 0",
                           help="variance of nonzeros per row: with rows=, mean=, min= and max=, row lengths "
                                "fitted to these statistics"),
              "min": Param("min", int, 0, lambda v: v >= 0, ">= 0",
                           help="fewest nonzeros in a row (with var=)"),
              "max": Param("max", int, 1, lambda v: v >= 1, ">= 1",
                           help="most nonzeros in a row, at most rows= (with var=)"),
              "iters": Param("iters", int, 10, lambda v: v >= 1, ">= 1", help="solver iterations (loops)"),
              "row_ns": _cost("row_ns", 5.0, "per row"),
              "nnz_ns": _cost("nnz_ns", 2.0, "per nonzero"),
              # The matrix and x are read from a file on the master thread (a Matrix Market reader; assumed
              # of the published SpMV), so their pages are all on the master's node.
              **data_params("master", ("master", "first-touch", "interleave"))}

    # The statistics the row lengths are fitted to (like=, or var= and the rest); None: read or drawn.
    targets: RowTargets | None = None

    def check(self):
        given, p = self.given, self.params
        if "like" in given:
            self._check_like()
            return
        fitted = [k for k in ("var", "min", "max") if k in given]
        drawn = [k for k in ("lengths", "mean") if k in given]
        if "rows" in given and "matrix" in given:
            raise SimschedError("workload spmv: give matrix= (read a matrix) or rows= (draw row lengths), not both")
        if fitted:
            missing = [f"{k}=" for k in ("rows", "mean", "var", "min", "max") if k not in given]
            if missing:
                raise SimschedError(f"workload spmv: {fitted[0]}= fits row lengths to statistics: give "
                                    "rows=, mean=, var=, min= and max= together (missing: "
                                    + ", ".join(missing) + ")")
            if "lengths" in given:
                raise SimschedError("workload spmv: lengths= draws row lengths from a distribution and var= "
                                    "fits them to statistics: give one of them")
            self.targets = RowTargets(p["rows"], p["mean"], p["var"], p["min"], p["max"])
            check_targets(self.targets, "workload spmv")
            self._check_fit()
            return
        if drawn and "rows" not in given:
            raise SimschedError(f"workload spmv: {drawn[0]}= applies to drawn row lengths: give rows= too")
        if not float(p["mean"]).is_integer():
            raise SimschedError(f"workload spmv: mean={p['mean']} must be a whole number for lengths drawn "
                                "from a distribution (a fractional mean needs var=, min= and max=: fitted "
                                "lengths)")

    def _check_like(self):
        from .published_matrices import known, scaled

        given = self.given
        if "matrix" in given:
            raise SimschedError("workload spmv: give matrix= (read a matrix) or like= (a published matrix's "
                                "statistics), not both")
        other = [k for k in ("lengths", "mean", "var", "min", "max") if k in given]
        if other:
            raise SimschedError(f"workload spmv: like= gives the row statistics, so {other[0]}= does not "
                                "apply (rows= scales the published matrix)")
        # The published name as printed, whatever the case given.
        self.params["like"] = known(self.params["like"])
        self.targets = scaled(self.params["like"], self.params["rows"] if "rows" in given else None)
        self._check_fit()

    def _check_fit(self):
        # Fitted now, and kept for the run: a few rows near an extreme may have no whole lengths near enough.
        try:
            fit(self.targets)
        except SimschedError as exc:
            raise SimschedError(f"workload spmv: {exc}") from None

    def input_files(self):
        matrix = self.params["matrix"]
        fileless = "rows" in self.given or "like" in self.given
        return [] if fileless or not matrix or names_shipped(matrix) else [Path(matrix)]

    def loop_sizes(self):
        # Drawn or fitted rows are known up front; a matrix's only once it is read (at least one).
        rows = self.targets.rows if self.targets else self.params["rows"] if "rows" in self.given else 1
        return [(rows, self.params["iters"])]

    def matrix_statistics(self) -> dict[str, float] | None:
        """The row statistics of the matrix read, or of the row lengths fitted (exact, whatever the seed);
        None for lengths drawn from a distribution (each draw has its own)."""
        if self.targets is not None:
            return fit(self.targets).statistics()
        if "rows" in self.given:
            return None
        return row_statistics(read_matrix(self.params["matrix"]))

    def shape(self, rng) -> tuple[np.ndarray, int]:
        """Nonzeros per row, and the columns (the length of x): the matrix's, drawn, or fitted (square)."""
        p = self.params
        if self.targets is not None:
            # One draw from the run's generator seeds the streams the rows are dealt from.
            return fit(self.targets).lengths(int(rng.integers(2**63))), self.targets.rows
        if "rows" in self.given:
            return row_lengths(p["lengths"], p["rows"], int(p["mean"]), rng), p["rows"]
        matrix = read_matrix(p["matrix"])
        return np.diff(matrix.indptr), int(matrix.shape[1])

    def loop_costs(self, rng):
        return self._costs(self.shape(rng)[0])

    def _costs(self, lengths: np.ndarray) -> list[np.ndarray]:
        cost = self.params["row_ns"] + self.params["nnz_ns"] * lengths
        return [cost] * self.params["iters"]

    def loops(self, rng):
        lengths, cols = self.shape(rng)
        costs = self._costs(lengths)
        if not self.params["data"]:
            return self.program(costs)
        # Every product streams the same rows and gathers from the same x: one data set for all the loops.
        source = (f"like={self.params['like']}" if "like" in self.given else "rows" if "rows" in self.given
                  else self.params["matrix"])
        footprint = rows_footprint(lengths, cols, self.params["placement"], data_name(f"spmv {source}"),
                                   optional="data" not in self.given)
        return self.program(costs, [footprint] * len(costs))
