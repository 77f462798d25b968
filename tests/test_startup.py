"""The command line starts without the heavy libraries: pandas, SciPy, matplotlib and networkx load where used."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("pandas", "scipy", "matplotlib", "networkx")
CHECK = """
import sys
{code}
print("loaded:" + ",".join(m for m in {heavy!r} if m in sys.modules))
"""


def heavy_modules_after(code: str) -> list[str]:
    """The heavy libraries a fresh interpreter has loaded after running ``code``."""
    proc = subprocess.run([sys.executable, "-c", CHECK.format(code=code, heavy=HEAVY)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    line = [line for line in proc.stdout.splitlines() if line.startswith("loaded:")][-1]
    return [m for m in line[len("loaded:"):].split(",") if m]


@pytest.mark.parametrize("code", [
    "import simsched.cli",
    "import simsched",
    "import contextlib, io\nfrom simsched.cli import main\nwith contextlib.redirect_stdout(io.StringIO()):\n"
    "    try:\n        main(['--help'])\n    except SystemExit:\n        pass",
    "from simsched.cli import main\nassert main(['run', '--machine', 'xeon-e7-4860v2', '--scheduler', 'omp-dynamic', "
    "'--threads', '8', '--workload', 'uniform:n=200', '--json']) == 0",
    "from simsched.cli import main\nassert main(['machines', 'cell-qs22']) == 0",
])
def test_the_command_line_does_not_load_heavy_libraries(code):
    assert heavy_modules_after(code) == []


def test_the_heavy_libraries_still_load_where_used():
    """The check above can fail: the chunk table and the machine graph do bring their libraries in."""
    code = ("import simsched\nr = simsched.simulate('xeon-e7-4860v2', 'fg-tree', 'uniform:n=50', 4)\n"
            "r.chunks\nsimsched.load_machine('xeon-e7-4860v2').graph")
    assert heavy_modules_after(code) == ["pandas", "networkx"]


def test_lazy_attributes_are_the_modules_objects():
    import simsched
    from simsched.engine import simulate
    from simsched.machine import Machine

    assert simsched.simulate is simulate and simsched.Machine is Machine
    assert set(simsched.__all__) <= set(dir(simsched))
    with pytest.raises(AttributeError):
        simsched.no_such_thing


def test_the_analyses_load_scipy_only_to_fit():
    """Printing a sweep's breakdown or ranking needs no SciPy (a second of import); fitting a burden does."""
    tables = "import simsched.analysis, simsched.analysis.breakdown, simsched.analysis.ranking"
    assert "scipy" not in heavy_modules_after(tables)
    fit = tables + "\nsimsched.analysis.fit_burden([1.0, 10.0, 100.0], [0.5, 2.0, 3.5], 4)"
    assert "scipy" in heavy_modules_after(fit)
