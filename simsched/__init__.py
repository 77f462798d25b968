"""simsched: discrete-event simulation of parallel-loop schedulers on modeled many-core machines."""

from __future__ import annotations

import importlib

from .errors import ExecutionError, SimschedError

__version__ = "0.1.0"

# The rest is imported on first use (PEP 562), so that the command line starts without
# loading NumPy, SimPy and the schedulers before it knows it needs them.
_LAZY = {
    "Loop": "loop", "Simulation": "engine", "simulate": "engine", "simulate_program": "engine",
    "Machine": "machine", "builtin_machines": "machine", "load_machine": "machine",
    "Result": "result", "get_scheduler": "schedulers", "get_workload": "workloads",
}

__all__ = [
    "ExecutionError", "Loop", "Machine", "Result", "SimschedError", "Simulation",
    "builtin_machines", "get_scheduler", "get_workload", "load_machine", "simulate",
    "simulate_program",
]


def __getattr__(name: str):
    if name in _LAZY:
        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
