"""Per-loop scheduler advice: each loop of a program simulated alone under candidate schedulers, the fastest kept.

This is what a runtime that picks a scheduler per loop could reach: the program's time with
every loop on its own best scheduler, against one scheduler (the baseline) for all of them.
"""

from __future__ import annotations

import warnings

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
# One seed's draw of costs and races can reorder candidates whose means are a few percent apart;
# five seeds show that spread at five times one seed's cost, which is still seconds for most programs.
DEFAULT_SEEDS = 5
# Each seed simulates every loop under every candidate: past this, a study is a sweep's work.
MAX_SEEDS = 1000


# The candidates for a program recorded on LLVM's or Intel's runtime (``simsched record``): the OpenMP schedules
# that runtime has, then schedulers no OpenMP clause names, to show what a loop could gain beyond them.
RECORDED_BASELINE = "omp-static:runtime=llvm"
RECORDED_SCHEDULERS = ("omp-static:runtime=llvm", "omp-dynamic:chunk=1,runtime=llvm",
                       "omp-dynamic:chunk=16,runtime=llvm", "omp-dynamic:chunk=64,runtime=llvm",
                       "omp-guided:chunk=1,runtime=llvm", "stealing", "ich", "binlpt")
TRACE_SUFFIXES = (".parquet", ".csv", ".npz")
OPENMP_KINDS = {"omp-static": "static", "omp-dynamic": "dynamic", "omp-guided": "guided"}


def trace_program(program: str) -> str | None:
    """The trace file ``program`` names when it is a path to one (``simsched advise TRACE``), else None."""
    from pathlib import Path

    path = Path(program.strip())
    if path.suffix.lower() in TRACE_SUFFIXES and ";" not in program and (path.is_file() or ":" not in program):
        return str(path)  # a missing file is then refused as a trace, by name
    return None


def openmp_schedule(spec: str) -> tuple[str, str] | None:
    """The OMP_SCHEDULE value and the ``schedule(...)`` clause of a scheduler spec, or None where OpenMP has none."""
    scheduler = get_scheduler(spec)
    kind = OPENMP_KINDS.get(scheduler.name)
    if kind is None:
        return None
    chunk = scheduler.params.get("chunk") or 0
    if not chunk or (kind != "static" and chunk == 1):  # OpenMP's own default chunk: no chunk to write
        return kind, f"schedule({kind})"
    return f"{kind},{chunk}", f"schedule({kind}, {chunk})"


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


def _mean(values: list[float]) -> float:
    return float(sum(values) / len(values))


@dataclass
class LoopAdvice:
    """One loop's mean times over the seeds per candidate (None: the scheduler cannot run it), and the fastest.

    ``samples`` holds each candidate's time with each seed, in the order of ``Advice.seeds``.
    """

    index: int
    name: str
    iterations: int
    times_ns: dict[str, float | None]
    best: str
    best_ns: float
    baseline_ns: float
    samples: dict[str, list[float] | None] = field(default_factory=dict)

    @property
    def gain(self) -> float:
        return self.baseline_ns / self.best_ns if self.best_ns > 0 else 1.0

    @property
    def runner_ups(self) -> list[str]:
        """The candidates that run the loop, after the best, fastest mean first (ties: the earlier candidate)."""
        ran = [spec for spec, time in self.times_ns.items() if time is not None and spec != self.best]
        return sorted(ran, key=lambda s: self.times_ns[s])

    def wins(self) -> dict[str, int]:
        """How many seeds each candidate was the fastest with (ties: the earlier candidate)."""
        return _wins(self.samples)


def _wins(samples: dict[str, list[float] | None]) -> dict[str, int]:
    """How many seeds each sampled candidate is the fastest with (ties: the earlier candidate)."""
    ran = [spec for spec, times in samples.items() if times is not None]
    wins = {spec: 0 for spec in ran}
    for k in range(len(samples[ran[0]]) if ran else 0):
        wins[min(ran, key=lambda s: samples[s][k])] += 1
    return wins


