"""Experiment sweeps: a TOML config expanded into a factorial grid of runs, run in parallel into a tidy table.

Each run records its resolved parameters, its outcome (or the error that stopped it)
and its wall time, so a failed point is a row like any other, not the end of the sweep.
This module runs and resumes sweeps; the config is read by :mod:`simsched.experiment`, its
grid expanded by :mod:`simsched.grid`, and the table written by :mod:`simsched.resultstable`,
whose public names it also offers.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import pandas as pd

from . import __version__
from .errors import Interrupted
from .experiment import Experiment, load_experiment, parse_experiment, with_machine_settings
from .grid import AXES, MAX_GRID_POINTS, expand_grid, share_of_cores
from .resultstable import read_table, write_table
from .signals import signals_held, signals_interrupt
from .store import point_id

__all__ = ["AXES", "MAX_GRID_POINTS", "Experiment", "expand_grid", "load_experiment", "parse_experiment",
           "read_table", "run_point", "run_sweep", "share_of_cores", "with_machine_settings", "write_table"]


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
