"""The row statistics of the 15 SuiteSparse matrices of Booth and Lane's SpMV runs, as targets for fitted row
lengths.

Booth and Lane (iCh, Table 1) give per matrix its rows and nonzeros in millions, the mean
nonzeros per row, the ratio of the longest row to the shortest and the variance of the row
lengths, each to two or three digits. ``targets`` reads them as the statistics of whole row
lengths (see docs/workloads.md, "Matrices like the published ones"):

- rows: the figure times 10^6 (``rows=`` scales it);
- mean: the mean figure; the nonzeros are the mean times the rows (the nonzeros figure, cut to
  0.1 M as the rows figure is, is not used: their ratio is up to 4% off the mean figure);
- min and max: the least min >= 1, then the least max, whose ratio shows as the published
  ratio when cut to its digits and that leave the mean and the variance reachable;
- variance: the figure, or where whole lengths of that mean, min and max cannot vary so
  little, the least they can (hugebubbles-10 only: 0 becomes 0.09).

The figures are read as cut, not rounded, to their digits: hugebubbles-10's mean of 2.9 with a
ratio of 1 and a variance of 0 is only possible so (rows of 2 and 3 nonzeros, a ratio of 1.5).
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import cache

from ..errors import SimschedError
from .fitted_lengths import RowTargets, check_targets, fit, least_rows, variance_range

# name: rows (10^6), nonzeros (10^6), mean nonzeros per row, longest row / shortest row, variance of row
# lengths. Booth & Lane, "An Adaptive Self-Scheduling Loop Scheduler", Table 1, as printed.
FIGURES: dict[str, tuple[str, str, str, str, str]] = {
    "FullChip": ("2.9", "26.6", "8.9", "1.1e6", "3.2e6"),
    "circuit5M_dc": ("3.5", "14.8", "4.2", "12", "1"),
    "wikipedia": ("3.5", "45", "12.6", "1.8e5", "6.2e4"),
    "patents": ("3.7", "14.9", "3.9", "762", "31.5"),
    "AS365": ("3.7", "22.7", "5.9", "4.6", "0.7"),
    "delaunay_n23": ("8.3", "50.3", "5.9", "7", "1.7"),
    "wb-edu": ("9.8", "57.1", "5.8", "2.5e4", "2.0e3"),
    "hugebubbles-10": ("19.4", "58.3", "2.9", "1", "0"),
    "arabic-2005": ("22.7", "639.9", "28.1", "5.7e5", "3.0e5"),
    "road_usa": ("23.9", "57.7", "2.4", "4.5", "0.8"),
    "nlpkkt240": ("27.9", "760.6", "27.1", "4.6", "4.8"),
    "uk-2005": ("39.4", "936.3", "23.7", "1.7e6", "2.7e6"),
    "kmer_P1a": ("139.3", "297.8", "2.1", "20", "0.4"),
    "kmer_A2a": ("170.7", "360.5", "2.1", "20", "0.3"),
    "kmer_V1r": ("214", "465.4", "2.1", "4", "0.3"),
}
# The rows of the scaled matrices of the table in docs/workloads.md (more where the longest row needs more).
TABLE_ROWS = 100_000


def known(name: str) -> str:
    """The published matrix ``name`` names, matched without regard to case; refused naming the known ones."""
    found = {key.lower(): key for key in FIGURES}.get(str(name).strip().lower())
    if found is None:
        raise SimschedError(f"workload spmv: unknown like={name!r} (known: {', '.join(FIGURES)})")
    return found


def _unit(figure: str) -> Fraction:
    """One unit of a figure's last printed digit (``3.2e6``: 10^5; ``762``: 1)."""
    mantissa, _, exponent = figure.lower().partition("e")
    return Fraction(10) ** (int(exponent or 0) - len(mantissa.partition(".")[2]))


@cache
def targets(name: str) -> RowTargets:
    """The statistics of the published matrix ``name`` at its published rows, read as the module says."""
    name = known(name)
    rows_m, _, mean_text, ratio_text, var_text = FIGURES[name]
    rows, mean, var = int(Fraction(rows_m) * 10**6), float(Fraction(mean_text)), Fraction(var_text)
    ratio, ratio_unit, var_unit = Fraction(ratio_text), _unit(ratio_text), _unit(var_text)
    nonzeros = round(Fraction(mean_text) * rows)
    for least in range(1, math.floor(mean) + 1):
        # max / min shows as the printed ratio when cut to its digits: ratio <= max / min < ratio + unit.
        above = math.ceil((ratio + ratio_unit) * least)
        for most in range(max(math.ceil(ratio * least), math.ceil(mean)), above):
            if most > rows or not (rows - 1) * least + most <= nonzeros <= least + (rows - 1) * most:
                continue
            low, high = variance_range(rows, nonzeros, least, most)
            if low <= var <= high:
                return RowTargets(rows, mean, float(var), least, most)
            if var < low < var + var_unit:  # the least variance they allow, printed as the same figure
                return RowTargets(rows, mean, low, least, most)
    raise SimschedError(f"workload spmv: like={name}: no whole row lengths show its published statistics")


def scaled(name: str, rows: int | None = None) -> RowTargets:
    """The statistics of the published matrix ``name`` over ``rows`` rows (default: its own), checked
    reachable."""
    name = known(name)
    t = targets(name) if rows is None else targets(name).with_rows(rows)
    check_targets(t, f"workload spmv: like={name}" + ("" if rows is None else f" at rows={rows}"))
    return t


def table_rows(name: str, rows: int = TABLE_ROWS) -> int:
    """The rows of ``name``'s scaled matrix in the table: ``rows``, or the fewest that keep its statistics,
    rounded up to two digits."""
    least = least_rows(targets(name))
    if least <= rows:
        return rows
    step = 10 ** max(0, len(str(least)) - 2)
    return -(-least // step) * step


def comparison_table(rows: int = TABLE_ROWS) -> str:
    """Each published matrix's statistics next to those of its fitted row lengths, at its own rows and scaled,
    as a Markdown table."""
    head = ("| matrix | rows | mean | variance | max/min | min | max | mean | variance | rows at min | "
            "scaled rows | mean | variance |")
    lines = [head, "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, (rows_m, _, mean, ratio, var) in FIGURES.items():
        t = targets(name)
        full = fit(t)
        made = full.statistics()
        n = table_rows(name, rows)
        small = fit(scaled(name, n)).statistics()
        lines.append(f"| `{name}` | {rows_m} M | {mean} | {var} | {ratio} | {t.min} | {t.max} "
                     f"| {made['mean']:.4g} | {made['var']:.4g} | {full.counts[0] / full.rows:.1%} | {n} "
                     f"| {small['mean']:.4g} | {small['var']:.4g} |")
    return "\n".join(lines)
