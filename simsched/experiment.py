"""An experiment config: a TOML file read and checked into an Experiment, its grid and analysis sections."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import SimschedError
from .grid import axis_values, expand_grid
from .spec import parse_spec

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
                      fit_machine=_fit_machine(
                          fit, published, axis_values("machine", data["grid"]["machine"], source), source),
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
