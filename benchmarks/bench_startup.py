"""Command-line start-up: median wall time of `simsched --help` and a small `simsched run`, next to `python -c pass`.

Also `simsched machines` building and describing a 1,024-core machine (16 EPYC sockets).

Run:  python benchmarks/bench_startup.py [--runs 10]
Each command runs in a fresh interpreter, as a user starts it. Byte code is cached in a
temporary folder (an installed package has its .pyc files), and a first run of each command
fills that cache before the timed runs. Targets: --help under 0.25 s, the run and the 1,024-core machine under 0.5 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = {
    "python -c pass": ["-c", "pass"],
    "simsched --help": ["-m", "simsched.cli", "--help"],
    "simsched run (small)": ["-m", "simsched.cli", "run", "--machine", "xeon-e7-4860v2", "--scheduler", "fg-tree",
                             "--threads", "4", "--workload", "uforall:n=100"],
    "simsched machines (1024 cores)": ["-m", "simsched.cli", "machines", "scaled:base=epyc-7742-2s,sockets=16"],
}
TARGETS = {"simsched --help": 0.25, "simsched run (small)": 0.5, "simsched machines (1024 cores)": 0.5}


def wall(args: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, *args], env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="timed runs per command (median)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cache:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PYTHONPYCACHEPREFIX=cache, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT),
                                                                                     env.get("PYTHONPATH")])))
        for command in COMMANDS.values():
            wall(command, env)
        # Interleaved, so that a noisy moment on a shared machine touches every command alike.
        times: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for _ in range(args.runs):
            for name, command in COMMANDS.items():
                times[name].append(wall(command, env))
    for name, samples in times.items():
        median = statistics.median(samples)
        target = f"  (target < {TARGETS[name]:.2f} s)" if name in TARGETS else ""
        print(f"{name:<22} median {median:6.3f} s  min {min(samples):6.3f}  max {max(samples):6.3f}"
              f"  over {len(samples)} runs{target}")


if __name__ == "__main__":
    main()
