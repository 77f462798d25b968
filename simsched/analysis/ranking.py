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


def rank_methods(results: pd.DataFrame, baseline: str | None, baseline_threads: int = 1,
                 threads: int | None = None) -> pd.DataFrame:
    """Per machine, workload and thread count: each method's best speedup over ``baseline``.

    Without a baseline, each method's speedup is over the sequential loop: its fastest spec's
    mean ``sequential_ns`` over its mean ``makespan_ns``. A machine's methods are compared with
    that machine's baseline. Columns: machine (when the results have it), workload, threads,
    method, best (the winning spec), speedup, makespan_ns (the winning spec's mean), rank
    (1 = fastest), sensitivity (worst / best time over the method's parameter settings),
    behind_best (the fraction by which its speedup falls short of the fastest method's); with
    SpMV workloads also row_variance and row_cv, the variance and coefficient of variation of
    their matrix's nonzeros per row.
    """
    needed = ["scheduler", "workload", "threads", "makespan_ns"] + ([] if baseline else ["sequential_ns"])
    missing = [c for c in needed if c not in results.columns]
    if missing:
        raise SimschedError(f"results table lacks column {missing[0]!r}: is it a sweep's results?")
    results = numeric(results, needed[2:])
    ok = results[succeeded(results)]
    place = (["machine"] if "machine" in ok.columns else []) + ["workload"]
    reference = None
    if baseline is not None:
        base = ok[(ok["scheduler"] == baseline) & (ok["threads"] == baseline_threads)]
        if base.empty:
            ran = sorted(int(p) for p in ok.loc[ok["scheduler"] == baseline, "threads"].unique())
            hint = (f" ({baseline} ran on {', '.join(map(str, ran))} thread(s): choose one with "
                    "--baseline-threads or rank.baseline_threads)") if ran else ""
            raise SimschedError(f"no successful {baseline} run on {baseline_threads} thread(s) to compare "
                                f"against{hint}")
        reference = {_key(key): time for key, time in base.groupby(place)["makespan_ns"].mean().items()}
    ok = ok.assign(method=ok["scheduler"].map(method_of))
    if threads is not None:
        ok = ok[ok["threads"] == threads]
    rows = []
    for key, group in ok.groupby(place + ["threads", "method"], sort=False):
        *where, p, method = key
        times = group.groupby("scheduler")["makespan_ns"].mean()
        best = times.idxmin()
        if reference is None:
            speedup = group.loc[group["scheduler"] == best, "sequential_ns"].mean() / times.min()
        elif tuple(where) in reference:
            speedup = reference[tuple(where)] / times.min()
        else:
            continue
        rows.append({**dict(zip(place, where)), "threads": int(p), "method": method, "best": best,
                     "speedup": speedup, "makespan_ns": times.min(),
                     "sensitivity": times.max() / times.min()})
    if not rows:
        raise SimschedError("no runs to rank")
    table = pd.DataFrame(rows)
    by_point = table.groupby(place + ["threads"])["speedup"]
    table["rank"] = by_point.rank(ascending=False, method="min").astype(int)
    table["behind_best"] = 1 - table["speedup"] / by_point.transform("max")
    rows_of = matrix_rows(table["workload"].unique())
    if rows_of:
        # SpMV's imbalance is its matrix's: the spread of nonzeros per row goes beside its ranks.
        table["row_variance"] = table["workload"].map(lambda w: rows_of[w]["var"] if w in rows_of else None)
        table["row_cv"] = table["workload"].map(lambda w: rows_of[w]["cv"] if w in rows_of else None)
    return table.sort_values(place + ["threads", "rank"]).reset_index(drop=True)


def _key(key) -> tuple:
    """A groupby key as a tuple, whether it grouped by one column or several."""
    return key if isinstance(key, tuple) else (key,)


def ranking_basis(baseline: str | None, baseline_threads: int = 1) -> str:
    """What a ranking's speedups are relative to, in words."""
    if baseline is None:
        return "speedup over the sequential loop (sequential_ns / makespan_ns)"
    return f"speedup over {baseline} on {baseline_threads} thread(s)"


def matrix_rows(workloads) -> dict[str, dict[str, float]]:
    """The row statistics of the matrix of each SpMV workload among ``workloads`` (whose matrix can be read,
    or whose row lengths are fitted to statistics)."""
    from ..workloads import get_workload

    found = {}
    for spec in workloads:
        try:
            workload = get_workload(spec)
            # Rows drawn from a distribution have no statistics of their own until drawn: none.
            stats = workload.matrix_statistics() if workload.name == "spmv" else None
        except SimschedError:  # a workload of another version, or a matrix file not here: no statistics
            continue
        if stats is not None:
            found[spec] = stats
    return found


