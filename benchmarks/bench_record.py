"""Recording overhead: what a chunk costs on the OMPT runtime with simsched's tool loaded and without it.

Run:  python benchmarks/bench_record.py [--threads 2] [--rounds 5] [--runtime PATH]
The probe (simsched/native/omp_record_probe.c) runs a schedule(runtime) loop of empty iterations under
OMP_SCHEDULE=static,1, timed by the program itself; rounds alternate the tool off and on, and each round's
figures come from one run of each, so a busy host slows both alike. Prints the runtime's ns per chunk, the
tool's ns per chunk over it (the median of the rounds' differences), and the span an empty chunk shows in the
recording (what the recorder takes off every chunk). Nothing here is a pass/fail test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from simsched.native import ompt
from simsched.native.user_program import probe_runtime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runtime", help="libiomp5.so or libomp.so.5 (default: the first found)")
    args = parser.parse_args()
    runtime = ompt.find_runtime(args.runtime)
    print(f"runtime {runtime.label} at {runtime.path}; {args.threads} threads; load average "
          f"{os.getloadavg()[0]:.2f} at the start")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        shim = ompt.shim_folder(runtime, Path(folder))
        for r in range(args.rounds):
            probe = probe_runtime(runtime, shim, args.threads, Path(folder), timeout_s=120.0)
            rows.append(probe)
            print(f"round {r + 1}: runtime {probe.runtime_ns_per_chunk:6.1f} ns a chunk, tool +"
                  f"{probe.tool_ns_per_chunk:6.1f} ns, empty chunk in the recording {probe.empty_chunk_ns:6.1f} ns")
    print(f"median of {args.rounds} rounds: runtime {statistics.median(p.runtime_ns_per_chunk for p in rows):.1f} "
          f"ns a chunk; the tool adds {statistics.median(p.tool_ns_per_chunk for p in rows):.1f} ns; an empty "
          f"chunk spans {statistics.median(p.empty_chunk_ns for p in rows):.1f} ns in a recording; load average "
          f"{os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
