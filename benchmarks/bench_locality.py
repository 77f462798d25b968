"""Locality model speed: the data model's cost per chunk, a chunk=1 application run with and without data,
the E3 sweep's wall time, and events and time per chunk as iterations grow 100x.

Run:  python benchmarks/bench_locality.py [--jobs 2] [--skip-sweep] [--rounds 5] [--app-rounds 1]
Prints each figure; nothing here is a pass/fail test (these machines are noisy). The ways of working a
chunk out (NumPy over its iterations; one iteration at a time in plain floats, in Python or compiled) are
timed alternately, round after round, and compared by the median of each round's ratio.
"""

from __future__ import annotations

import argparse
import contextlib
import heapq
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

import simsched
from simsched import load_machine, locality
from simsched.locality import scalar_iterations
from simsched.locality import DataState
from simsched.sweep import load_experiment, run_sweep
from simsched.workloads import draw_loops, get_workload

ROOT = Path(__file__).resolve().parent.parent
MACHINE = "haswell-e5-2695v3"
APP = "spmv:matrix=powerlaw,iters=10"   # one of E4's applications: 10 loops of 2048 rows, a gather of x
PATHS = {"numpy": 0, "per-iteration": 10**9, "compiled": 10**9, "as shipped": None}   # None: the shipped limits
COMPILED = locality.compiled


@contextlib.contextmanager
def compiled_path(on: bool):
    """Within it, data states take the compiled per-iteration path (where built) or the Python one."""
    kept, locality.compiled = locality.compiled, COMPILED if on else None
    try:
        yield
    finally:
        locality.compiled = kept




def data_model_cost(size: int, path: str, chunks: int = 2000, threads: int = 28) -> float:
    """Seconds per chunk of the data model alone: ``chunks`` chunks of ``size`` iterations of APP's loops on
    MACHINE, each to the worker free first (as self-scheduling deals them), timed at its start."""
    machine = load_machine(MACHINE)
    loops = draw_loops(get_workload(APP), np.random.default_rng(0))
    limit = PATHS[path]
    with compiled_path(path != "per-iteration"):
        state = DataState(machine, machine.placement(threads), loops, np.random.default_rng(1))
    free = [(0.0, worker) for worker in range(threads)]
    loop, lo = 0, 0
    with scalar_iterations(limit):
        begin = time.perf_counter()
        for _ in range(chunks):
            start, worker = heapq.heappop(free)
            if lo >= loops[loop].n:
                loop, lo = (loop + 1) % len(loops), 0
            hi = min(lo + size, loops[loop].n)
            heapq.heappush(free, (start + state.chunk(worker, loops[loop].data, lo, hi, start), worker))
            lo = hi
        return (time.perf_counter() - begin) / chunks


def app_run(workload: str, limit: int | None, compiled: bool = True) -> tuple[float, float]:
    """Wall seconds and makespan of a chunk=1 run of ``workload`` on MACHINE, 28 threads (``limit``: of the
    per-iteration paths, None for the shipped ones)."""
    limits = contextlib.nullcontext() if limit is None else scalar_iterations(limit)
    with limits, compiled_path(compiled):
        begin = time.perf_counter()
        result = simsched.simulate(MACHINE, "omp-dynamic:chunk=1,runtime=gnu", workload, 28,
                                   keep_chunks=False)
        return time.perf_counter() - begin, result.makespan_ns


