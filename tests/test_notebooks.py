"""Execute every notebook under notebooks/ from a copy outside the source tree; check what analyses compute."""

from __future__ import annotations

import ast
import os
import re
import shutil
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


@pytest.fixture(scope="session")
def outside():
    """A folder outside the source tree, where each notebook runs from a copy as a user's copy would."""
    with tempfile.TemporaryDirectory(prefix="simsched-notebooks-") as tmp:
        folder = Path(tmp).resolve()
        assert not folder.is_relative_to(ROOT), f"{folder} is inside the source tree"
        yield folder


_executed: dict[Path, object] = {}


def execute(path: Path, kernel: str, outside: Path):
    """Run a copy of a notebook top to bottom in a fresh kernel, in a folder of its own outside the source tree.

    Once per session; the kernel's working directory is that folder, so the notebook finds
    nothing of the source tree there and must take machines and workloads from the installed package.
    """
    if path not in _executed:
        folder = outside / path.stem
        folder.mkdir()
        copy = folder / path.name
        shutil.copyfile(path, copy)
        nb = nbformat.read(copy, as_version=4)
        client = nbclient.NotebookClient(nb, timeout=600, kernel_name=kernel,
                                         resources={"metadata": {"path": str(folder)}})
        client.execute()  # raises CellExecutionError if any cell raises
        _executed[path] = nb
        # Nothing is written beside the notebook (no results folder, no figure files).
        assert sorted(p.name for p in folder.iterdir()) == [path.name]
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
def test_notebook_runs_outside_the_source_tree(path, python3_kernel, outside):
    nb = execute(path, python3_kernel, outside)
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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_says_how_to_run_it(path):
    """The first markdown cell names the command and the packages that provide it and the kernel."""
    nb = nbformat.read(path, as_version=4)
    first = next(cell.source for cell in nb.cells if cell.cell_type == "markdown")
    assert f"jupyter execute {path.name}" in first
    assert "`nbclient`" in first and "ipykernel" in first


# The experiment configs a notebook writes out (so that it runs without the source tree), by variable name.
WRITTEN_OUT = {"E1_CONFIG": "e1-burden-xeon-e7.toml", "WHATIF_SCALE": "whatif-scale.toml",
               "WHATIF_NOISE": "whatif-noise.toml"}


def written_out_configs(path: Path) -> dict[str, str]:
    """The string constants assigned at the top level of a notebook's code cells, by name."""
    found = {}
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        # IPython magics are not Python: blank them out before parsing.
        source = "\n".join("" if line.startswith("%") else line for line in cell.source.splitlines())
        for node in ast.parse(source).body:
            if (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
                    and node.targets[0].id in WRITTEN_OUT and isinstance(node.value, ast.Constant)):
                found[node.targets[0].id] = node.value.value
    return found


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_written_out_experiments_are_the_source_trees(path):
    """A notebook's copy of an experiment config reads as the file under experiments/ does."""
    for name, text in written_out_configs(path).items():
        source = ROOT / "experiments" / WRITTEN_OUT[name]
        assert tomllib.loads(text) == tomllib.loads(source.read_text("utf-8")), (
            f"{path.name}: {name} differs from experiments/{source.name}")


WHAT_IF = ROOT / "notebooks" / "burden-what-if.ipynb"
COUNTS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
          "ten": 10}


@pytest.mark.skipif(not WHAT_IF.is_file(), reason="burden-what-if notebook not present")
def test_burden_what_if_text_counts_the_schedulers_it_runs():
    """Where the text says how many schedulers the notebook runs, it is E1's number."""
    schedulers = tomllib.loads(E1_CONFIG.read_text(encoding="utf-8"))["grid"]["scheduler"]
    text = " ".join(c.source for c in nbformat.read(WHAT_IF, as_version=4).cells if c.cell_type == "markdown")
    for count in re.findall(r"\b(\w+) (?:schedulers|algorithms)\b", text.lower()):
        number = int(count) if count.isdigit() else COUNTS.get(count)
        assert number in (None, len(schedulers)), f"the text says {count} schedulers; E1 runs {len(schedulers)}"


@pytest.mark.skipif(not WHAT_IF.is_file(), reason="burden-what-if notebook not present")
def test_burden_what_if_tables(python3_kernel, outside):
    """Each fitted-d table names every E1 scheduler with a finite, positive d; the plots were drawn."""
    schedulers = tomllib.loads(E1_CONFIG.read_text(encoding="utf-8"))["grid"]["scheduler"]
    nb = execute(WHAT_IF, python3_kernel, outside)
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
def test_scaling_and_noise_tables(python3_kernel, outside):
    """The reduced what-if runs give a finite d per scheduler and thread count, and an inflation per noise level."""
    schedulers = tomllib.loads((ROOT / "experiments" / "whatif-scale.toml").read_text(encoding="utf-8"))["grid"][
        "scheduler"]
    nb = execute(SCALING, python3_kernel, outside)
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
