"""A sweep's results folder: a manifest naming the experiment, a journal of finished points, the results table.

The journal (``runs.jsonl``) gets one line per finished point, flushed to disk as the point
completes, so an interrupted sweep loses nothing it finished and a re-run computes only the
points the journal lacks. Each point is keyed by a hash of its resolved parameters; the
experiment by a hash of its name and the keys of all its points, so a folder holding a
different experiment is recognised and left alone. One sweep at a time holds the folder
(see :mod:`simsched.folderlock`).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import warnings
from pathlib import Path
from typing import Any, Iterable

from .errors import SimschedError
from .folderlock import LOCK, FolderLock

MANIFEST = "sweep.json"
JOURNAL = "runs.jsonl"
# Journal lines that hold no finished point's row (torn by a kill, damaged on disk), kept as they were.
REJECTED = "runs.rejected"
# Files a sweep writes into its folder; anything else there is not ours to overwrite.
SWEEP_FILES = {MANIFEST, JOURNAL, REJECTED, "experiment.toml", "results.csv", "results.parquet", "burden.csv",
               "ranking.csv", "breakdown.csv", "speedup.png", "breakdown.png"}
# The figures every row of a point that ran has.
FIGURES = ("makespan_ns", "sequential_ns", "chunks", "events")


def point_id(point: dict[str, Any]) -> str:
    """A short stable key for one grid point: a hash of its resolved parameters."""
    text = json.dumps({k: point[k] for k in sorted(point)}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def experiment_fingerprint(name: str, ids: Iterable[str]) -> str:
    """A key for a whole experiment: its name and the set of its points."""
    text = json.dumps({"name": name, "points": sorted(ids)})
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _plain(value: Any) -> Any:
    """A JSON-ready copy of a NumPy scalar (rows may carry them from counters)."""
    if hasattr(value, "item"):
        return value.item()
    return str(value)


class ResultsFolder:
    """The folder one experiment's sweep writes into, with its journal of finished points."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.lock: FolderLock | None = None
        self._made: list[Path] = []  # the folders claim() created, outermost first

    @property
    def journal_path(self) -> Path:
        return self.path / JOURNAL

    def manifest(self) -> dict[str, Any] | None:
        """The manifest of the sweep this folder holds, or None."""
        file = self.path / MANIFEST
        if not file.is_file():
            return None
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise SimschedError(f"{file}: unreadable sweep manifest ({exc}); use --force to start over") from None
        if not isinstance(data, dict) or "fingerprint" not in data:
            raise SimschedError(f"{file}: not a simsched sweep manifest; use --force to start over")
        return data

    def claim(self, name: str, fingerprint: str, points: int, force: bool = False) -> str | None:
        """Make the folder this experiment's, refusing one that holds something else unless ``force``.

        Returns the simsched version that wrote the saved points when it is not this one.
        """
        from . import __version__

        earlier = None
        self._create()
        try:
            self.lock = FolderLock(self.path)  # before anything is read: another sweep may be writing
            if force:
                self.clear()
            else:
                manifest = self.manifest()
                if manifest is not None and manifest["fingerprint"] != fingerprint:
                    what = ("an earlier grid of this experiment" if manifest.get("experiment") == name
                            else "a different experiment")
                    raise SimschedError(
                        f"{self.path} holds results of {what} ({manifest.get('experiment')!r}, "
                        f"{manifest.get('points')} points); use another --out, or --force to replace them")
                if manifest is None and any(p.name != LOCK for p in self.path.iterdir()):
                    raise SimschedError(f"{self.path} is not empty and holds no simsched sweep; "
                                        "use another --out, or --force to replace its sweep files")
                if (manifest is not None and manifest.get("simsched") != __version__
                        and self.journal_path.is_file()):
                    earlier = str(manifest.get("simsched"))
            self._write_manifest({"experiment": name, "fingerprint": fingerprint, "points": points,
                                  "simsched": __version__})
        except BaseException:
            self.abandon()
            raise
        return earlier

    def _create(self) -> None:
        """Make the folder and the missing folders above it, remembering which were made (see ``abandon``)."""
        missing = []
        folder = self.path
        cannot = f"cannot create the results folder {self.path}"
        try:
            while not folder.is_dir():
                if folder.is_symlink() and not folder.exists():
                    try:
                        os.stat(folder)
                        reason = "gone meanwhile"
                    except OSError as exc:
                        reason = exc.strerror or str(exc)
                    raise SimschedError(f"{cannot}: {folder} is a symbolic link to nothing ({reason})")
                if folder.exists():
                    if folder == self.path:
                        raise SimschedError(f"--out {self.path} exists and is not a folder")
                    raise SimschedError(f"{cannot}: {folder} is not a folder")
                missing.append(folder)
                folder = folder.parent
            for folder in reversed(missing):
                try:
                    folder.mkdir()
                except FileExistsError:
                    if not folder.is_dir():
                        raise
                    continue  # made meanwhile by another sweep, whose it is
                self._made.append(folder)
        except OSError as exc:
            self.abandon()
            raise SimschedError(f"{cannot}: {exc.strerror or exc}") from None

    def release(self) -> None:
        """Let other sweeps have the folder."""
        if self.lock is not None:
            self.lock.release()
            self.lock = None

    def abandon(self) -> None:
        """Release the folder, and remove it (with the sweep files in it) and the folders above it if this
        claim made them: a sweep refused before it ran leaves nothing behind."""
        if self.path in self._made and self.lock is not None:
            self.clear()
            for name in (MANIFEST + ".partial", JOURNAL + ".partial"):
                (self.path / name).unlink(missing_ok=True)
        self.release()
        for folder in reversed(self._made):
            try:
                folder.rmdir()
            except OSError:
                pass  # not empty: something else is in it now
        self._made = []

    def clear(self) -> None:
        """Remove the files a sweep writes (and nothing else) from the folder."""
        if not self.path.is_dir():
            return
        for name in SWEEP_FILES:
            target = self.path / name
            if target.is_file():
                target.unlink()

    def _write_manifest(self, data: dict[str, Any]) -> None:
        partial = self.path / (MANIFEST + ".partial")
        try:
            partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
            os.replace(partial, self.path / MANIFEST)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise SimschedError(f"cannot write {self.path / MANIFEST}: {exc.strerror or exc}") from None

    def finished(self) -> dict[str, dict[str, Any]]:
        """The rows of every point the journal holds, by point key.

        Lines that hold no finished point's row (a line torn by a kill, bytes damaged on disk)
        are moved to ``runs.rejected`` with one warning: every valid row is kept, and the points
        of the others run again.
        """
        rows: dict[str, dict[str, Any]] = {}
        if not self.journal_path.is_file():
            return rows
        try:
            data = self.journal_path.read_bytes()
        except OSError as exc:
            raise SimschedError(f"cannot read {self.journal_path}: {exc.strerror or exc}") from None
        lines = data.split(b"\n")
        if lines[-1] == b"":
            lines.pop()  # the end of the last line, not a line
        good, bad = [], []
        for line in lines:
            row = _row(line)
            if row is None:
                bad.append(line)
            else:
                rows[row["point_id"]] = row
                good.append(line)
        if bad or (data and not data.endswith(b"\n")):  # a whole row whose newline was cut off gets it back
            self._set_aside(good, bad)
        return rows

    def _set_aside(self, good: list[bytes], bad: list[bytes]) -> None:
        """Keep the ``bad`` lines in ``runs.rejected`` (first, so that a failure loses none), then leave the
        journal with the ``good`` ones, each ending its line."""
        rejected = self.path / REJECTED
        partial = self.path / (JOURNAL + ".partial")
        try:
            if bad:
                with open(rejected, "ab") as f:
                    f.write(b"".join(line + b"\n" for line in bad))
                    f.flush()
                    os.fsync(f.fileno())
            with open(partial, "wb") as f:
                f.write(b"".join(line + b"\n" for line in good))
                f.flush()
                os.fsync(f.fileno())
            os.replace(partial, self.journal_path)
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise SimschedError(f"cannot set damaged lines of {self.journal_path} aside: "
                                f"{exc.strerror or exc}") from None
        if bad:
            lines = "1 line holds" if len(bad) == 1 else f"{len(bad)} lines hold"
            warnings.warn(f"{self.journal_path}: {lines} no finished point's row (torn by a kill, or "
                          f"damaged), moved to {rejected}; the points the journal lacks run again",
                          stacklevel=3)

    def open_journal(self) -> "Journal":
        """A journal that appends finished points to this folder's ``runs.jsonl``."""
        return Journal(self.journal_path)

    def save_config(self, config: Path | None) -> None:
        """Keep a copy of the experiment file beside its results (``fit``, ``rank`` and ``plot`` read it)."""
        if config is not None and config.resolve() != (self.path / "experiment.toml").resolve():
            from .output import write_whole

            # Whole or not at all: fit, rank and plot read it later.
            write_whole(self.path / "experiment.toml", lambda partial: shutil.copyfile(config, partial))


