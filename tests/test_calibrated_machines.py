"""The calibrations shipped under machines/calibrated/ load as machines and say how they were measured."""

from pathlib import Path

import numpy as np
import pytest

from simsched import load_machine, simulate
from simsched.native.calibrate import DOUBTFUL

CALIBRATED = sorted((Path(__file__).resolve().parent.parent / "machines" / "calibrated").glob("*.toml"))


def test_there_is_a_sixteen_cpu_calibration():
    assert any(load_machine(str(path)).cores == 16 for path in CALIBRATED)


@pytest.mark.parametrize("path", CALIBRATED, ids=lambda p: p.name)
def test_a_calibrated_machine_loads_and_simulates(path):
    machine = load_machine(str(path))
    assert machine.latency.shape == (machine.cores, machine.cores)
    assert np.all(machine.latency[~np.eye(machine.cores, dtype=bool)] > 0)
    assert machine.hierarchy is not None
    run = simulate(str(path), "omp-static", "uforall:n=64,cost_ns=100", machine.cores)
    assert run.makespan_ns > 64 * 100 / machine.cores


@pytest.mark.parametrize("path", CALIBRATED, ids=lambda p: p.name)
def test_a_calibrated_machine_names_its_command_and_its_doubts(path):
    header = [line for line in path.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
    assert header[0].startswith("# Measured by `simsched native calibrate")
    # Written with --force: every doubt is in the header, where native validate looks for it.
    if "--force" in header[0]:
        assert any(line.startswith(DOUBTFUL) for line in header)
