"""The grid of an experiment: its axes, ranges and thread shares expanded into resolved run points."""

from __future__ import annotations

import itertools
import math
import re
from typing import Any

import numpy as np

from .errors import SimschedError
from .spec import format_spec, parse_spec

AXES = ("machine", "scheduler", "threads", "workload", "seed", "repeat")

# A grid is counted before it is built, so a mistyped size (num = 100000000) is one line, not a full memory.
MAX_GRID_POINTS = 1_000_000
_TOGETHER = "together"
_FRACTION = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")
_THREADS_FORMS = 'integers >= 1, "all" or fractions of the machine\'s cores such as "1/2"'


def _range(where: str, value: dict[str, Any]) -> tuple[str, list[float], int, int]:
    """A range table's kind (logspace or linspace), bounds, number of values and significant digits, checked."""
    unknown = set(value) - {"logspace", "linspace", "num", "round"}
    if unknown:
        raise SimschedError(f"{where}: unknown key {sorted(unknown)[0]!r} (use logspace or linspace, num)")
    kinds = [k for k in ("logspace", "linspace") if k in value]
    if len(kinds) != 1:
        raise SimschedError(f"{where}: give exactly one of logspace = [a, b] or linspace = [a, b]")
    bounds = value[kinds[0]]
    num = value.get("num")
    if (not isinstance(bounds, list) or len(bounds) != 2
            or not all(isinstance(b, (int, float)) and not isinstance(b, bool) and math.isfinite(b)
                       for b in bounds)):
        raise SimschedError(f"{where}.{kinds[0]} must be two finite numbers [a, b]")
    if isinstance(num, bool) or not isinstance(num, int) or num < 1:
        raise SimschedError(f"{where}.num must be an integer >= 1")
    if num > MAX_GRID_POINTS:
        raise SimschedError(f"{where}.num = {num:,} is more than the {MAX_GRID_POINTS:,} values "
                            "a grid may have")
    if kinds[0] == "logspace" and min(bounds) <= 0:
        raise SimschedError(f"{where}.logspace bounds must be > 0")
    digits = value.get("round", 6)
    if isinstance(digits, bool) or not isinstance(digits, int) or not 1 <= digits <= 17:
        raise SimschedError(f"{where}.round must be an integer from 1 to 17 (significant digits)")
    return kinds[0], bounds, num, digits


def _axis_size(key: str, value: Any, source: str) -> int:
    """How many values one grid axis takes, checked and counted without building them."""
    if isinstance(value, dict):
        return _range(f"{source}: grid.{key}", value)[2]
    if isinstance(value, list):
        if not value:
            raise SimschedError(f"{source}: grid.{key} is an empty list")
        return len(value)
    return 1


def axis_values(key: str, value: Any, source: str) -> list[Any]:
    """The list of values one grid axis takes: a scalar, a list, or {logspace|linspace = [a, b], num = n}."""
    if isinstance(value, dict):
        kind, bounds, num, digits = _range(f"{source}: grid.{key}", value)
        if kind == "logspace":
            values = np.logspace(math.log10(bounds[0]), math.log10(bounds[1]), num)
        else:
            values = np.linspace(bounds[0], bounds[1], num)
        return [float(f"{v:.{digits}g}") for v in values]
    if isinstance(value, list):
        if not value:
            raise SimschedError(f"{source}: grid.{key} is an empty list")
        return list(value)
    return [value]


