"""A user's OpenMP program recorded into a program trace: the runs under the tool, their costs, the files.

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
import platform
import shlex
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import SimschedError
from . import ompt, openmp
from .extension import _check_integer, _check_timeout
from .loop_instances import Run, iteration_costs, parse_run
from .record import choose_block

DEFAULT_THREADS = 2
DEFAULT_REPEAT = 3
DEFAULT_TIMEOUT_S = 600.0
# A chunk lasts at least this many empty chunks: the runtime's, the tool's and the boundary's shares stay small.
RECORD_SPANS = 100
PROBE_ITERATIONS = 20_000
PROBE_REPEAT = 41
# A release runtime hands out a chunk in tens of ns; Debian's debug builds of libomp take about 500.
DEBUG_CHUNK_NS = 200.0
# Below this share of the program's time, loops the runtime cannot see are not worth a warning.
UNSEEN_SHARE = 0.05


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
        progress(f"probing {chosen.label} ({chosen.path}) on {threads} threads")
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
    meta = {"program": list(command), "command_line": shlex.join(command), "runtime": runtime.label,
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
