"""Large program traces: a 1,000-loop x 100,000-iteration trace simulated in memory that follows its largest loop.

Run:  python benchmarks/bench_program.py [--loops 1000] [--iterations 100000] [--threads 16]
Writes the trace (and one 10x smaller per loop) to a temporary folder, then simulates each under
omp-dynamic and omp-static without a chunk table, each run in a fresh process so that its peak
RSS is its own. The smaller program runs with a 10x smaller dynamic chunk: the same chunks,
10x fewer iterations, and the same events. Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

MACHINE = "xeon-e7-4860v2"


def write(path: Path, loops: int, iterations: int) -> float:
    """Write a trace of ``loops`` loops of ``iterations`` uneven costs each (one loop in memory at a time)."""
    from simsched.workloads.trace import write_trace

    rng = np.random.default_rng(1)
    start = time.perf_counter()
    write_trace(path, (rng.exponential(500.0, iterations) for _ in range(loops)),
                serial_ns=np.full(loops, 2000.0), metadata={"source": "bench_program"})
    return time.perf_counter() - start


def measure(path: str, scheduler: str, threads: int) -> dict:
    """One run, in this process: wall time, peak RSS, events and chunks."""
    import simsched

    start = time.perf_counter()
    result = simsched.simulate_program(MACHINE, scheduler, f"trace:path={path}", threads, keep_chunks=False)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    return {"wall_s": wall, "peak_rss_mib": peak, "events": result.events, "chunks": result.chunk_count,
            "loops": len(result.loop_ns)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loops", type=int, default=1000)
    parser.add_argument("--iterations", type=int, default=100_000)
    parser.add_argument("--threads", type=int, default=16)
    parser.add_argument("--measure", nargs=2, metavar=("TRACE", "SCHEDULER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure(*args.measure, args.threads)))
        return
    print(f"machine {MACHINE}, {args.threads} threads, no chunk table; each run in a fresh process")
    print(f"{'program':>22} {'scheduler':>22} {'wall s':>7} {'peak RSS MiB':>13} {'events':>9} {'chunks':>8} "
          f"{'events/chunk':>13}")
    with tempfile.TemporaryDirectory() as folder:
        for scale in (1, 10):
            iterations = args.iterations // scale
            chunk = max(1, 1000 // scale)
            path = Path(folder) / f"program-{scale}.parquet"
            seconds = write(path, args.loops, iterations)
            label = f"{args.loops} x {iterations}"
            print(f"{label:>22}   trace written in {seconds:.1f} s, {path.stat().st_size / 2**20:.0f} MiB")
            for scheduler in (f"omp-dynamic:chunk={chunk}", "omp-static"):
                proc = subprocess.run([sys.executable, __file__, "--measure", str(path), scheduler,
                                       "--threads", str(args.threads)], capture_output=True, text=True)
                if proc.returncode:
                    sys.exit(proc.stderr)
                m = json.loads(proc.stdout)
                print(f"{label:>22} {scheduler:>22} {m['wall_s']:7.1f} {m['peak_rss_mib']:13.0f} "
                      f"{m['events']:9d} {m['chunks']:8d} {m['events'] / m['chunks']:13.2f}")
            path.unlink()


if __name__ == "__main__":
    main()
