"""Execute every notebook under notebooks/ and check what the analysis notebooks compute."""

from __future__ import annotations

import os
import sys
import tempfile
import tomllib
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
E1_CONFIG = ROOT / "experiments" / "e1-burden-xeon-e7.toml"


def _runs_this_interpreter(argv: list[str]) -> bool:
    """Whether a kernelspec's command starts the interpreter running the tests."""
    if not argv:
        return False
    # jupyter_client replaces a bare python/python3/python3.X with sys.executable.
    major, minor = sys.version_info[:2]
    if argv[0] in ("python", f"python{major}", f"python{major}.{minor}"):
        return True
    # Compare without following symlinks: a virtualenv's python links to the base interpreter,
    # which runs without the virtualenv's packages.
    return os.path.abspath(argv[0]) == os.path.abspath(sys.executable)


@pytest.fixture(scope="session")
def python3_kernel():
    """Make sure kernel "python3" runs this interpreter (install a temporary kernelspec if needed)."""
    from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel, find_kernel_specs

    ok = False
    if "python3" in find_kernel_specs():
        try:
            ok = _runs_this_interpreter(KernelSpecManager().get_kernel_spec("python3").argv)
        except NoSuchKernel:
            ok = False
    if ok:
        yield "python3"
        return
    from ipykernel import kernelspec

    with tempfile.TemporaryDirectory(prefix="simsched-kernel-") as tmp, pytest.MonkeyPatch.context() as mp:
        kernelspec.install(user=False, prefix=tmp, kernel_name="python3")
        share = str(Path(tmp) / "share" / "jupyter")
        mp.setenv("JUPYTER_PATH", share + os.pathsep + os.environ.get("JUPYTER_PATH", ""))
        assert _runs_this_interpreter(KernelSpecManager().get_kernel_spec("python3").argv)
        yield "python3"


_executed: dict[Path, object] = {}


def execute(path: Path, kernel: str):
    """Run a notebook top to bottom in a fresh kernel from the repository root (once per session)."""
    if path not in _executed:
        nb = nbformat.read(path, as_version=4)
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name=kernel,
                                         resources={"metadata": {"path": str(ROOT)}})
        client.execute()  # raises CellExecutionError if any cell raises
        _executed[path] = nb
    return _executed[path]


def cell_text(nb, tag: str) -> str:
    """Everything the cell tagged ``tag`` printed or displayed as text."""
    cells = [c for c in nb.cells if tag in c.get("metadata", {}).get("tags", [])]
    assert len(cells) == 1, f"expected exactly one cell tagged {tag!r}, found {len(cells)}"
    parts = []
    for out in cells[0].get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append(out.get("text", ""))
        elif "data" in out:
            parts.append(out["data"].get("text/plain", ""))
    return "".join(parts)


def table_rows(text: str, names) -> dict[str, list[str]]:
    """The first printed row of each of ``names`` in a text table: name -> the other fields."""
    rows: dict[str, list[str]] = {}
    for line in text.splitlines():
        fields = line.split()
        if fields and fields[0] in names and fields[0] not in rows:
            rows[fields[0]] = fields[1:]
    return rows


def test_there_are_notebooks():
    assert NOTEBOOKS, "no notebooks under notebooks/"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, python3_kernel):
    nb = execute(path, python3_kernel)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
        assert not errors, f"{path.name}: a cell raised {errors[0].get('ename')}: {errors[0].get('evalue')}"
        assert cell.get("execution_count") is not None, f"{path.name}: a code cell did not run"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_is_committed_without_outputs(path):
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.get("outputs"), f"{path.name}: committed with outputs"
            assert cell.get("execution_count") is None, f"{path.name}: committed with execution counts"


WHAT_IF = ROOT / "notebooks" / "burden-what-if.ipynb"


@pytest.mark.skipif(not WHAT_IF.is_file(), reason="burden-what-if notebook not present")
def test_burden_what_if_tables(python3_kernel):
    """Each fitted-d table names every E1 scheduler with a finite, positive d; the plots were drawn."""
    schedulers = tomllib.loads(E1_CONFIG.read_text(encoding="utf-8"))["grid"]["scheduler"]
    nb = execute(WHAT_IF, python3_kernel)
    for tag in ("d-table-base", "d-table-half", "d-table-big", "d-table-all"):
        text = cell_text(nb, tag)
        assert text.strip(), f"cell {tag} printed nothing"
        rows = table_rows(text, schedulers)
        for sched in schedulers:
            assert sched in rows, f"cell {tag}: no row for scheduler {sched}"
            # d is the second column: after P in the per-machine tables, after the published d in the last one.
            d = float(rows[sched][1])
            assert 0 < d < 1000, f"cell {tag}: implausible d={d} for {sched}"
    # The 96-thread table fits at P = 96, the others at P = 48.
    for tag, threads in (("d-table-base", "48"), ("d-table-half", "48"), ("d-table-big", "96")):
        rows = table_rows(cell_text(nb, tag), schedulers)
        assert all(r[0] == threads for r in rows.values()), f"cell {tag}: wrong P"
    conclusions = cell_text(nb, "conclusions")
    assert "halving the cross-socket latency" in conclusions and "doubling the sockets" in conclusions
    images = sum("image/png" in o.get("data", {}) for c in nb.cells if c.cell_type == "code"
                 for o in c.get("outputs", []))
    assert images >= 4, f"expected the speedup plots and the bar chart, found {images} image(s)"


SCALING = ROOT / "notebooks" / "scaling-and-noise.ipynb"


@pytest.mark.skipif(not SCALING.is_file(), reason="scaling-and-noise notebook not present")
def test_scaling_and_noise_tables(python3_kernel):
    """The reduced what-if runs give a finite d per scheduler and thread count, and an inflation per noise level."""
    schedulers = tomllib.loads((ROOT / "experiments" / "whatif-scale.toml").read_text(encoding="utf-8"))["grid"][
        "scheduler"]
    nb = execute(SCALING, python3_kernel)
    assert "built in" in cell_text(nb, "machine") and "16 socket(s) x 64 cores" in cell_text(nb, "machine")
    rows = table_rows(cell_text(nb, "d-table"), schedulers)
    for sched in schedulers:
        d = [float(x) for x in rows[sched]]
        assert len(d) == 3 and all(0 < x < 1e6 for x in d), f"d of {sched}: {rows[sched]}"
    # A tree barrier's burden stays within a few microseconds from 64 to 256 threads.
    assert max(float(x) for x in rows["fg-tree"]) < 10
    inflation = table_rows(cell_text(nb, "inflation"), schedulers)
    for sched in schedulers:
        values = [float(x) for x in inflation[sched]]
        assert len(values) == 4 and all(0.3 < x < 100 for x in values)
    # Late arrival by 100 us on average: the fork-join loop waits for the last worker; Cilk does not.
    assert float(inflation["omp-static"][3]) > 2 * float(inflation["cilk"][3])