def _spread(samples: dict[str, list[float] | None], pick) -> dict[str, float | None]:
    return {spec: None if times is None else float(pick(times)) for spec, times in samples.items()}


@dataclass
class Advice:
    """Per-loop advice for a program, and the program's time under the baseline and with per-loop selection.

    Times are means over ``seeds``; ``seed`` is the first of them. ``oracles`` names the candidates
    given a loop's exact iteration costs before it runs, and what they are given.
    """

    machine: str
    program: str
    threads: int
    seed: int
    baseline: str
    schedulers: list[str]
    loops: list[LoopAdvice] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    oracles: dict[str, str] = field(default_factory=dict)

    @property
    def baseline_ns(self) -> float:
        return float(sum(loop.baseline_ns for loop in self.loops))

    @property
    def best_ns(self) -> float:
        return float(sum(loop.best_ns for loop in self.loops))

    def single_samples(self) -> dict[str, list[float]]:
        """Each scheduler's program time with each seed when it runs every loop (those that can run them all)."""
        return {s: [float(sum(loop.samples[s][k] for loop in self.loops)) for k in range(len(self.seeds))]
                for s in self.schedulers if all(loop.samples[s] is not None for loop in self.loops)}

    def single_ns(self) -> dict[str, float]:
        """Each scheduler's program time when it runs every loop (only those that can run them all)."""
        return {s: float(sum(loop.times_ns[s] for loop in self.loops)) for s in self.schedulers
                if all(loop.times_ns[s] is not None for loop in self.loops)}

    def single_ranking(self) -> list[str]:
        """The schedulers that can run every loop, fastest mean program first (ties: the earlier candidate)."""
        single = self.single_ns()
        return sorted(single, key=single.get)

    def unsettled_loops(self) -> list[int]:
        """The loops whose best is not the fastest with every seed: there the gaps are within the spread."""
        return [loop.index for loop in self.loops if loop.wins()[loop.best] < len(self.seeds)]

    def sites(self) -> list[dict]:
        """Per loop site (a recorded loop ``file:line#k`` belongs to ``file:line``; other loops are their own
        site), the OpenMP schedule that runs its instances fastest in all, its clause, and the best of all."""
        grouped: dict[str, list[LoopAdvice]] = {}
        for loop in self.loops:
            site = loop.name.rpartition("#")[0] if "#" in loop.name else (loop.name or f"loop {loop.index}")
            grouped.setdefault(site, []).append(loop)
        rows = []
        for site, loops in grouped.items():
            totals = {spec: sum(loop.times_ns[spec] for loop in loops) for spec in self.schedulers
                      if all(loop.times_ns[spec] is not None for loop in loops)}
            openmp = [spec for spec in totals if openmp_schedule(spec) is not None]
            best = min(totals, key=totals.get)
            row = {"site": site, "instances": len(loops), "best": best, "best_ns": totals[best],
                   "omp_schedule": None, "clause": None, "openmp_scheduler": None, "openmp_ns": None}
            if openmp:
                chosen = min(openmp, key=totals.get)
                value, clause = openmp_schedule(chosen)
                row.update(omp_schedule=value, clause=clause, openmp_scheduler=chosen, openmp_ns=totals[chosen])
            rows.append(row)
        return rows

    def program_openmp(self) -> dict | None:
        """The one OMP_SCHEDULE for the whole program (every schedule(runtime) loop at once): the fastest."""
        single = {spec: ns for spec, ns in self.single_ns().items() if openmp_schedule(spec) is not None}
        if not single:
            return None
        chosen = min(single, key=single.get)
        value, clause = openmp_schedule(chosen)
        return {"omp_schedule": value, "clause": clause, "scheduler": chosen, "program_ns": single[chosen]}

    def to_dict(self) -> dict:
        single = self.single_ns()
        ranking = self.single_ranking()
        best_single = ranking[0]
        single_samples = self.single_samples()
        single_wins = _wins(single_samples)  # ties go to the earlier candidate, as for each loop
        return {"machine": self.machine, "program": self.program, "threads": self.threads, "seed": self.seed,
                "baseline": self.baseline, "schedulers": self.schedulers,
                "loops": [{"loop": a.index, "name": a.name, "iterations": a.iterations, "best": a.best,
                           "best_ns": a.best_ns, "baseline_ns": a.baseline_ns, "gain": a.gain,
                           "times_ns": a.times_ns, "times_min_ns": _spread(a.samples, min),
                           "times_max_ns": _spread(a.samples, max), "wins": a.wins(),
                           "runner_ups": a.runner_ups} for a in self.loops],
                "program_baseline_ns": self.baseline_ns, "program_best_ns": self.best_ns,
                "program_gain": self.baseline_ns / self.best_ns if self.best_ns > 0 else 1.0,
                "best_single": best_single, "best_single_ns": single[best_single],
                "seeds": self.seeds, "single_ns": {s: single[s] for s in ranking},
                "single_min_ns": {s: min(single_samples[s]) for s in ranking},
                "single_max_ns": {s: max(single_samples[s]) for s in ranking},
                "single_wins": {s: single_wins[s] for s in ranking},
                "best_single_runner_ups": ranking[1:], "oracles": self.oracles,
                "sites": self.sites(), "program_openmp": self.program_openmp()}


