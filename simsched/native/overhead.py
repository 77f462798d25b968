"""Per-loop scheduling overhead by EPCC schedbench's protocol: natively, on the host OpenMP runtime, and simulated.

The protocol: a loop of ``iters_per_thread`` x P iterations of ``delay_ns`` each, run many
times back to back; repetitions are timed in blocks that last at least the target test time
(one untimed block first), ``outer`` blocks in all, and each block gives the mean time of one
loop. The overhead is that time less the reference: the same iterations run by one thread
with no runtime at all. Natively and in the simulation an iteration costs exactly its
``delay_ns`` (the runtime busy-waits deadlines that accumulate over a chunk), so their
reference is ``iters_per_thread x delay_ns``; the OpenMP program measures its own.
"""

from __future__ import annotations

import math
import subprocess
import tempfile

import numpy as np
import pandas as pd

from ..engine import simulate
from ..errors import SimschedError
from ..machine import load_machine
from ..host import HOST_MACHINE_FILE
from . import openmp
from .extension import MAX_REPEAT, _check_integer, check_threads, require
from .pinned_runs import run
from .shares import as_run_natively

CONF95 = 1.96
# The loop the simulation averages over, after its first (which starts from cold workers).
SIMULATED_LOOPS = 10


def default_schedulers(iters_per_thread: int) -> list[str]:
    """omp-static, then omp-dynamic and omp-guided at chunk 1, 2, 4, ... up to ``iters_per_thread``."""
    chunks = [2**k for k in range(int(math.log2(iters_per_thread)) + 1)]
    return ["omp-static"] + [f"omp-{kind}:chunk={c}" for kind in ("dynamic", "guided") for c in chunks]


def openmp_schedule(spec: str) -> tuple[str, int] | None:
    """The OpenMP schedule clause a scheduler spec stands for, (kind, chunk); None for simsched's own schedulers."""
    from ..schedulers import get_scheduler

    sched = get_scheduler(spec)
    kinds = {"omp-static": "static", "omp-dynamic": "dynamic", "omp-guided": "guided"}
    if sched.name not in kinds:
        return None
    return kinds[sched.name], int(sched.params.get("chunk", 0) or 0)


def block_stats(times_us) -> dict:
    """EPCC's statistics of the per-loop times of the blocks: mean, standard deviation, median, min, max."""
    times = np.asarray(times_us, dtype=float)
    sd = float(times.std(ddof=1)) if times.size > 1 else 0.0
    return {"mean_us": float(times.mean()), "sd_us": sd, "median_us": float(np.median(times)),
            "min_us": float(times.min()), "max_us": float(times.max())}


def native_blocks(spec: str, workload: str, threads: int, outer: int,
                  test_time_us: float) -> tuple[list, int, float]:
    """The mean loop time (us) of each of ``outer`` timed blocks of the native runtime, the loops per block,
    and the median time of one timed loop (us)."""
    probe = run(spec, workload, threads, repeat=11).loop_ns[1:]
    per_block = max(1, math.ceil(test_time_us * 1e3 / float(np.median(probe))))
    if per_block * (outer + 1) > MAX_REPEAT:
        raise SimschedError(f"{spec}: {per_block} loops per block x {outer + 1} blocks exceeds the native "
                            f"runtime's {MAX_REPEAT} loops per run: lower --test-time-us or --outer")
    loops = np.asarray(run(spec, workload, threads, repeat=per_block * (outer + 1)).loop_ns, dtype=float)
    blocks = loops.reshape(outer + 1, per_block)[1:]  # the first block is untimed, as in schedbench
    return list(blocks.sum(axis=1) / per_block / 1e3), per_block, float(np.median(blocks)) / 1e3


