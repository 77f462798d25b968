"""Native mode: the scheduler algorithms on pinned threads of this machine (a C extension, optional).

``run`` executes a loop program on real threads and returns a :class:`~simsched.result.Result`
of the same shape as a simulated one; ``calibrate`` measures this machine into a machine
file the simulator can load. Without the compiled extension the simulator works as
before and every native entry point says, in one line, that native mode is not built.
"""

from __future__ import annotations

from .extension import DEFAULT_TIMEOUT_S, INT32, MAX_REPEAT, available, check_threads, cores, require
from .extension import _native as _native  # the compiled module, or None where it was not built
from .memkernel import CHUNK_BYTES, ITERATION_BYTES, MAX_ARRAYS_BYTES, check_memory, kernel
from .pinned_runs import chunk_tables, execute, replay, run
from .run_result import ZERO_NATIVELY, report, simulated_counter_keys, simulator_counters, summary
from .shares import (NATIVE, NEVER_SLEEPS, SPLIT_TO_CHUNK, TABLE_HOOKS, as_run_natively, expected_chunks,
                     native_config, native_entry)

__all__ = [
    "CHUNK_BYTES", "DEFAULT_TIMEOUT_S", "INT32", "ITERATION_BYTES", "MAX_ARRAYS_BYTES", "MAX_REPEAT",
    "NATIVE", "NEVER_SLEEPS", "SPLIT_TO_CHUNK", "TABLE_HOOKS", "ZERO_NATIVELY", "as_run_natively",
    "available", "check_memory", "check_threads", "chunk_tables", "cores", "execute", "expected_chunks",
    "kernel", "native_config", "native_entry", "replay", "report", "require", "run", "simulated_counter_keys",
    "simulator_counters", "summary",
]
