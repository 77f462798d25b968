"""Simulation against hardware: the E1 uforall sweep run natively and simulated on the calibrated host model."""

from __future__ import annotations

import subprocess
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

from ..analysis.amdahl import fit_burden
from ..engine import simulate
from ..errors import SimschedError
from ..machine import load_machine
from ..host import HOST_MACHINE_FILE
from . import openmp
from .calibrate import DOUBTFUL
from .extension import _check_integer, check_threads, require
from .memprobe import half_private
from .pinned_runs import run
from .shares import NATIVE, as_run_natively


def warn_if_doubtful(path: Path, lines: list[str]) -> None:
    """Warn when ``native calibrate --force`` wrote machine file ``path`` (its ``lines``) from doubtful figures."""
    if any(line.startswith(DOUBTFUL) for line in lines):
        warnings.warn(f"machine file {path} was calibrated on a busy host and written with --force (see its "
                      "header): its figures, and every comparison with them, may be far off", RuntimeWarning,
                      stacklevel=3)


def durations_us(points: int, low_us: float = 1.0, high_us: float = 1000.0) -> np.ndarray:
    """The loop durations T of the sweep, log-spaced."""
    return np.logspace(np.log10(low_us), np.log10(high_us), points)


def _kept(loop_ns) -> np.ndarray:
    # The first loop of a run pays for waking the threads and first touches: EPCC discards it.
    times = np.asarray(loop_ns, dtype=float)
    return times[1:] if times.size > 1 else times


def _median_loop_ns(loop_ns) -> float:
    return float(np.median(_kept(loop_ns)))


def median_ci(loop_ns) -> tuple[float, float]:
    """A distribution-free 95% confidence interval of the median loop time (order statistics)."""
    times = np.sort(_kept(loop_ns))
    n = times.size
    half = 1.96 * np.sqrt(n) / 2
    lo = int(max(np.floor(n / 2 - half), 0))
    hi = int(min(np.ceil(n / 2 + half), n - 1))
    return float(times[lo]), float(times[hi])


def openmp_times(threads: int, n: int, t_us: np.ndarray, repeat: int) -> np.ndarray | None:
    """Median loop ns of the host OpenMP runtime's static schedule per T, or None without an OpenMP compiler."""
    with tempfile.TemporaryDirectory() as folder:
        binary = openmp.build("omp_uforall", folder)
        if binary is None:
            return None
        env = openmp.environment(threads)
        medians = []
        for t in t_us:
            out = subprocess.run([str(binary), str(n), f"{t * 1e3 / n:.3f}", str(repeat + 1), "static"],
                                 capture_output=True, text=True, env=env, timeout=120)
            if out.returncode != 0:
                return None
            medians.append(_median_loop_ns([float(x) for x in out.stdout.split()]))
        return np.asarray(medians)


def validate(machine=HOST_MACHINE_FILE, threads: int | None = None, points: int = 10, repeat: int = 21,
             schedulers=None, openmp: bool = True, progress=None) -> pd.DataFrame:
    """Per scheduler: native and simulated burden d and the error of the simulated loop times.

    The sweep is E1's uforall: 10 iterations per thread, T log-spaced from 1 us to 1 ms,
    each loop run ``repeat`` times (median and its 95% confidence interval, first loop
    discarded). ``median_abs_error`` is the median over T of |simulated - native| / native
    loop time. ``progress`` (a function of one line) hears of each scheduler as it starts.
    """
    progress = progress or _quiet
    require()
    model = load_machine(machine)
    threads = threads if threads is not None else model.cores
    check_threads(threads)
    model.check_threads(threads)
    n = 10 * threads
    t_us = durations_us(points)
    rows = []
    reference = None
    names = schedulers or list(NATIVE)
    for index, name in enumerate(names, 1):
        progress(f"{name} ({index}/{len(names)}): {points} loop durations, {repeat + 1} loops each, natively "
                 "and simulated")
        native_ns, sim_ns, ci = [], [], []
        for t in t_us:
            workload = f"uforall:n={n},total_us={t:.6g}"
            measured = run(name, workload, threads, repeat=repeat + 1).loop_ns
            native_ns.append(_median_loop_ns(measured))
            ci.append(median_ci(measured))
            sim_ns.append(_median_loop_ns(simulate(model, as_run_natively(name), workload, threads, repeat=5).loop_ns))
        row = _row(name, threads, t_us, np.asarray(native_ns), np.asarray(sim_ns))
        row["native_ci_us"] = [[round(lo / 1e3, 3), round(hi / 1e3, 3)] for lo, hi in ci]
        rows.append(row)
        if name == "omp-static":
            reference = np.asarray(sim_ns)
    if openmp:
        progress("the host OpenMP runtime's static schedule (where an OpenMP compiler is found)")
        omp = openmp_times(threads, n, t_us, repeat)
        if omp is not None:
            if reference is None:
                reference = np.asarray([_median_loop_ns(simulate(model, "omp-static", f"uforall:n={n},total_us={t:.6g}",
                                                                  threads, repeat=5).loop_ns) for t in t_us])
            rows.append(_row("host-openmp-static", threads, t_us, omp, reference))
    return pd.DataFrame(rows)


