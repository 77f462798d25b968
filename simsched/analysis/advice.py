"""Per-loop scheduler advice: each loop of a program simulated alone under candidate schedulers, the fastest kept.

This is what a runtime that picks a scheduler per loop could reach: the program's time with
every loop on its own best scheduler, against one scheduler (the baseline) for all of them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engine import Simulation, run_generator
from ..errors import ExecutionError, SimschedError
from ..machine import load_machine
from ..schedulers import get_scheduler
from ..workloads import get_workload

# OpenMP's default schedule is the baseline; the candidates span static, self-scheduling,
# load-estimating, work-stealing and adaptive schedulers at their default parameters.
DEFAULT_BASELINE = "omp-static"
DEFAULT_SCHEDULERS = ("omp-static", "omp-dynamic:chunk=1", "omp-guided:chunk=1", "taskloop", "binlpt",
                      "stealing", "ich", "hybrid")


def split_schedulers(text: str) -> list[str]:
    """Scheduler specs from a comma-separated list; an item ``key=value`` continues the spec before it."""
    specs: list[str] = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            raise SimschedError(f"--schedulers {text!r}: an empty item")
        if "=" in item and ":" not in item:
            if not specs:
                raise SimschedError(f"--schedulers {text!r}: {item!r} is a parameter without a scheduler before it")
            specs[-1] += "," + item
        else:
            specs.append(item)
    return specs


def split_program(text: str) -> list[str]:
    """The workload specs of a program ``SPEC ; SPEC ; ...``: their loops run in this order."""
    specs = [part.strip() for part in text.split(";")]
    if not all(specs):
        raise SimschedError(f"program {text!r}: an empty workload spec (specs are separated by ';')")
    return specs


@dataclass
class LoopAdvice:
    """One loop's times under each candidate (None: the scheduler cannot run it) and the fastest."""

    index: int
    name: str
    iterations: int
    times_ns: dict[str, float | None]
    best: str
    best_ns: float
    baseline_ns: float

    @property
    def gain(self) -> float:
        return self.baseline_ns / self.best_ns if self.best_ns > 0 else 1.0


@dataclass
class Advice:
    """Per-loop advice for a program, and the program's time under the baseline and with per-loop selection."""

    machine: str
    program: str
    threads: int
    seed: int
    baseline: str
    schedulers: list[str]
    loops: list[LoopAdvice] = field(default_factory=list)

    @property
    def baseline_ns(self) -> float:
        return float(sum(loop.baseline_ns for loop in self.loops))

    @property
    def best_ns(self) -> float:
        return float(sum(loop.best_ns for loop in self.loops))

    def single_ns(self) -> dict[str, float]:
        """Each scheduler's program time when it runs every loop (only those that can run them all)."""
        return {s: float(sum(loop.times_ns[s] for loop in self.loops)) for s in self.schedulers
                if all(loop.times_ns[s] is not None for loop in self.loops)}

    def to_dict(self) -> dict:
        single = self.single_ns()
        best_single = min(single, key=single.get)
        return {"machine": self.machine, "program": self.program, "threads": self.threads, "seed": self.seed,
                "baseline": self.baseline, "schedulers": self.schedulers,
                "loops": [{"loop": a.index, "name": a.name, "iterations": a.iterations, "best": a.best,
                           "best_ns": a.best_ns, "baseline_ns": a.baseline_ns, "gain": a.gain,
                           "times_ns": a.times_ns} for a in self.loops],
                "program_baseline_ns": self.baseline_ns, "program_best_ns": self.best_ns,
                "program_gain": self.baseline_ns / self.best_ns if self.best_ns > 0 else 1.0,
                "best_single": best_single, "best_single_ns": single[best_single]}


