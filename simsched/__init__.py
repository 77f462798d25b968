"""simsched: discrete-event simulation of parallel-loop schedulers on modeled many-core machines."""

from .engine import Loop, Simulation, simulate, simulate_program
from .errors import ExecutionError, SimschedError
from .machine import Machine, builtin_machines, load_machine
from .result import Result
from .schedulers import get_scheduler
from .workloads import get_workload

__version__ = "0.1.0"

__all__ = [
    "ExecutionError", "Loop", "Machine", "Result", "SimschedError", "Simulation",
    "builtin_machines", "get_scheduler", "get_workload", "load_machine", "simulate",
    "simulate_program",
]