def _row(name, threads, t_us, native_ns, sim_ns) -> dict:
    native_fit = fit_burden(t_us, t_us * 1e3 / native_ns, threads)
    sim_fit = fit_burden(t_us, t_us * 1e3 / sim_ns, threads)
    error = np.abs(sim_ns - native_ns) / native_ns
    return {"scheduler": name, "threads": threads, "native_d_us": native_fit.d_us,
            "native_d_ci_us": native_fit.d_ci_us, "sim_d_us": sim_fit.d_us,
            "median_abs_error": float(np.median(error)), "max_abs_error": float(error.max()),
            "native_loop_us": [round(x / 1e3, 3) for x in native_ns],
            "sim_loop_us": [round(x / 1e3, 3) for x in sim_ns], "t_us": [round(x, 3) for x in t_us]}


def format_validation(table: pd.DataFrame) -> str:
    lines = [f"{'scheduler':<20} {'P':>3} {'native d (us)':>14} {'sim d (us)':>11} {'median err':>11} {'max err':>8}"]
    for row in table.itertuples(index=False):
        lines.append(f"{row.scheduler:<20} {row.threads:>3} {row.native_d_us:14.3f} {row.sim_d_us:11.3f} "
                     f"{100 * row.median_abs_error:10.1f}% {100 * row.max_abs_error:7.1f}%")
    return "\n".join(lines)


def _quiet(line: str) -> None:
    """A progress function that says nothing."""


def check_machine_file(path: str | Path) -> Path:
    """``path``, a machine file that exists; a warning when ``native calibrate --force`` wrote it from doubtful
    figures (its header says so), since every comparison with it inherits their errors, and when its loop
    and chunk costs are an OpenMP runtime's (``native calibrate --openmp``) rather than the native runtime's."""
    path = Path(path)
    if not path.is_file():
        raise SimschedError(f"no machine file {path}: measure this machine first with simsched native calibrate")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError):
        lines = []  # load_machine says what is wrong with it
    warn_if_doubtful(path, lines)
    if any(line.strip() == "[openmp]" for line in lines):
        # The native runtime is what these commands run; the file's loop and chunk costs are another runtime's.
        warnings.warn(f"machine file {path} has an OpenMP runtime's loop_setup and chunk (native calibrate "
                      "--openmp), not those of simsched's native runtime that this command runs: calibrate "
                      "without --openmp to compare with it", RuntimeWarning, stacklevel=2)
    return path


# E3's locality microbenchmark: working sets as multiples of a cache level's total size over the threads.
LOCALITY_N = 4096
LOCALITY_SWEEPS = 5


