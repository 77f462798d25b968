"""The what-if experiments' tables and plots: burden against thread count, winners, and noise inflation."""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import SimschedError
from .burden import burden_table, numeric, speedup_curves, succeeded

NO_NOISE = "none"


def burden_by_threads(results: pd.DataFrame) -> pd.DataFrame:
    """The fitted burden d (us): one row per scheduler, one column per thread count, in the grid's order."""
    table = burden_table(results)
    order = list(dict.fromkeys(table["scheduler"]))
    return (table.pivot(index="scheduler", columns="threads", values="d_us").reindex(order)
            .rename_axis(columns="threads"))


def winners(results: pd.DataFrame) -> pd.DataFrame:
    """The scheduler with the highest mean speedup at each (threads, loop duration), and that speedup."""
    curves = speedup_curves(results)
    if not curves:
        raise SimschedError("no successful runs to rank")
    mean = pd.concat([curve.rename("speedup").reset_index().assign(scheduler=scheduler, threads=threads)
                      for (_, scheduler, threads), curve in curves.items()], ignore_index=True)
    best = mean.loc[mean.groupby(["threads", "t_us"])["speedup"].idxmax()]
    best = best.rename(columns={"scheduler": "best", "speedup": "best_speedup"})
    return best[["threads", "t_us", "best", "best_speedup"]].sort_values(["threads", "t_us"]).reset_index(drop=True)


def noise_label(machine: str) -> str:
    """What a machine variant changes (``noise.rate_hz=1000,...``), or ``none`` for the machine itself."""
    machine = str(machine)
    if not machine.endswith("]") or "[" not in machine:
        return NO_NOISE
    return machine[machine.index("[") + 1:-1].replace("noise.", "")


def noise_inflation(results: pd.DataFrame) -> pd.DataFrame:
    """Mean makespan under each noise over the mean makespan without, per scheduler, workload and thread count.

    The runs without noise are the grid's plain machine (a name without ``[...]``); each
    variant ``NAME[noise...]`` is compared with it at the same scheduler, workload and threads.
    """
    missing = [c for c in ("machine", "scheduler", "workload", "threads", "makespan_ns") if c not in results]
    if missing:
        raise SimschedError(f"results table lacks column {missing[0]!r}: is it a sweep's results?")
    ok = numeric(results[succeeded(results)], ["threads", "makespan_ns"]).copy()
    ok["noise"] = ok["machine"].map(noise_label)
    if not (ok["noise"] == NO_NOISE).any():
        raise SimschedError("the results have no run without noise (a machine without [...]) to compare with")
    keys = ["scheduler", "workload", "threads"]
    mean = ok.groupby(keys + ["noise"], sort=False)["makespan_ns"].mean().reset_index()
    base = mean[mean["noise"] == NO_NOISE].set_index(keys)["makespan_ns"]
    mean["inflation"] = mean["makespan_ns"].to_numpy() / base.reindex(
        pd.MultiIndex.from_frame(mean[keys])).to_numpy()
    return mean[mean["noise"] != NO_NOISE].reset_index(drop=True)


def inflation_table(inflation: pd.DataFrame, workload: str) -> pd.DataFrame:
    """One workload's inflation: a row per scheduler, a column per noise, in the grid's order."""
    part = inflation[inflation["workload"] == workload]
    if part.empty:
        raise SimschedError(f"no runs of workload {workload!r}")
    return (part.pivot_table(index="scheduler", columns="noise", values="inflation", sort=False)
            .reindex(columns=list(dict.fromkeys(part["noise"]))))


def plot_burden_by_threads(table: pd.DataFrame, ax=None):
    """d against threads on log-log axes, a line per scheduler."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(7, 4.5))
    for scheduler, row in table.iterrows():
        ax.plot(row.index.astype(int), row.to_numpy(dtype=float), marker="o", label=scheduler)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(table.columns.astype(int), [str(int(c)) for c in table.columns])
    ax.set_xlabel("threads P")
    ax.set_ylabel("fitted burden d (us)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    return ax


def plot_inflation(table: pd.DataFrame, ax=None, title: str = ""):
    """Inflation per scheduler (groups) and noise (bars), 1 = unaffected."""
    import matplotlib.pyplot as plt

    if ax is None:
        _, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / max(len(table.columns), 1)
    x = np.arange(len(table.index))
    for i, noise in enumerate(table.columns):
        ax.bar(x + i * width, table[noise].to_numpy(dtype=float), width, label=noise)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x + width * (len(table.columns) - 1) / 2, table.index, rotation=20)
    ax.set_ylabel("loop time / loop time without noise")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    return ax
