"""A user's OpenMP program recorded into a program trace, and the trace checked against the program's own runs.

Recording runs the program under simsched's OMPT tool with ``OMP_SCHEDULE=static,K`` on P bound
threads. Every chunk the runtime hands out is reported with its first iteration and size; a
chunk lasts until its thread's next report (its next chunk, or the loop's end). Its span, less
the span of an empty chunk (measured first, on the same runtime, by a probe loop), spread evenly
over its iterations, gives their costs; over ``repeat`` runs each cost is the median, so a
chunk the OS preempted in one run does not carry the pause. K is chosen, as ``native record``
chooses its block, so that a chunk lasts at least RECORD_SPANS empty chunks: more than for a
kernel recorded alone, because here threads run chunks side by side, and where one thread's
chunk meets another's they share cache lines and break each other's prefetch streams, a cost
of about one line transfer per chunk boundary that a coarse schedule does not pay.

The trace has one loop per loop instance, in program order, named ``file:line#k`` (the k-th
instance of the loop at file:line; its phase is ``file:line``), and the serial code between
loops: the initial thread's time from one loop's end to the next loop's start, less what it
spends in the runtime (barriers, forking and joining a team), which the model charges itself.
What the program does before its first loop (reading input, starting threads) is not modelled.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import shlex
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import SimschedError
from . import _check_integer, _check_timeout, openmp
from . import ompt
from .record import choose_block

DEFAULT_THREADS = 2
DEFAULT_REPEAT = 3
DEFAULT_ROUNDS = 5
DEFAULT_TIMEOUT_S = 600.0
DEFAULT_SCHEDULES = ("static", "dynamic,1", "dynamic,64", "guided")
# A chunk lasts at least this many empty chunks: the runtime's, the tool's and the boundary's shares stay small.
RECORD_SPANS = 100
PROBE_ITERATIONS = 20_000
PROBE_REPEAT = 41
# A release runtime hands out a chunk in tens of ns; Debian's debug builds of libomp take about 500.
DEBUG_CHUNK_NS = 200.0
# Below this share of the program's time, loops the runtime cannot see are not worth a warning.
UNSEEN_SHARE = 0.05
SCHEDULE_KINDS = ("static", "dynamic", "guided")


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


@dataclass
class Probe:
    """What a chunk costs on the runtime beyond its iterations (ns), with and without the tool."""

    empty_chunk_ns: float  # an empty chunk's span as the recording sees it (runtime and tool)
    tool_ns_per_chunk: float  # the tool's share: the probe loop's time with the tool less without, per chunk
    runtime_ns_per_chunk: float  # the runtime's own: the probe loop's time without the tool, per chunk


def _median_ns(output: str) -> float:
    values = [float(x) for x in output.split()]
    return float(np.median(values[1:] if len(values) > 1 else values))  # the first pays for starting threads


def probe_runtime(runtime: ompt.Runtime, shim: Path, threads: int, folder: Path, timeout_s: float) -> Probe:
    """Run the probe loop (empty iterations, static,1) with the tool and without it."""
    binary = openmp.build("omp_record_probe", folder)
    if binary is None:
        raise SimschedError("no C compiler builds OpenMP programs here (cc -fopenmp), so the runtime's chunk "
                            "cost cannot be measured: install one (the recording's probe needs it)")
    command = [str(binary), str(PROBE_ITERATIONS), str(PROBE_REPEAT)]
    chunks_per_thread = PROBE_ITERATIONS / threads
    times = {}
    for tool in (False, True):
        events = folder / "probe.events" if tool else None
        env = ompt.environment(runtime, shim, threads, "static,1", events)
        out, _ = ompt.run_program(command, env, timeout_s, f"the runtime probe on {runtime.path}", output=True)
        times[tool] = _median_ns(out)
    events = ompt.read_events(folder / "probe.events")
    ompt.check_callbacks(events, runtime)
    spans = []
    for records in events.threads:
        chunk = np.flatnonzero(records["kind"][:-1] == ompt.CHUNK)
        spans.append(records["time"][chunk + 1] - records["time"][chunk])
    empty = float(np.median(np.concatenate(spans))) if spans else 0.0
    return Probe(empty, max((times[True] - times[False]) / chunks_per_thread, 0.0),
                 times[False] / chunks_per_thread)


@dataclass
class Recorder:
    """Runs of one program under the tool on one runtime: the shim folder and the measured chunk cost."""

    command: list[str]
    threads: int
    runtime: ompt.Runtime
    folder: Path
    timeout_s: float
    runs: int = 0

    def __post_init__(self):
        self.shim = ompt.shim_folder(self.runtime, self.folder)

    def run(self, schedule: str, what: str, chunks: bool = True) -> Run:
        """One run of the program under ``schedule``, parsed (without its chunks unless ``chunks``)."""
        self.runs += 1
        prefix = self.folder / f"run{self.runs}.events"
        env = ompt.environment(self.runtime, self.shim, self.threads, schedule, prefix, chunks)
        ompt.run_program(self.command, env, self.timeout_s, what)
        events = ompt.read_events(prefix)
        ompt.check_callbacks(events, self.runtime)
        run = parse_run(events)
        for done in self.folder.glob(prefix.name + ".*"):
            done.unlink()
        if not run.instances:
            raise SimschedError(f"{what}: the program ran no worksharing loop the runtime reports (does it use "
                                "OpenMP loops with schedule(runtime), dynamic or guided?)")
        return run


def check_recordable(command: list[str], runtime: str | None) -> ompt.Runtime:
    """The runtime to record ``command`` on, after checking the program, the runtime and the tool."""
    program = ompt.program_path(command)
    ompt.check_program(program)
    try:
        chosen = ompt.find_runtime(runtime)
    except ompt.NoRuntime as exc:
        libraries = ompt.openmp_libraries(program)
        if libraries and all(ompt.GOMP.match(name) for name in libraries):
            raise SimschedError(f"program {program} runs on GCC's libgomp, which has no tool interface (OMPT), and "
                                "no OMPT runtime is installed to run it on instead: pip install --no-deps "
                                "intel-openmp (or "
                                f"Debian's libomp5-{ompt.FIRST_LLVM_WITH_CHUNKS}), then record again") from None
        raise exc
    ompt.tool_path()
    return chosen


def check_counts(threads: int, repeat: int, block: int | None, timeout_s: float) -> None:
    _check_integer("--threads", threads, 1, 4096)
    _check_integer("--repeat", repeat, 1, 1000)
    if block is not None:
        _check_integer("--block", block, 1, 2**31 - 1)
    _check_timeout(timeout_s)


def _typical_iteration_ns(run: Run, empty_ns: float) -> float:
    """The time-weighted median of the loop instances' mean iteration cost under a static schedule."""
    means, weights = [], []
    for inst, name in zip(run.instances, run.names):
        if inst.count:
            costs = iteration_costs(inst, name, empty_ns)
            means.append(costs.mean())
            weights.append(costs.sum())
    if not means or sum(weights) <= 0:
        return 0.0
    order = np.argsort(means)
    cumulative = np.cumsum(np.asarray(weights)[order])
    return float(np.asarray(means)[order][np.searchsorted(cumulative, cumulative[-1] / 2)])