def _loop_time(machine, threads: int, loop, spec: str, seed: int) -> tuple[float | None, str]:
    """The makespan of ``loop`` alone under ``spec`` in a fresh simulation, or None and why the scheduler refuses it."""
    try:
        sim = Simulation(machine, threads, [loop], seed=seed, keep_chunks=False)
        return sim.run(get_scheduler(spec)).makespan_ns, ""
    except ExecutionError:
        raise
    except SimschedError as exc:  # e.g. nested loops under a flat-loop scheduler
        return None, str(exc)


def _draw(workloads: list, seed: int) -> list:
    """The program's loops as ``simsched run`` draws them from the seed's generator."""
    rng = run_generator(seed)
    return [loop for workload in workloads for loop in workload.loops(rng)]


def _loops_differ(workloads: list, seeds: list[int]) -> str:
    """Why the program's loops change with the seed (its k-th loops are then not one loop), or ''."""
    first = [(loop.n, loop.name) for loop in _draw(workloads, seeds[0])] if len(seeds) > 1 else []
    for seed in seeds[1:]:
        shape = [(loop.n, loop.name) for loop in _draw(workloads, seed)]
        if len(shape) != len(first):
            return f"the program has {len(first)} loop(s) with seed {seeds[0]} and {len(shape)} with seed {seed}"
        for index, (a, b) in enumerate(zip(first, shape)):
            if a != b:
                return f"loop {index} of the program has {a[0]} iterations with seed {seeds[0]} and {b[0]} with seed {seed}"
    return ""


