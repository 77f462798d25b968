"""The chunk table as a CSV file: a ``# simsched: {...}`` line naming the run, then one row per chunk (ns)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from .errors import SimschedError
from .result import CHUNK_COLUMNS, Result

# In files the times say their unit; Result.chunks keeps ``start`` and ``end`` (also ns).
FILE_COLUMNS = {"start": "start_ns", "end": "end_ns"}
PREFIX = "# simsched: "


def metadata(result: Result, source: str) -> dict:
    """What the file's first line records about the run that made the chunks."""
    return {"source": source, "machine": result.machine, "scheduler": result.scheduler,
            "workload": result.workload, "threads": result.threads, "seed": result.seed, "repeat": result.repeat,
            "time_unit": "ns"}


def write_chunks(result: Result, path: Path, source: str = "simulated") -> None:
    """Write ``result``'s chunk table to ``path``, whole or not at all: the metadata line, then CSV with
    start_ns and end_ns."""
    from .output import write_whole

    def write(partial: Path) -> None:
        with open(partial, "w", encoding="utf-8", newline="") as out:
            out.write(PREFIX + json.dumps(metadata(result, source)) + "\n")
            result.chunks.rename(columns=FILE_COLUMNS).to_csv(out, index=False)

    write_whole(path, write, "--chunks")


def read_chunks(path: str | Path) -> tuple[pd.DataFrame, dict | None]:
    """A chunk file's table (columns as in Result.chunks) and its metadata, or None for a file without any.

    Files from before the metadata line and the ``_ns`` names (``start``, ``end``) read as well.
    """
    path = Path(path)
    if not path.is_file():
        raise SimschedError(f"chunk table not found: {path}")
    try:
        with open(path, encoding="utf-8") as source:
            first = source.readline()
        meta = None
        if first.startswith(PREFIX):
            meta = json.loads(first[len(PREFIX):])
            if not isinstance(meta, dict):
                raise ValueError("the metadata is not a JSON object")
        table = pd.read_csv(path, comment="#")
    except (UnicodeDecodeError, ValueError, pd.errors.ParserError, pd.errors.EmptyDataError) as exc:
        raise SimschedError(f"cannot read the chunk table {path}: {exc}".splitlines()[0]) from None
    except OSError as exc:
        raise SimschedError(f"cannot read the chunk table {path}: {exc.strerror or exc}") from None
    for old, new in FILE_COLUMNS.items():
        if new in table.columns and old in table.columns:
            raise SimschedError(f"the chunk table {path} has both {old!r} and {new!r} columns")
    table = table.rename(columns={new: old for old, new in FILE_COLUMNS.items()})
    missing = [c for c in CHUNK_COLUMNS if c not in table.columns]
    if missing:
        wanted = ", ".join(FILE_COLUMNS.get(c, c) for c in CHUNK_COLUMNS)
        raise SimschedError(f"the chunk table {path} lacks column {FILE_COLUMNS.get(missing[0], missing[0])!r} "
                            f"(expected {wanted}): is it one written by --chunks?")
    return table, meta


def replay_seed(meta: dict | None, path, workload, seed: int | None) -> int:
    """The seed to replay ``path``'s chunks with; refuses a workload or seed other than the recorded ones."""
    from .workloads import get_workload

    if meta is None:
        return 0 if seed is None else seed
    recorded = meta.get("workload")
    if recorded is not None and not _same_workload(recorded, workload, get_workload):
        raise SimschedError(f"{path} records workload {recorded!r}, not {workload.spec!r}: "
                            "replay the workload the chunks were made for")
    if "seed" in meta and seed is not None and seed != meta["seed"]:
        raise SimschedError(f"{path} records seed {meta['seed']}, not {seed}: the workload's costs would differ")
    return int(meta.get("seed", 0)) if seed is None else seed


def _same_workload(recorded, workload, get_workload) -> bool:
    """Whether the recorded spec names the same loop as ``workload`` (the same name and resolved parameters)."""
    if not isinstance(recorded, str):
        return False
    try:
        other = get_workload(recorded)
    except SimschedError:   # e.g. a file workload whose file is gone: only the spelling can be compared
        return recorded == workload.spec
    return (other.name, other.params) == (workload.name, workload.params)
