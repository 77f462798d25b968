"""The affinity study (E3): scalability T1/TP, work efficiency Ts/T1 and affinity per scheduler and working set.

T1 is the same scheduler's run on one worker, TP its run on P workers, and Ts the program
run sequentially (no scheduler, one core, ``sequential_ns``), each with its memory time.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from ..errors import SimschedError
from ..output import save_figure
from .burden import succeeded

SERVED = ("l1_hits", "l2_hits", "l3_hits", "remote_l3_hits", "local_dram", "remote_dram")


def working_set_mb(workload: str) -> float:
    """The data a workload spec touches in MB (10^6 bytes): n x its (mean) bytes per iteration; NaN without data."""
    from ..workloads import get_workload

    params = get_workload(workload).params
    if not params.get("bytes") or "n" not in params:
        return float("nan")
    return params["n"] * params["bytes"] / 1e6


def affinity_table(results: pd.DataFrame) -> pd.DataFrame:
    """Per (machine, workload, scheduler, threads): time, scalability, work efficiency, affinity, served-by shares."""
    ok = results[succeeded(results)].copy()
    if ok.empty:
        raise SimschedError("no successful runs to tabulate")
    if "affinity" not in ok.columns:
        raise SimschedError("the results have no affinity column: rerun the sweep with this version")
    keys = ["machine", "workload", "scheduler"]
    means = ok.groupby(keys + ["threads"], sort=False).agg(
        makespan_ns=("makespan_ns", "mean"), sequential_ns=("sequential_ns", "mean"),
        affinity=("affinity", "mean"), **{name: (f"counter_{name}", "mean") for name in SERVED
                                          if f"counter_{name}" in ok.columns}).reset_index()
    one = means[means["threads"] == 1].set_index(keys)["makespan_ns"]
    if one.empty:
        raise SimschedError("scalability needs each scheduler's run on 1 thread: put 1 in grid.threads")
    t1 = means.set_index(keys).index.map(one.to_dict().get)
    means["t1_ns"] = np.asarray(t1, dtype=float)
    means["scalability"] = means["t1_ns"] / means["makespan_ns"]
    means["work_efficiency"] = means["sequential_ns"] / means["t1_ns"]
    served = [name for name in SERVED if name in means.columns]
    total = means[served].sum(axis=1).replace(0, np.nan)
    for name in served:
        means[f"{name}_pct"] = 100 * means[name] / total
    means["working_set_mb"] = [working_set_mb(w) for w in means["workload"]]
    return means.drop(columns=served)


def format_affinity_table(table: pd.DataFrame, threads: int | None = None) -> str:
    """The table at ``threads`` (default: the most in the results), one line per workload and scheduler."""
    threads = threads or int(table["threads"].max())
    rows = table[table["threads"] == threads]
    width = max([len(s) for s in rows["scheduler"]] + [9])
    wide = max([len(w) for w in rows["workload"]] + [8])
    lines = [f"affinity study at {threads} threads (Ts: sequential; T1, TP: the scheduler on 1 and {threads} "
             "threads; lines served, %)",
             f"{'workload':<{wide}} {'scheduler':<{width}} {'TP (ms)':>9} {'T1/TP':>6} {'Ts/T1':>6} {'affinity':>8} "
             f"{'L1+L2':>6} {'L3':>5} {'rL3':>5} {'DRAM':>5} {'rDRAM':>6}"]
    for row in rows.itertuples(index=False):
        row = row._asdict()
        affinity = "" if pd.isna(row["affinity"]) else f"{row['affinity']:.3f}"
        private = row.get("l1_hits_pct", np.nan) + row.get("l2_hits_pct", np.nan)
        lines.append(f"{row['workload']:<{wide}} {row['scheduler']:<{width}} {row['makespan_ns'] / 1e6:9.3f} "
                     f"{row['scalability']:6.2f} {row['work_efficiency']:6.3f} {affinity:>8} "
                     f"{private:6.1f} {row.get('l3_hits_pct', np.nan):5.1f} "
                     f"{row.get('remote_l3_hits_pct', np.nan):5.1f} {row.get('local_dram_pct', np.nan):5.1f} "
                     f"{row.get('remote_dram_pct', np.nan):6.1f}")
    return "\n".join(lines)


def plot_affinity(table: pd.DataFrame, out=None):
    """Scalability against threads per working set (a panel each), and affinity at the most threads, as E3 shows."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..workloads import get_workload

    table = table.copy()
    table["balance"] = [get_workload(w).params.get("balance", "") for w in table["workload"]]
    sizes = sorted(table["working_set_mb"].dropna().unique()) or [np.nan]
    balances = list(dict.fromkeys(table["balance"]))
    schedulers = list(dict.fromkeys(table["scheduler"]))
    colors = {s: f"C{i}" for i, s in enumerate(schedulers)}
    fig, axes = plt.subplots(len(balances), len(sizes) + 1, figsize=(3.2 * (len(sizes) + 1), 3.0 * len(balances)),
                             squeeze=False)
    top = int(table["threads"].max())
    for r, balance in enumerate(balances):
        part = table[table["balance"] == balance]
        for c, size in enumerate(sizes):
            ax = axes[r][c]
            panel = part[np.isclose(part["working_set_mb"], size)] if not np.isnan(size) else part
            for sched in schedulers:
                line = panel[panel["scheduler"] == sched].sort_values("threads")
                if len(line):
                    ax.plot(line["threads"], line["scalability"], marker="o", ms=3, color=colors[sched], label=sched)
            ax.set_title(f"{balance or 'all'}, {size:.3g} MB", fontsize=9)
            ax.set_xlabel("threads")
            if c == 0:
                ax.set_ylabel("scalability T1/TP")
            ax.grid(alpha=0.3)
        ax = axes[r][-1]
        at_top = part[part["threads"] == top]
        width = 0.8 / max(len(schedulers), 1)
        for i, sched in enumerate(schedulers):
            bars = at_top[at_top["scheduler"] == sched].sort_values("working_set_mb")
            ax.bar(np.arange(len(bars)) + i * width, bars["affinity"], width, color=colors[sched], label=sched)
        ax.set_xticks(np.arange(len(sizes)) + 0.4 - width / 2)
        ax.set_xticklabels([f"{s:.3g}" for s in sizes], fontsize=8)
        ax.set_xlabel("working set (MB)")
        ax.set_ylabel(f"affinity at {top} threads")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{balance or 'all'}: affinity", fontsize=9)
    # One legend for every panel, below them, where it hides no line however many schedulers there are.
    handles, labels = axes[0][0].get_legend_handles_labels()
    rows = -(-len(labels) // 4)
    fig.legend(handles, labels, loc="lower center", ncol=min(len(labels), 4), fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.06 * rows / len(balances), 1, 1))
    return save_figure(fig, out)