def advise(machine, program: str, threads: int, schedulers: list[str] | None = None,
           baseline: str = DEFAULT_BASELINE, seed: int = 0, seeds: int | None = None) -> Advice:
    """Simulate each loop of ``program`` alone under every candidate and the baseline; keep each loop's fastest.

    ``program`` is a workload spec, or several separated by ``;`` (their loops in order, as
    ``simulate_program`` runs them). Each of the seeds ``seed``, ..., ``seed + seeds - 1`` draws the
    loops from its generator as ``simsched run`` draws them and simulates them; a loop's time under
    a candidate is the mean over the seeds, and the seeds must give the program the same loops and
    sizes. ``seeds`` defaults to ``DEFAULT_SEEDS``, or to the first seed alone (with a warning) for a
    program whose loops change with the seed; a count given for such a program is refused. The baseline is always a candidate, so no loop's gain is below 1; ties go to the earlier
    candidate. Program times are sums of the loops' times: each loop starts on idle workers.
    """
    machine = load_machine(machine)
    machine.check_threads(threads)
    run_generator(seed)  # a bad seed is refused before anything runs
    chosen = seeds is not None
    seeds = DEFAULT_SEEDS if seeds is None else seeds
    if isinstance(seeds, bool) or not isinstance(seeds, int) or not 1 <= seeds <= MAX_SEEDS:
        raise SimschedError(f"seeds must be an integer from 1 to {MAX_SEEDS}, got {seeds!r}")
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
    seed_list = list(range(seed, seed + seeds))
    differ = _loops_differ(workloads, seed_list)
    if differ and chosen:
        raise SimschedError(f"{differ}, so its loops' times cannot be averaged over seeds: give --seeds 1")
    if differ:
        warnings.warn(f"{differ}, so its loops' times cannot be averaged over seeds: the advice is seed {seed}'s "
                      "alone (--seeds 1 says so without this warning)", stacklevel=2)
        seed_list = [seed]
    first: list = []
    # samples[index][spec]: the loop's time under spec with each seed, None once spec cannot run it.
    samples: list[dict[str, list[float] | None]] = []
    for s in seed_list:
        loops = _draw(workloads, s)
        if s == seed:
            first = loops
            samples = [{spec: [] for spec in candidates} for _ in loops]
        done: dict[int, dict[str, tuple[float | None, str]]] = {}  # a loop repeated in the program (matmul) runs once
        for index, loop in enumerate(loops):
            if id(loop) not in done:
                done[id(loop)] = {spec: _loop_time(machine, threads, loop, spec, s) for spec in candidates}
            if done[id(loop)][baseline][0] is None:
                raise SimschedError(f"baseline {baseline} cannot run loop {index}: {done[id(loop)][baseline][1]}")
            for spec, (time, _) in done[id(loop)].items():
                kept = samples[index][spec]
                samples[index][spec] = None if time is None or kept is None else kept + [time]
    oracles = {spec: get_scheduler(spec).oracle() for spec in candidates}
    advice = Advice(machine.name, " ; ".join(w.spec for w in workloads), threads, seed, baseline, candidates,
                    seeds=seed_list, oracles={spec: text for spec, text in oracles.items() if text})
    for index, (loop, sampled) in enumerate(zip(first, samples)):
        times = {spec: None if runs is None else _mean(runs) for spec, runs in sampled.items()}
        best = min((spec for spec in candidates if times[spec] is not None), key=lambda s: times[s])
        advice.loops.append(LoopAdvice(index, loop.name, loop.n, times, best, times[best], times[baseline],
                                       sampled))
    return advice


def _range_us(low: float, high: float) -> str:
    return f"{low / 1e3:.3f}-{high / 1e3:.3f}"