@dataclass
class Recording:
    """A recorded program: per loop instance its costs, name, site and serial code; metadata; the chunk table."""

    loops: list[np.ndarray]
    names: list[str]
    phases: list[str]
    serial_ns: list[float]
    meta: dict
    chunks: pd.DataFrame


def record_program(command: list[str], threads: int = DEFAULT_THREADS, repeat: int = DEFAULT_REPEAT,
                   block: int | None = None, runtime: str | None = None,
                   timeout_s: float = DEFAULT_TIMEOUT_S, progress=None) -> Recording:
    """Record ``command``'s loops (see the module docstring)."""
    progress = progress or (lambda line: None)
    check_counts(threads, repeat, block, timeout_s)
    chosen = check_recordable(command, runtime)
    if threads == 1:
        warnings.warn("recording on 1 thread: chunks never run side by side, so the costs miss what threads "
                      "sharing caches and memory do to each other")
    with ompt.scratch() as scratch:
        recorder = Recorder(list(command), threads, chosen, Path(scratch), timeout_s)
        progress(f"probing {chosen.name} ({chosen.path}) on {threads} threads")
        probe = probe_runtime(chosen, recorder.shim, threads, Path(scratch), timeout_s)
        if probe.runtime_ns_per_chunk > DEBUG_CHUNK_NS:
            warnings.warn(f"the runtime {chosen.path} takes {probe.runtime_ns_per_chunk:.0f} ns a chunk (a debug "
                          "build?): its chunk costs weigh in every measured loop; Intel's libiomp5 (pip install "
                          "--no-deps intel-openmp) takes tens of ns")
        if block is None:
            progress("a first run under a static schedule, to choose the chunk size")
            pilot = recorder.run("static", "the first run (OMP_SCHEDULE=static)")
            block = choose_block(probe.empty_chunk_ns, _typical_iteration_ns(pilot, probe.empty_chunk_ns),
                                 RECORD_SPANS)
            block = min(block, max(max((inst.count for inst in pilot.instances), default=1) // threads, 1))
        schedule = f"static,{block}"
        runs = []
        for r in range(repeat):
            progress(f"run {r + 1} of {repeat} (OMP_SCHEDULE={schedule})")
            runs.append(recorder.run(schedule, f"run {r + 1} of {repeat} (OMP_SCHEDULE={schedule})"))
    return combine(runs, command, chosen, probe, threads, block)


def combine(runs: list[Run], command: list[str], runtime: ompt.Runtime, probe: Probe, threads: int,
            block: int) -> Recording:
    """The recording from runs of the same program: per iteration the median over the runs of one shape."""
    reference = runs[0].shape
    kept = [run for run in runs if run.shape == reference]
    notes = list(dict.fromkeys(note for run in runs for note in run.notes))
    if len(kept) < len(runs):
        notes.append(f"the program's loops differ between runs ({len(runs) - len(kept)} of {len(runs)} runs had "
                     "other loops or trip counts): costs come from the runs like the first")
    first = kept[0]
    compiled = compiled_schedules(first, "static")
    if compiled:
        notes.append(f"loop(s) {', '.join(compiled)} ran a schedule compiled into them, not OMP_SCHEDULE's: "
                     "their costs come from that schedule's chunks, and no OMP_SCHEDULE changes them (compile "
                     "them with schedule(runtime))")
    loops = []
    for k, name in enumerate(first.names):
        samples = np.stack([iteration_costs(run.instances[k], name, probe.empty_chunk_ns) for run in kept])
        loops.append(np.median(samples, axis=0))
    serial = [float(np.median([run.serial_ns[k] for run in kept])) for k in range(len(first.names))]
    total = sum(float(c.sum()) for c in loops) + sum(serial)
    unseen = float(np.median([run.unseen_ns for run in kept]))
    if total > 0 and unseen > UNSEEN_SHARE * total:
        notes.append(f"{unseen / 1e6:.3g} ms in parallel regions outside every reported loop ({unseen / total:.0%} "
                     "of the loops' and serial code's time), recorded as serial code: loops compiled with a "
                     "static schedule are invisible to the runtime; compile them with schedule(runtime)")
    for note in notes:
        warnings.warn(note)
    chunks = []
    for r, run in enumerate(runs):
        for k, inst in enumerate(run.instances):
            table = inst.chunk_table()
            if table.size:
                chunks.append(pd.DataFrame({"run": r, "loop": k, "thread": table[:, 0].astype(np.int64),
                                            "start": table[:, 1].astype(np.int64),
                                            "iterations": table[:, 2].astype(np.int64),
                                            "begin_ns": table[:, 3], "end_ns": table[:, 4]}))
    meta = {"program": list(command), "command_line": shlex.join(command), "runtime": runtime.name,
            "runtime_path": str(runtime.path), "runtime_version": first.runtime_version,
            "schedule": f"static,{block}", "threads": threads, "block": block, "repeat": len(runs),
            "runs_kept": len(kept), "empty_chunk_ns": round(probe.empty_chunk_ns, 2),
            "tool_ns_per_chunk": round(probe.tool_ns_per_chunk, 2),
            "runtime_ns_per_chunk": round(probe.runtime_ns_per_chunk, 2), "record_spans": RECORD_SPANS,
            "host": platform.node() or "unknown", "notes": notes,
            "recorded": datetime.datetime.now().astimezone().isoformat(timespec="seconds")}
    table = pd.concat(chunks, ignore_index=True) if chunks else pd.DataFrame(
        columns=["run", "loop", "thread", "start", "iterations", "begin_ns", "end_ns"])
    return Recording(loops, first.names, [name.rpartition("#")[0] for name in first.names], serial, meta, table)


def compiled_schedules(run: Run, kind: str) -> list[str]:
    """The loop sites of ``run`` whose runtime says it ran another schedule than OMP_SCHEDULE's ``kind``."""
    sites = [name.rpartition("#")[0] for name, inst in zip(run.names, run.instances)
             if inst.schedule not in ("", "other", kind)]
    return list(dict.fromkeys(sites))


def chunk_table_path(out: Path) -> Path:
    """Where the recording's own chunk table goes: beside the trace, ``NAME.chunks.csv``."""
    return out.with_name(out.name[: -len(out.suffix)] + ".chunks.csv")


def write_recording(out: Path, recording: Recording) -> Path:
    """The chunk table, then the trace (its metadata naming the table); each file whole or not at all."""
    from ..output import write_whole
    from ..workloads.trace import write_trace

    table_path = chunk_table_path(out)
    write_whole(table_path, lambda partial: recording.chunks.to_csv(partial, index=False))
    meta = {**recording.meta, "chunk_table": table_path.name}
    try:
        return write_trace(out, recording.loops, names=recording.names, phases=recording.phases,
                           serial_ns=recording.serial_ns, metadata=meta)
    except BaseException:
        table_path.unlink(missing_ok=True)  # both files or neither
        raise


# ---- validation -------------------------------------------------------------------------------------------

def scheduler_for(schedule: str) -> str:
    """The simsched scheduler that models an OMP_SCHEDULE value on LLVM's (and Intel's) runtime."""
    kind, comma, chunk = schedule.strip().partition(",")
    kind = kind.strip().lower()
    if kind not in SCHEDULE_KINDS:
        raise SimschedError(f"--schedules: {schedule!r} is not an OMP_SCHEDULE value simsched models "
                            "(static[,K], dynamic[,K] or guided[,K])")
    # "static," too is refused: the runtime ignores such a value, so the runs would not be under it.
    if comma and not (chunk.strip().isdigit() and int(chunk) >= 1):
        raise SimschedError(f"--schedules: {schedule!r}: the chunk size must be an integer >= 1")
    k = int(chunk) if comma else (1 if kind == "dynamic" else 0)  # dynamic's default chunk is 1
    return f"omp-{kind}:" + ",".join(([f"chunk={k}"] if k else []) + ["runtime=llvm"])


def split_schedules(text: str) -> list[str]:
    """OMP_SCHEDULE values separated by ';' or by spaces (a comma belongs to a value: dynamic,64)."""
    schedules = [s.strip() for s in text.replace(";", " ").split() if s.strip()]
    if not schedules:
        raise SimschedError("--schedules: no schedule given")
    for schedule in schedules:
        scheduler_for(schedule)
    return schedules


def _by_site(names: list[str], values) -> dict[str, list[float]]:
    """Values of the loop instances named ``site#k``, grouped by site in order of first appearance."""
    sites: dict[str, list[float]] = {}
    for name, value in zip(names, values):
        sites.setdefault(name.rpartition("#")[0], []).append(float(value))
    return sites


def _error(simulated: float, measured: float) -> float | None:
    return simulated / measured - 1.0 if measured > 0 else None


def check_validation(trace: Path | None, rounds: int) -> None:
    """Refuse, before the program runs, --rounds out of range and a --trace that is missing or unreadable."""
    from ..workloads.trace import TraceFile

    _check_integer("--rounds", rounds, 1, 1000)
    if trace is not None:
        next(iter(TraceFile(trace).loops()), None)  # its format and first loop: what a run would find last


def validate_program(command: list[str], trace: Path, machine, schedules=DEFAULT_SCHEDULES,
                     rounds: int = DEFAULT_ROUNDS, threads: int = DEFAULT_THREADS, runtime: str | None = None,
                     timeout_s: float = DEFAULT_TIMEOUT_S, seed: int = 0, progress=None) -> dict:
    """Per loop site and schedule, an instance's measured time (median over ``rounds`` runs) and simulated time.

    The rounds run every schedule in turn; ``load_average`` is the host's one-minute load average
    before the first run and after the last.

    The runs record loops, not chunks, so that a measured loop pays no tool callback per chunk.
    A loop site's time is the mean over its instances (a program whose loop runs until it
    converges may run it a different number of times under another schedule); an instance runs
    from its first thread's start to its last thread's end. The program's time runs from the
    first loop's start to the last loop's end; its simulated time is the trace's makespan (loops
    and the serial code between); ``same_loops`` says whether the runs had the trace's loops.
    """
    from ..engine import simulate_program
    from ..machine import load_machine
    from ..workloads import get_workload

    progress = progress or (lambda line: None)
    check_validation(trace, rounds)
    check_counts(threads, 1, None, timeout_s)
    model = load_machine(machine)
    if isinstance(machine, (str, Path)) and Path(machine).is_file():
        from .validate import warn_if_doubtful

        warn_if_doubtful(Path(machine), Path(machine).read_text(encoding="utf-8", errors="replace").splitlines())
    schedules = list(schedules)
    for schedule in schedules:
        scheduler_for(schedule)
    chosen = check_recordable(command, runtime)
    load = [os.getloadavg()[0]]
    measured: dict[str, list[dict[str, list[float]]]] = {schedule: [] for schedule in schedules}
    spans: dict[str, list[float]] = {schedule: [] for schedule in schedules}
    shapes: dict[str, list[list[str]]] = {schedule: [] for schedule in schedules}
    ignored: dict[str, set[str]] = {schedule: set() for schedule in schedules}  # sites OMP_SCHEDULE did not reach
    with ompt.scratch() as scratch:
        recorder = Recorder(list(command), threads, chosen, Path(scratch), timeout_s)
        # Round after round, every schedule once: a change in the host's load falls on all of them alike.
        for r in range(rounds):
            for schedule in schedules:
                what = f"round {r + 1} of {rounds} under OMP_SCHEDULE={schedule}"
                progress(what)
                run = recorder.run(schedule, what, chunks=False)  # a loop's time without a callback per chunk
                measured[schedule].append(_by_site(run.names, [inst.end - inst.begin for inst in run.instances]))
                spans[schedule].append(run.span_ns)
                shapes[schedule].append(run.names)
                ignored[schedule].update(compiled_schedules(run, schedule.partition(",")[0].strip().lower()))
    load.append(os.getloadavg()[0])
    for schedule, sites in ignored.items():
        if sites:
            warnings.warn(f"under OMP_SCHEDULE={schedule}, loop(s) {', '.join(sorted(sites))} ran the schedule "
                          "compiled into them: their measured times are not that schedule's")
    rows, program = [], []
    for schedule in schedules:
        spec = scheduler_for(schedule)
        result = simulate_program(model, spec, [get_workload("trace", path=str(trace))], threads, seed=seed,
                                  keep_chunks=False)
        for site, times in _by_site(result.loop_names, result.loop_ns).items():
            sim_ns = float(np.mean(times))
            per_round = [float(np.mean(sites[site])) for sites in measured[schedule] if site in sites]
            counts = [len(sites.get(site, [])) for sites in measured[schedule]]
            value = float(np.median(per_round)) if per_round else math.nan
            rows.append({"loop": site, "schedule": schedule, "measured_ns": value, "simulated_ns": sim_ns,
                         "error": _error(sim_ns, value), "instances": float(np.median(counts)),
                         "trace_instances": len(times), "measured_min_ns": min(per_round, default=math.nan),
                         "measured_max_ns": max(per_round, default=math.nan),
                         "schedule_followed": site not in ignored[schedule]})
        value = float(np.median(spans[schedule]))
        program.append({"schedule": schedule, "measured_ns": value, "simulated_ns": result.makespan_ns,
                        "error": _error(result.makespan_ns, value), "scheduler": spec,
                        "same_loops": all(shape == result.loop_names for shape in shapes[schedule])})
    return {"program": program, "rows": rows, "machine": model.name, "threads": threads, "rounds": rounds,
            "runtime": chosen.name, "trace": str(trace), "load_average": load}


def format_validation(report: dict) -> str:
    """The validation as a table: per loop site and schedule, an instance's measured and simulated time."""
    def error(row) -> str:
        return "" if row["error"] is None else f"{row['error']:+.1%}"

    lines = [f"{'loop (per instance)':<28} {'schedule':<12} {'instances':>9} {'measured us':>12} "
             f"{'simulated us':>13} {'error':>8}  {'measured min-max us':>21}"]
    for row in report["rows"]:
        lines.append(f"{row['loop']:<28} {row['schedule']:<12} {row['instances']:>9g} "
                     f"{row['measured_ns'] / 1e3:12.1f} {row['simulated_ns'] / 1e3:13.1f} {error(row):>8}  "
                     f"{row['measured_min_ns'] / 1e3:>10.1f}-{row['measured_max_ns'] / 1e3:<10.1f}"
                     + ("" if row["schedule_followed"] else "  (ran its compiled schedule)"))
    lines.append("")
    lines.append(f"whole program ({report['threads']} threads, {report['runtime']}, median of {report['rounds']} "
                 f"rounds, simulated on {report['machine']}; load average {report['load_average'][0]:.2f} "
                 f"before, {report['load_average'][1]:.2f} after):")
    for row in report["program"]:
        differs = "" if row["same_loops"] else "  (the runs' loops differ from the trace's)"
        lines.append(f"  {row['schedule']:<12} measured {row['measured_ns'] / 1e3:12.1f} us   simulated "
                     f"{row['simulated_ns'] / 1e3:12.1f} us   {error(row):>8}   ({row['scheduler']}){differs}")
    return "\n".join(lines)
