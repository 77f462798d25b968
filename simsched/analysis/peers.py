"""A side-by-side comparison of loop-scheduling techniques: makespan over the ideal sum/P, and chunks taken.

The ideal is a perfect split of the loop's sequential time over P workers with no scheduling at all,
so a ratio of 1.10 means 10% above what any schedule could reach; on a machine whose clock does not
depend on the load (``uniform``), the ratio is the technique's imbalance plus its scheduling cost.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..output import save_figure
from ..spec import parse_spec
from .burden import succeeded

PEERS_COLUMNS = ["scheduler", "workload", "threads", "ratio", "chunks"]


def workload_labels(workloads) -> dict[str, str]:
    """A short label per workload spec: its name, or the whole spec where two share a name."""
    names = {w: parse_spec(w, "workload")[0] for w in workloads}
    shared = {n for n in names.values() if list(names.values()).count(n) > 1}
    return {w: w if n in shared else n for w, n in names.items()}


def peers_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per (scheduler, workload, threads): makespan / (sequential time / threads) and the chunks taken."""
    ok = results[succeeded(results)]
    table = pd.DataFrame({
        "scheduler": ok["scheduler"], "workload": ok["workload"], "threads": ok["threads"].astype(int),
        "ratio": ok["makespan_ns"] / (ok["sequential_ns"] / ok["threads"]),
        "chunks": ok["chunks"].astype(int),
    })
    # Seeds of one point are averaged: the ratio's mean, the chunks' median.
    grouped = table.groupby(["scheduler", "workload", "threads"], sort=False)
    return grouped.agg(ratio=("ratio", "mean"), chunks=("chunks", "median")).reset_index()[PEERS_COLUMNS]


def _pivot(table: pd.DataFrame, value: str) -> pd.DataFrame:
    labels = workload_labels(dict.fromkeys(table["workload"]))
    wide = table.assign(column=[f"{labels[w]} P={p}" for w, p in zip(table["workload"], table["threads"])])
    order = list(dict.fromkeys(wide["column"]))
    return wide.pivot(index="scheduler", columns="column", values=value).reindex(
        index=list(dict.fromkeys(table["scheduler"])), columns=order)


def format_peers(table: pd.DataFrame) -> str:
    """Two blocks, one row per scheduler: makespan / (sum/P) per workload and thread count, then chunk counts."""
    ratio, chunks = _pivot(table, "ratio"), _pivot(table, "chunks")
    best = ratio.idxmin()
    # Wide enough for every column's title and for the name of its best scheduler, in the row that names it.
    width = max(12, *(len(c) + 1 for c in ratio.columns), *(len(str(b)) + 1 for b in best))
    name = max(10, *(len(s) for s in ratio.index)) + 1

    def block(title: str, frame: pd.DataFrame, fmt) -> list[str]:
        lines = [title, f"{'scheduler':<{name}}" + "".join(f"{c:>{width}}" for c in frame.columns)]
        for scheduler, row in frame.iterrows():
            lines.append(f"{scheduler:<{name}}" + "".join(
                f"{'-' if pd.isna(v) else fmt(v):>{width}}" for v in row))
        return lines

    lines = block("makespan / (sum/P), 1 is ideal", ratio, lambda v: f"{v:.3f}")
    lines.append(f"{'best':<{name}}" + "".join(f"{best[c]:>{width}}" for c in ratio.columns))
    lines.append("")
    lines += block("chunks", chunks, lambda v: f"{int(v)}")
    return "\n".join(lines)


def plot_peers(table: pd.DataFrame, out) -> None:
    """A heat map of makespan / (sum/P): schedulers by row, workload and thread count by column."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ratio = _pivot(table, "ratio")
    values = ratio.to_numpy(dtype=float)
    fig, ax = plt.subplots(figsize=(1.1 * values.shape[1] + 3, 0.32 * values.shape[0] + 1.6))
    # A log scale centred on the ideal: 1.0 white-ish, the worst darkest.
    image = ax.imshow(np.log10(values), cmap="viridis_r", aspect="auto",
                      vmin=0, vmax=max(np.nanmax(np.log10(values)), 0.01))
    ax.set_xticks(range(values.shape[1]), ratio.columns, rotation=30, ha="right")
    ax.set_yticks(range(values.shape[0]), ratio.index)
    for (i, j), v in np.ndenumerate(values):
        if np.isfinite(v):
            dark = np.log10(v) > 0.6 * image.get_clim()[1]
            ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7, color="white" if dark else "black")
    bar = fig.colorbar(image, ax=ax)
    ticks = [t for t in (1, 1.1, 1.25, 1.5, 2, 3, 5, 10, 20, 50) if np.log10(t) <= image.get_clim()[1]]
    bar.set_ticks(np.log10(ticks), labels=[f"{t:g}" for t in ticks])
    bar.set_label("makespan / (sum/P)")
    ax.set_title("Scheduling techniques side by side: makespan over the ideal sum/P")
    fig.tight_layout()
    save_figure(fig, out)
    plt.close(fig)
