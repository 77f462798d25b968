"""Experiment sweeps: a TOML config expanded into a factorial grid of runs, run in parallel into a tidy table.

Each run records its resolved parameters, its outcome (or the error that stopped it)
and its wall time, so a failed point is a row like any other, not the end of the sweep.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import time
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from . import __version__
from .errors import Interrupted, SimschedError, parquet
from .signals import signals_held, signals_interrupt
from .spec import format_spec, parse_spec
from .store import point_id

AXES = ("machine", "scheduler", "threads", "workload", "seed", "repeat")
_SECTIONS = {"experiment", "grid", "fit", "rank", "breakdown", "affinity", "apps", "peers"}
_EXPERIMENT_KEYS = {"name", "description", "plugins"}
_FIT_KEYS = {"published_d_us", "threads", "source", "machine"}
_RANK_KEYS = {"baseline", "baseline_threads", "threads", "highlight", "published"}
_BREAKDOWN_KEYS = {"baseline", "published", "source"}
_AFFINITY_KEYS = {"published", "source"}
_APPS_KEYS = {"published", "source"}
_PEERS_KEYS = {"published", "source"}


@dataclass
class Experiment:
    """A parsed experiment config: its name, the grid of runs and optional published burdens."""

    name: str
    description: str
    points: list[dict[str, Any]]
    published_d_us: dict[str, float] = field(default_factory=dict)
    source: str = ""
    fit_machine: str = ""  # the machine published_d_us was measured on; only its runs are compared with them
    path: Path | None = None
    rank: dict[str, Any] | None = None
    breakdown: dict[str, Any] | None = None
    affinity: dict[str, Any] | None = None
    apps: dict[str, Any] | None = None
    peers: dict[str, Any] | None = None
    # The config as read, where it came from and the --set settings it ran with: a changed machine
    # can have other cores, so its "all" and "a/b" thread counts are resolved anew from the config.
    config: dict[str, Any] | None = field(default=None, repr=False)
    origin: str = "<config>"
    settings: tuple[str, ...] = ()


def load_experiment(path: str | Path) -> Experiment:
    """Read and validate an experiment TOML file, naming the bad key on error."""
    path = Path(path)
    if not path.is_file():
        raise SimschedError(f"experiment file not found: {path}")
    from .filesize import EXPERIMENT_FILE_BYTES, read_limited

    raw = read_limited(path, "experiment file", EXPERIMENT_FILE_BYTES)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SimschedError(f"{path}: not valid TOML: {exc}") from None
    return parse_experiment(data, str(path), path)


def parse_experiment(data: dict[str, Any], source: str = "<config>", path: Path | None = None,
                     settings: tuple[str, ...] = ()) -> Experiment:
    """Validate an experiment config (as parsed from TOML) and expand its grid on machines changed by ``settings``."""
    for key in data:
        if key not in _SECTIONS:
            raise SimschedError(f"{source}: unknown section or key {key!r} (expected {', '.join(sorted(_SECTIONS))})")
        if not isinstance(data[key], dict):
            raise SimschedError(f"{source}: {key} must be a table")
    meta = data.get("experiment", {})
    for key in meta:
        if key not in _EXPERIMENT_KEYS:
            raise SimschedError(f"{source}: unknown key experiment.{key}")
    name = _check_name(meta.get("name", Path(source).stem), source)
    if "plugins" in meta:  # before the grid, whose specs may name what they define
        from . import plugins

        listed = meta["plugins"]
        if not isinstance(listed, list) or not all(isinstance(item, str) for item in listed):
            raise SimschedError(f"{source}: experiment.plugins must be a list of Python files or module names")
        plugins.activate(listed, base=path.parent if path is not None else None)
    if "grid" not in data:
        raise SimschedError(f"{source}: missing section [grid]")
    points = expand_grid(data["grid"], source, settings)
    schedulers = list(dict.fromkeys(p["scheduler"] for p in points))
    fit = data.get("fit", {})
    for key in fit:
        if key not in _FIT_KEYS:
            raise SimschedError(f"{source}: unknown key fit.{key}")
    published = fit.get("published_d_us", {})
    if not isinstance(published, dict):
        raise SimschedError(f"{source}: fit.published_d_us must be a table of scheduler = d")
    for sched, value in published.items():
        _check_in_grid(sched, schedulers, f"{source}: fit.published_d_us")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise SimschedError(f"{source}: fit.published_d_us.{sched} must be a number > 0, got {value!r}")
    if published:
        _check_fit_grid(points, source)
    return Experiment(name=name, description=str(meta.get("description", "")), points=points,
                      published_d_us={k: float(v) for k, v in published.items()},
                      source=str(fit.get("source", "")), path=path,
                      fit_machine=_fit_machine(fit, published,
                                               _values("machine", data["grid"]["machine"], source), source),
                      rank=_rank_section(data.get("rank"), source, points),
                      breakdown=_breakdown_section(data.get("breakdown"), source),
                      affinity=_affinity_section(data.get("affinity"), source, points),
                      apps=_apps_section(data.get("apps"), source, points),
                      peers=_peers_section(data.get("peers"), source),
                      config=data, origin=source, settings=tuple(settings))


def with_machine_settings(experiment: Experiment, settings: list[str]) -> Experiment:
    """The experiment with every point's machine changed by ``--set`` settings (see ``machine.with_settings``).

    An experiment read from a config has its grid expanded anew from it, so that thread counts
    given as shares of the cores are those of the changed machines.
    """
    import dataclasses

    from .machine import load_machine, with_settings

    points = [{**point, "machine": with_settings(str(point["machine"]), settings)} for point in experiment.points]
    for machine in dict.fromkeys(point["machine"] for point in points):
        load_machine(machine)   # a misspelt or out-of-range setting is named before any folder is touched
    if experiment.config is not None:   # the grid again on the changed machines, whose cores may differ
        return parse_experiment(experiment.config, experiment.origin, experiment.path,
                                (*experiment.settings, *settings))
    machines = {name: load_machine(name) for name in dict.fromkeys(point["machine"] for point in points)}
    for point in points:
        machines[point["machine"]].check_threads(point["threads"])
    return dataclasses.replace(experiment, points=points)


def _check_fit_grid(points: list[dict[str, Any]], source: str) -> None:
    """A burden fit needs one loop shape at several durations: refuse a grid that cannot give it, before it runs."""
    from .analysis.shape import check_one_shape

    workloads = list(dict.fromkeys(p["workload"] for p in points))
    try:
        check_one_shape(workloads)
    except SimschedError as exc:
        raise SimschedError(f"{source}: [fit]: {str(exc).replace('the results mix', 'the grid mixes')}") from None
    if len(workloads) < 2:
        raise SimschedError(f"{source}: [fit]: the grid runs one workload, {workloads[0]}, so there is no "
                            "loop-duration axis to fit (e.g. \"workload.total_us\" = { logspace = [1, 1000], num = 8 })")


def _fit_machine(fit: dict[str, Any], published: dict[str, Any], machines: list[Any], source: str) -> str:
    """The machine the published burdens were measured on: fit.machine, else the grid's only machine.

    ``machines`` are the grid's as the config writes them: runs on machines that ``--set`` changed
    are not the machine the publication measured.
    """
    machines = list(dict.fromkeys(machines))
    named = fit.get("machine")
    if named is not None:
        if not isinstance(named, str):
            raise SimschedError(f"{source}: fit.machine must be a machine name of the grid, got {named!r}")
        if not published:
            raise SimschedError(f"{source}: fit.machine names the machine published_d_us was measured on; "
                                "the section has no published_d_us")
        if named not in machines:
            raise SimschedError(f"{source}: fit.machine: {named!r} is not a machine of the grid "
                                f"(the grid has {', '.join(machines)})")
        return named
    if published and len(machines) > 1:
        # Several machines, and the publication measured one of them: comparing the others with its
        # figures would report their differences as errors.
        raise SimschedError(f"{source}: [fit]: the grid runs {len(machines)} machines; name the one the "
                            f"published d was measured on with fit.machine (one of {', '.join(machines)})")
    return machines[0] if published else ""


def _check_name(name: Any, source: str) -> str:
    """An experiment name names the results folder, so it must be a plain name, never a path."""
    if not isinstance(name, str) or not name.strip():
        raise SimschedError(f"{source}: experiment.name must be a non-empty string")
    name = name.strip()
    if name in (".", "..") or any(c in "/\\" or ord(c) < 32 for c in name):
        raise SimschedError(f"{source}: experiment.name must be a plain name, without path separators "
                            f"or '..', got {name!r}")
    return name


def _check_in_grid(scheduler: str, schedulers: list[str], where: str) -> None:
    """Refuse a section key naming a scheduler the grid never runs (a typo would silently match nothing)."""
    if scheduler not in schedulers:
        raise SimschedError(f"{where}: {scheduler!r} is not a scheduler of the grid "
                            f"(the grid has {', '.join(schedulers)})")


def _rank_section(rank: dict[str, Any] | None, source: str, points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Validate the optional [rank] section: which methods to compare against which baseline."""
    if rank is None:
        return None
    for key in rank:
        if key not in _RANK_KEYS:
            raise SimschedError(f"{source}: unknown key rank.{key}")
    if not isinstance(rank.get("baseline"), str):
        raise SimschedError(f"{source}: rank.baseline must be a scheduler spec, e.g. \"omp-guided:chunk=1\"")
    for key in ("baseline_threads", "threads"):
        value = rank.get(key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise SimschedError(f"{source}: rank.{key} must be an integer >= 1")
    for key in ("highlight", "published"):
        if key in rank and not isinstance(rank[key], str):
            raise SimschedError(f"{source}: rank.{key} must be a string")
    schedulers = list(dict.fromkeys(p["scheduler"] for p in points))
    _check_in_grid(rank["baseline"], schedulers, f"{source}: rank.baseline")
    if "highlight" in rank:
        methods = list(dict.fromkeys(parse_spec(s, "scheduler")[0] for s in schedulers))
        _check_in_grid(rank["highlight"], methods, f"{source}: rank.highlight")
    threads = sorted({p["threads"] for p in points})
    for key in ("baseline_threads", "threads"):
        if key in rank and rank[key] not in threads:
            raise SimschedError(f"{source}: rank.{key} = {rank[key]} is not a thread count of the grid "
                                f"({', '.join(map(str, threads))})")
    return {"baseline_threads": 1, **rank}


def _check_string_keys(section: dict[str, Any], name: str, keys: set[str], source: str) -> None:
    """Refuse a key of section [name] outside ``keys``, or a value that is not a string."""
    for key, value in section.items():
        if key not in keys:
            raise SimschedError(f"{source}: unknown key {name}.{key}")
        if not isinstance(value, str):
            raise SimschedError(f"{source}: {name}.{key} must be a string")


def _breakdown_section(section: dict[str, Any] | None, source: str) -> dict[str, Any] | None:
    """Validate the optional [breakdown] section: normalized time by category, against one worker of ``baseline``."""
    if section is None:
        return None
    _check_string_keys(section, "breakdown", _BREAKDOWN_KEYS, source)
    if "baseline" in section:  # run on one worker by the breakdown itself, so it need not be in the grid
        from .schedulers import get_scheduler

        try:
            get_scheduler(section["baseline"])
        except SimschedError as exc:
            raise SimschedError(f"{source}: breakdown.baseline: {exc}") from None
    return {"baseline": "lbs", **section}


def _affinity_section(section: dict[str, Any] | None, source: str,
                      points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Validate the optional [affinity] section: scalability, work efficiency and affinity per scheduler (E3)."""
    if section is None:
        return None
    _check_string_keys(section, "affinity", _AFFINITY_KEYS, source)
    if 1 not in {p["threads"] for p in points}:
        raise SimschedError(f"{source}: [affinity]: scalability T1/TP needs 1 in grid.threads")
    # T1 is taken per machine, so a machine the grid runs only on more threads has no scalability.
    with_one = {p["machine"] for p in points if p["threads"] == 1}
    for machine in dict.fromkeys(p["machine"] for p in points):
        if machine not in with_one:
            raise SimschedError(f"{source}: [affinity]: scalability T1/TP needs 1 thread on every machine; "
                                f"the grid never runs {machine} on 1 thread")
    return dict(section)


def _apps_section(section: dict[str, Any] | None, source: str,
                  points: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Validate the optional [apps] section: the application study (E5) over app workloads."""
    if section is None:
        return None
    _check_string_keys(section, "apps", _APPS_KEYS, source)
    if not any(parse_spec(p["workload"], "workload")[0] == "app" for p in points):
        raise SimschedError(f"{source}: [apps]: the grid runs no app workload (app:name=...)")
    return dict(section)


def _peers_section(section: dict[str, Any] | None, source: str) -> dict[str, Any] | None:
    """Validate the optional [peers] section: techniques side by side, makespan over sum/P and chunk counts."""
    if section is None:
        return None
    _check_string_keys(section, "peers", _PEERS_KEYS, source)
    return dict(section)


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


def _values(key: str, value: Any, source: str) -> list[Any]:
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
    values = {key: _values(key, grid[key], source) for key in sizes}
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


def run_point(point: dict[str, Any]) -> dict[str, Any]:
    """Run one grid point; never raises: errors become the row's ``error``."""
    from .engine import simulate

    row: dict[str, Any] = dict(point)
    if hasattr(row["machine"], "name"):  # a Machine object (e.g. a what-if variant): record its name
        row["machine"] = row["machine"].name
    start = time.perf_counter()
    try:
        # A point keeps its figures, never its chunk table.
        result = simulate(point["machine"], point["scheduler"], point["workload"], point["threads"],
                          seed=point["seed"], repeat=point["repeat"], keep_chunks=False)
        row.update(makespan_ns=result.makespan_ns, sequential_ns=result.sequential_ns,
                   speedup=result.speedup, chunks=result.chunk_count, events=result.events,
                   affinity=result.affinity["overall"] if result.affinity else None,
                   seed_independent=result.seed_independent, reused_from="")
        for cls, ns in result.loop_ns_by_class().items():
            row[f"loop_{cls}_ns"] = ns  # loop time per class of named loops (the app workloads' fine, coarse, once)
        for state, ns in result.state_totals.items():
            row[f"state_{state}_ns"] = ns
        for name, count in result.counters.items():
            row[f"counter_{name}"] = count
        row["error"] = ""
    except Exception as exc:  # a failed point is recorded, not fatal
        row["error"] = f"{type(exc).__name__}: {exc}".splitlines()[0]
    row["wall_s"] = time.perf_counter() - start
    return row


def run_sweep(experiment: Experiment, jobs: int | None = None, progress: bool = True, *,
              out: str | Path | None = None, fmt: str = "csv", dask: str | None = None, force: bool = False,
              retry_failed: bool = False) -> pd.DataFrame:
    """Run every point of ``experiment``; one row per run, in grid order.

    With ``out``, each finished point is saved in that folder as it completes and a re-run of
    the same experiment computes only the points it lacks (``retry_failed`` also re-runs the
    ones that failed) and those whose input files changed since they were saved (see
    :mod:`simsched.inputs`); ``force`` replaces the sweep files of whatever the folder held. Of points
    that differ only in their seed, one is simulated first; if its run drew nothing from its
    generator, the others get copies of its row (see ``_next_batch``). The
    points run on ``jobs`` local processes (default: all cores) or on the Dask cluster ``dask``.
    SIGINT and SIGTERM stop the sweep with :class:`Interrupted` once the finished rows are saved.
    """
    from .inputs import changed_files, point_inputs
    from .pool import check_pool, open_pool
    from .store import ResultsFolder, experiment_fingerprint

    if jobs is None:
        jobs = os.cpu_count() or 1
    check_pool(jobs, dask)  # a pool that cannot open is refused before the folder is touched
    points = experiment.points
    ids = [point_id(p) for p in points]
    # Every input file is checked and hashed before the folder is touched or any point runs.
    inputs = dict(zip(ids, point_inputs(points, str(experiment.path or experiment.name))))
    folder = ResultsFolder(out) if out is not None else None
    done: dict[str, dict[str, Any]] = {}
    stale: dict[str, list[str]] = {}   # saved points whose input files changed since: the files, by point

    def current(key: str, row: dict[str, Any]) -> bool:
        return key in inputs and not changed_files(row.get("inputs"), inputs[key])

    journal = None
    if folder is not None:
        earlier = folder.claim(experiment.name, experiment_fingerprint(experiment.name, ids), len(points), force)
        try:
            if earlier is not None:
                warnings.warn(f"{folder.path}: resuming points saved by simsched {earlier} with simsched "
                              f"{__version__}; use --force to recompute them all", stacklevel=2)
            folder.save_config(experiment.path)
            saved = folder.finished()
            stale = {k: changed for k, row in saved.items()
                     if k in inputs and (changed := changed_files(row.get("inputs"), inputs[k]))}
            done = {k: row for k, row in saved.items()
                    if k not in stale and not (retry_failed and row.get("error"))}
            journal = folder.open_journal()
        except BaseException:
            folder.abandon()  # refused before anything ran: a folder this claim made goes again
            raise
    kept_failed = sum(bool(row.get("error")) for row in done.values())
    todo = [i for i, key in enumerate(ids) if key not in done]
    saved_before = len(points) - len(todo)
    bar = _progress(len(points), experiment.name, progress, initial=saved_before)
    interrupted: Interrupted | None = None
    lost = reused = 0
    pool = None
    ran_all = False

    def keep(row: dict[str, Any]) -> None:
        nonlocal reused
        reused += bool(row.get("reused_from"))
        bar.update(1)
        done[row["point_id"]] = row
        if journal is not None:
            journal.record(row)
    try:
        with signals_interrupt() as fired:
            with signals_held():
                pool = open_pool(jobs, dask)
            while todo:
                batch, todo = _next_batch(points, ids, todo, done, keep)
                for k, row in pool.run(run_point, [points[i] for i in batch]):
                    if row is None:
                        bar.update(1)
                        lost += 1
                    else:
                        keep({"point_id": ids[batch[k]], **row, "inputs": inputs[ids[batch[k]]]})
                    if fired:  # a signal whose exception was swallowed on its way (see signals_interrupt)
                        raise Interrupted(fired[0])
            ran_all = True
    except Interrupted as exc:
        interrupted = exc
    finally:
        if pool is not None:
            pool.close(kill=not ran_all)  # stopped, or an error: the points still running are abandoned
        bar.close()
        if journal is not None:
            journal.close()
        if folder is not None and not ran_all and interrupted is None:  # an error, so no table
            if pool is None:
                folder.abandon()  # the pool never opened: nothing ran, and a folder made for it goes
            else:
                folder.release()
    if folder is not None:
        # The rows exactly as saved, so a resumed sweep equals a fresh one; a stale row a stopped
        # sweep had not yet recomputed is left out.
        try:
            done = {k: row for k, row in folder.finished().items() if current(k, row)}
        except BaseException:
            folder.release()
            raise
    frame = pd.DataFrame([done[k] for k in ids if k in done])
    frame.insert(0, "experiment", experiment.name)
    frame.attrs.update(points=len(points), saved_before=saved_before, lost=lost, reused=reused,
                       kept_failed=kept_failed, recomputed=len(stale),
                       changed_inputs=sorted({name for names in stale.values() for name in names}))
    if folder is not None:
        try:
            frame.attrs["table"] = write_table(frame, folder.path / f"results.{fmt}")
        finally:
            folder.release()
    if interrupted is not None:
        interrupted.frame = frame
        raise interrupted
    return frame


def _next_batch(points, ids, todo, done, keep):
    """The points to simulate next, and those left for later, after copying what a seed cannot change.

    Points that differ only in their seed form a group. A run that drew nothing from its
    generator gives the same result for every seed, so once one seed of a group has run
    that way, ``keep`` receives a copy of its row for each other seed, marked ``reused_from``.
    Until then, only one seed of an untried group is simulated; the rest wait for its answer.
    """
    def group_of(point):
        return point_id({k: v for k, v in point.items() if k != "seed"})

    groups: dict[str, list[int]] = {}
    for i in todo:
        groups.setdefault(group_of(points[i]), []).append(i)
    tried: dict[str, dict[str, Any]] = {}   # per group, a finished row: one that holds for every seed if any
    for i, key in enumerate(ids):
        row = done.get(key)
        if row is not None:
            group = group_of(points[i])
            if group in groups and (group not in tried or _holds_for_every_seed(row)):
                tried[group] = row
    batch, later = [], []
    for group, members in groups.items():
        source = tried.get(group)
        if source is None:
            batch.append(members[0])
            later.extend(members[1:])
        elif _holds_for_every_seed(source):
            for i in members:
                keep({**source, "point_id": ids[i], "seed": points[i]["seed"], "wall_s": 0.0,
                      "reused_from": source.get("reused_from") or source["point_id"]})
        else:
            batch.extend(members)
    return sorted(batch), sorted(later)


def _holds_for_every_seed(row: dict[str, Any]) -> bool:
    """Whether a finished row's run drew nothing from its generator (rows saved before this was recorded: no)."""
    return not row.get("error") and row.get("seed_independent") is True


def _progress(total, name, enabled, initial=0):
    from tqdm import tqdm

    return tqdm(total=total, initial=initial, desc=name, unit="run", disable=not enabled, leave=False)


def write_table(frame: pd.DataFrame, path: Path) -> Path:
    """Write a results table as CSV or Parquet (by suffix), atomically: no half-written file is left behind."""
    from .output import write_whole

    path = Path(path)
    if path.suffix == ".parquet":
        parquet("writing Parquet results")
        return write_whole(path, lambda partial: frame.to_parquet(partial, index=False))
    return write_whole(path, lambda partial: frame.to_csv(partial, index=False))


def read_table(path: str | Path) -> pd.DataFrame:
    """Read a results table written by a sweep (CSV or Parquet)."""
    path = Path(path)
    if path.is_dir():
        found = [p for p in (path / "results.parquet", path / "results.csv") if p.is_file()]
        if not found:
            raise SimschedError(f"no results.csv or results.parquet in {path}")
        path = found[0]
    if not path.is_file():
        raise SimschedError(f"results file not found: {path}")
    try:
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.read_csv(path, keep_default_na=False, na_values=[""])
    except Exception as exc:
        raise SimschedError(f"cannot read results from {path}: {exc}".splitlines()[0]) from None
