"""Burden tables from sweep results: one Amdahl fit per (machine, scheduler, threads)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import SimschedError
from .amdahl import fit_burden, fit_saturating
from .shape import check_duration_axis

KEYS = ["machine", "scheduler", "threads"]


def succeeded(results: pd.DataFrame) -> pd.Series:
    """Which rows of a results table ran without error (an empty or missing ``error``)."""
    if "error" not in results.columns:
        return pd.Series(True, index=results.index)
    return results["error"].isna() | (results["error"].astype(str) == "")


def numeric(results: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """``results`` with ``columns`` as numbers (empty cells become NaN); a column of text is an error."""
    results = results.copy()
    for column in columns:
        converted = pd.to_numeric(results[column].replace("", np.nan), errors="coerce")
        bad = converted.isna() & results[column].notna() & (results[column].astype(str) != "")
        bad &= succeeded(results)
        if bad.any():
            raise SimschedError(f"results column {column!r} holds a non-number: {results[column][bad].iloc[0]!r}")
        results[column] = converted
    return results


def loop_durations_us(results: pd.DataFrame) -> pd.Series:
    """Sequential duration of one loop (us): a row's sequential time over its repetitions."""
    repeat = results["repeat"] if "repeat" in results else 1
    return results["sequential_ns"] / repeat / 1e3


def _successful_durations(results: pd.DataFrame) -> pd.DataFrame:
    """The successful runs, their figures as numbers, with each run's loop duration ``t_us``."""
    results = numeric(results, ["threads", "sequential_ns", "speedup"] +
                      (["repeat"] if "repeat" in results.columns else []))
    ok = results[succeeded(results)]
    return ok.assign(t_us=loop_durations_us(ok))


def _curves(ok: pd.DataFrame) -> dict[tuple, pd.Series]:
    return {key: group.groupby("t_us")["speedup"].mean() for key, group in ok.groupby(KEYS, sort=False)}


def speedup_curves(results: pd.DataFrame) -> dict[tuple, pd.Series]:
    """Per (machine, scheduler, threads): the mean speedup of the successful runs by loop duration (us)."""
    return _curves(_successful_durations(results))


def burden_table(results: pd.DataFrame, published: dict[str, float] | None = None,
                 published_machine: str | None = None) -> pd.DataFrame:
    """Fit d for every (machine, scheduler, threads) group of successful runs; add published d where known.

    The runs must be one loop shape at several durations (see :mod:`.shape`). Besides the
    published one-parameter d (P fixed), ``d2_us`` and ``s_max`` fit d with the plateau free.
    ``published`` d are compared with the runs of ``published_machine`` only (of every machine
    when it is None); other machines' ``published_d_us`` and ``d_vs_published`` are NaN.
    """
    missing = [c for c in KEYS + ["sequential_ns", "speedup"] if c not in results.columns]
    if missing:
        raise SimschedError(f"results table lacks column {missing[0]!r}: is it a sweep's results?")
    ok = _successful_durations(results)
    if ok.empty:
        raise SimschedError("no successful runs to fit")
    if "workload" not in ok.columns:
        raise SimschedError("results table lacks column 'workload': the loop shape of its runs is unknown")
    check_duration_axis(ok["workload"].astype(str), ok["t_us"])
    rows = []
    for (machine, scheduler, threads), curve in _curves(ok).items():
        if len(curve) < 2:
            continue
        fit = fit_burden(curve.index.to_numpy(), curve.to_numpy(), int(threads))
        row = {"machine": machine, "scheduler": scheduler, "threads": int(threads)}
        row.update({k: v for k, v in fit.to_dict().items() if k != "threads"})
        free = fit_saturating(curve.index.to_numpy(), curve.to_numpy())
        row.update(d2_us=free.d_us, d2_ci_us=free.d_ci_us, s_max=free.s_max, s_max_ci=free.s_max_ci)
        if published is not None:
            measured = published_machine is None or str(machine) == published_machine
            row["published_d_us"] = published.get(scheduler, np.nan) if measured else np.nan
            row["d_vs_published"] = row["d_us"] / row["published_d_us"] - 1.0
        rows.append(row)
    if not rows:
        raise SimschedError("every group has fewer than two loop durations: nothing to fit")
    return pd.DataFrame(rows)


def format_burden_table(table: pd.DataFrame, published_machine: str | None = None) -> str:
    """A fixed-width text rendering of a burden table, its name columns as wide as their longest name.

    With ``published_machine``, the published and error cells of other machines' rows are blank;
    "-" marks a scheduler of that machine that the publication gives no d for.
    """
    has_pub = "published_d_us" in table.columns
    # At least the widths the usual names fit, wider for longer ones (a scaled machine, one with overrides),
    # so every column stays aligned.
    machine_w = max([18, *(len(str(m)) for m in table["machine"])])
    scheduler_w = max([22, *(len(str(s)) for s in table["scheduler"])])
    head = f"{'machine':<{machine_w}} {'scheduler':<{scheduler_w}} {'P':>3} {'d (us)':>9} {'95% CI':>8} " \
           f"{'t05 (us)':>9} {'t50 (us)':>9} {'t95 (us)':>9} {'peak':>6} {'d2 (us)':>9} {'S_max':>6}"
    if has_pub:
        head += f" {'published':>9} {'error':>7}"
    lines = [head, "-" * len(head)]
    for row in table.itertuples(index=False):
        line = (f"{row.machine!s:<{machine_w}} {row.scheduler!s:<{scheduler_w}} {row.threads:>3} "
                f"{row.d_us:>9.2f} {row.d_ci_us:>8.2f} {row.t05_us:>9.2f} {row.t50_us:>9.1f} "
                f"{row.t95_us:>9.0f} {row.peak_speedup:>6.1f} {row.d2_us:>9.2f} {row.s_max:>6.1f}")
        if has_pub:
            if np.isfinite(row.published_d_us):
                line += f" {row.published_d_us:>9.2f} {100 * row.d_vs_published:>+6.0f}%"
            elif published_machine is None or str(row.machine) == published_machine:
                line += f" {'-':>9} {'-':>7}"
        lines.append(line)
    return "\n".join(lines)
