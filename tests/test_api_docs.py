"""The API reference (docs/api, Sphinx autodoc) builds from the docstrings with every warning an error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_the_api_reference_builds_without_a_warning(tmp_path):
    pytest.importorskip("sphinx", reason="the API reference needs Sphinx (pip install -e '.[test]')")
    built = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-E", "-q", "-b", "html", str(ROOT / "docs" / "api"),
                            str(tmp_path / "api")], capture_output=True, text=True, timeout=600, check=False)
    assert built.returncode == 0, built.stderr[-3000:]
    page = (tmp_path / "api" / "schedulers.html").read_text()
    # The pages hold what an author needs: the registry, the base classes, the chunk rules, the claims.
    for name in ("Registry", "Scheduler", "ForkJoin", "IndexedChunks", "ChunkRule", "load"):
        assert f'<span class="pre">{name}</span>' in page, name
    assert "Simulation" in (tmp_path / "api" / "simulation.html").read_text()