def working_sets(hierarchy, threads: int) -> list[tuple[str, int]]:
    """(label, total bytes) of the locality sweep: 0.5 x the threads' last private level, 0.5, 2 and 8 x the last."""
    levels = hierarchy.levels
    if not levels:
        raise SimschedError("the machine file describes no cache levels: the locality validation sizes its "
                            "working sets by them")
    sets = []
    private = [lv for lv in levels if lv.shared_by == "core"]
    last = levels[-1]
    if private and private[-1] is not last:
        sets.append((f"0.5x {private[-1].name} x{threads}", private[-1].size_bytes * threads // 2))
    total = last.size_bytes * (threads if last.shared_by == "core" else 1)
    name = f"{last.name} x{threads}" if last.shared_by == "core" else last.name
    sets += [(f"{factor:g}x {name}", int(total * factor)) for factor in (0.5, 2, 8)]
    return sets


def locality_schedulers(n: int, threads: int) -> list[str]:
    """The three schedulers of the sweep; omp-dynamic's chunk is a cilk_for grain, min(N / 8P, 2048)."""
    from ..schedulers.base import default_grain

    return ["omp-static", f"omp-dynamic:chunk={default_grain(n, threads)}", "hybrid"]


def validate_locality(machine=HOST_MACHINE_FILE, threads: int | None = None, n: int = LOCALITY_N,
                      repeat: int = 21, sweeps: int = LOCALITY_SWEEPS, progress=None) -> pd.DataFrame:
    """Per scheduler and working set: native and simulated median loop time of ``arrays`` (balanced) and affinity.

    Each working set is spread over ``n`` iterations (bytes per iteration rounded to whole
    8-byte doubles); each run is ``repeat`` loops over the same data, the first discarded.
    The native measurements (each loop body's cost, then each scheduler's run) go over the
    working sets ``sweeps`` times, one sweep after another, and each figure is its best sweep,
    as each memory probe of the calibration is its best try: on a shared host other work only ever
    slows a sweep down, and the model, calibrated on the host undisturbed, has none of it.
    ``progress`` (a function of one line) hears of each working set of each sweep as it starts.
    """
    progress = progress or _quiet
    require()
    sweeps = _check_integer("--sweeps", sweeps, 1, 1000)
    model = load_machine(machine)
    if model.hierarchy is None:
        raise SimschedError(f"machine file {machine} describes no memory hierarchy: measure it again with "
                            "simsched native calibrate")
    threads = threads if threads is not None else model.cores
    check_threads(threads)
    model.check_threads(threads)
    if isinstance(n, bool) or not isinstance(n, int) or n < threads:
        raise SimschedError(f"the locality validation needs n >= threads ({threads}) iterations, got {n!r}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 2:
        raise SimschedError(f"the locality validation needs --repeat >= 2 (the first loop is discarded), got {repeat!r}")
    sets = [(label, max(8, round(total / n / 8) * 8)) for label, total in working_sets(model.hierarchy, threads)]
    workloads = {label: f"arrays:n={n},bytes={per},balance=balanced" for label, per in sets}
    schedulers = locality_schedulers(n, threads)
    bodies = {label: [] for label, _ in sets}
    measured = {(label, name): [] for label, _ in sets for name in schedulers}
    for sweep in range(1, sweeps + 1):
        for label, per in sets:
            progress(f"sweep {sweep}/{sweeps}: working set {label}, {n} iterations of {per} bytes, "
                     f"{len(schedulers)} schedulers")
            bodies[label].append(loop_body_ns(model, per, n))
            for name in schedulers:
                result = run(name, workloads[label], threads, repeat=repeat)
                measured[label, name].append((_median_loop_ns(result.loop_ns), _overall(result)))
    rows = []
    for label, per in sets:
        # The simulated loop carries the native kernel's own cost at this size as each iteration's compute.
        body_ns = min(bodies[label])
        modeled = f"{workloads[label]},cost_ns={body_ns:.3f}"
        for name in schedulers:
            native_sweeps = [median for median, _ in measured[label, name]]
            best = int(np.argmin(native_sweeps))
            native_ns, native_affinity = measured[label, name][best]
            simulated = simulate(model, as_run_natively(name), modeled, threads, repeat=repeat)
            sim_ns = _median_loop_ns(simulated.loop_ns)
            rows.append({"scheduler": name, "working_set": label, "total_bytes": per * n, "bytes": per,
                         "threads": threads, "n": n, "body_ns": body_ns, "sweeps_body_ns": bodies[label],
                         "native_us": native_ns / 1e3, "sweeps_native_us": [x / 1e3 for x in native_sweeps],
                         "sim_us": sim_ns / 1e3, "error": (sim_ns - native_ns) / native_ns,
                         "native_affinity": native_affinity,
                         "sim_affinity": _overall(simulated)})
    return pd.DataFrame(rows)


def loop_body_ns(model, nbytes: int, n: int, repeat: int = 11) -> float:
    """The native kernel's own cost per iteration of ``nbytes``: its work beyond fetching the data.

    One thread runs the kernel over as many such iterations (at most ``n``) as half the
    core's last private cache level holds, so that after the first loop its data is in the
    core's own caches; the median loop time per iteration, less the memory time the model
    gives the same loop, is the work the model has no figure for (the update of each double,
    the index arithmetic, the loop's bounds and call), which the workload's ``cost_ns``
    stands for in the simulation.
    """
    iterations = max(1, min(n, half_private(model.hierarchy.levels) // nbytes))
    workload = f"arrays:n={iterations},bytes={nbytes},balance=balanced"
    native_ns = _median_loop_ns(run("omp-static", workload, 1, repeat=repeat).loop_ns)
    modeled_ns = _median_loop_ns(simulate(model, "omp-static", workload, 1, repeat=repeat).loop_ns)
    return max(native_ns - modeled_ns, 0.0) / iterations


def _overall(result):
    affinity = getattr(result, "affinity", None)
    return None if affinity is None else affinity["overall"]


def locality_errors(table: pd.DataFrame) -> dict[str, float]:
    """The median over working sets of |simulated - native| / native, per scheduler (in sweep order)."""
    return {name: float(table.loc[table["scheduler"] == name, "error"].abs().median())
            for name in dict.fromkeys(table["scheduler"])}


def format_locality(table: pd.DataFrame) -> str:
    def affinity(value):
        return "-" if value is None or value != value else f"{value:.3f}"

    lines = [f"{'scheduler':<24} {'working set':<16} {'total':>10} {'body ns':>9} {'native us':>11} "
             f"{'worst':>9} {'sim us':>11} {'error':>8} {'native aff':>10} {'sim aff':>8}"]
    for row in table.itertuples(index=False):
        lines.append(f"{row.scheduler:<24} {row.working_set:<16} {row.total_bytes / 2**20:8.2f} MiB "
                     f"{row.body_ns:9.1f} {row.native_us:11.1f} {max(row.sweeps_native_us):9.1f} {row.sim_us:11.1f} "
                     f"{100 * row.error:+7.1f}% {affinity(row.native_affinity):>10} {affinity(row.sim_affinity):>8}")
    sweeps = len(table["sweeps_native_us"].iloc[0]) if len(table) else 0
    lines.append(f"native: the best of {sweeps} sweep{'s' * (sweeps != 1)} over the working sets (worst: the "
                 "slowest); body: each "
                 "iteration's cost_ns in the simulation, the native kernel's own cost at that size (one thread, its "
                 "data in the core's own caches) less the model's memory time for it, the sweeps' least")
    lines.append("median |error| over working sets: " + ", ".join(
        f"{name} {100 * error:.1f}%" for name, error in locality_errors(table).items()))
    return "\n".join(lines)


def recorded_costs(path, kernel, block: int) -> list[np.ndarray]:
    """Per loop of ``kernel``, each iteration's recorded cost: a block's cost spread evenly over its iterations,
    so the simulated loops have the native ones' iterations (and a scheduler's chunk means the same in both)."""
    from ..workloads.trace import TraceFile
    from .record import block_sizes

    recorded = [loop.costs for loop in TraceFile(path).loops()]
    sizes = kernel.loop_sizes
    if len(recorded) != len(sizes):
        raise SimschedError(f"trace {path} has {len(recorded)} loops; its kernel {kernel.spec} runs {len(sizes)}: "
                            "the input changed since it was recorded")
    costs = []
    for index, (blocks, n) in enumerate(zip(recorded, sizes)):
        split = block_sizes(n, block)
        if blocks.size != split.size:
            raise SimschedError(f"trace {path}: loop {index} has {blocks.size} blocks; its kernel's loop of {n} "
                                f"iterations makes {split.size} of {block}: the input changed since it was recorded")
        costs.append(np.repeat(blocks / split, split))
    return costs


def validate_trace(workload: str, machine=HOST_MACHINE_FILE, threads: int | None = None, repeat: int = 21,
                   schedulers=None, progress=None) -> pd.DataFrame:
    """Per scheduler: a recorded kernel's median native time, the simulated time of its recorded costs on the
    calibrated model, and the error.

    The trace (``trace:path=FILE``) names its kernel and inputs in its metadata; the kernel is
    rebuilt and run natively ``repeat`` times after a warm pass (the recording's was warm too).
    ``progress`` (a function of one line) hears of each scheduler as it starts.
    """
    progress = progress or _quiet
    from ..engine import Simulation
    from ..loop import Loop
    from ..schedulers import get_scheduler
    from ..workloads import get_workload
    from .pinned_runs import execute
    from .kernels import from_meta

    require()
    spec = get_workload(workload)
    if spec.name != "trace":
        raise SimschedError(f"--workload {workload}: validation against a recording takes a recorded trace "
                            "(trace:path=FILE, written by simsched native record)")
    from ..workloads.trace import trace_metadata

    path = spec.params["path"]
    meta = trace_metadata(path)
    block = _check_integer(f"trace {path}: its metadata's block", meta.get("block", 1), 1, 2**31 - 1)
    kernel = from_meta(meta, f"trace {path}")
    repeat = _check_integer("--repeat", repeat, 1, 10**6)
    model = load_machine(machine)
    threads = threads if threads is not None else model.cores
    check_threads(threads)
    model.check_threads(threads)
    costs = recorded_costs(path, kernel, block)
    data = meta.get("data", False)
    if not isinstance(data, bool):
        raise SimschedError(f"trace {path}: its metadata's data must be true or false, got {data!r}")
    # A recording with its data holds the kernel's work alone: the simulation adds what its data costs.
    footprints = kernel.footprints() if data else [None] * len(costs)
    program = [Loop(cost, data=footprint) for cost, footprint in zip(costs, footprints)]
    if data and model.hierarchy is None:
        raise SimschedError(f"trace {path} was recorded with --data: its simulation adds the kernel's data, which "
                            f"needs a machine file that describes its memory hierarchy ([cache.*] and [dram])")
    Simulation(model, threads, keep_chunks=False).load(program)  # data that cannot fit is refused before any run
    zeros = np.zeros(int(kernel.sizes.sum()))
    loops = len(kernel.loop_sizes)

    names = list(schedulers or NATIVE)

    def compare(name: str, workers: int, control: bool, which: str) -> dict:
        progress(f"{name} on {workers} thread(s) ({which}): {repeat + 1} passes")
        measured, _ = execute(get_scheduler(name), kernel.spec, workers, zeros, kernel.sizes,
                              kernel.passes * (repeat + 1), memory=kernel.memory, csr=kernel.csr)
        passes = np.asarray(measured.loop_ns).reshape(repeat + 1, loops).sum(axis=1)[1:]  # the first is warm-up
        simulation = Simulation(model, workers, keep_chunks=False)
        simulation.load(program)
        simulated = float(sum(simulation.run(get_scheduler(as_run_natively(name))).loop_ns))
        native_ns = float(np.median(passes))
        return {"scheduler": name, "threads": workers, "control": control, "kernel": kernel.spec, "block": block,
                "data": data,
                "native_ms": native_ns / 1e6, "native_min_ms": float(passes.min()) / 1e6,
                "native_max_ms": float(passes.max()) / 1e6, "sim_ms": simulated / 1e6,
                "error": (simulated - native_ns) / native_ns}

    # The control: one thread, as recorded; its error is how far this host's speed now is from the recording's.
    rows = [compare("omp-static", 1, True, "the control")]
    rows += [compare(name, threads, False, f"{index}/{len(names)}") for index, name in enumerate(names, 1)]
    return pd.DataFrame(rows)


def format_trace_validation(table: pd.DataFrame) -> str:
    """The table of :func:`validate_trace`, then the median |error| over its schedulers, then the control."""
    lines = [f"{'scheduler':<14} {'native ms':>10} {'(min - max)':>19} {'simulated ms':>13} {'error':>8}"]
    control = table[table["control"]]
    table = table[~table["control"]]
    for row in table.itertuples(index=False):
        spread = f"({row.native_min_ms:.3f} - {row.native_max_ms:.3f})"
        lines.append(f"{row.scheduler:<14} {row.native_ms:10.3f} {spread:>19} {row.sim_ms:13.3f} "
                     f"{100 * row.error:+7.1f}%")
    if len(table):
        data = ("; simulated: each block's work with its data in cache, plus the kernel's data footprints"
                if table["data"].iloc[0] else "")
        lines.append(f"{table['kernel'].iloc[0]} on {table['threads'].iloc[0]} thread(s), recorded in blocks of "
                     f"{table['block'].iloc[0]}; native: median of the passes after a warm one{data}")
        lines.append(f"median |error|: {100 * float(table['error'].abs().median()):.1f}%")
    for row in control.itertuples(index=False):
        lines.append(f"control, omp-static on 1 thread as recorded: native {row.native_ms:.3f} ms, simulated "
                     f"{row.sim_ms:.3f} ms ({100 * row.error:+.1f}%: this host's speed now against the recording's)")
    return "\n".join(lines)
