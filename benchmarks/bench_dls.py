"""Events per chunk of every self-scheduling technique at two loop sizes: none may grow with iterations.

Run:  python benchmarks/bench_dls.py [--n 100000] [--threads 16] [--schedulers a,b,...]
Each technique runs a normal(10 us, 3 us) loop of N and of 10 N iterations on the uniform machine,
without a chunk table. A technique whose events grew with iterations would show events per chunk
rising about tenfold; one that stays O(chunks) shows the same events per chunk at both sizes
(its chunk count may grow, as a fixed chunk's does). Also printed: simulated chunks per second of
wall time. Nothing here is a pass/fail test (these machines are noisy).
"""

from __future__ import annotations

import argparse
import time

import simsched
from simsched.schedulers import REGISTRY

MACHINE = "uniform:cores=48"
# The modules of the self-scheduling family and of the stealing schedulers it is compared with.
FAMILY_MODULES = ("static", "selfsched", "dls", "adaptive", "staticsteal", "tbb", "binlpt", "ich", "stealing")


def family() -> list[str]:
    """Every registered scheduler of those modules, in registry order."""
    return [name for name, cls in REGISTRY.items() if cls.__module__.rsplit(".", 1)[-1] in FAMILY_MODULES]


def measure(scheduler: str, n: int, threads: int) -> tuple[int, int, float]:
    """(events, chunks, wall s) of one run."""
    start = time.perf_counter()
    result = simsched.simulate(MACHINE, scheduler, f"normal:n={n},mean_ns=10000,std_ns=3000", threads,
                               keep_chunks=False)
    return result.events, result.chunk_count, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--schedulers", help="comma-separated scheduler names (default: the whole family)")
    args = parser.parse_args()
    names = args.schedulers.split(",") if args.schedulers else family()
    small, large = args.n, 10 * args.n
    print(f"machine {MACHINE}, {args.threads} threads, normal(10 us, 3 us) loops of {small} and {large} iterations")
    print(f"{'scheduler':<22} {'chunks':>9} {'events':>9} {'ev/chunk':>9} | {'chunks':>9} {'events':>9} "
          f"{'ev/chunk':>9} {'growth':>7} {'chunks/s':>9}")
    worst = 0.0
    for name in names:
        e1, c1, _ = measure(name, small, args.threads)
        e2, c2, wall = measure(name, large, args.threads)
        growth = (e2 / c2) / (e1 / c1)
        worst = max(worst, growth)
        print(f"{name:<22} {c1:>9} {e1:>9} {e1 / c1:>9.2f} | {c2:>9} {e2:>9} {e2 / c2:>9.2f} {growth:>7.2f} "
              f"{c2 / wall:>9.0f}")
    print(f"largest growth of events per chunk from {small} to {large} iterations: {worst:.2f}x "
          f"(about 10x would mean events per iteration)")


if __name__ == "__main__":
    main()
