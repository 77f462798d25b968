"""What-if scale: one 10^6-iteration loop on 1,024 threads per scheduler, building 1,024-core machines, and noise's cost.

Run:  python benchmarks/bench_whatif.py [--iterations 1000000] [--runs 3]
Prints, for omp-dynamic (chunk 1), stealing (chunk 1), fg-tree and cilk on the 1,024-core what-if machine
scaled:base=epyc-7742-2s,sockets=16: the median wall time of one loop, its events and
chunks; the time to build that machine and uniform:cores=1024 in-process; and the same
omp-dynamic loop on 48 threads with and without OS noise (1,000 random 10 us
interruptions per second per core), whose event counts must be equal. Targets: omp-dynamic,
fg-tree and cilk under 1 s, stealing under 2 s, a 1,024-core machine under 0.5 s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simsched.engine import simulate  # noqa: E402
from simsched.machine import load_machine  # noqa: E402

MACHINE = "scaled:base=epyc-7742-2s,sockets=16"
LOOPS = {"omp-dynamic": 1.0, "stealing": 2.0, "fg-tree": 1.0, "cilk": 1.0}


def median_wall(runs: int, call) -> tuple[float, object]:
    times, out = [], None
    for _ in range(runs):
        start = time.perf_counter()
        out = call()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=1_000_000, help="iterations of the loop")
    parser.add_argument("--runs", type=int, default=3, help="timed runs of each (median)")
    args = parser.parse_args()
    for spec in (MACHINE, "uniform:cores=1024"):
        wall, machine = median_wall(args.runs, lambda: load_machine(spec))
        print(f"build {spec:<40} {machine.cores:>5} cores  {wall:8.3f} s  (target < 0.5 s)")
    machine = load_machine(MACHINE)
    workload = f"uniform:n={args.iterations},low_ns=50,high_ns=150"
    for scheduler, target in LOOPS.items():
        wall, result = median_wall(args.runs, lambda: simulate(machine, scheduler, workload, 1024,
                                                               keep_chunks=False))
        print(f"{scheduler:<12} 1024 threads, {args.iterations} iterations: {wall:7.2f} s  "
              f"(target < {target:g} s)  {result.events} events, {result.chunk_count} chunks, "
              f"makespan {result.makespan_ns / 1e6:.3f} ms")
    quiet = load_machine("xeon-e7-4860v2")
    noisy = load_machine("xeon-e7-4860v2[noise.rate_hz=1000,noise.duration_us=10]")
    for name, m in (("without noise", quiet), ("with noise", noisy)):
        wall, result = median_wall(args.runs, lambda: simulate(m, "omp-dynamic", workload, 48, keep_chunks=False))
        print(f"omp-dynamic 48 threads {name:<14} {wall:7.2f} s  {result.events} events, "
              f"noise_ns {result.counters.get('noise_ns', 0) / 1e6:.3f} ms")


if __name__ == "__main__":
    main()
