"""A native run's trace as a Result (chunks, states, segments, the simulator's counters) and its summary."""

from __future__ import annotations

from functools import lru_cache

import numpy as np
import pandas as pd

from .. import affinity
from ..engine import STATES, verify_exactly_once
from ..errors import ExecutionError
from ..result import CHUNK_COLUMNS, SEGMENT_COLUMNS, Result


# Counters the simulator reports that are zero natively by construction.
ZERO_NATIVELY = {
    "wakeups": "native workers spin between loops; they never sleep",
}


@lru_cache(maxsize=64)
def simulated_counter_keys(scheduler: str) -> tuple[str, ...]:
    """The counters a simulation of ``scheduler`` reports, less the memory model's (no hardware counterpart).

    Read from a tiny simulation, so the two modes cannot drift apart: the schedulers declare
    their counters, present even when zero.
    """
    from ..engine import simulate
    from ..memory import Memory

    counters = simulate("haswell-e5-2695v3", scheduler, "uforall:n=64", 2).counters
    return tuple(sorted(k for k in counters if k not in Memory.COUNTERS))


def simulator_counters(scheduler: str, measured: dict) -> dict[str, int]:
    """The native ``measured`` counters under exactly the simulator's keys for ``scheduler``."""
    counters = {}
    for key in simulated_counter_keys(scheduler):
        if key in measured:
            counters[key] = int(measured[key])
        elif key in ZERO_NATIVELY:
            counters[key] = 0
        else:
            raise ExecutionError(f"the native runtime does not count {key}, which a simulated {scheduler} reports")
    return counters


def _result(trace, scheduler: str, workload: str, threads: int, seed: int, costs, sizes: list,
            repeat: int, runs_each: int = 1) -> Result:
    """A Result from the extension's trace of loops of ``sizes`` iterations (``costs``' program ``repeat`` times),
    checked for exactly-once execution (``runs_each``: a plan ran every chunk so many times; its distinct
    chunks are checked)."""
    records = np.frombuffer(trace["chunks"], dtype=[("loop", "<i8"), ("lo", "<i8"), ("hi", "<i8"),
                                                     ("start", "<f8"), ("end", "<f8")])
    workers = np.frombuffer(trace["workers"], dtype="<i8")
    chunks = pd.DataFrame({"worker": workers, **{name: records[name] for name in CHUNK_COLUMNS[1:]}})
    chunks = chunks.sort_values(["start", "worker"], kind="stable").reset_index(drop=True)
    sizes = [int(n) for n in sizes]
    distinct = chunks
    if runs_each > 1:
        runs = chunks.groupby(["loop", "lo", "hi"], sort=False).size()
        if (runs != runs_each).any():
            raise ExecutionError(f"{scheduler}: a planned chunk ran {int(runs[runs != runs_each].iloc[0])} time(s), "
                                 f"not {runs_each}")
        distinct = chunks.drop_duplicates(["loop", "lo", "hi"])
    verify_exactly_once(distinct, sizes, scheduler)
    ends = [float(x) for x in trace["loop_end"]]
    makespan = ends[-1]
    measured = np.frombuffer(trace["state"], dtype="<f8").reshape(threads, 3)
    state = {name: np.zeros(threads) for name in STATES}
    state["compute"], state["schedule"], state["sync"] = (measured[:, 0].copy(), measured[:, 1].copy(),
                                                          measured[:, 2].copy())
    busy = state["compute"] + state["schedule"] + state["sync"]
    state["idle"] = np.maximum(makespan - busy, 0.0)
    marks = np.frombuffer(trace.get("marks", b""), dtype="<f8")
    segments = _segments(marks.reshape(threads, repeat, 4), chunks, makespan) if marks.size else None
    return Result(machine="host", scheduler=scheduler, workload=workload, threads=threads, seed=seed,
                  makespan_ns=makespan, sequential_ns=float(costs.sum()) * repeat, state_ns=state, chunks=chunks,
                  counters=dict(sorted(trace["counters"].items())),
                  loop_ns=[float(x) for x in np.diff([0.0] + ends)],
                  events=0, repeat=repeat, segments=segments, affinity=affinity.from_chunks(distinct, sizes))


def _segments(marks: np.ndarray, chunks: pd.DataFrame, makespan: float) -> pd.DataFrame:
    """Each worker's sync and schedule stretches (SEGMENT_COLUMNS) from its fork and join marks.

    ``marks[w, loop]`` holds when worker w reached the loop's fork, left it, reached its join
    and left it. The runtime accounts fork and join as sync and whatever the worker does
    between them outside its chunks (claims, steal attempts) as schedule; those gaps are
    exactly the schedule stretches. Outside the loops a worker is idle.
    """
    from ..timeline import gaps

    frames = []
    for w in range(marks.shape[0]):
        entered, begun, ended, joined = marks[w].T
        mine = chunks[chunks["worker"] == w].sort_values("start")
        starts = np.concatenate((entered, ended, mine["start"].to_numpy()))
        ends = np.concatenate((begun, joined, mine["end"].to_numpy()))
        order = np.argsort(starts, kind="stable")
        lo, hi = gaps(starts[order], ends[order], makespan)
        # A gap between a loop's fork and join is schedule time; any other is idle.
        loop = np.searchsorted(begun, lo, side="right") - 1
        inside = (loop >= 0) & (hi <= ended[np.maximum(loop, 0)])
        frames.append(pd.DataFrame({"worker": w, "state": "sync", "start": np.concatenate((entered, ended)),
                                    "end": np.concatenate((begun, joined))}))
        frames.append(pd.DataFrame({"worker": w, "state": "schedule", "start": lo[inside], "end": hi[inside]}))
    table = pd.concat(frames, ignore_index=True)
    table = table[table["end"] > table["start"]].sort_values(["worker", "start"], kind="stable")
    return table[SEGMENT_COLUMNS].reset_index(drop=True)


def summary(result: Result) -> dict:
    """Per loop: the median loop time over a native run's loops (the first included), its spread, one loop's
    sequential time and their ratio; ``total_ns`` is the whole run, over which the state times are summed.
    """
    times = np.asarray(result.loop_ns, dtype=float)
    q1, median, q3 = np.percentile(times, [25, 50, 75])
    sequential = result.sequential_ns / result.repeat
    return {"makespan_ns": float(median), "sequential_ns": sequential,
            "speedup": sequential / float(median) if median > 0 else float("inf"),
            "makespan_spread_ns": {"min": float(times.min()), "q1": float(q1), "q3": float(q3),
                                   "max": float(times.max())},
            "total_ns": result.makespan_ns}


def report(result: Result) -> str:
    """The human-readable form of a native run: the figures of :func:`summary`, then states and counters."""
    figures = summary(result)
    spread = figures["makespan_spread_ns"]
    lines = [
        f"{result.scheduler} on {result.machine}, {result.threads} thread(s), workload {result.workload}, "
        f"seed {result.seed}, {result.repeat} loop(s)",
        f"  makespan     {figures['makespan_ns'] / 1e3:14.3f} us  median loop (min {spread['min'] / 1e3:.3f}, "
        f"max {spread['max'] / 1e3:.3f} us)",
        f"  sequential   {figures['sequential_ns'] / 1e3:14.3f} us  one loop",
        f"  speedup      {figures['speedup']:14.3f}",
        f"  whole run    {figures['total_ns'] / 1e3:14.3f} us  all {result.repeat} loop(s): the chunks, states "
        "and counters below",
        f"  chunks       {len(result.chunks):14d}",
    ]
    return "\n".join(lines + result.detail_lines())