def workload_kind(spec: str) -> str:
    """A workload spec's kind: its name without parameters (``spmv`` for ``spmv:matrix=banded``)."""
    return str(spec).split(":", 1)[0]


def geometric_means(table: pd.DataFrame, kinds=("spmv",)) -> pd.DataFrame:
    """Each method's geometric mean speedup over the workloads of each kind in ``kinds``, ranked.

    A ``rank_methods`` table in, one of the same columns out: per machine, kind and thread count,
    a row per method whose speedup is the geometric mean of its best speedups over every workload
    of that kind (a method missing from any of them is left out), under the workload name
    ``KIND (geometric mean over N workloads)`` and the kind in column ``kind``. Kinds with fewer than two workloads give no row:
    one matrix's mean is that matrix's own ranking.
    """
    import numpy as np

    place = ["machine"] if "machine" in table.columns else []
    kind = table["workload"].map(workload_kind)
    rows = []
    for name in kinds:
        mine = table[kind == name]
        for key, group in mine.groupby(place + ["threads"], sort=False):
            *where, p = _key(key)
            count = group["workload"].nunique()
            if count < 2:
                continue
            label = f"{name} (geometric mean over {count} workloads)"
            for method, runs in group.groupby("method", sort=False):
                if runs["workload"].nunique() < count:
                    continue
                rows.append({**dict(zip(place, where)), "workload": label, "kind": name, "threads": int(p),
                             "method": method, "best": ", ".join(sorted(set(runs["best"]))),
                             "speedup": float(np.exp(np.log(runs["speedup"]).mean())),
                             "makespan_ns": float(np.exp(np.log(runs["makespan_ns"]).mean())),
                             "sensitivity": float(runs["sensitivity"].max())})
    if not rows:
        return table.iloc[0:0][[c for c in table.columns if c not in ("row_variance", "row_cv")]].assign(kind="")
    means = pd.DataFrame(rows)
    by_point = means.groupby(place + ["workload", "threads"])["speedup"]
    means["rank"] = by_point.rank(ascending=False, method="min").astype(int)
    means["behind_best"] = 1 - means["speedup"] / by_point.transform("max")
    return means.sort_values(place + ["workload", "threads", "rank"]).reset_index(drop=True)


def format_ranking(table: pd.DataFrame, highlight: str | None = None, basis: str = "") -> str:
    """Text tables, one per (machine, workload, threads), under the line ``basis`` (what the speedups are
    over); the highlighted method is marked."""
    place = (["machine"] if "machine" in table.columns else []) + ["workload"]
    # As wide as the longest method, so the columns stay aligned.
    method_w = max([12, *(len(str(m)) for m in table["method"])])
    blocks = [basis] if basis else []
    for key, group in table.groupby(place + ["threads"], sort=False):
        *where, p = key
        title = f"{where[-1]}, {p} threads" + (f" on {where[0]}" if len(where) > 1 else "")
        if "row_variance" in group.columns and pd.notna(group["row_variance"].iloc[0]):
            title += (f" (nonzeros per row: variance {group['row_variance'].iloc[0]:.1f}, "
                      f"CV {group['row_cv'].iloc[0]:.2f})")
        lines = [title, f"  {'rank':>4}  {'method':<{method_w}} {'speedup':>8}  {'time (us)':>11}  "
                        f"{'sensitivity':>11}  best"]
        for row in group.itertuples(index=False):
            mark = " <" if row.method == highlight else ""
            lines.append(f"  {row.rank:>4}  {row.method:<{method_w}} {row.speedup:>8.2f}  "
                         f"{row.makespan_ns / 1e3:>11.2f}  {row.sensitivity:>11.3f}  {row.best}{mark}")
        blocks.append("\n".join(lines))
    if highlight is not None and highlight in set(table["method"]):
        mine = table[table["method"] == highlight]
        blocks.append(f"{highlight}: rank {', '.join(str(r) for r in mine['rank'])}; at most "
                      f"{100 * mine['behind_best'].max():.1f}% behind the best, "
                      f"{100 * mine['behind_best'].mean():.1f}% on average; parameter sensitivity "
                      f"(worst/best) up to {mine['sensitivity'].max():.3f}")
    return "\n\n".join(blocks)
