"""The application study (E5): whole-program and fine-grain-loop times of the app workloads, against AV21.

A run simulates a shortened program (the workload's ``scale``); its loop time per class
(the sweep's ``loop_<class>_ns`` columns) is scaled to the whole program class by class,
by the ratio of the class's sequential time in the whole program to that in the run, and
the whole program's sequential code is added. Classes repeat uniformly within a program
(every fine loop runs the same number of times per step, and so does every coarse one;
MPDATA's set-up loop is a class of its own; a Ligra kernel's coarse loops are equal), so the
scaling keeps each loop's share.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from ..errors import SimschedError
from ..output import save_figure
from ..spec import parse_spec
from .burden import succeeded

# Which scheduler each kind of application is compared against, and with which.
PAIRS = {"code": ("omp-static", ("fg-tree",)), "graph": ("cilk", ("cilk-fg", "hybrid"))}
# The published scheduler the model's is compared with: AV21's hybrid Cilk scheduler is cilk-fg.
PUBLISHED_AS = {"fg-tree": "fine-grain", "cilk-fg": "hybrid Cilk (AV21)"}


@lru_cache(maxsize=256)
def _program_figures(workload: str, seed: int) -> dict[str, float] | None:
    """Per class, the (run, whole program) sequential ns of an app workload, and the whole program's serial ns."""
    from ..workloads import get_workload
    from ..workloads.apps import App

    spec = get_workload(workload)
    if not isinstance(spec, App):
        return None
    program = spec.build(np.random.default_rng(seed))
    run, full = program.class_sequential_ns(), program.class_sequential_ns(full=True)
    return {"app": spec.params["name"], "run": run, "full": full, "serial_full": program.serial_total_ns(full=True)}


def apps_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per (machine, app workload, scheduler, threads): the whole program's and its fine loops' time, scaled up."""
    from ..workloads.apps import PUBLISHED

    ok = results[succeeded(results)]
    rows = []
    for row in ok.to_dict(orient="records"):
        figures = _program_figures(row["workload"], int(row["seed"]))
        if figures is None:
            continue
        repeat = int(row.get("repeat", 1) or 1)
        whole, fine = figures["serial_full"], np.nan
        for cls, full_ns in figures["full"].items():
            column = f"loop_{cls}_ns"
            if column not in row or pd.isna(row[column]):
                raise SimschedError(f"the results have no {column} column: rerun the sweep with this version")
            ns = row[column] * full_ns / (figures["run"][cls] * repeat)
            whole += ns
            if cls == "fine":
                fine = ns
        t_seq = sum(figures["full"].values()) + figures["serial_full"]
        rows.append({"machine": row["machine"], "app": figures["app"], "kind": PUBLISHED[figures["app"]].kind,
                     "workload": row["workload"], "scheduler": row["scheduler"], "threads": int(row["threads"]),
                     "seed": row["seed"], "run_ms": row["makespan_ns"] / 1e6, "whole_s": whole / 1e9,
                     "fine_s": fine / 1e9, "t_seq_s": t_seq / 1e9})
    if not rows:
        raise SimschedError("no successful runs of app workloads to tabulate")
    frame = pd.DataFrame(rows)
    keys = ["machine", "app", "kind", "workload", "scheduler", "threads"]
    table = frame.groupby(keys, sort=False)[["run_ms", "whole_s", "fine_s", "t_seq_s"]].mean().reset_index()
    table["speedup"] = table["t_seq_s"] / table["whole_s"]
    return table


def _published(app: str, scheduler: str) -> dict[str, float]:
    """The published figures the model's gain of ``scheduler`` over its baseline is compared with."""
    from ..workloads.apps import PUBLISHED

    pub = PUBLISHED[app]
    if pub.kind == "graph":
        if scheduler != "cilk-fg":
            return {}
        return {"pub_base_whole_s": pub.cilk_total_s, "pub_base_fine_s": pub.cilk_fine_s,
                "pub_whole_s": pub.hybrid_total_s, "pub_fine_s": pub.hybrid_fine_s,
                "pub_whole_gain_pct": 100 * (pub.cilk_total_s / pub.hybrid_total_s - 1),
                "pub_fine_gain_pct": 100 * (pub.cilk_fine_s / pub.hybrid_fine_s - 1)}
    gains = {"cloverleaf": 4.0, "mpdata": 22.0, "lb3d": 100 * (39.3 / 34.1 - 1)}
    out = {"pub_whole_gain_pct": gains[app]}
    if app == "lb3d":
        out.update(pub_base_speedup=34.1, pub_speedup=39.3)
    return out


