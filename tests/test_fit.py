"""The Amdahl burden fit and the loop durations for fractions of peak speedup."""

import numpy as np
import pytest

from simsched import SimschedError
from simsched.analysis import amdahl_speedup, duration_for, fit_burden


def test_fit_recovers_a_known_burden_exactly():
    t = np.logspace(-1, 4, 25)
    fit = fit_burden(t, amdahl_speedup(t, 3.5, 48), 48)
    assert fit.d_us == pytest.approx(3.5, rel=1e-6)
    assert fit.d_ci_us < 1e-6


def test_fit_reports_an_honest_interval_for_noisy_points():
    rng = np.random.default_rng(0)
    t = np.logspace(-1, 4, 40)
    s = amdahl_speedup(t, 5.0, 48) * rng.normal(1, 0.05, t.size)
    fit = fit_burden(t, s, 48)
    assert abs(fit.d_us - 5.0) < 2 * fit.d_ci_us + 0.5
    assert 0 < fit.d_ci_us < 2


def test_durations_for_fractions_of_peak():
    t = np.array([1.0, 10.0, 100.0, 1000.0])
    s = np.array([1.0, 10.0, 30.0, 40.0])
    assert duration_for(t, s, 40.0) == pytest.approx(1000.0)
    assert duration_for(t, s, 20.0) == pytest.approx(10 ** 1.5)  # halfway between 10 and 30 in log T
    assert np.isnan(duration_for(t, s, 41.0))
    fit = fit_burden(t, s, 48)
    assert fit.t95_us == pytest.approx(np.exp(np.log(100) + 0.8 * np.log(10)))


def test_fit_needs_two_points():
    with pytest.raises(SimschedError, match="at least two"):
        fit_burden([1.0], [0.5], 48)
