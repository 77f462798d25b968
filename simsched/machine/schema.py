"""The machine-file schema: the sections and keys a machine file may hold, their defaults, and its checks."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..errors import SimschedError
from ..hierarchy import MAX_VALUE
from ..noise import check_noise

# The schema every machine file is checked against: section -> key -> (type, required, check, rule).
_POSITIVE = (lambda v: v > 0, "> 0")
_NON_NEGATIVE = (lambda v: v >= 0, ">= 0")
_COUNT = (lambda v: v >= 1, ">= 1")


def _key(kind, required=True, check=_NON_NEGATIVE):
    return (kind, required, check)


SCHEMA: dict[str, dict[str, tuple]] = {
    "topology": {
        "sockets": _key(int, check=_COUNT),
        "cores_per_socket": _key(int, check=_COUNT),
        "threads_per_core": _key(int, False, _COUNT),
        "socket_links": _key((str, list), False, None),
        "core_layout": _key(str, False, None),
        # Nested groups of cores inside a socket, innermost first: {ccx = 4} for core complexes of 4 cores.
        "core_groups": _key(dict, False, None),
    },
    "clock": {
        "base_ghz": _key(float, check=_POSITIVE),
        "turbo_max_ghz": _key(float, False, _POSITIVE),
        "turbo_all_ghz": _key(float, False, _POSITIVE),
        "all_core_throughput": _key(float, False, (lambda v: 0 < v <= 1, "in (0, 1]")),
        # Each core's speed relative to the nominal core: one number per core, or [count, speed] runs.
        "core_speed": _key(list, False, None),
    },
    "latency_ns": {
        "smt": _key(float, False),
        "same_socket": _key(float, False),
        "ring_hop": _key(float, False),
        "socket_hop": _key(float, False),
        "transfer_fraction": _key(float, False, (lambda v: 0 < v <= 1, "in (0, 1]")),
        "matrix": _key(list, False, None),
    },
    "coherence": {
        "protocol": _key(str, False, None),  # snoop: spinners told at once; directory: one by one
        "serve_ns": _key(float, False),
        "atomics": _key(str, False, None),   # locked: requests queue for the line; reservation: LL/SC retries
        "hold": _key(str, False, None),      # request: a line stays with its last user until a request could
                                             # reach it; none: it leaves as the operation ends
    },
    "costs_ns": {
        "atomic": _key(float),
        "store": _key(float),
        "loop_setup": _key(float),
        "chunk": _key(float),
        "combine": _key(float),
        "spawn": _key(float, False),
        "steal": _key(float, False),
        "stack_switch": _key(float, False),
        "split": _key(float, False),
        "task_create": _key(float, False),
        "timer": _key(float, False),
    },
    "os": {
        "wakeup_ns": _key(float, False),
    },
    # The OpenMP runtime whose loop_setup and chunk [costs_ns] holds (native calibrate --openmp), as measured.
    "openmp": {
        "runtime": _key(str, check=None),
        "path": _key(str, False, None),
        "version": _key(str, False, None),
        "profile": _key(str, False, None),
        "threads": _key(int, check=_COUNT),
        "chunk_ns": _key(float),
        "loop_setup_ns": _key(float),
        "contended_chunk_ns": _key(float, False),
        "loop_iterations": _key(int, False, _COUNT),
        "static_loop_ns": _key(float, False),
        "dynamic64_loop_ns": _key(float, False),
        "guided_loop_ns": _key(float, False),
    },
    "memory_ns": {
        "l1": _key(float, False),
        "l2": _key(float, False),
        "l3": _key(float, False),
        "dram_local": _key(float, False),
        "l3_remote": _key(float, False),
        "dram_remote": _key(float, False),
        "dma_local_store": _key(float, False),
        "dma_memory": _key(float, False),
        "mmio": _key(float, False),
    },
}
_TOP_LEVEL = {"name": str, "description": str}
ATOMICS = ("locked", "reservation")
# [openmp] runtime: the OpenMP runtimes native calibrate --openmp measures (by the start of their library's
# file name), and the omp schedulers' runtime= profile that models each.
OPENMP_RUNTIMES = {"libiomp5": "llvm", "libomp": "llvm", "libgomp": "gnu"}
HOLDS = ("request", "none")
# The memory hierarchy ([cache.l1], [cache.l2], ..., [dram]): nested tables, checked in hierarchy.py.
_HIERARCHY_SECTIONS = ("cache", "dram")
# OS noise and late arrival ([noise]): checked in noise.py.
_NOISE_SECTION = "noise"
MAX_CORES = 16384
_REQUIRED_SECTIONS = ("topology", "clock", "latency_ns", "costs_ns")
# What a machine file that leaves out [coherence] or [os] (or one of their keys) gets: shown
# as "(default)" by ``simsched machines NAME``, so a what-if machine states only what it changes.
DEFAULTS: dict[str, dict[str, Any]] = {
    "coherence": {"protocol": "snoop", "serve_ns": 0.0, "atomics": "locked"},
    "os": {"wakeup_ns": 0.0},
}


def _validate(data: dict[str, Any], source: str) -> None:
    if not isinstance(data, dict):
        raise SimschedError(f"{source}: a machine file must be a TOML table")
    for key, value in data.items():
        if key.startswith("_"):
            continue
        if key in _TOP_LEVEL:
            if not isinstance(value, _TOP_LEVEL[key]):
                raise SimschedError(f"{source}: key {key} must be a string")
            continue
        if key not in SCHEMA and key not in _HIERARCHY_SECTIONS and key != _NOISE_SECTION:
            raise SimschedError(f"{source}: unknown section or key {key!r}")
        if not isinstance(value, dict):
            raise SimschedError(f"{source}: {key} must be a table")
    for section in _REQUIRED_SECTIONS:
        if section not in data:
            raise SimschedError(f"{source}: missing section [{section}]")
    for section, table in data.items():
        if section not in SCHEMA:  # the hierarchy sections are checked by Hierarchy
            continue
        for key in table:
            if key not in SCHEMA[section] and not (section == "latency_ns" and key in _group_names(data)):
                raise SimschedError(f"{source}: unknown key {section}.{key}")
        for key, (kind, required, check) in SCHEMA[section].items():
            where = f"{section}.{key}"
            if key not in table:
                if required:
                    raise SimschedError(f"{source}: missing key {where}")
                continue
            value = table[key]
            if kind is float:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise SimschedError(f"{source}: {where} must be a number, got {value!r}")
                if not math.isfinite(value) or abs(value) > MAX_VALUE:
                    raise SimschedError(f"{source}: {where} must be a finite number up to {MAX_VALUE:g}, "
                                        f"got {value!r}")
            elif kind is int:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise SimschedError(f"{source}: {where} must be an integer, got {value!r}")
            elif not isinstance(value, kind):
                raise SimschedError(f"{source}: {where} has the wrong type ({type(value).__name__})")
            if check is not None and not check[0](value):
                raise SimschedError(f"{source}: {where} must be {check[1]}, got {value!r}")
    topo = data["topology"]
    if topo["sockets"] * topo["cores_per_socket"] > MAX_CORES:
        raise SimschedError(f"{source}: topology has {topo['sockets'] * topo['cores_per_socket']} cores; "
                            f"at most {MAX_CORES} are supported")
    layout = topo.get("core_layout", "crossbar")
    if layout not in ("crossbar", "ring"):
        raise SimschedError(f"{source}: topology.core_layout must be crossbar or ring, got {layout!r}")
    protocol = data.get("coherence", {}).get("protocol", DEFAULTS["coherence"]["protocol"])
    if protocol not in ("snoop", "directory"):
        raise SimschedError(f"{source}: coherence.protocol must be snoop or directory, got {protocol!r}")
    atomics = data.get("coherence", {}).get("atomics", DEFAULTS["coherence"]["atomics"])
    if atomics not in ATOMICS:
        raise SimschedError(f"{source}: coherence.atomics must be {' or '.join(ATOMICS)}, got {atomics!r}")
    hold = data.get("coherence", {}).get("hold", HOLDS[0])
    if hold not in HOLDS:
        raise SimschedError(f"{source}: coherence.hold must be {' or '.join(HOLDS)}, got {hold!r}")
    if "openmp" in data:
        _validate_openmp(data["openmp"], source)
    lat = data["latency_ns"]
    if _NOISE_SECTION in data:
        check_noise(data[_NOISE_SECTION], topo["sockets"] * topo["cores_per_socket"], source)
    _validate_groups(data, source)
    if "core_speed" in data["clock"]:
        core_speeds(data["clock"]["core_speed"], topo["sockets"] * topo["cores_per_socket"], source)
    if "matrix" not in lat:
        needed = "ring_hop" if layout == "ring" else "same_socket"
        if topo["cores_per_socket"] > 1 and needed not in lat:
            raise SimschedError(f"{source}: missing key latency_ns.{needed}")
        if topo["sockets"] > 1 and "socket_hop" not in lat:
            raise SimschedError(f"{source}: missing key latency_ns.socket_hop")
    clock = data["clock"]
    if "turbo_all_ghz" in clock and clock["turbo_all_ghz"] > clock.get("turbo_max_ghz", math.inf):
        raise SimschedError(f"{source}: clock.turbo_all_ghz must not exceed clock.turbo_max_ghz")


def _validate_openmp(table: dict[str, Any], source: str) -> None:
    runtime = table["runtime"]
    if runtime not in OPENMP_RUNTIMES:
        raise SimschedError(f"{source}: openmp.runtime must be {', '.join(OPENMP_RUNTIMES)}, got {runtime!r}")
    profiles = sorted(set(OPENMP_RUNTIMES.values()))
    if "profile" in table and table["profile"] not in profiles:
        raise SimschedError(f"{source}: openmp.profile must be {' or '.join(profiles)}, "
                            f"got {table['profile']!r}")
    loops = [key for key in ("static_loop_ns", "dynamic64_loop_ns", "guided_loop_ns") if key in table]
    if loops and "loop_iterations" not in table:
        raise SimschedError(f"{source}: openmp.{loops[0]} needs openmp.loop_iterations (its iterations)")


def _group_names(data: dict[str, Any]) -> list[str]:
    groups = data.get("topology", {}).get("core_groups")
    return list(groups) if isinstance(groups, dict) else []


def _validate_groups(data: dict[str, Any], source: str) -> None:
    """Core groups nest (each group's size divides the next and the socket) and each has a latency.

    A latency grows with the level that two cores first share, so that the groups are a
    tree of latencies: the innermost group's at most the next one's, at most ``same_socket``.
    """
    topo, lat = data["topology"], data["latency_ns"]
    groups = topo.get("core_groups", {})
    if not groups:
        return
    if topo.get("core_layout", "crossbar") != "crossbar":
        raise SimschedError(f"{source}: topology.core_groups needs core_layout = \"crossbar\"")
    inner, below = 1, 0.0
    for name, cores in groups.items():
        where = f"topology.core_groups.{name}"
        if name in SCHEMA["latency_ns"] or not name.isidentifier():
            raise SimschedError(f"{source}: {where}: a group needs a name of its own (not {name!r})")
        if isinstance(cores, bool) or not isinstance(cores, int) or cores < 2:
            raise SimschedError(f"{source}: {where} must be an integer >= 2, got {cores!r}")
        if cores % inner or topo["cores_per_socket"] % cores:
            raise SimschedError(f"{source}: {where} = {cores} must be a multiple of the group inside it ({inner}) "
                                f"and divide topology.cores_per_socket ({topo['cores_per_socket']})")
        inner = cores
        if "matrix" in lat:
            continue
        latency = lat.get(name)
        if isinstance(latency, bool) or not isinstance(latency, (int, float)) or not 0 <= latency <= MAX_VALUE:
            raise SimschedError(f"{source}: latency_ns.{name} (one-way latency within a {name}) must be a number "
                                f">= 0, got {latency!r}")
        if latency < below:
            raise SimschedError(f"{source}: latency_ns.{name} = {latency} is below the latency of the group "
                                f"inside it ({below}): latencies must grow outward")
        below = latency
    if "matrix" not in lat and lat.get("same_socket", below) < below:
        raise SimschedError(f"{source}: latency_ns.same_socket = {lat['same_socket']} is below latency_ns."
                            f"{name} ({below}): latencies must grow outward")


def core_speeds(value: list, cores: int, source: str = "machine") -> np.ndarray:
    """``clock.core_speed`` as one speed per core: a list of ``cores`` numbers, or ``[count, speed]`` runs."""
    where = f"{source}: clock.core_speed"
    runs = value and all(isinstance(item, list) for item in value)
    if runs:
        if not all(len(item) == 2 and isinstance(item[0], int) and not isinstance(item[0], bool) and item[0] >= 1
                   for item in value):
            raise SimschedError(f"{where}: runs must be [count, speed] pairs with count >= 1")
        if sum(item[0] for item in value) != cores:
            raise SimschedError(f"{where}: the runs cover {sum(item[0] for item in value)} cores; "
                                f"the machine has {cores}")
        speeds = [item[1] for item in value for _ in range(item[0])]
    else:
        if len(value) != cores:
            raise SimschedError(f"{where}: {len(value)} speeds given for {cores} cores (give one per core, "
                                "or [count, speed] runs)")
        speeds = value
    for speed in speeds:
        if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed) or speed <= 0:
            raise SimschedError(f"{where}: speeds must be numbers > 0, got {speed!r}")
    return np.asarray(speeds, dtype=float)