def format_advice(advice: Advice) -> str:
    """A text table, one row per loop, the program's times, each scheduler's program time, and what to mind.

    With several seeds, times are means and each carries its spread (min-max over the seeds) and,
    for a best, the seeds it was the fastest with.
    """
    width = max(len(s) for s in advice.schedulers)
    named = any(loop.name for loop in advice.loops)
    name_width = max([10] + [len(loop.name) for loop in advice.loops])
    count = len(advice.seeds)
    summary = advice.to_dict()
    spreads = [_range_us(min(runs), max(runs)) for loop in advice.loops
               for runs in loop.samples.values() if runs]
    singles = {spec: _range_us(summary["single_min_ns"][spec], summary["single_max_ns"][spec])
               for spec in summary["single_ns"]}
    spread_width = max(len(text) for text in spreads + list(singles.values()) + ["spread_us"])

    def spread(runs: list[float], wins: int | None = None) -> str:
        """The spread column (and wins column) after a time; nothing with one seed, where there is no spread."""
        if count == 1:
            return ""
        text = f"  {_range_us(min(runs), max(runs)):>{spread_width}}"
        return text if wins is None else text + f"  {f'{wins}/{count}':>5}"

    if count == 1:
        seeds = f"seed {advice.seed}"
        spread_head = wins_head = ""
    else:
        seeds = f"seeds {advice.seeds[0]}-{advice.seeds[-1]} (times are means, spread_us their min-max)"
        spread_head, wins_head = f"  {'spread_us':>{spread_width}}", f"  {'wins':>5}"
    lines = [f"{advice.program} on {advice.machine}, {advice.threads} threads, {seeds}: "
             f"{len(advice.loops)} loop(s); baseline {advice.baseline}",
             f"  {'loop':>4}  " + (f"{'name':<{name_width}} " if named else "") + f"{'best':<{width}}  {'best_us':>12}  "
             f"{'baseline_us':>12}  {'gain':>6}{spread_head}{wins_head}  {'runner-up':<{width}}  "
             f"{'runner_up_us':>12}{spread_head}"]
    for a in advice.loops:
        row = (f"  {a.index:>4}  " + (f"{a.name:<{name_width}} " if named else "") + f"{a.best:<{width}}  "
               f"{a.best_ns / 1e3:>12.3f}  {a.baseline_ns / 1e3:>12.3f}  {a.gain:>5.2f}x"
               f"{spread(a.samples[a.best], a.wins()[a.best])}")
        if a.runner_ups:
            second = a.runner_ups[0]
            row += f"  {second:<{width}}  {a.times_ns[second] / 1e3:>12.3f}{spread(a.samples[second])}"
        lines.append(row)
    lines.append(f"program: baseline {advice.baseline_ns / 1e3:.3f} us; each loop on its best "
                 f"{advice.best_ns / 1e3:.3f} us ({summary['program_gain']:.2f}x); best single scheduler "
                 f"{summary['best_single']} {summary['best_single_ns'] / 1e3:.3f} us")
    lines.append("each scheduler for the whole program, fastest first:")
    lines.append(f"  {'scheduler':<{width}}  {'program_us':>12}{spread_head}{wins_head}")
    single_samples = advice.single_samples()
    for spec, mean in summary["single_ns"].items():
        columns = spread(single_samples[spec], summary["single_wins"][spec])
        lines.append(f"  {spec:<{width}}  {mean / 1e3:>12.3f}{columns}")
    unsettled = advice.unsettled_loops()
    if unsettled:
        lines.append(f"note: the best of loop(s) {', '.join(map(str, unsettled))} is not the fastest with every "
                     "seed: there the seeds move the candidates more than their gaps")
    if summary["single_wins"][summary["best_single"]] < count:
        lines.append(f"note: the best single scheduler {summary['best_single']} is not the fastest with every "
                     "seed: the seeds move the whole-program times more than their gaps")
    for spec, given in advice.oracles.items():
        lines.append(f"note: {spec} is an oracle here: it is given {given}")
    lines.extend(_clause_lines(advice))
    return "\n".join(lines)


def _clause_lines(advice: Advice) -> list[str]:
    """What to write in the program: each loop site's fastest OpenMP schedule clause, and one OMP_SCHEDULE."""
    sites = advice.sites()
    if not any(site["clause"] for site in sites):
        return []
    width = max(len(site["site"]) for site in sites)
    lines = ["OpenMP schedule per loop site (the fastest OpenMP schedule over the site's instances):",
             f"  {'site':<{width}}  {'instances':>9}  {'clause':<22}  {'us':>12}  best of all candidates"]
    for site in sites:
        if site["clause"] is None:
            lines.append(f"  {site['site']:<{width}}  {site['instances']:>9}  {'(none)':<22}  {'':>12}  "
                         f"{site['best']}")
            continue
        beyond = ("the same" if site["best"] == site["openmp_scheduler"] else
                  f"{site['best']} {site['openmp_ns'] / site['best_ns']:.2f}x faster" if site["best_ns"] > 0
                  else site["best"])
        lines.append(f"  {site['site']:<{width}}  {site['instances']:>9}  {site['clause']:<22}  "
                     f"{site['openmp_ns'] / 1e3:>12.3f}  {beyond}")
    whole = advice.program_openmp()
    if whole is not None:
        lines.append(f"one schedule for every schedule(runtime) loop: OMP_SCHEDULE={whole['omp_schedule']} "
                     f"({whole['program_ns'] / 1e3:.3f} us)")
    return lines
