"""The host OpenMP runtime as a reference: the shipped C programs, built with -fopenmp and run on bound threads."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..errors import SimschedError

HERE = Path(__file__).resolve().parent


def build(name: str, folder) -> Path | None:
    """Compile the shipped ``name``.c into ``folder``; None where no compiler here builds OpenMP."""
    source = HERE / f"{name}.c"
    if not source.is_file():  # a broken install, not a missing compiler: say so rather than skip
        raise SimschedError(f"the OpenMP reference {source} is missing from this install "
                            "(reinstall simsched, or pass --no-openmp)")
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        return None
    binary = Path(folder) / name
    built = subprocess.run([compiler, "-O2", "-fopenmp", str(source), "-o", str(binary)],
                           capture_output=True, text=True)
    return binary if built.returncode == 0 else None


def environment(threads: int) -> dict[str, str]:
    """The environment the references run in: ``threads`` threads, spinning while they wait, one per CPU."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "OMP_WAIT_POLICY": "active",
            "OMP_PROC_BIND": "close", "OMP_PLACES": "threads"}
