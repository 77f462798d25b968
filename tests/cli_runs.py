"""The command line as tests drive it: in a process of its own, and what a refusal must look like."""

from __future__ import annotations

import subprocess
import sys


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    """The command line in a process of its own."""
    return subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=300, check=False)


def refused(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Assert one error line on stderr naming every needle, status 2 and nothing on stdout; return the line."""
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("simsched: error: "), proc.stderr
    assert proc.stdout.strip() == ""
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]
