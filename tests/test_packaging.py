"""What a plain install ships: the host OpenMP reference that ``native validate`` builds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import simsched.native as native
from simsched.native import openmp

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("name", ["omp_uforall", "omp_schedbench"])
def test_the_openmp_references_resolve_inside_the_package(name):
    source = openmp.HERE / f"{name}.c"
    assert openmp.HERE == Path(native.__file__).resolve().parent and source.is_file()
    assert "#pragma omp parallel" in source.read_text()


def _openmp_compiler() -> bool:
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    return compiler is not None and subprocess.run(
        [compiler, "-fopenmp", "-x", "c", "-", "-o", os.devnull], input="int main(void){return 0;}",
        capture_output=True, text=True).returncode == 0


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A wheel built from a clean copy of the sources, and that wheel installed into a folder of its own."""
    base = tmp_path_factory.mktemp("wheel")
    source = base / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("simsched", "machines"):
        shutil.copytree(ROOT / name, source / name, ignore=ignore)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    built = subprocess.run([*pip, "wheel", str(source), "--no-deps", "--no-build-isolation", "-w", str(base / "dist")],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    wheel = next((base / "dist").glob("simsched-*.whl"))
    target = base / "site"
    done = subprocess.run([*pip, "install", "--no-deps", "--no-build-isolation", "--target", str(target), str(wheel)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return wheel, target


@pytest.mark.parametrize("source", ["omp_uforall.c", "omp_schedbench.c"])
def test_the_wheel_ships_the_openmp_references(installed, source):
    wheel, target = installed
    assert f"simsched/native/{source}" in zipfile.ZipFile(wheel).namelist()
    assert (target / "simsched" / "native" / source).is_file()


def test_the_wheel_ships_the_matrices(installed, tmp_path):
    wheel, target = installed
    for name in ("banded", "uniform", "lognormal", "powerlaw"):
        assert f"simsched/workloads/matrices/{name}.mtx" in zipfile.ZipFile(wheel).namelist()
    # Read by name from the install, outside any checkout.
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "run", "--machine", "haswell-e5-2695v3",
                           "--scheduler", "omp-static", "--threads", "2", "--workload",
                           "spmv:matrix=banded,iters=1,row_ns=0,nnz_ns=1,data=0", "--json"], capture_output=True, text=True,
                          cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(target)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["sequential_ns"] == 2048 * 9


def test_validate_runs_the_openmp_reference_from_an_install(installed, tmp_path):
    _, target = installed
    if not list((target / "simsched" / "native").glob("_native*.so")) or not _openmp_compiler():
        pytest.skip("no C compiler with OpenMP here")
    env = {**os.environ, "PYTHONPATH": str(target)}

    def cli(*args):
        # Outside any checkout: the installed package is the only simsched there is.
        proc = subprocess.run([sys.executable, "-m", "simsched.cli", *args], capture_output=True, text=True,
                              cwd=tmp_path, env=env, timeout=300)
        assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
        return proc

    probe = subprocess.run([sys.executable, "-c", "import simsched; print(simsched.__file__)"], capture_output=True,
                           text=True, cwd=tmp_path, env=env)
    assert Path(probe.stdout.strip()).is_relative_to(target)
    cli("native", "calibrate", "--out", "m.toml", "--threads", "1", "--rounds", "100", "--force")
    records = json.loads(cli("native", "validate", "--machine", "m.toml", "--threads", "1", "--points", "2",
                             "--repeat", "1", "--json").stdout)
    reference = [r for r in records if r["scheduler"] == "host-openmp-static"]
    assert len(reference) == 1 and len(reference[0]["native_loop_us"]) == 2


def test_no_build_artefact_is_tracked():
    """Wheels, compiled extensions and build folders stay out of the repository."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("not a git checkout")
    tracked = subprocess.run(["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True).stdout.split()
    artefacts = [f for f in tracked if f.endswith((".whl", ".so", ".pyc", ".o", ".egg-info"))
                 or f.split("/")[0] in ("build", "dist", "results")]
    assert artefacts == []
