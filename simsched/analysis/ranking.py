"""Method rankings from sweep results: each method at its best parameter, against a common baseline.

A *method* is a scheduler name; its parameter settings (e.g. ``omp-dynamic:chunk=1``,
``omp-dynamic:chunk=2``) compete, and the fastest stands for the method, as in the iCh
paper's comparison (speedup = baseline time / best time over the method's parameters).
"""

from __future__ import annotations

import pandas as pd

from ..errors import SimschedError
from ..spec import parse_spec
from .burden import numeric, succeeded


def method_of(scheduler: str) -> str:
    """The method a scheduler spec belongs to: its name without parameters."""
    return parse_spec(scheduler, "scheduler")[0]


def rank_methods(results: pd.DataFrame, baseline: str, baseline_threads: int = 1,
                 threads: int | None = None) -> pd.DataFrame:
    """Per workload and thread count: each method's best speedup over ``baseline`` on ``baseline_threads``.

    Columns: workload, threads, method, best (the winning spec), speedup, rank (1 = fastest),
    sensitivity (worst / best time over the method's parameter settings), behind_best (the fraction
    by which its speedup falls short of the fastest method's); with SpMV workloads also row_variance
    and row_cv, the variance and coefficient of variation of their matrix's nonzeros per row.
    """
    needed = ["scheduler", "workload", "threads", "makespan_ns"]
    missing = [c for c in needed if c not in results.columns]
    if missing:
        raise SimschedError(f"results table lacks column {missing[0]!r}: is it a sweep's results?")
    results = numeric(results, ["threads", "makespan_ns"])
    ok = results[succeeded(results)]
    base = ok[(ok["scheduler"] == baseline) & (ok["threads"] == baseline_threads)]
    if base.empty:
        raise SimschedError(f"no successful {baseline} run on {baseline_threads} thread(s) to compare against")
    base_time = base.groupby("workload")["makespan_ns"].mean()
    ok = ok.assign(method=ok["scheduler"].map(method_of))
    if threads is not None:
        ok = ok[ok["threads"] == threads]
    rows = []
    for (workload, p, method), group in ok.groupby(["workload", "threads", "method"], sort=False):
        if workload not in base_time:
            continue
        times = group.groupby("scheduler")["makespan_ns"].mean()
        rows.append({"workload": workload, "threads": int(p), "method": method, "best": times.idxmin(),
                     "speedup": base_time[workload] / times.min(),
                     "sensitivity": times.max() / times.min()})
    if not rows:
        raise SimschedError("no runs to rank")
    table = pd.DataFrame(rows)
    by_point = table.groupby(["workload", "threads"])["speedup"]
    table["rank"] = by_point.rank(ascending=False, method="min").astype(int)
    table["behind_best"] = 1 - table["speedup"] / by_point.transform("max")
    rows_of = matrix_rows(table["workload"].unique())
    if rows_of:
        # SpMV's imbalance is its matrix's: the spread of nonzeros per row goes beside its ranks.
        table["row_variance"] = table["workload"].map(lambda w: rows_of[w]["var"] if w in rows_of else None)
        table["row_cv"] = table["workload"].map(lambda w: rows_of[w]["cv"] if w in rows_of else None)
    return table.sort_values(["workload", "threads", "rank"]).reset_index(drop=True)


def matrix_rows(workloads) -> dict[str, dict[str, float]]:
    """The row statistics of the matrix of each SpMV workload among ``workloads`` (whose matrix can be read)."""
    from ..workloads import get_workload
    from ..workloads.sparse import read_matrix, row_statistics

    found = {}
    for spec in workloads:
        try:
            workload = get_workload(spec)
            if workload.name == "spmv" and "rows" not in workload.given:  # drawn rows have no matrix to read
                found[spec] = row_statistics(read_matrix(workload.params["matrix"]))
        except SimschedError:  # a workload of another version, or a matrix file not here: no statistics
            continue
    return found


def format_ranking(table: pd.DataFrame, highlight: str | None = None) -> str:
    """Text tables, one per (workload, threads); the highlighted method is marked."""
    blocks = []
    for (workload, p), group in table.groupby(["workload", "threads"], sort=False):
        title = f"{workload}, {p} threads"
        if "row_variance" in group.columns and pd.notna(group["row_variance"].iloc[0]):
            title += (f" (nonzeros per row: variance {group['row_variance'].iloc[0]:.1f}, "
                      f"CV {group['row_cv'].iloc[0]:.2f})")
        lines = [title, f"  {'rank':>4}  {'method':<12} {'speedup':>8}  {'sensitivity':>11}  best"]
        for row in group.itertuples(index=False):
            mark = " <" if row.method == highlight else ""
            lines.append(f"  {row.rank:>4}  {row.method:<12} {row.speedup:>8.2f}  {row.sensitivity:>11.3f}  "
                         f"{row.best}{mark}")
        blocks.append("\n".join(lines))
    if highlight is not None and highlight in set(table["method"]):
        mine = table[table["method"] == highlight]
        blocks.append(f"{highlight}: rank {', '.join(str(r) for r in mine['rank'])}; at most "
                      f"{100 * mine['behind_best'].max():.1f}% behind the best, "
                      f"{100 * mine['behind_best'].mean():.1f}% on average; parameter sensitivity "
                      f"(worst/best) up to {mine['sensitivity'].max():.3f}")
    return "\n\n".join(blocks)
