"""A machine's core-to-core latency matrix against a measured one: errors per class of core pair."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..errors import SimschedError
from ..filesize import MACHINE_FILE_BYTES, read_limited


def read_latency_csv(path: str | Path) -> np.ndarray:
    """A measured one-way latency matrix (ns) from CSV: full, or lower-triangular with empty cells above.

    This is the layout the common core-to-core ping-pong tools write (one row per CPU, no
    header); an empty cell takes its mirror's value, and the diagonal is ignored.
    """
    path = Path(path)
    if not path.is_file():
        raise SimschedError(f"latency file not found: {path}")
    text = read_limited(path, "latency file", MACHINE_FILE_BYTES)  # the same matrix a machine file may hold
    try:
        lines = [line.rstrip("\r\n") for line in text.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError:
        raise SimschedError(f"{path}: not a text CSV file") from None
    n = len(lines)
    if n < 2:
        raise SimschedError(f"{path}: a latency matrix needs at least 2 rows, got {n}")
    matrix = np.full((n, n), np.nan)
    for i, line in enumerate(lines):
        cells = line.split(",")
        if len(cells) < n or any(cell.strip() for cell in cells[n:]):
            raise SimschedError(f"{path}: row {i + 1} has {len(cells)} cells; a {n}-row matrix needs {n}")
        for j, cell in enumerate(cells[:n]):
            if cell.strip():
                try:
                    value = float(cell)
                except ValueError:
                    raise SimschedError(f"{path}: row {i + 1}, column {j + 1}: {cell.strip()!r} is not a number") \
                        from None
                if not math.isfinite(value) or value < 0:
                    raise SimschedError(f"{path}: row {i + 1}, column {j + 1}: latencies must be numbers >= 0, "
                                        f"got {cell.strip()}")
                matrix[i, j] = value
    matrix = np.where(np.isnan(matrix), matrix.T, matrix)
    off = ~np.eye(n, dtype=bool)
    missing = np.argwhere(np.isnan(matrix) & off)
    if missing.size:
        i, j = missing[0]
        raise SimschedError(f"{path}: no latency between CPUs {i} and {j} (row {i + 1} or {j + 1})")
    np.fill_diagonal(matrix, 0.0)
    return matrix


def pair_classes(machine) -> tuple[np.ndarray, list[str]]:
    """Each core pair's class index (the innermost level the two cores share) and the class names."""
    cores = np.arange(machine.cores)
    names = ["across sockets", "within a socket"]
    socket = cores // machine.cores_per_socket
    classes = np.where(socket[:, None] == socket[None, :], 1, 0)
    for name, size in machine.topology.get("core_groups", {}).items():
        names.append(f"within a {name}")
        classes = np.where((cores[:, None] // size) == (cores[None, :] // size), len(names) - 1, classes)
    return classes, names


def compare_latency(machine, measured: np.ndarray) -> list[dict]:
    """Per class of core pair (and over all pairs): the pairs, the medians and the largest errors.

    ``measured`` may list more CPUs than the machine has cores (hardware threads after
    the cores, as Linux numbers them on these servers): its first ``cores`` rows are used.
    """
    n = machine.cores
    if measured.shape[0] < n:
        raise SimschedError(f"the measured matrix has {measured.shape[0]} CPUs; machine {machine.name} has {n} cores")
    measured = measured[:n, :n]
    model = machine.latency
    classes, names = pair_classes(machine)
    off = ~np.eye(n, dtype=bool)
    rows = []
    for index, name in [(i, names[i]) for i in range(len(names))] + [(None, "all pairs")]:
        mask = off if index is None else off & (classes == index)
        if not mask.any():
            continue
        ours, theirs = model[mask], measured[mask]
        error = np.abs(ours - theirs) / np.maximum(theirs, 1e-9)
        rows.append({"pairs": name, "count": int(mask.sum() // 2),
                     "measured_median_ns": float(np.median(theirs)), "measured_min_ns": float(theirs.min()),
                     "measured_max_ns": float(theirs.max()), "model_median_ns": float(np.median(ours)),
                     "median_error": float(np.median(error)), "max_error": float(error.max())})
    return rows


def format_comparison(machine, rows: list[dict]) -> str:
    """The comparison as a text table."""
    lines = [f"{machine.name}: one-way core-to-core latency, model against measurement",
             f"  {'pairs':<18} {'count':>6} {'measured ns (min-median-max)':>30} {'model median':>13} "
             f"{'median error':>13} {'max error':>10}"]
    for row in rows:
        spread = f"{row['measured_min_ns']:.1f}-{row['measured_median_ns']:.1f}-{row['measured_max_ns']:.1f}"
        lines.append(f"  {row['pairs']:<18} {row['count']:>6} {spread:>30} {row['model_median_ns']:>13.1f} "
                     f"{row['median_error']:>13.1%} {row['max_error']:>10.1%}")
    return "\n".join(lines)
