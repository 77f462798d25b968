"""Plots of sweep results: speedup against loop duration, one curve per scheduler."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import SimschedError
from ..output import save_figure
from .amdahl import amdahl_speedup, saturating_speedup
from .burden import burden_table, loop_durations_us, succeeded


def plot_speedup(results: pd.DataFrame, out: str | Path | None = None, ax=None, fitted: bool = True):
    """Speedup vs sequential loop duration (log x) per (machine, scheduler, threads), with both fitted curves.

    Dotted: the published fit T/(d + T/P); dash-dotted: T/(d2 + T/S_max) with the plateau free.
    """
    import matplotlib

    if ax is None and out is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = results[succeeded(results)]
    if ok.empty:
        raise SimschedError("no successful runs to plot")
    ok = ok.assign(t_us=loop_durations_us(ok))
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(7, 4.5))
    fits = burden_table(ok).set_index(["machine", "scheduler", "threads"]) if fitted else None
    several_machines = ok["machine"].nunique() > 1
    for (machine, scheduler, threads), group in ok.groupby(["machine", "scheduler", "threads"], sort=False):
        curve = group.groupby("t_us")["speedup"].mean()
        label = f"{scheduler} (P={threads})" + (f" on {machine}" if several_machines else "")
        fit = fits.loc[(machine, scheduler, threads)] if fits is not None and (machine, scheduler, threads) \
            in fits.index else None
        if fit is not None:
            label += f", d={fit['d_us']:.2f} us; d2={fit['d2_us']:.2f} us, S_max={fit['s_max']:.1f}"
        (line,) = ax.plot(curve.index, curve.values, "o-", ms=3, label=label)
        if fit is not None:
            t = np.geomspace(curve.index.min(), curve.index.max(), 200)
            ax.plot(t, amdahl_speedup(t, fit["d_us"], int(threads)), ":", color=line.get_color(), lw=1)
            if np.isfinite(fit["d2_us"]):
                ax.plot(t, saturating_speedup(t, fit["d2_us"], fit["s_max"]), "-.", color=line.get_color(), lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("sequential loop duration T (us)")
    ax.set_ylabel("speedup")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    ax.set_title("speedup vs loop duration (dotted: fitted T/(d + T/P); dash-dotted: T/(d2 + T/S_max))",
                 fontsize=9)
    if own and out is not None:
        fig.tight_layout()
        save_figure(fig, out)
        plt.close(fig)
    return ax


def plot_ranking(table: pd.DataFrame, out: str | Path | None = None):
    """Best speedup against threads per method, one panel per workload (a ``rank_methods`` table)."""
    import matplotlib

    if out is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(dict.fromkeys(table["workload"]))
    # At most four panels a row, so many workloads wrap instead of making one unreadably wide strip;
    # each method keeps one colour in every panel.
    columns = min(4, len(workloads))
    panels = -(-len(workloads) // columns)
    fig, axes = plt.subplots(panels, columns, figsize=(4.5 * columns, 3.8 * panels), squeeze=False)
    colours = {m: f"C{i % 10}" for i, m in enumerate(dict.fromkeys(table["method"]))}
    for ax, workload in zip(axes.flat, workloads):
        rows = table[table["workload"] == workload]
        for method, group in rows.groupby("method", sort=False):
            group = group.sort_values("threads")
            ax.plot(group["threads"], group["speedup"], "o-", ms=3, label=method, color=colours[method])
        ax.set_title(workload, fontsize=9)
        ax.set_xlabel("threads")
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(workloads):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("speedup (best parameter per method)")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    if out is not None:
        save_figure(fig, out)
        plt.close(fig)
    return fig
