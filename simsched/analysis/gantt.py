"""A Gantt chart of one or more traces written by ``--trace``: a row per worker, a colour per state."""

from __future__ import annotations

from pathlib import Path

from ..engine import STATES
from ..output import save_figure
from ..timeline import read_trace

# Successive chunks alternate two greens, so that chunk boundaries show.
CHUNK_SHADES = ("#4c9a2a", "#7cc25a")
COLOURS = {"compute": CHUNK_SHADES[0], "schedule": "#e8a33d", "steal": "#d1495b", "split": "#8e6cc2",
           "create": "#3b8ec2", "sync": "#6b6b6b", "idle": "#e4e4e4"}


def plot_timeline(traces: list[str | Path], out: str | Path) -> Path:
    """Draw every process of ``traces`` as a panel of worker rows on one time axis (us); write ``out``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    runs = [run for path in traces for run in read_trace(path)]
    heights = [max(int(run["slices"]["worker"].max()) + 1, 1) for run in runs]
    fig, axes = plt.subplots(len(runs), 1, sharex=True, squeeze=False,
                             figsize=(10, 1.2 + 0.35 * sum(heights) + 0.6 * len(runs)),
                             gridspec_kw={"height_ratios": heights})
    shown = set()
    for ax, run, rows in zip(axes[:, 0], runs, heights):
        slices = run["slices"]
        for state in STATES:
            mine = slices[slices["state"] == state]
            if mine.empty:
                continue
            shown.add(state)
            for worker, group in mine.groupby("worker"):
                spans = list(zip(group["start"] / 1e3, (group["end"] - group["start"]) / 1e3))
                colours = [CHUNK_SHADES[i % 2] for i in range(len(spans))] if state == "compute" \
                    else COLOURS[state]
                ax.broken_barh(spans, (worker - 0.4, 0.8), facecolors=colours, edgecolor="none")
        for bound in run["bounds"]:
            ax.axvline(bound / 1e3, color="black", lw=0.8, ls="--")
        ax.set_yticks(range(rows))
        ax.set_yticklabels([f"worker {w}" for w in range(rows)], fontsize=8)
        ax.set_ylim(rows - 0.5, -0.5)
        ax.set_title(run["label"], fontsize=9, loc="left")
        ax.grid(True, axis="x", alpha=0.3)
    axes[-1, 0].set_xlabel("time (us); dashed: loop ends")
    handles = [Patch(facecolor=COLOURS[s], label="compute (chunks alternate shades)" if s == "compute" else s)
               for s in STATES if s in shown]
    fig.legend(handles=handles, loc="upper center", ncol=len(handles), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0, 1, 0.94))
    try:
        return save_figure(fig, out, "--out")
    finally:
        plt.close(fig)
