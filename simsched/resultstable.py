"""A sweep's results table: written whole as CSV or Parquet, and read back from a file or a results folder."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .errors import SimschedError, parquet


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
