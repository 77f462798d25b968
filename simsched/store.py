"""A sweep's results folder: a manifest naming the experiment, a journal of finished points, the results table.

The journal (``runs.jsonl``) gets one line per finished point, flushed to disk as the point
completes, so an interrupted sweep loses nothing it finished and a re-run computes only the
points the journal lacks. Each point is keyed by a hash of its resolved parameters; the
experiment by a hash of its name and the keys of all its points, so a folder holding a
different experiment is recognised and left alone.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from pathlib import Path
from typing import Any, Iterable

from .errors import SimschedError

MANIFEST = "sweep.json"
JOURNAL = "runs.jsonl"
# Files a sweep writes into its folder; anything else there is not ours to overwrite.
SWEEP_FILES = {MANIFEST, JOURNAL, "experiment.toml", "results.csv", "results.parquet", "burden.csv",
               "ranking.csv", "breakdown.csv", "speedup.png", "breakdown.png"}


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
        if self.path.exists() and not self.path.is_dir():
            raise SimschedError(f"--out {self.path} exists and is not a folder")
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
            if manifest is None and self.path.is_dir() and any(self.path.iterdir()):
                raise SimschedError(f"{self.path} is not empty and holds no simsched sweep; "
                                    "use another --out, or --force to replace its sweep files")
            if manifest is not None and manifest.get("simsched") != __version__ and self.journal_path.is_file():
                earlier = str(manifest.get("simsched"))
        self.path.mkdir(parents=True, exist_ok=True)
        self._write_manifest({"experiment": name, "fingerprint": fingerprint, "points": points,
                              "simsched": __version__})
        return earlier

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
        partial.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(partial, self.path / MANIFEST)

    def finished(self) -> dict[str, dict[str, Any]]:
        """The rows of every point the journal holds, by point key (a torn last line is dropped)."""
        rows: dict[str, dict[str, Any]] = {}
        if not self.journal_path.is_file():
            return rows
        with open(self.journal_path, "rb") as f:
            data = f.read()
        good = 0
        for line in data.splitlines(keepends=True):
            if not line.endswith(b"\n"):
                break  # written when the sweep was killed: the point did not finish
            try:
                row = json.loads(line)
            except ValueError:
                number = data[:good].count(b"\n") + 1
                raise SimschedError(f"{self.journal_path}: line {number} is not a JSON record; "
                                    "use --force to start over") from None
            rows[row["point_id"]] = row
            good += len(line)
        if good < len(data):
            with open(self.journal_path, "r+b") as f:
                f.truncate(good)
        return rows

    def open_journal(self) -> "Journal":
        """A journal that appends finished points to this folder's ``runs.jsonl``."""
        return Journal(self.journal_path)

    def save_config(self, config: Path | None) -> None:
        """Keep a copy of the experiment file beside its results (``fit``, ``rank`` and ``plot`` read it)."""
        if config is not None and config.resolve() != (self.path / "experiment.toml").resolve():
            shutil.copyfile(config, self.path / "experiment.toml")


class Journal:
    """An append-only file of finished points, one JSON line each, on disk as soon as it is written."""

    def __init__(self, path: Path):
        self.file = open(path, "a", encoding="utf-8")

    def record(self, row: dict[str, Any]) -> None:
        line = json.dumps({k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()},
                          default=_plain)
        self.file.write(line + "\n")
        self.file.flush()
        os.fsync(self.file.fileno())

    def close(self) -> None:
        self.file.close()