def _together(value: Any, sizes: dict[str, int], source: str) -> list[tuple[str, ...]]:
    """The groups of grid.together: each two or more axes of as many values, taken in step, not combined."""
    where = f"{source}: grid.{_TOGETHER}"
    if not isinstance(value, list) or not value or not all(isinstance(group, list) for group in value):
        raise SimschedError(f'{where} must be a list of groups of axis names, e.g. [["machine", "threads"]]')
    grouped: set[str] = set()
    for group in value:
        if len(group) < 2 or not all(isinstance(name, str) for name in group):
            raise SimschedError(f"{where}: each group names two or more axes, got {group!r}")
        for name in group:
            if name not in sizes:
                raise SimschedError(f"{where}: {name!r} is not an axis of the grid "
                                    f"(its axes: {', '.join(sizes)})")
            if name in grouped:
                raise SimschedError(f"{where}: axis {name} is named more than once")
            grouped.add(name)
    for group in value:
        if len({sizes[name] for name in group}) > 1:
            counts = ", ".join(f"{name} has {sizes[name]}" for name in group)
            raise SimschedError(f"{where}: axes that vary together need as many values each ({counts})")
    return [tuple(group) for group in value]


def _check_threads(value: Any, source: str) -> None:
    """Refuse a grid.threads value that is neither a count >= 1, "all", nor a fraction a/b in (0, 1]."""
    if isinstance(value, str):
        if value == "all":
            return
        match = _FRACTION.fullmatch(value)
        if match is None:
            raise SimschedError(f"{source}: grid.threads values must be {_THREADS_FORMS}, got {value!r}")
        part, whole = map(int, match.groups())
        if not 0 < part <= whole:
            raise SimschedError(f"{source}: grid.threads = {value!r}: a fraction of the machine's cores "
                                "must be more than 0 and at most 1")
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise SimschedError(f"{source}: grid.threads values must be {_THREADS_FORMS}, got {value!r}")
    if value < 1:
        raise SimschedError(f"{source}: grid.threads values must be >= 1, got {value}")


