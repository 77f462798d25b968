"""One run of a user's program under the OMPT tool: its loop instances, the serial code, their costs."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import SimschedError
from . import ompt


@dataclass
class Instance:
    """One loop instance of one run: where it is in the program, its chunks and its times (ns)."""

    region: int
    position: int  # its place among the region's loops
    code: int
    count: int
    schedule: str = ""  # the schedule the runtime says it ran ("static", "dynamic", "guided"; "" unknown)
    begins: dict[int, float] = field(default_factory=dict)  # thread -> when it entered the loop
    ends: dict[int, float] = field(default_factory=dict)
    chunks: list[np.ndarray] = field(default_factory=list)  # per thread: (start, iterations, begin, end) rows

    @property
    def begin(self) -> float:
        return min(self.begins.values())

    @property
    def end(self) -> float:
        return max(self.ends.values(), default=self.begin)

    def chunk_table(self) -> np.ndarray:
        """Every chunk as rows (thread, start, iterations, begin ns, end ns)."""
        rows = [np.column_stack((np.full(len(c), t), c)) for t, c in enumerate(self.chunks) if len(c)]
        return np.concatenate(rows) if rows else np.empty((0, 5))


@dataclass
class Run:
    """One run's loop instances in program order, the serial code before each, and what the trace cannot hold."""

    instances: list[Instance]
    serial_ns: list[float]
    names: list[str]
    notes: list[str]
    runtime_version: str
    unseen_ns: float  # the initial thread's time in parallel regions outside every reported loop and barrier

    @property
    def shape(self) -> list[tuple[str, int]]:
        return [(name, inst.count) for name, inst in zip(self.names, self.instances)]

    @property
    def span_ns(self) -> float:
        """From the first loop's start to the last loop's end."""
        return self.instances[-1].end - self.instances[0].begin if self.instances else 0.0


def _pairs(kinds: np.ndarray, times: np.ndarray, opening: int, closing: int) -> list[tuple[float, float]]:
    """Intervals from each ``opening`` record to the next ``closing`` one on a thread."""
    opens = np.flatnonzero(kinds == opening)
    closes = np.flatnonzero(kinds == closing)
    at = np.searchsorted(closes, opens)
    return [(float(times[o]), float(times[closes[a]])) for o, a in zip(opens, at) if a < closes.size]


def _overlap(intervals: list[tuple[float, float]], low: float, high: float) -> float:
    return float(sum(max(0.0, min(e, high) - max(s, low)) for s, e in intervals))


def parse_run(events: ompt.Events) -> Run:
    """A run's loop instances from the tool's records, checked: each instance's chunks cover it exactly once."""
    instances: dict[tuple[int, int], Instance] = {}
    notes: list[str] = []
    nested = tasks = iterations = 0
    for thread, records in enumerate(events.threads):
        kinds, times = records["kind"], records["time"]
        # What the tool spent making record blocks, up to each record: taken off the chunks it fell in.
        made = np.cumsum(np.where(kinds == ompt.TOOL, records["b"].astype(float) * events.ns_per_tick, 0.0))
        positions: dict[int, int] = {}
        opened: tuple[Instance, int] | None = None
        nested += int(np.count_nonzero((kinds == ompt.IMPLICIT_BEGIN) & (records["c"] > 1)))
        tasks += int(np.count_nonzero(kinds == ompt.TASK_CREATE))
        iterations += int(np.count_nonzero(kinds == ompt.ITERATION))
        for i in np.flatnonzero((kinds == ompt.WORK_BEGIN) | (kinds == ompt.WORK_END)):
            if int(records["b"][i]) >> 32 not in ompt.LOOP_WORK:
                continue
            region = int(records["a"][i])
            if kinds[i] == ompt.WORK_BEGIN:
                position = positions.get(region, 0)
                positions[region] = position + 1
                count = int(records["b"][i + 1]) if i + 1 < kinds.size and kinds[i + 1] == ompt.COUNT else 0
                work = ompt.LOOP_WORK[int(records["b"][i]) >> 32]
                inst = instances.setdefault((region, position),
                                            Instance(region, position, int(records["c"][i]), count, work))
                inst.begins[thread] = float(times[i])
                opened = (inst, i)
            elif opened is not None:
                inst, first = opened
                inst.ends[thread] = float(times[i])
                chunk = first + np.flatnonzero(kinds[first:i] == ompt.CHUNK)
                # A chunk lasts until the thread's next chunk or the loop's end, not its next record: the
                # tasks its iterations create (and their taskwaits) are records inside it.
                until = np.append(chunk[1:], i)[:chunk.size]
                rows = np.column_stack((records["b"][chunk].astype(np.int64), records["c"][chunk].astype(np.int64),
                                        times[chunk], times[until] - (made[until - 1] - made[chunk])))
                while len(inst.chunks) <= thread:
                    inst.chunks.append(np.empty((0, 4)))
                inst.chunks[thread] = rows
                opened = None
    if nested:
        notes.append("nested parallel regions: the trace holds their loops as if each ran on the whole team")
    if tasks:
        notes.append(f"{tasks} explicit task(s) created: the trace does not hold tasks, their time counts in "
                     "the loops or serial code around them")
    if iterations:
        notes.append("the runtime reported single iterations, not chunks: those loops are not recorded")
    # A loop of no iterations has nothing to schedule: its time is the serial code around it.
    ordered = [instances[key] for key in sorted(instances) if instances[key].count > 0]
    master = events.threads[0] if events.threads else np.empty(0, dtype=ompt.RECORD_DTYPE)
    kinds, times = master["kind"], master["time"]
    in_runtime = (_pairs(kinds, times, ompt.SYNC_BEGIN, ompt.SYNC_END)
                  + _pairs(kinds, times, ompt.PARALLEL_BEGIN, ompt.IMPLICIT_BEGIN)
                  + _pairs(kinds, times, ompt.IMPLICIT_END, ompt.PARALLEL_END))
    regions = _pairs(kinds, times, ompt.IMPLICIT_BEGIN, ompt.IMPLICIT_END)
    serial, unseen = [], 0.0
    for k, inst in enumerate(ordered):
        if 0 not in inst.begins:
            raise SimschedError("the initial thread did not take part in a loop: nested or orphaned parallel "
                                "regions are not supported")
        if k == 0:
            serial.append(0.0)
            continue
        low, high = ordered[k - 1].ends.get(0, ordered[k - 1].end), inst.begins[0]
        gap = max(high - low, 0.0)
        serial.append(max(gap - _overlap(in_runtime, low, high), 0.0))
        # Time in a parallel region that is neither a loop nor the runtime: code every thread runs, or a loop
        # the runtime never sees (a static schedule compiled inline).
        unseen += max(_overlap(regions, low, high) - _overlap(in_runtime, low, high), 0.0)
    labels = [ompt.source_line(*events.codes[inst.code]) if inst.code in events.codes else f"{inst.code:#x}"
              for inst in ordered]
    seen: dict[str, int] = {}
    numbered = []
    for label in labels:
        numbered.append(f"{label}#{seen.get(label, 0)}")
        seen[label] = seen.get(label, 0) + 1
    return Run(ordered, serial, numbered, notes, events.runtime_version, unseen)


