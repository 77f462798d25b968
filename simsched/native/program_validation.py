"""A recorded program's trace checked against the program's own runs: measured and simulated loop times."""

from __future__ import annotations

import math
import os
import warnings
from pathlib import Path

import numpy as np

from ..errors import SimschedError
from . import ompt
from .extension import _check_integer
from .user_program import (DEFAULT_THREADS, DEFAULT_TIMEOUT_S, Recorder, check_counts, check_recordable,
                           compiled_schedules)

DEFAULT_ROUNDS = 5
DEFAULT_SCHEDULES = ("static", "dynamic,1", "dynamic,64", "guided")
SCHEDULE_KINDS = ("static", "dynamic", "guided")


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
            "runtime": chosen.label, "trace": str(trace), "load_average": load}


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