def apps_comparison(table: pd.DataFrame, threads: int | None = None) -> pd.DataFrame:
    """Gains at ``threads`` (default: the most): fg-tree over omp-static (codes), cilk-fg and hybrid over cilk (kernels).

    A gain is the baseline's time over the scheduler's, minus 1, in percent.
    """
    threads = threads or int(table["threads"].max())
    at = table[table["threads"] == threads]
    rows = []
    for (machine, app, workload), group in at.groupby(["machine", "app", "workload"], sort=False):
        kind = group["kind"].iloc[0]
        baseline, contenders = PAIRS[kind]
        by = group.set_index("scheduler")
        if baseline not in by.index:
            continue
        base = by.loc[baseline]
        for sched in by.index:
            if parse_spec(sched, "scheduler")[0] not in contenders:
                continue
            mine = by.loc[sched]
            rows.append({"machine": machine, "app": app, "kind": kind, "workload": workload, "threads": threads,
                         "baseline": baseline, "scheduler": sched,
                         "base_whole_s": base["whole_s"], "whole_s": mine["whole_s"],
                         "base_fine_s": base["fine_s"], "fine_s": mine["fine_s"],
                         "base_speedup": base["speedup"], "speedup": mine["speedup"],
                         "whole_gain_pct": 100 * (base["whole_s"] / mine["whole_s"] - 1),
                         "fine_gain_pct": 100 * (base["fine_s"] / mine["fine_s"] - 1),
                         **_published(app, sched)})
    if not rows:
        raise SimschedError(f"no pair of schedulers to compare at {threads} threads "
                            "(codes: omp-static and fg-tree; Ligra kernels: cilk and cilk-fg or hybrid)")
    return pd.DataFrame(rows)


def _cell(value, fmt: str) -> str:
    return "" if value is None or pd.isna(value) else format(value, fmt)


def format_apps_table(comparison: pd.DataFrame) -> str:
    """The comparison as text: model and published, whole program and fine-grain loops."""
    threads = int(comparison["threads"].iloc[0])
    lines = [f"applications at {threads} threads (whole program scaled from the run; fine: the loops under "
             "1 ms, the fine-grain loops for Ligra; gain = baseline time / time - 1)",
             f"{'app':<11} {'scheduler':<9} {'vs':<10} {'speedup':>7} {'base':>6} {'whole s':>9} {'base s':>9} "
             f"{'fine s':>9} {'base s':>9} {'whole %':>8} {'fine %':>7} | {'published':<9} {'whole s':>7} "
             f"{'base s':>7} {'fine s':>7} {'base s':>7} {'whole %':>8} {'fine %':>7} {'speedups':>11}"]
    for r in comparison.to_dict(orient="records"):
        speedups = (f"{r['pub_base_speedup']:.1f}/{r['pub_speedup']:.1f}"
                    if not pd.isna(r.get("pub_speedup", np.nan)) else "")
        # A kernel's sequential time is work inferred from Cilk times by the E1 model: no speedup to show.
        code = r["kind"] == "code"
        lines.append(
            f"{r['app']:<11} {r['scheduler']:<9} {r['baseline']:<10} {_cell(r['speedup'] if code else None, '7.2f'):>7} "
            f"{_cell(r['base_speedup'] if code else None, '6.2f'):>6} "
            f"{r['whole_s']:9.4f} {r['base_whole_s']:9.4f} {r['fine_s']:9.4f} {r['base_fine_s']:9.4f} "
            f"{r['whole_gain_pct']:+8.1f} {r['fine_gain_pct']:+7.1f} | {PUBLISHED_AS.get(r['scheduler'], ''):<9.9} "
            f"{_cell(r.get('pub_whole_s'), '7.3f'):>7} {_cell(r.get('pub_base_whole_s'), '7.3f'):>7} "
            f"{_cell(r.get('pub_fine_s'), '7.4f'):>7} {_cell(r.get('pub_base_fine_s'), '7.4f'):>7} "
            f"{_cell(r.get('pub_whole_gain_pct'), '+8.1f'):>8} {_cell(r.get('pub_fine_gain_pct'), '+7.1f'):>7} "
            f"{speedups:>11}")
    return "\n".join(lines)


def plot_apps(comparison: pd.DataFrame, out=None):
    """Bars of the model's gains (whole program, fine-grain loops) per app and scheduler, published ones beside."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [f"{r['app']}\n{r['scheduler']}" for r in comparison.to_dict(orient="records")]
    x = np.arange(len(labels))
    fig, ax = plt.subplots(figsize=(max(6, 1.0 * len(labels)), 4))
    series = [("whole_gain_pct", "whole program, model", "C0", ""), ("fine_gain_pct", "fine-grain loops, model", "C1", ""),
              ("pub_whole_gain_pct", "whole program, published", "C0", "//"),
              ("pub_fine_gain_pct", "fine-grain loops, published", "C1", "//")]
    width = 0.2
    for i, (column, label, color, hatch) in enumerate(series):
        values = comparison[column] if column in comparison.columns else pd.Series(np.nan, index=comparison.index)
        ax.bar(x + (i - 1.5) * width, values.fillna(0), width, color=color, hatch=hatch,
               alpha=0.5 if hatch else 1.0, label=label)
    ax.axhline(0, color="k", lw=0.5)
    ax.set_xticks(x)
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel(f"gain over the baseline at {int(comparison['threads'].iloc[0])} threads (%)")
    ax.set_title("fg-tree over omp-static (codes), cilk-fg and hybrid over cilk (Ligra)", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, out)