def share_of_cores(threads: str, cores: int) -> int:
    """The count "all" or "a/b" stands for on a machine of ``cores`` cores: a/b of them, rounded down, >= 1."""
    if threads == "all":
        return cores
    part, whole = map(int, _FRACTION.fullmatch(threads).groups())
    return max(1, cores * part // whole)


def expand_grid(grid: dict[str, Any], source: str = "<config>", settings: list[str] | tuple[str, ...] = ()
                ) -> list[dict[str, Any]]:
    """All combinations of the grid's axes, as resolved run configs (spec strings carry their parameters).

    Axes grouped in ``together`` take their values in step rather than in every combination;
    thread counts "all" and "a/b" become counts of each point's machine's cores; ``settings``
    (``--set``) change every machine before that.
    """
    for required in ("machine", "scheduler", "threads", "workload"):
        if required not in grid:
            raise SimschedError(f"{source}: missing key grid.{required}")
    sizes: dict[str, int] = {}
    for key, value in grid.items():
        base, dot, param = key.partition(".")
        if key == _TOGETHER:
            continue
        if dot:
            if base not in ("scheduler", "workload") or not param:
                raise SimschedError(f"{source}: unknown key grid.{key} (parameter axes are scheduler.X or workload.X)")
        elif key not in AXES:
            raise SimschedError(f"{source}: unknown key grid.{key} (known: {', '.join(AXES)}, {_TOGETHER})")
        sizes[key] = _axis_size(key, value, source)
    groups = _together(grid[_TOGETHER], sizes, source) if _TOGETHER in grid else []
    params = [key for key in sizes if key not in AXES]
    # Rows keep the order they always had: plain axes as given, the default seed and repeat, then parameters.
    names = [key for key in sizes if key in AXES] + [k for k in ("seed", "repeat") if k not in sizes] + params
    group_of = {name: group for group in groups for name in group}
    slots = list(dict.fromkeys(group_of.get(name, (name,)) for name in names))
    count = math.prod(sizes.get(slot[0], 1) for slot in slots)
    if count > MAX_GRID_POINTS:
        factors = " x ".join(f"{sizes.get(slot[0], 1):,} {'/'.join(slot)}" for slot in slots
                             if sizes.get(slot[0], 1) > 1)
        raise SimschedError(f"{source}: the grid has {count:,} points ({factors}), more than the limit of "
                            f"{MAX_GRID_POINTS:,}; split it into several experiments")
    values = {key: axis_values(key, grid[key], source) for key in sizes}
    values.setdefault("seed", [0])
    values.setdefault("repeat", [1])
    for v in values["threads"]:
        _check_threads(v, source)
    for key, least in (("seed", 0), ("repeat", 1)):
        for v in values[key]:
            if isinstance(v, bool) or not isinstance(v, int):
                raise SimschedError(f"{source}: grid.{key} values must be integers, got {v!r}")
            if v < least:
                raise SimschedError(f"{source}: grid.{key} values must be >= {least}, got {v}")
    for key in ("machine", "scheduler", "workload"):
        for v in values[key]:
            if not isinstance(v, str):
                raise SimschedError(f"{source}: grid.{key} values must be strings, got {v!r}")
    if settings:
        from .machine import with_settings

        values["machine"] = [with_settings(machine, list(settings)) for machine in values["machine"]]
    order = [name for slot in slots for name in slot]
    pools = [list(zip(*(values[name] for name in slot))) for slot in slots]
    points = []
    for combo in itertools.product(*pools):
        point = dict(zip(order, itertools.chain.from_iterable(combo)))
        for key in params:
            base, _, param = key.partition(".")
            name, spec_params = parse_spec(point[base], base)
            spec_params[param] = point.pop(key)
            point[base] = format_spec(name, spec_params)
        points.append({k: point[k] for k in AXES})
    _check_unique(points, source)
    _check_specs(points, source)
    return _resolve_threads(points, source)


def _resolve_threads(points: list[dict[str, Any]], source: str) -> list[dict[str, Any]]:
    """The points with "all" and "a/b" as counts of their machines' cores, after checking each count fits.

    Two shares can come to the same count on a small machine (1/2 and all of one core): that run is kept once.
    """
    from .machine import load_machine

    machines: dict[str, Any] = {}
    counts: dict[tuple[str, Any], int] = {}
    for key in dict.fromkeys((point["machine"], point["threads"]) for point in points):
        name, threads = key
        if name not in machines:
            machines[name] = load_machine(name)
        machine = machines[name]
        if isinstance(threads, str):
            counts[key] = share_of_cores(threads, machine.cores)
        elif threads > machine.cores:
            raise SimschedError(f"{source}: grid.threads: {threads} threads on machine {machine.name}, which "
                                f"has {machine.cores} cores (give counts per machine as \"all\", fractions "
                                "such as \"1/2\", or together = [[\"machine\", \"threads\"]])")
    if not counts:
        return points
    resolved: dict[tuple, dict[str, Any]] = {}
    for point in points:
        point = {**point, "threads": counts.get((point["machine"], point["threads"]), point["threads"])}
        resolved.setdefault(tuple(point[k] for k in AXES), point)
    return list(resolved.values())


def _check_unique(points: list[dict[str, Any]], source: str) -> None:
    """Refuse a grid that lists one run twice (e.g. a repeated seed): results are keyed by point."""
    seen = set()
    for point in points:
        key = tuple(point[k] for k in AXES)
        if key in seen:
            described = ", ".join(f"{k}={point[k]}" for k in AXES)
            raise SimschedError(f"{source}: the grid lists the same run twice ({described})")
        seen.add(key)


def _check_specs(points, source):
    """Reject unknown schedulers, workloads, machines and parameters before anything runs."""
    from .machine import load_machine
    from .schedulers import get_scheduler
    from .workloads import get_workload

    seen: set[tuple[str, str]] = set()
    for point in points:
        for kind, build in (("machine", load_machine), ("scheduler", get_scheduler), ("workload", get_workload)):
            key = (kind, point[kind])
            if key in seen:
                continue
            seen.add(key)
            try:
                build(point[kind])
            except SimschedError as exc:
                raise SimschedError(f"{source}: grid.{kind}: {exc}") from None
