"""A machine model: cores, their topology and latencies, and documented software costs, loaded from TOML."""

from .files import _machine_files as _machine_files
from .files import builtin_machine_bytes, builtin_machines, value_sources
from .loading import SCALED, SCALED_PARAMS, UNIFORM, UNIFORM_PARAMS, scaled_machine, uniform_machine
from .loading import load_machine, machine_files, register_machine
from .model import Machine
from .overrides import format_setting, parse_settings, setting_at, with_settings
from .schema import _TOP_LEVEL as _TOP_LEVEL
from .schema import ATOMICS, DEFAULTS, HOLDS, MAX_CORES, OPENMP_RUNTIMES, SCHEMA, core_speeds
from .topology import Topology

__all__ = [
    "SCHEMA", "ATOMICS", "OPENMP_RUNTIMES", "HOLDS", "MAX_CORES", "DEFAULTS",
    "Machine", "core_speeds", "Topology",
    "builtin_machine_bytes", "value_sources", "builtin_machines", "register_machine",
    "UNIFORM", "UNIFORM_PARAMS", "uniform_machine", "SCALED", "SCALED_PARAMS", "scaled_machine",
    "parse_settings", "with_settings", "format_setting", "setting_at",
    "machine_files", "load_machine",
]
