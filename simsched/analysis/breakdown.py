"""Normalized execution time broken down by what the workers did, as the loop-task publications report it.

The normalized time of a run is P x makespan / T1, where T1 is one worker running the
same program under a baseline scheduler (by default ``lbs``, which never splits alone).
It is the sum over workers of each state's time over T1, so the categories stack: a
perfect schedule is 1.0 of computing and nothing else.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from ..errors import SimschedError
from ..output import save_figure
from .burden import succeeded

# Result states summed into each published category.
CATEGORIES = {
    "computing": ("compute",),
    "searching": ("steal", "idle", "sync"),   # looking for work, idle, waiting for a loop to finish
    "splitting": ("split",),
    "creating": ("create",),
    "scheduling": ("schedule",),              # task dispatch and own-queue operations
}
COUNTERS = ("tasks_created", "iterations_serialized", "splits", "steal_attempts", "steals")


@lru_cache(maxsize=256)
def one_worker_ns(machine: str, baseline: str, workload: str, seed: int, repeat: int) -> float:
    """The makespan of the program on one worker under ``baseline`` (the normalization T1)."""
    from ..engine import simulate

    return simulate(machine, baseline, workload, 1, seed=seed, repeat=repeat).makespan_ns


def breakdown_table(results: pd.DataFrame, baseline: str = "lbs") -> pd.DataFrame:
    """Per (machine, workload, scheduler, threads): mean normalized time, its categories and the counters.

    Means are over seeds; ``serialized_pct`` is iterations_serialized over all iterations.
    """
    ok = results[succeeded(results)]
    if ok.empty:
        raise SimschedError("no successful runs to break down")
    missing = [f"state_{s}_ns" for states in CATEGORIES.values() for s in states
               if f"state_{s}_ns" not in ok.columns]
    if missing:
        raise SimschedError(f"the results lack {', '.join(missing)}: rerun the sweep with this version")
    rows = []
    for run in ok.itertuples(index=False):
        run = run._asdict()
        t1 = one_worker_ns(run["machine"], baseline, run["workload"], int(run["seed"]), int(run.get("repeat", 1)))
        row = {key: run[key] for key in ("machine", "workload", "scheduler", "threads", "seed")}
        row["normalized"] = run["threads"] * run["makespan_ns"] / t1
        for category, states in CATEGORIES.items():
            row[category] = sum(run[f"state_{s}_ns"] for s in states) / t1
        for name in COUNTERS:
            row[name] = run.get(f"counter_{name}", np.nan)
        iterations = _iterations(run["workload"], int(run["seed"]), int(run.get("repeat", 1)))
        row["serialized_pct"] = 100.0 * row["iterations_serialized"] / iterations if iterations else np.nan
        row["speedup"] = t1 / run["makespan_ns"]
        rows.append(row)
    frame = pd.DataFrame(rows)
    keys = ["machine", "workload", "scheduler", "threads"]
    table = frame.groupby(keys, sort=False).mean(numeric_only=True).reset_index()
    table["seeds"] = frame.groupby(keys, sort=False).size().to_numpy()
    return table.drop(columns=["seed"])


@lru_cache(maxsize=256)
def _iterations(workload: str, seed: int, repeat: int) -> int:
    """Iterations of all loops of a run's program (inner loops included); the same for every scheduler."""
    from ..workloads import get_workload

    loops = get_workload(workload).loops(np.random.default_rng(seed))
    per_program = sum(loop.n + sum(inner.n for inner in loop.inner.values()) for loop in loops)
    return per_program * repeat


def format_breakdown(table: pd.DataFrame) -> str:
    """The breakdown as aligned text, one block per (machine, workload, threads); "-" where a value is undefined."""
    name = max(len("scheduler"), *(len(str(s)) for s in table["scheduler"]))
    # (header, width, decimals) per column after the scheduler's.
    columns = {"normalized": ("norm", 7, 4), "computing": ("comp", 6, 3), "searching": ("search", 7, 4),
               "splitting": ("split", 6, 4), "creating": ("create", 7, 4), "scheduling": ("sched", 6, 4),
               "tasks_created": ("tasks", 9, 0), "serialized_pct": ("serial%", 8, 2), "steals": ("steals", 8, 0),
               "steal_attempts": ("attempts", 10, 0)}
    head = f"  {'scheduler':<{name}} " + " ".join(f"{h:>{w}}" for h, w, _ in columns.values())
    order = table.assign(_block=table.groupby(["machine", "workload"], sort=False).ngroup())
    lines = []
    for (_, machine, workload, threads), rows in order.groupby(["_block", "machine", "workload", "threads"]):
        if lines:
            lines.append("")
        lines.append(f"{workload} ({machine}, {int(threads)} workers, {int(rows['seeds'].iloc[0])} seed(s)); "
                     "time normalized to one worker")
        lines.append(head)
        for row in rows.to_dict(orient="records"):
            cells = [_cell(row[key], w, d) for key, (_, w, d) in columns.items()]
            lines.append(f"  {row['scheduler']:<{name}} " + " ".join(cells))
    return "\n".join(lines)


def _cell(value, width: int, decimals: int) -> str:
    """A number right-aligned in ``width``, or "-" where it is undefined (a counter the scheduler lacks)."""
    if value is None or not np.isfinite(value):
        return f"{'-':>{width}}"
    return f"{value:{width}.{decimals}f}"


def plot_breakdown(table: pd.DataFrame, out=None):
    """Stacked bars of the normalized time per scheduler, one panel per workload."""
    import matplotlib

    if out is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(table["workload"]))
    columns = min(3, len(workloads))
    panels = (len(workloads) + columns - 1) // columns
    fig, axes = plt.subplots(panels, columns, figsize=(4.8 * columns, 3.8 * panels), squeeze=False)
    colors = dict(zip(CATEGORIES, ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3"]))
    for ax, workload in zip(axes.flat, workloads):
        rows = table[table["workload"] == workload]
        x = np.arange(len(rows))
        bottom = np.zeros(len(rows))
        for category in CATEGORIES:
            values = rows[category].to_numpy()
            ax.bar(x, values, bottom=bottom, color=colors[category], label=category, width=0.7)
            bottom += values
        ax.set_xticks(x, rows["scheduler"], rotation=45, ha="right", fontsize=8)
        ax.set_title(workload, fontsize=9)
        ax.set_ylabel("time x P / T1")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(workloads):]:
        ax.set_visible(False)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    if out is not None:
        save_figure(fig, out)
        plt.close(fig)
    return fig
