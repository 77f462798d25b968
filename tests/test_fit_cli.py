"""``simsched fit`` and ``simsched plot`` on sweeps: one loop shape over its duration, and both fits."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from simsched.analysis import amdahl_speedup, fit_burden
from simsched.analysis.burden import loop_durations_us
from test_cli import FIT_KEYS, simsched_cli

GRID = """\
[experiment]
name = "fit-shapes"

[grid]
machine = "xeon-e7-4860v2"
scheduler = SCHEDULERS
threads = 48
WORKLOAD
"""
# E1's instrumented uforall: the instrumentation caps the speedup near 28 (docs/workloads.md#uforall).
SATURATING = ('workload = "uforall:n=480,instrumentation=0.6"\n'
              '"workload.total_us" = { logspace = [0.3, 30000], num = 9 }\n')


def sweep(tmp_path, workload: str, schedulers: str = '["fg-tree"]'):
    config = tmp_path / "experiment.toml"
    config.write_text(GRID.replace("SCHEDULERS", schedulers).replace("WORKLOAD", workload), encoding="utf-8")
    simsched_cli("sweep", config, "--out", tmp_path / "out", "--jobs", "1", "--quiet")
    return tmp_path / "out"


def refused(out) -> str:
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", "fit", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr, proc.stderr
    return proc.stderr


@pytest.mark.parametrize("workload, needles", [
    ('workload = ["uforall:n=480,total_us=10", "uforall:n=480,total_us=100", "linear:n=480"]',
     ["mix loop shapes", "workloads uforall, linear"]),
    ('workload = ["uforall:n=480,total_us=10", "uforall:n=960,total_us=100"]',
     ["mix loop shapes", "uforall's n (480, 960)"]),
    ('workload = "uforall:n=480,total_us=10"\nseed = [0, 1]', ["no loop-duration axis", "total_us"]),
], ids=["names", "n", "one-duration"])
def test_fit_refuses_what_is_not_one_shape_over_durations(tmp_path, workload, needles):
    message = refused(sweep(tmp_path, workload))
    for needle in needles:
        assert needle in message, message


def test_cost_ns_and_total_us_are_one_shape(tmp_path):
    out = sweep(tmp_path, 'workload = ["uforall:n=480,cost_ns=20", "uforall:n=480,total_us=100"]')
    records = json.loads(simsched_cli("fit", out, "--json").stdout)
    assert len(records) == 1 and records[0]["points"] == 2


@pytest.fixture(scope="module")
def saturating(tmp_path_factory):
    """fg-tree and cilk on 48 threads of the E1 machine and benchmark, whose speedup plateaus near 28."""
    return sweep(tmp_path_factory.mktemp("saturating"), SATURATING, '["fg-tree", "cilk"]')


def test_fit_adds_the_free_plateau_fit_and_keeps_the_published_one(saturating):
    records = json.loads(simsched_cli("fit", saturating, "--json").stdout)
    frame = pd.read_csv(saturating / "results.csv", keep_default_na=False)
    for record in records:
        keys = list(record)
        assert keys[:len(FIT_KEYS)] == FIT_KEYS
        assert {"d2_us", "d2_ci_us", "s_max", "s_max_ci"} <= set(keys)
        rows = frame[frame["scheduler"] == record["scheduler"]]
        t, s = loop_durations_us(rows).to_numpy(), rows["speedup"].to_numpy()
        # The one-parameter d is the published fit with P fixed, unchanged.
        assert record["d_us"] == pytest.approx(fit_burden(t, s, 48).d_us, rel=1e-12)
        # The data plateau well below P = 48; the free fit finds the plateau and follows the points.
        assert 20 < record["s_max"] < 40 and abs(record["s_max"] - record["peak_speedup"]) < 3
        assert record["d2_us"] < record["d_us"]
        free = np.abs(amdahl_speedup(t, record["d2_us"], record["s_max"]) - s).max()
        fixed = np.abs(amdahl_speedup(t, record["d_us"], 48) - s).max()
        assert free < fixed / 3 and free < 2.0, (free, fixed)
    text = simsched_cli("fit", saturating).stdout
    assert "d2 (us)" in text and "S_max" in text


def test_plot_draws_both_fits(saturating, tmp_path):
    out = tmp_path / "speedup.png"
    assert simsched_cli("plot", saturating, "--out", out).stdout.strip() == str(out)
    assert out.is_file() and out.stat().st_size > 10_000


def test_plot_curves_are_the_two_fits(saturating):
    import matplotlib

    matplotlib.use("Agg")
    from simsched.analysis.plots import plot_speedup

    frame = pd.read_csv(saturating / "results.csv", keep_default_na=False)
    import matplotlib.pyplot as plt

    ax = plot_speedup(frame, ax=plt.subplots()[1])
    records = {r["scheduler"]: r for r in json.loads(simsched_cli("fit", saturating, "--json").stdout)}
    dotted = [line for line in ax.get_lines() if line.get_linestyle() == ":"]
    dashdot = [line for line in ax.get_lines() if line.get_linestyle() == "-."]
    assert len(dotted) == len(dashdot) == 2
    for scheduler, line in zip(records, dashdot):
        t, s = line.get_data()
        r = records[scheduler]
        np.testing.assert_allclose(s, amdahl_speedup(t, r["d2_us"], r["s_max"]), rtol=1e-9)
        assert s.max() < 40  # it saturates at the plateau, not at P = 48
