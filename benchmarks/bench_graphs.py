"""Graph workload speed: building and simulating BFS over a 10^6-vertex scale-free graph (gamma 2.3).

Run:  python benchmarks/bench_graphs.py [--n 1000000] [--scheduler omp-dynamic] [--seed 0]
Prints each figure (target: build and simulation under 60 s in all on a 2-core machine); nothing
here is a pass/fail test (these machines are noisy).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import simsched
from simsched.workloads import get_workload
from simsched.workloads.graphs import build_graph

MACHINE, THREADS = "haswell-e5-2695v3", 28


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000, help="vertices")
    parser.add_argument("--scheduler", default="omp-dynamic")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    spec = f"bfs:graph=scale-free,n={args.n},gamma=2.3"
    workload = get_workload(spec)

    start = time.perf_counter()
    graph = build_graph({"graph": "scale-free", "n": args.n, "gamma": 2.3}, np.random.default_rng(args.seed))
    graph_s = time.perf_counter() - start
    start = time.perf_counter()
    loops = workload.loops(np.random.default_rng(args.seed))  # the graph again, then its levels
    program_s = time.perf_counter() - start
    print(f"{spec}: {graph.shape[0]} vertices, {graph.nnz // 2} edges, max degree {np.diff(graph.indptr).max()}")
    print(f"graph build {graph_s:.1f} s; graph and BFS levels {program_s:.1f} s: {len(loops)} levels, "
          f"{sum(loop.n for loop in loops)} vertices reached")

    start = time.perf_counter()
    result = simsched.simulate(MACHINE, args.scheduler, spec, THREADS, seed=args.seed, keep_chunks=False)
    total_s = time.perf_counter() - start
    print(f"{args.scheduler} on {MACHINE}, {THREADS} threads: build and simulate {total_s:.1f} s wall "
          f"(target: under 60 s), {result.chunk_count} chunks, {result.events} events, "
          f"{result.events / result.chunk_count:.2f} events per chunk, "
          f"{1e6 * (total_s - program_s) / result.chunk_count:.1f} us per chunk simulated, "
          f"speedup {result.speedup:.2f}")


if __name__ == "__main__":
    main()
