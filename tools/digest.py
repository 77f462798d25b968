"""A digest of 840 small simulations, to show a change leaves every simulated result bit-identical.

Run:  python tools/digest.py        (prints runs, failures and the sha256; about a minute)
Every registered scheduler (sorted by name) x 7 workloads x 3 thread counts on haswell-e5-2695v3,
seed 3: each run's makespan (repr), counters and event count go into one sha256. Run it before and
after a change (e.g. in two virtual environments, or a checkout of each commit): equal digests mean
the 840 runs are identical, event numbers and tie order included.
"""

from __future__ import annotations

import hashlib
import json

from simsched.engine import simulate
from simsched.schedulers import REGISTRY

MACHINE = "haswell-e5-2695v3"
WORKLOADS = ("uniform:n=500", "exp-dec:n=500", "exp-inc:n=500", "normal:n=500", "linear:n=500",
             "uforall:n=64,cost_ns=2000", "spmv:rows=400,iters=1")
THREADS = (2, 7, 16)


def digest() -> tuple[int, int, str]:
    """(runs, runs that raised, sha256 hex) over every scheduler x workload x thread count."""
    h = hashlib.sha256()
    runs = failed = 0
    for name in sorted(REGISTRY):
        for workload in WORKLOADS:
            for threads in THREADS:
                runs += 1
                try:
                    r = simulate(MACHINE, name, workload, threads, seed=3, keep_chunks=False)
                    row = [name, workload, threads, repr(r.makespan_ns), sorted(r.counters.items()), r.events]
                except Exception as exc:  # a refusal is part of the behaviour being compared
                    failed += 1
                    row = [name, workload, threads, type(exc).__name__, str(exc)]
                h.update(json.dumps(row, default=str).encode())
    return runs, failed, h.hexdigest()


if __name__ == "__main__":
    runs, failed, hexdigest = digest()
    print(runs, failed, hexdigest)
