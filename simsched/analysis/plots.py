"""Plots of sweep results: speedup against loop duration per scheduler, and method comparisons."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import SimschedError
from ..output import save_figure
from .amdahl import amdahl_speedup, saturating_speedup
from .burden import KEYS, burden_table, loop_durations_us, numeric, succeeded
from .labels import chars_across, wrap_label

# One hollow marker shape per scheduler or method, the same in every panel.
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "h", "*", "p")
# Where no line style is taken by a fit, methods alternate them: a dashed line over a solid one shows both.
LINESTYLES = ("-", "--", "-.", ":")
LEGEND_INCHES = 3.0   # the room a panel's legend of fitted values takes beside it
TITLE_SIZE = 10


def styles(names) -> dict[str, dict]:
    """A colour, marker, marker size, line width and line style per name, the same in every panel of a figure.

    Each name is drawn over the ones before it and a little thinner, so that of two lines which
    coincide the one beneath still shows along both edges of the other.
    """
    names = list(dict.fromkeys(names))
    under = [(len(names) - 1 - i) / max(len(names) - 1, 1) for i in range(len(names))]
    # Markers that cannot be staggered (too few points) shrink the same way: one shape inside the other.
    return {name: {"color": f"C{i % 10}", "marker": MARKERS[i % len(MARKERS)], "lw": 1 + 1.2 * under[i],
                   "ms": 4.5 + 6.5 * under[i], "ls": LINESTYLES[i % len(LINESTYLES)]}
            for i, name in enumerate(names)}


def stagger(index: int, curves: int, points: int):
    """Which points of the ``index``-th of ``curves`` curves carry its marker (matplotlib's markevery).

    With enough points, each curve marks every ``curves``-th point from its own offset, so curves that
    coincide (omp-static and fg-tree-full on E1) still show each its own markers.
    """
    return (index % curves, curves) if curves > 1 and points >= 3 * curves else None


def _pyplot(out):
    import matplotlib

    if out is not None:
        matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _finish(fig, out, plt):
    if out is not None:
        save_figure(fig, out)
        plt.close(fig)
    return fig


def _fit_label(fit) -> str:
    """The fitted values of one curve, in two short lines: d (and the published d) and the free fit."""
    text = f"d={fit['d_us']:.2f} us"
    published = fit.get("published_d_us", np.nan)
    if pd.notna(published):
        text += f" (published {published:.2f})"
    if np.isfinite(fit["d2_us"]):
        text += f"\nd2={fit['d2_us']:.2f} us, S_max={fit['s_max']:.1f}"
    return text


def _speedup_curves(ax, rows: pd.DataFrame, fits, look: dict, name) -> None:
    """Each (machine, scheduler, threads) curve of ``rows`` and its fits on ``ax``, labelled ``name(key)``."""
    groups = list(rows.groupby(KEYS, sort=False))
    for index, (key, group) in enumerate(groups):
        curve = group.groupby("t_us")["speedup"].mean()
        fit = fits.loc[key] if fits is not None and key in fits.index else None
        label = name(key) + (": " + _fit_label(fit) if fit is not None else "")
        style = look[key[1]]
        every = stagger(index, len(groups), len(curve))
        ax.plot(curve.index, curve.values, "-", lw=style["lw"], marker=style["marker"],
                ms=style["ms"] if every is None else 6, mfc="none", mew=1.2, color=style["color"],
                markevery=every, label=label)
        if fit is not None:
            t = np.geomspace(curve.index.min(), curve.index.max(), 200)
            ax.plot(t, amdahl_speedup(t, fit["d_us"], int(key[2])), ":", color=style["color"], lw=1)
            if np.isfinite(fit["d2_us"]):
                ax.plot(t, saturating_speedup(t, fit["d2_us"], fit["s_max"]), "-.", color=style["color"],
                        lw=1)
    ax.set_xscale("log")
    ax.set_xlabel("sequential loop duration T (us)")
    ax.set_ylabel("speedup")
    ax.grid(True, which="both", alpha=0.3)


def plot_speedup(results: pd.DataFrame, out: str | Path | None = None, ax=None, fitted: bool = True,
                 published: dict[str, float] | None = None, published_machine: str | None = None,
                 source: str = ""):
    """Speedup vs sequential loop duration (log x) per (machine, scheduler, threads), with both fitted curves.

    Dotted: the published fit T/(d + T/P); dash-dotted: T/(d2 + T/S_max) with the plateau free.
    The curves of ``published_machine`` give the ``published`` d of their scheduler (from ``source``)
    beside the fitted one. Into ``ax``, every curve goes on it and ``ax`` is returned; otherwise
    the figure has one panel per (machine, thread count), is titled with what it shows, and is
    returned (and saved to ``out``).
    """
    ok = results[succeeded(results)]
    if ok.empty:
        raise SimschedError("no successful runs to plot")
    ok = ok.assign(t_us=loop_durations_us(ok))
    fits = burden_table(ok, published, published_machine).set_index(KEYS) if fitted else None
    look = styles(ok["scheduler"])
    machines = list(dict.fromkeys(ok["machine"]))
    counts = list(dict.fromkeys(ok["threads"]))
    if ax is not None:
        def name(key):
            return f"{key[1]} (P={key[2]})" + (f" on {key[0]}" if len(machines) > 1 else "")

        _speedup_curves(ax, ok, fits, look, name)
        ax.legend(fontsize=8)
        ax.set_title("speedup vs loop duration (dotted: fitted T/(d + T/P); dash-dotted: T/(d2 + T/S_max))",
                     fontsize=9)
        return ax
    plt = _pyplot(out)
    panels = list(dict.fromkeys(zip(ok["machine"], ok["threads"])))
    columns = 1 if len(panels) <= 2 else 2
    rows_n = -(-len(panels) // columns)
    width = columns * (6.0 + LEGEND_INCHES)
    fig, axes = plt.subplots(rows_n, columns, figsize=(width, 3.9 * rows_n + 1.2), squeeze=False,
                             layout="constrained")
    for panel_ax, (machine, threads) in zip(axes.flat, panels):
        rows = ok[(ok["machine"] == machine) & (ok["threads"] == threads)]
        _speedup_curves(panel_ax, rows, fits, look, lambda key: wrap_label(key[1], 30))
        panel_ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)
        if len(panels) > 1:
            where = [str(machine)] if len(machines) > 1 else []
            where += [f"P={threads}"] if len(counts) > 1 else []
            panel_ax.set_title(wrap_label(", ".join(where), chars_across(6.0, 9)), fontsize=9)
    for panel_ax in list(axes.flat)[len(panels):]:
        panel_ax.set_visible(False)
    title = "Speedup against loop duration"
    if len(machines) == 1:
        title += f" on {machines[0]}"
    if len(counts) == 1:
        title += f", {counts[0]} threads"
    lines = [title, "solid: mean simulated speedup; dotted: fitted T/(d + T/P); "
                    "dash-dotted: fitted T/(d2 + T/S_max)"]
    if published and published_machine is not None:
        lines.append(f"published d: {source + ', ' if source else ''}measured on {published_machine}")
    fig.suptitle("\n".join(wrap_label(line, chars_across(width - 0.4, TITLE_SIZE)) for line in lines),
                 fontsize=TITLE_SIZE)
    return _finish(fig, out, plt)


def plot_ranking(table: pd.DataFrame, out: str | Path | None = None, basis: str = ""):
    """Each method's best speedup per machine and workload (a ``rank_methods`` table), titled ``basis``.

    With several thread counts, speedup against threads, one panel per (workload, machine); with
    one, bars, one panel per (workload, threads), a group of bars per machine.
    """
    plt = _pyplot(out)
    if "machine" not in table.columns:
        table = table.assign(machine="")
    look = styles(table["method"])
    one_count = table.groupby(["machine", "workload"])["threads"].nunique().max() == 1
    if one_count:
        panels = list(dict.fromkeys(zip(table["workload"], table["threads"])))
        machines = list(dict.fromkeys(table["machine"]))
        panel_w = max(4.5, 0.6 + 0.22 * len(machines) * len(look))
    else:
        panels = list(dict.fromkeys(zip(table["workload"], table["machine"])))
        panel_w = 4.5
    # At most four panels a row, so many workloads wrap instead of making one unreadably wide strip;
    # each method keeps one colour and marker in every panel.
    columns = min(4 if panel_w <= 4.5 else 2, len(panels))
    rows_n = -(-len(panels) // columns)
    width = columns * panel_w + 2.2
    fig, axes = plt.subplots(rows_n, columns, figsize=(width, 3.8 * rows_n + 1.0), squeeze=False,
                             layout="constrained")
    across = chars_across(panel_w - 0.6, 9)
    for ax, panel in zip(axes.flat, panels):
        if one_count:
            workload, threads = panel
            rows = table[(table["workload"] == workload) & (table["threads"] == threads)]
            _bars(ax, rows, machines, look, panel_w)
            ax.set_title(wrap_label(f"{workload}, {threads} threads", across), fontsize=9)
        else:
            workload, machine = panel
            rows = table[(table["workload"] == workload) & (table["machine"] == machine)]
            for method, group in rows.groupby("method", sort=False):
                group = group.sort_values("threads")
                ax.plot(group["threads"], group["speedup"], look[method]["ls"], lw=look[method]["lw"],
                        marker=look[method]["marker"], ms=look[method]["ms"], mfc="none", mew=1.2,
                        color=look[method]["color"], label=method)
            ax.set_xlabel("threads")
            ax.set_title(wrap_label(workload + (f" on {machine}" if machine else ""), across), fontsize=9)
        ax.grid(True, alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.set_visible(False)
    for row in axes:
        row[0].set_ylabel("speedup (best parameter per method)")
    if one_count:
        handles = [plt.Rectangle((0, 0), 1, 1, color=s["color"]) for s in look.values()]
    else:
        handles = [plt.Line2D([], [], color=s["color"], marker=s["marker"], mfc="none", ls=s["ls"],
                              lw=s["lw"], ms=s["ms"], mew=1.2) for s in look.values()]
    fig.legend(handles, [wrap_label(m, 24) for m in look], loc="outside right upper", fontsize=8,
               title="method")
    if basis:
        fig.suptitle(wrap_label(basis, chars_across(width - 2.4, TITLE_SIZE)), fontsize=TITLE_SIZE)
    return _finish(fig, out, plt)


def _bars(ax, rows: pd.DataFrame, machines: list, look: dict, panel_w: float) -> None:
    """A group of bars per machine, one bar per method, their speedups."""
    width = 0.8 / len(look)
    x = np.arange(len(machines))
    for i, (method, style) in enumerate(look.items()):
        mine = rows[rows["method"] == method].set_index("machine")["speedup"]
        ax.bar(x + (i - (len(look) - 1) / 2) * width, [mine.get(m, np.nan) for m in machines], width,
               color=style["color"], label=method)
    ax.set_xticks(x, [wrap_label(m, chars_across((panel_w - 0.6) / len(machines), 8)) or "(machine)"
                      for m in machines], fontsize=8)
    ax.set_xlabel("machine")


def plot_sweep(results: pd.DataFrame, out: str | Path | None = None,
               published: dict[str, float] | None = None, published_machine: str | None = None,
               source: str = ""):
    """The plot of a sweep without an analysis section, returned (and saved to ``out``).

    Runs of one loop shape at several durations get speedup curves (:func:`plot_speedup`); any
    other sweep, such as one workload over schedulers and machines, each method's best speedup over
    the sequential loop per machine (:func:`plot_ranking`).
    """
    from .ranking import rank_methods, ranking_basis
    from .shape import has_duration_axis

    ok = numeric(results, [c for c in ("sequential_ns", "repeat") if c in results.columns])
    ok = ok[succeeded(ok)]
    if {"workload", "sequential_ns"} <= set(ok.columns) and not ok.empty and \
            has_duration_axis(ok["workload"].astype(str), loop_durations_us(ok)):
        return plot_speedup(results, out, published=published, published_machine=published_machine,
                            source=source)
    return plot_ranking(rank_methods(results, None), out, ranking_basis(None))
