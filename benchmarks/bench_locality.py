"""Locality model speed: the E3 sweep's wall time, and events and time per chunk as iterations grow 100x.

Run:  python benchmarks/bench_locality.py [--jobs 2] [--skip-sweep]
Prints each figure; nothing here is a pass/fail test (these machines are noisy).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import simsched
from simsched.sweep import load_experiment, run_sweep

ROOT = Path(__file__).resolve().parent.parent


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
    args = parser.parse_args()
    print("events and wall time per chunk, omp-dynamic, 32 threads, 5 loops, same chunk count:")
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