def _loop_time(machine, threads: int, loop, spec: str, seed: int) -> tuple[float | None, str]:
    """The makespan of ``loop`` alone under ``spec`` in a fresh simulation, or None and why the scheduler refuses it."""
    try:
        sim = Simulation(machine, threads, [loop], seed=seed, keep_chunks=False)
        return sim.run(get_scheduler(spec)).makespan_ns, ""
    except ExecutionError:
        raise
    except SimschedError as exc:  # e.g. nested loops under a flat-loop scheduler
        return None, str(exc)


def advise(machine, program: str, threads: int, schedulers: list[str] | None = None,
           baseline: str = DEFAULT_BASELINE, seed: int = 0) -> Advice:
    """Simulate each loop of ``program`` alone under every candidate and the baseline; keep each loop's fastest.

    ``program`` is a workload spec, or several separated by ``;`` (their loops in order, as
    ``simulate_program`` runs them). The loops are drawn from the seed's generator as ``simsched run`` draws them. The baseline
    is always a candidate, so no loop's gain is below 1; ties go to the earlier candidate.
    Program times are sums of the loops' times: each loop starts on idle workers.
    """
    machine = load_machine(machine)
    machine.check_threads(threads)
    rng = run_generator(seed)  # draws the loops as ``simsched run`` draws them
    candidates = list(DEFAULT_SCHEDULERS if schedulers is None else schedulers)
    if not candidates:
        raise SimschedError("no candidate schedulers")
    for spec in candidates + [baseline]:
        get_scheduler(spec)  # an unknown name or parameter is refused before anything runs
    seen = set()
    for spec in candidates:
        if spec in seen:
            raise SimschedError(f"scheduler {spec} is listed twice")
        seen.add(spec)
    if baseline not in seen:
        candidates.append(baseline)
    workloads = [get_workload(spec) for spec in split_program(program)]
    loops = [loop for workload in workloads for loop in workload.loops(rng)]
    advice = Advice(machine.name, " ; ".join(w.spec for w in workloads), threads, seed, baseline, candidates)
    done: dict[int, dict[str, tuple[float | None, str]]] = {}  # a loop repeated in the program (matmul) runs once
    for index, loop in enumerate(loops):
        if id(loop) not in done:
            done[id(loop)] = {spec: _loop_time(machine, threads, loop, spec, seed) for spec in candidates}
        times = {spec: time for spec, (time, _) in done[id(loop)].items()}
        if times[baseline] is None:
            raise SimschedError(f"baseline {baseline} cannot run loop {index}: {done[id(loop)][baseline][1]}")
        best = min((spec for spec in candidates if times[spec] is not None), key=lambda s: times[s])
        advice.loops.append(LoopAdvice(index, loop.name, loop.n, times, best, times[best], times[baseline]))
    return advice


def format_advice(advice: Advice) -> str:
    """A text table, one row per loop, and the program's times."""
    width = max(len(s) for s in advice.schedulers)
    named = any(loop.name for loop in advice.loops)
    lines = [f"{advice.program} on {advice.machine}, {advice.threads} threads, seed {advice.seed}: "
             f"{len(advice.loops)} loop(s); baseline {advice.baseline}",
             f"  {'loop':>4}  " + (f"{'name':<10} " if named else "") + f"{'best':<{width}}  {'best_us':>12}  "
             f"{'baseline_us':>12}  {'gain':>6}"]
    for a in advice.loops:
        lines.append(f"  {a.index:>4}  " + (f"{a.name:<10} " if named else "") + f"{a.best:<{width}}  "
                     f"{a.best_ns / 1e3:>12.3f}  {a.baseline_ns / 1e3:>12.3f}  {a.gain:>5.2f}x")
    summary = advice.to_dict()
    lines.append(f"program: baseline {advice.baseline_ns / 1e3:.3f} us; each loop on its best "
                 f"{advice.best_ns / 1e3:.3f} us ({summary['program_gain']:.2f}x); best single scheduler "
                 f"{summary['best_single']} {summary['best_single_ns'] / 1e3:.3f} us")
    return "\n".join(lines)