def _row(line: bytes) -> dict[str, Any] | None:
    """The row a journal line holds, or None if it holds none: not a JSON object, no point key, no figures."""
    from .grid import AXES

    try:
        row = json.loads(line)
    except ValueError:  # also bytes that are not UTF-8
        return None
    if (not isinstance(row, dict) or not isinstance(row.get("point_id"), str)
            or not isinstance(row.get("error"), str) or any(key not in row for key in AXES)):
        return None
    if row["error"] == "" and not all(_number(row.get(key)) for key in FIGURES):
        return None  # a point that ran, without its figures
    return row


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class Journal:
    """An append-only file of finished points, one JSON line each, on disk as soon as it is written."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise SimschedError(f"cannot write {path}: {exc.strerror or exc}") from None

    def record(self, row: dict[str, Any]) -> None:
        line = json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()},
                          default=_plain)
        data = memoryview((line + "\n").encode())
        end = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(self.fd, data):]
            os.fsync(self.fd)
        except OSError as exc:
            # The journal keeps whole rows only: a row cut short is taken back.
            try:
                os.ftruncate(self.fd, end)
            except OSError:
                pass  # a device, not a file
            raise SimschedError(f"cannot write {self.path}: {exc.strerror or exc}; the points saved before "
                                "are kept, and running the same command again computes the rest") from None

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