def iteration_costs(inst: Instance, name: str, empty_ns: float) -> np.ndarray:
    """Each iteration's cost (ns): its chunk's span less an empty chunk's, spread over the chunk."""
    table = inst.chunk_table()
    if inst.count == 0:
        return np.zeros(0)
    if table.size == 0:
        raise SimschedError(f"loop {name}: the runtime reported no chunks (a loop compiled with a static "
                            "schedule: compile it with schedule(runtime))")
    starts, sizes = table[:, 1].astype(np.int64), table[:, 2].astype(np.int64)
    order = np.argsort(starts, kind="stable")
    starts, sizes = starts[order], sizes[order]
    # A chunk reports the lowest value its loop variable takes in it; with a step other than 1, consecutive
    # chunks say the step. Each must then start a whole number of steps after the first.
    step = 1
    if starts.size > 1 and sizes[0] > 0 and (starts[1] - starts[0]) % sizes[0] == 0:
        step = int((starts[1] - starts[0]) // sizes[0]) or 1
    offsets = starts - starts[0]
    logical = offsets // step
    if (np.any(sizes <= 0) or np.any(offsets % step) or np.any(logical[1:] != np.cumsum(sizes)[:-1])
            or int(sizes.sum()) != inst.count):
        raise SimschedError(f"loop {name}: the runtime's chunks do not cover its {inst.count} iterations exactly "
                            "once")
    if _counts_down(table, inst.schedule):
        order = order[::-1]  # the program runs the highest values first
    spans = (table[order, 4] - table[order, 3]) - empty_ns
    sizes = table[order, 2].astype(np.int64)
    return np.repeat(np.maximum(spans, 0.0) / sizes, sizes)


def _counts_down(table: np.ndarray, schedule: str) -> bool:
    """Whether a loop's chunks ran from its highest values down: a thread's later chunks start lower; with one
    chunk a thread, under a dynamic or guided schedule the first chunk handed out starts highest, under a
    static one (the recording's, or one the runtime does not name) thread 0's, which holds the first."""
    threads, starts, begins = table[:, 0], table[:, 1], table[:, 3]
    votes = 0
    for thread in np.unique(threads):
        mine = starts[threads == thread]  # in the order the thread was given them
        votes += int(np.sign(np.diff(mine)).sum())
    if votes:
        return votes < 0
    if starts.size < 2:
        return False
    if schedule in ("dynamic", "guided"):
        return bool(starts[np.argmin(begins)] == starts.max())
    return bool(starts[threads == threads.min()][0] == starts.max())  # static (the recording's schedule)
