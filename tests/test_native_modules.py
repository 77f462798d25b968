"""Native mode's modules: the package re-exports what its modules hold; one type names an OpenMP runtime."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from cli_runs import refused

import simsched.native as native
from simsched.native import extension, omp_calibrate, ompt

ROOT = Path(__file__).resolve().parents[1]
# What the rest of the tree takes from simsched.native itself.
USED = ("NATIVE", "NEVER_SLEEPS", "DEFAULT_TIMEOUT_S", "INT32", "MAX_REPEAT", "as_run_natively", "available",
        "check_threads", "cores", "execute", "expected_chunks", "kernel", "native_config", "replay", "report",
        "require", "run", "simulated_counter_keys", "summary")


def test_the_package_only_re_exports_its_modules():
    tree = ast.parse(Path(native.__file__).read_text(encoding="utf-8"))
    assert isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant)  # docstring
    body = tree.body[1:]
    assert all(isinstance(node, (ast.ImportFrom, ast.Assign)) for node in body), \
        [ast.unparse(node)[:60] for node in body if not isinstance(node, (ast.ImportFrom, ast.Assign))]
    assigned = [target.id for node in body if isinstance(node, ast.Assign) for target in node.targets]
    assert assigned == ["__all__"]
    sources = {node.module for node in body if isinstance(node, ast.ImportFrom) and node.level == 1}
    assert all((Path(native.__file__).parent / f"{module}.py").is_file() for module in sources), sources
    assert set(USED) <= set(native.__all__)
    assert all(hasattr(native, name) for name in native.__all__)
    assert native._native is extension._native  # the compiled runtime, None where it was not built


def _library(folder: Path, name: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"\x7fELF" + bytes(60))
    return path


def test_recording_and_calibrating_name_a_runtime_by_one_type(tmp_path):
    llvm = _library(tmp_path / "llvm-17" / "lib", "libomp.so.5")
    recorded, calibrated = ompt.runtime_at(llvm), omp_calibrate.runtime_for(str(llvm))
    assert type(recorded) is type(calibrated) is ompt.Runtime
    assert (recorded.name, recorded.version, recorded.label) == ("libomp", "17", "libomp 17")
    assert (calibrated.name, calibrated.describe()) == ("libomp", f"libomp ({llvm})")
    assert recorded.profile == calibrated.profile == "llvm"
    intel = ompt.runtime_at(_library(tmp_path, "libiomp5.so"))
    assert (intel.name, intel.label, intel.profile) == ("libiomp5", "libiomp5", "llvm")
    assert ompt.Runtime("libgomp", None).profile == "gnu"
    assert ompt.Runtime("libgomp", None).describe() == "libgomp"


def test_record_refuses_a_runtime_that_reports_no_chunks(tmp_path):
    old = _library(tmp_path / "llvm-15" / "lib", "libomp.so.5")
    program = tmp_path / "program.sh"  # a script: which runtime it loads is known only once it runs
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    out = tmp_path / "t.parquet"
    command = ["record", "--runtime", str(old), "--out", str(out), "--", str(program)]
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *command], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    refused(proc, f"--runtime {old}", "libomp 15 does not report chunks")
    assert not out.exists()