def openmp_blocks(threads: int, iters_per_thread: int, delay_ns: float, outer: int, test_time_us: float,
                  schedules) -> dict | None:
    """Per (kind, chunk): the host OpenMP runtime's (reference, test) block times in us; None without OpenMP."""
    out = {}
    with tempfile.TemporaryDirectory() as folder:
        binary = openmp.build("omp_schedbench", folder)
        if binary is None:
            return None
        env = openmp.environment(threads)
        for kind, chunk in schedules:
            done = subprocess.run([str(binary), str(iters_per_thread), f"{delay_ns:.3f}", str(outer),
                                   f"{test_time_us:g}", kind, str(chunk)],
                                  capture_output=True, text=True, env=env, timeout=600)
            if done.returncode != 0:
                raise SimschedError(f"the OpenMP reference failed on schedule({kind},{chunk}): "
                                    f"{done.stderr.strip() or done.returncode}")
            lines = [line.split() for line in done.stdout.splitlines()]
            out[kind, chunk] = ([float(v) for name, v in lines if name == "reference"],
                                [float(v) for name, v in lines if name == "test"])
    return out


def overhead(machine=HOST_MACHINE_FILE, threads: int | None = None, iters_per_thread: int = 128,
             delay_ns: float = 100.0, outer: int = 20, test_time_us: float = 1000.0, schedulers=None,
             openmp: bool = True) -> pd.DataFrame:
    """Per scheduler: the per-loop overhead (us) natively, simulated on ``machine`` and on the host OpenMP runtime.

    ``native_us`` and ``openmp_us`` are the median over the blocks (schedbench's median overhead),
    ``*_mean_us`` the mean and ``*_ci_us`` schedbench's +/- 1.96 standard deviations; ``error`` is
    (simulated - native) / native, of the medians: on a shared host a preempted block moves the mean.
    A block's mean holds whatever interrupted its loops; ``native_loop_us``, the median of single
    loops, is the overhead of an uninterrupted loop, which a machine without ``[noise]`` simulates.
    """
    require()
    iters_per_thread = _check_integer("--iters-per-thread", iters_per_thread, 1, 2**20)
    outer = _check_integer("--outer", outer, 2, 1000)
    for name, value, low in (("--delay-ns", delay_ns, 0.0), ("--test-time-us", test_time_us, 1.0)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= 1e7:
            raise SimschedError(f"{name} must be a number in [{low:g}, 1e7], got {value!r}")
    model = load_machine(machine)
    threads = threads if threads is not None else model.cores
    check_threads(threads)
    model.check_threads(threads)
    specs = list(schedulers or default_schedulers(iters_per_thread))
    schedules = {spec: openmp_schedule(spec) for spec in specs}
    workload = f"uforall:n={iters_per_thread * threads},cost_ns={delay_ns:g}"
    ideal_us = iters_per_thread * delay_ns / 1e3
    omp = None
    if openmp:
        omp = openmp_blocks(threads, iters_per_thread, delay_ns, outer, test_time_us,
                            sorted({s for s in schedules.values() if s is not None}))
    rows = []
    for spec in specs:
        blocks, per_block, loop_us = native_blocks(spec, workload, threads, outer, test_time_us)
        native = block_stats(blocks)
        loops = simulate(model, as_run_natively(spec), workload, threads, repeat=SIMULATED_LOOPS + 1).loop_ns[1:]
        sim_us = float(np.mean(loops)) / 1e3
        row = {"scheduler": spec, "threads": threads, "iters_per_thread": iters_per_thread, "delay_ns": delay_ns,
               "loops_per_block": per_block, "native_us": native["median_us"] - ideal_us,
               "native_mean_us": native["mean_us"] - ideal_us, "native_ci_us": CONF95 * native["sd_us"],
               "native_loop_us": loop_us - ideal_us,
               "sim_us": sim_us - ideal_us}
        row["error"] = (row["sim_us"] - row["native_us"]) / row["native_us"] if row["native_us"] > 0 else None
        clause = schedules[spec]
        row["openmp_us"] = row["openmp_mean_us"] = row["openmp_ci_us"] = None
        if omp is not None and clause is not None:
            ref, test = (block_stats(t) for t in omp[clause])
            row["openmp_us"] = test["median_us"] - ref["median_us"]
            row["openmp_mean_us"] = test["mean_us"] - ref["mean_us"]
            row["openmp_ci_us"] = CONF95 * (test["sd_us"] + ref["sd_us"])
        rows.append(row)
    return pd.DataFrame(rows)


def format_overhead(table: pd.DataFrame) -> str:
    """The table of :func:`overhead`: per scheduler the overheads (median; mean +/- 1.96 sd) and the error."""
    def us(value):
        return "-" if value is None or value != value else f"{value:.3f}"

    def spread(mean, ci):
        return "-" if mean is None or mean != mean else f"{mean:.3f} +/- {ci:.3f}"

    lines = [f"{'scheduler':<24} {'OpenMP runtime':>14} {'(mean +/- 1.96 sd)':>20} {'native':>8} "
             f"{'(mean +/- 1.96 sd)':>20} {'one loop':>8} {'simulated':>9} {'error':>8}"]
    for row in table.itertuples(index=False):
        error = "-" if row.error is None or row.error != row.error else f"{100 * row.error:+.1f}%"
        lines.append(f"{row.scheduler:<24} {us(row.openmp_us):>14} {spread(row.openmp_mean_us, row.openmp_ci_us):>20} "
                     f"{us(row.native_us):>8} {spread(row.native_mean_us, row.native_ci_us):>20} "
                     f"{us(row.native_loop_us):>8} {us(row.sim_us):>9} {error:>8}")
    if len(table):
        first = table.iloc[0]
        errors = table["error"].dropna().abs()
        lines.append(f"per-loop overhead in us over {first['iters_per_thread']} iterations per thread of "
                     f"{first['delay_ns']:g} ns on {first['threads']} thread(s) (EPCC schedbench's protocol): the "
                     "median over the blocks, then their mean +/- 1.96 sd, then the median single loop (no "
                     "interruption); error: simulated against the native median over the blocks")
        if len(errors):
            lines.append(f"median |error| {100 * errors.median():.1f}%, largest {100 * errors.max():.1f}%, "
                         f"{int((errors <= 0.15).sum())} of {len(errors)} within 15%")
    return "\n".join(lines)


def plot_overhead(table: pd.DataFrame):
    """Overhead against chunk size, a panel each for omp-dynamic and omp-guided (omp-static as flat lines).

    Each panel shows the host OpenMP runtime, the native runtime (the median over the blocks,
    and the median single loop) and the simulation. Other schedulers of the table are not drawn.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..schedulers import get_scheduler

    kinds = {"omp-dynamic": "dynamic", "omp-guided": "guided"}
    scheds = [get_scheduler(spec) for spec in table["scheduler"]]
    rows = table.assign(name=[s.name for s in scheds], chunk=[s.params.get("chunk") for s in scheds])
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.5), sharey=True)
    static = rows[rows["name"] == "omp-static"]
    for ax, (name, kind) in zip(axes, kinds.items()):
        mine = rows[rows["name"] == name].sort_values("chunk")
        x = mine["chunk"].to_numpy(dtype=float)
        if mine["openmp_us"].notna().any():
            ax.plot(x, mine["openmp_us"].to_numpy(dtype=float), "s-", color="0.45", label=f"OpenMP runtime, {kind}")
        ax.plot(x, mine["native_us"].to_numpy(dtype=float), "o-", color="tab:blue", label="native (blocks)")
        ax.plot(x, mine["native_loop_us"].to_numpy(dtype=float), "o--", color="tab:blue", mfc="none",
                label="native (one loop)")
        ax.plot(x, mine["sim_us"].to_numpy(dtype=float), "^-", color="tab:orange", label="simulated")
        for _, row in static.iterrows():
            ax.axhline(row["native_us"], color="tab:blue", linestyle=":", linewidth=1, label="static: native")
            ax.axhline(row["sim_us"], color="tab:orange", linestyle=":", linewidth=1, label="static: simulated")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        if len(x):
            ax.set_xticks(x, [str(int(c)) for c in x])
        ax.set_xlabel("chunk (iterations)")
        ax.set_title(name)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    axes[0].set_ylabel("per-loop overhead (us)")
    if len(table):
        first = table.iloc[0]
        fig.suptitle(f"{first['iters_per_thread']} iterations per thread of {first['delay_ns']:g} ns on "
                     f"{first['threads']} thread(s), EPCC schedbench's protocol", fontsize=10)
    fig.tight_layout()
    return fig