def per_chunk(scheduler: str, n: int, chunk: int, repeat: int = 5) -> tuple[int, int, float]:
    """Chunks, events and wall seconds of an E3-like program with the data model on."""
    workload = f"arrays:n={n},bytes={max(8, 11_900_000 // n // 8 * 8)}"
    start = time.perf_counter()
    result = simsched.simulate("xeon-e5-4620", f"{scheduler}:chunk={chunk}", workload, 32, repeat=repeat,
                               keep_chunks=False)
    return result.chunk_count, result.events, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--skip-sweep", action="store_true")
    parser.add_argument("--rounds", type=int, default=5, help="alternations of the per-chunk timings")
    parser.add_argument("--app-rounds", type=int, default=1, help="alternations of the application runs")
    args = parser.parse_args()

    print(f"data model cost per chunk, {APP} on {MACHINE}, 28 workers "
          f"(as shipped, the per-iteration path takes chunks up to {locality.SCALAR_ITERATIONS} iterations in "
          f"Python, {locality.COMPILED_ITERATIONS} compiled):")
    if COMPILED is None:
        print("(simsched._locality is not built: the compiled column repeats the Python path)")
    print(f"{'iterations':>10} {'numpy us':>9} {'per-iteration us':>17} {'compiled us':>12} "
          f"{'numpy / per-iteration':>22} {'per-iteration / compiled':>25}")
    for size in (1, 2, 4, 8, 16, 32, 48, 64, 128):
        times: dict[str, list[float]] = {"numpy": [], "per-iteration": [], "compiled": []}
        for _ in range(args.rounds):
            for path, taken in times.items():
                taken.append(data_model_cost(size, path, chunks=max(200, 2000 // size)))
        ratio = statistics.median(a / b for a, b in zip(times["numpy"], times["per-iteration"]))
        faster = statistics.median(a / b for a, b in zip(times["per-iteration"], times["compiled"]))
        print(f"{size:>10} {1e6 * statistics.median(times['numpy']):9.1f} "
              f"{1e6 * statistics.median(times['per-iteration']):17.1f} "
              f"{1e6 * statistics.median(times['compiled']):12.1f} {ratio:22.2f} {faster:25.2f}")

    print(f"\nomp-dynamic:chunk=1,runtime=gnu, 28 threads, {APP}: wall s "
          f"(alternating, the least of {args.app_rounds} round(s))")
    walls: dict[str, list[float]] = {"data, as shipped": [], "data, Python path": [], "data, numpy only": [],
                                     "data=0": []}
    makespans = {}
    for _ in range(args.app_rounds):
        for name, taken in walls.items():
            workload = APP + (",data=0" if name == "data=0" else "")
            limit = PATHS["numpy"] if "numpy" in name else PATHS["as shipped"]
            wall, makespans[name] = app_run(workload, limit, compiled="Python" not in name)
            taken.append(wall)
    for name, values in walls.items():
        print(f"  {name:18} {min(values):7.2f} s  (makespan {makespans[name]:.6f} ns)")
    same = makespans["data, as shipped"] == makespans["data, Python path"] == makespans["data, numpy only"]
    print(f"  the three data runs' makespans are {'identical' if same else 'DIFFERENT'}")

    print("\nevents and wall time per chunk, omp-dynamic, 32 threads, 5 loops, same chunk count:")
    print(f"{'iterations':>10} {'chunk':>6} {'chunks':>7} {'events':>8} {'events/chunk':>13} {'us/chunk':>9}")
    for n, chunk in ((16_384, 64), (1_638_400, 6_400)):
        chunks, events, wall = per_chunk("omp-dynamic", n, chunk)
        print(f"{n:>10} {chunk:>6} {chunks:>7} {events:>8} {events / chunks:13.2f} {1e6 * wall / chunks:9.1f}")
    if not args.skip_sweep:
        experiment = load_experiment(ROOT / "experiments" / "e3-affinity-xeon-e5.toml")
        with tempfile.TemporaryDirectory() as folder:
            start = time.perf_counter()
            frame = run_sweep(experiment, jobs=args.jobs, progress=False, out=Path(folder) / "e3")
            wall = time.perf_counter() - start
        failed = int((frame["error"] != "").sum())
        print(f"E3 sweep: {len(frame)} runs ({failed} failed) on {args.jobs} process(es): {wall:.1f} s wall "
              f"(target: under 600 s on 2 cores)")


if __name__ == "__main__":
    main()
