"""What-if scale: one 10^6-iteration loop on 1,024 threads per scheduler, 10^7 on 16,384, and noise's cost.

Run:  python benchmarks/bench_whatif.py [--iterations 1000000] [--runs 3] [--no-largest]
Prints, for omp-dynamic (chunk 1), stealing (chunk 1), fg-tree and cilk on the 1,024-core what-if machine
scaled:base=epyc-7742-2s,sockets=16: the median wall time of one loop, its events and
chunks; the time to build that machine and uniform:cores=1024 in-process; and the same
omp-dynamic loop on 48 threads with and without OS noise (1,000 random 10 us
interruptions per second per core), whose event counts must be equal. Targets: omp-dynamic,
fg-tree and cilk under 1 s, stealing under 2 s, a 1,024-core machine under 0.5 s.

Then the same machine with 256 sockets, 16,384 cores: building it, and one loop of 10^7 iterations
under omp-dynamic and fg-tree on all its cores, each in a fresh process that prints its wall time and
peak resident memory. Targets: each loop under 30 s and 2 GB.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from simsched.engine import simulate  # noqa: E402
from simsched.machine import load_machine  # noqa: E402

MACHINE = "scaled:base=epyc-7742-2s,sockets=16"
LOOPS = {"omp-dynamic": 1.0, "stealing": 2.0, "fg-tree": 1.0, "cilk": 1.0}
LARGEST = "scaled:base=epyc-7742-2s,sockets=256"
LARGEST_LOOPS = ("omp-dynamic", "fg-tree")
LARGEST_ITERATIONS = 10_000_000

# One loop on every core of LARGEST, in a process of its own so that its peak memory is its own.
LARGEST_RUN = """
import resource, sys, time
from simsched.engine import simulate
from simsched.machine import load_machine
start = time.perf_counter()
machine = load_machine(sys.argv[1])
built = time.perf_counter()
result = simulate(machine, sys.argv[2], f"uniform:n={sys.argv[3]},low_ns=50,high_ns=150", machine.cores,
                  keep_chunks=False)
ran = time.perf_counter()
print(machine.cores, built - start, ran - built, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, result.events,
      result.chunk_count, result.makespan_ns)
"""


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
    parser.add_argument("--no-largest", action="store_true", help="leave out the 16,384-thread loops")
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
    if not args.no_largest:
        root = Path(__file__).resolve().parent.parent
        for scheduler in LARGEST_LOOPS:
            out = subprocess.run([sys.executable, "-c", LARGEST_RUN, LARGEST, scheduler, str(LARGEST_ITERATIONS)],
                                 cwd=root, capture_output=True, text=True, check=True).stdout.split()
            cores, built, ran, mib, events, chunks, makespan = map(float, out)
            print(f"{scheduler:<12} {cores:.0f} threads, {LARGEST_ITERATIONS} iterations on {LARGEST}: {ran:7.2f} s, "
                  f"peak {mib:,.0f} MiB (targets < 30 s, < 2048 MiB; machine built in {built:.2f} s)  "
                  f"{events:.0f} events, {chunks:.0f} chunks, makespan {makespan / 1e6:.3f} ms")


if __name__ == "__main__":
    main()
