"""A run's per-worker timeline, written as Chrome/Perfetto trace events (Trace Event Format JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import numpy as np
import pandas as pd

from .engine import STATES
from .errors import SimschedError
from .result import Result

SLICE_COLUMNS = ["worker", "state", "start", "end", "loop", "lo", "hi"]
# Simulated runs are process 1 and native runs process 2, so two traces' events can share one file.
PID = {"simulated": 1, "native": 2}


def gaps(starts: np.ndarray, ends: np.ndarray, until: float) -> tuple[np.ndarray, np.ndarray]:
    """The stretches of [0, ``until``) that no interval (sorted by start, not overlapping) covers."""
    before = np.concatenate(([0.0], ends))
    after = np.concatenate((starts, [until]))
    keep = after > before
    return before[keep], after[keep]


def worker_slices(result: Result) -> pd.DataFrame:
    """Every worker's slices (SLICE_COLUMNS, ns), in order: chunks, recorded segments and the idle gaps.

    Without recorded segments (a run made without a timeline) only the chunks are known, so
    no other slice is made up. Where the model lets a worker start a chunk before its last
    accounted wait ends (a Cilk thief's unlock store still draining), the wait is cut there.
    """
    makespan = result.makespan_ns
    chunks = result.chunks
    frames = [pd.DataFrame({"worker": chunks["worker"].to_numpy(np.int64), "state": "compute",
                            "start": chunks["start"].to_numpy(float),
                            "end": np.minimum(chunks["end"].to_numpy(float), makespan),
                            "loop": chunks["loop"].to_numpy(np.int64), "lo": chunks["lo"].to_numpy(np.int64),
                            "hi": chunks["hi"].to_numpy(np.int64)})]
    if result.segments is not None:
        frames.append(result.segments.assign(loop=-1, lo=-1, hi=-1))
    table = pd.concat(frames, ignore_index=True).sort_values(["worker", "start", "end"], kind="stable")
    same = table["worker"].to_numpy() == np.roll(table["worker"].to_numpy(), -1)
    same[-1:] = False
    following = np.roll(table["start"].to_numpy(), -1)
    ends = table["end"].to_numpy()
    cut = same & (following < ends) & (table["state"].to_numpy() != "compute")
    table["end"] = np.where(cut, following, ends)
    if result.segments is not None:
        idle = []
        for w in range(result.threads):
            rows = table[table["worker"] == w]
            lo, hi = gaps(rows["start"].to_numpy(), rows["end"].to_numpy(), makespan)
            idle.append(pd.DataFrame({"worker": w, "state": "idle", "start": lo, "end": hi,
                                      "loop": -1, "lo": -1, "hi": -1}))
        table = pd.concat([table, *idle], ignore_index=True).sort_values(["worker", "start", "end"],
                                                                         kind="stable")
    return table[SLICE_COLUMNS].reset_index(drop=True)


def microseconds(ns) -> np.ndarray:
    """Whole ns as the Trace Event Format's us, each the smallest double that a viewer reads back as that ns.

    Viewers multiply by 1000 and truncate (Perfetto does), so 1.001 us would read as 1000 ns
    and a slice could seem to overlap its successor; rounding to whole ns first keeps
    ``ts + dur`` equal to the next slice's ``ts``.
    """
    whole = np.rint(np.asarray(ns, dtype=float))
    us = whole / 1000.0
    low = us * 1000.0 < whole
    us[low] = np.nextafter(us[low], np.inf)
    return us


def trace_events(result: Result, kind: str = "simulated") -> list[dict]:
    """The run's trace events: one track per worker (tid = worker), a loops track, a busy-workers counter."""
    return list(iter_trace_events(result, kind))


def iter_trace_events(result: Result, kind: str = "simulated") -> Iterator[dict]:
    """The events of ``trace_events`` one at a time, so that a trace is written without a list of them all."""
    pid, threads = PID[kind], result.threads
    label = f"{kind}: {result.scheduler} on {result.machine}, {threads} thread(s), {result.workload}"
    yield {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "ts": 0, "args": {"name": label}}
    yield {"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0, "ts": 0,
           "args": {"sort_index": pid}}
    for tid, name in [*((w, f"worker {w}") for w in range(threads)), (threads, "loops")]:
        yield {"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "ts": 0, "args": {"name": name}}
        yield {"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "ts": 0,
               "args": {"sort_index": tid}}
    slices = worker_slices(result)
    start, end = np.rint(slices["start"].to_numpy()), np.rint(slices["end"].to_numpy())
    # Rounding to whole ns leaves some sub-ns segments empty; a chunk stays, empty or not.
    keep = (end > start) | (slices["state"].to_numpy() == "compute")
    slices, start, end = slices[keep], start[keep], end[keep]
    ts, dur = microseconds(start), microseconds(end - start)
    for row, t, d in zip(slices.itertuples(index=False), ts.tolist(), dur.tolist()):
        event = {"ph": "X", "name": row.state, "cat": row.state, "pid": pid, "tid": int(row.worker),
                 "ts": t, "dur": d}
        if row.state == "compute":
            event["args"] = {"loop": int(row.loop), "lo": int(row.lo), "hi": int(row.hi),
                             "iterations": int(row.hi - row.lo)}
        yield event
    bounds = np.concatenate(([0.0], np.cumsum(result.loop_ns)))
    for k, (t, d) in enumerate(zip(microseconds(bounds[:-1]).tolist(),
                                   microseconds(np.rint(bounds[1:]) - np.rint(bounds[:-1])).tolist())):
        yield {"ph": "X", "name": f"loop {k}", "cat": "loop", "pid": pid, "tid": threads, "ts": t, "dur": d,
               "args": {"loop": k}}
        yield {"ph": "i", "name": f"loop {k} ends", "cat": "loop", "s": "p", "pid": pid, "tid": threads,
               "ts": t + d}
    yield from _busy_counter(slices[slices["state"] == "compute"], pid)


def _busy_counter(compute: pd.DataFrame, pid: int) -> Iterator[dict]:
    """A counter of the workers computing at each moment, one sample wherever a chunk starts or ends."""
    times = np.rint(np.concatenate((compute["start"].to_numpy(), compute["end"].to_numpy())))
    steps = np.concatenate((np.ones(len(compute), np.int64), -np.ones(len(compute), np.int64)))
    order = np.lexsort((steps, times))   # at one instant, ends before starts
    times, level = times[order], np.cumsum(steps[order])
    last = np.append(times[1:] != times[:-1], True)   # the level after everything at that instant
    for t, n in zip(microseconds(times[last]).tolist(), level[last].tolist()):
        yield {"ph": "C", "name": "computing workers", "pid": pid, "tid": 0, "ts": t,
               "args": {"workers": int(n)}}


def describe(result: Result, kind: str) -> dict:
    """What the trace's ``otherData`` says about a run (times in ns)."""
    return {"pid": PID[kind], "kind": kind, "machine": result.machine, "scheduler": result.scheduler,
            "workload": result.workload, "threads": result.threads, "seed": result.seed, "repeat": result.repeat,
            "makespan_ns": result.makespan_ns, "state_ns": result.state_totals,
            "segments_recorded": result.segments is not None}


def write_trace(path: str | Path, result: Result, kind: str = "simulated") -> Path:
    """Write ``result`` as a Trace Event Format JSON file that ui.perfetto.dev and chrome://tracing open."""
    from .output import write_whole

    other = json.dumps({"simsched": [describe(result, kind)]})

    def write(target: Path) -> None:
        # Event by event, as json.dumps writes the whole document: no list of a long run's events is held.
        with open(target, "w", encoding="utf-8") as out:
            out.write('{"traceEvents": [')
            for i, event in enumerate(iter_trace_events(result, kind)):
                out.write(", " + json.dumps(event) if i else json.dumps(event))
            out.write(f'], "displayTimeUnit": "ns", "otherData": {other}}}')

    return write_whole(path, write, "--trace")


def read_trace(path: str | Path) -> list[dict]:
    """The processes of a trace written by ``--trace``: their label, worker slices and loop boundaries (ns)."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SimschedError(f"cannot read trace {path}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SimschedError(f"{path} is not a JSON trace: {exc}") from None
    events = document.get("traceEvents") if isinstance(document, dict) else document
    if not isinstance(events, list) or not all(isinstance(e, dict) for e in events):
        raise SimschedError(f"{path} has no list of trace events (traceEvents)")
    processes: dict[int, dict] = {}
    for event in events:
        pid = event.get("pid")
        process = processes.setdefault(pid, {"label": f"process {pid}", "workers": {}, "rows": [], "bounds": []})
        name, ph, args = event.get("name"), event.get("ph"), event.get("args") or {}
        try:
            if ph == "M" and name == "process_name":
                process["label"] = str(args.get("name", process["label"]))
            elif ph == "M" and name == "thread_name" and str(args.get("name", "")).startswith("worker "):
                process["workers"][event["tid"]] = int(str(args["name"]).split()[1])
            elif ph == "X" and name in STATES:
                process["rows"].append((event["tid"], name, float(event["ts"]) * 1000.0,
                                        (float(event["ts"]) + float(event["dur"])) * 1000.0))
            elif ph == "i" and event.get("cat") == "loop":
                process["bounds"].append(float(event["ts"]) * 1000.0)
        except (KeyError, TypeError, ValueError, IndexError):
            raise SimschedError(f"{path}: a malformed {ph!r} event ({name!r}) in the trace") from None
    runs = []
    for pid, process in sorted(processes.items(), key=lambda item: str(item[0])):
        rows = [(process["workers"].get(tid, tid), *rest) for tid, *rest in process["rows"]]
        if rows:
            runs.append({"label": process["label"], "bounds": sorted(process["bounds"]),
                         "slices": pd.DataFrame(rows, columns=["worker", "state", "start", "end"])})
    if not runs:
        raise SimschedError(f"{path} holds no worker slices: is it a trace written by simsched --trace?")
    return runs
