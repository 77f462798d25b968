"""The files a sweep's points read (machine, cost, trace, matrix and graph files, the source of a scheduler or
workload class registered from outside simsched), recorded by content hash.

A saved point is only as current as the files it read, so each row records, as its
``inputs``, a JSON object of each such file (as the spec names it) and a hash of its
contents; a re-run compares that record with the files as they are now. Files shipped with
simsched (built-in machines, the shipped matrices) are not listed: they change only with
simsched itself.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Iterable

from .errors import SimschedError

HASH_CHARS = 16
_BLOCK = 1 << 20


def _files_of(kind: str, spec: Any) -> list[Path]:
    """The user's files that the machine, scheduler or workload ``spec`` reads, and the source file of a
    scheduler or workload class registered from outside simsched (its code is an input as much as its data)."""
    if kind == "machine":
        from .machine import machine_files

        return machine_files(spec)
    if kind == "scheduler":
        from .schedulers import get_scheduler

        return _user_source(get_scheduler(spec))
    from .workloads import get_workload

    workload = get_workload(spec)
    return [*workload.input_files(), *_user_source(workload)]


def _user_source(obj: Any) -> list[Path]:
    """The file defining ``obj``'s class when that class is not simsched's own ([] for simsched's)."""
    import inspect

    cls = type(obj)
    if cls.__module__ == "simsched" or cls.__module__.startswith("simsched."):
        return []  # changes only with simsched itself
    try:
        source = inspect.getsourcefile(cls)
    except TypeError:  # its module is not imported by name: the file its methods were compiled from
        files = {value.__code__.co_filename for value in vars(cls).values() if inspect.isfunction(value)}
        source = next(iter(files)) if len(files) == 1 else None
    return [Path(source)] if source and Path(source).is_file() else []  # none for an interactive session


def content_hash(path: Path) -> str:
    """A short hash of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_BLOCK):
            digest.update(block)
    return digest.hexdigest()[:HASH_CHARS]


class InputFiles:
    """The input files of one sweep's points, each checked and hashed once, before any point runs."""

    def __init__(self, source: str):
        self.source = source
        self._hashes: dict[Path, str] = {}
        self._records: dict[tuple[str, str], dict[str, str]] = {}

    def record(self, point: dict[str, Any]) -> str:
        """The point's ``inputs``: a JSON object of file -> content hash, or '' when it reads no file."""
        files: dict[str, str] = {}
        for kind in ("machine", "scheduler", "workload"):
            spec = point[kind]
            key = (kind, spec if isinstance(spec, str) else f"object {id(spec)}")  # an object made in Python
            if key not in self._records:
                self._records[key] = {str(path): self._hash(path, kind, spec)
                                      for path in _files_of(kind, spec)}
            files.update(self._records[key])
        return json.dumps(files, sort_keys=True) if files else ""

    def _hash(self, path: Path, kind: str, spec: Any) -> str:
        where = f"{self.source}: grid.{kind}: {spec}"
        # Relative paths are read from the folder the sweep runs in, which is not always the config's.
        relative = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
        if not path.exists():
            raise SimschedError(f"{where}: no such file {path}{relative}")
        if not path.is_file():
            raise SimschedError(f"{where}: {path}{relative} is not a file")
        resolved = path.resolve()
        if resolved not in self._hashes:
            try:
                self._hashes[resolved] = content_hash(resolved)
            except OSError as exc:
                raise SimschedError(f"{where}: cannot read {path}: {exc.strerror or exc}") from None
        return self._hashes[resolved]


def point_inputs(points: Iterable[dict[str, Any]], source: str) -> list[str]:
    """Each point's ``inputs`` record; a missing or unreadable file is refused, naming it."""
    files = InputFiles(source)
    return [files.record(point) for point in points]


def changed_files(saved: Any, current: str) -> list[str]:
    """The files whose hash in a saved ``inputs`` record differs from the current record's ([]: none).

    A row saved without a record (by a simsched that kept none) counts every file it reads as changed.
    """
    now = _parse(current)
    before = _parse(saved)
    return sorted(name for name in now.keys() | before.keys() if now.get(name) != before.get(name))


def _parse(record: Any) -> dict[str, str]:
    if not isinstance(record, str) or not record:
        return {}
    try:
        value = json.loads(record)
    except ValueError:
        return {"(an unreadable record of input files)": ""}
    return value if isinstance(value, dict) else {"(an unreadable record of input files)": ""}
