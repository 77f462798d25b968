"""Amdahl burden fit: the scheduling burden d in S(T) = T / (d + T/P), fitted to measured speedups."""

from __future__ import annotations

import warnings

from dataclasses import dataclass

import numpy as np

from ..errors import SimschedError


@dataclass(frozen=True)
class BurdenFit:
    """A fitted burden d (us) with its 95% confidence half-width and the loop durations for given speedups."""

    threads: int
    d_us: float
    d_ci_us: float
    t05_us: float
    t50_us: float
    t95_us: float
    peak_speedup: float
    points: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


def amdahl_speedup(t_us, d_us: float, threads: int):
    """Speedup of a loop of sequential duration T (us) with burden d on P threads."""
    t = np.asarray(t_us, dtype=float)
    return t / (d_us + t / threads)


def _fit_points(t_us, speedup) -> tuple[np.ndarray, np.ndarray]:
    """The (T, S) points a fit can use (finite and positive); at least two of them, or an error."""
    t = np.asarray(t_us, dtype=float)
    s = np.asarray(speedup, dtype=float)
    keep = np.isfinite(t) & np.isfinite(s) & (t > 0) & (s > 0)
    t, s = t[keep], s[keep]
    if t.size < 2:
        raise SimschedError(f"need at least two loop durations to fit a burden, got {t.size}")
    return t, s


def fit_burden(t_us, speedup, threads: int) -> BurdenFit:
    """Least-squares fit of d in S(T) = T/(d + T/P) to (T, S) points, as the E1 publication fits it."""
    from scipy import optimize, stats  # here, not at the top: importing SciPy takes a second, and few runs fit

    t, s = _fit_points(t_us, speedup)
    if threads < 1:
        raise SimschedError(f"threads must be >= 1 to fit a burden, got {threads}")
    # A closed-form start: each point alone gives d = T/S - T/P.
    start = max(float(np.median(t / s - t / threads)), 1e-6)
    params, cov = optimize.curve_fit(lambda x, d: amdahl_speedup(x, d, threads), t, s,
                                     p0=[start], bounds=(0.0, np.inf), maxfev=10000)
    d = float(params[0])
    dof = max(t.size - 1, 1)
    half_width = float(stats.t.ppf(0.975, dof) * np.sqrt(cov[0, 0])) if np.isfinite(cov[0, 0]) else float("nan")
    peak = float(s.max())
    return BurdenFit(threads=threads, d_us=d, d_ci_us=half_width,
                     t05_us=duration_for(t, s, 0.05 * peak),
                     t50_us=duration_for(t, s, 0.50 * peak),
                     t95_us=duration_for(t, s, 0.95 * peak),
                     peak_speedup=peak, points=int(t.size))


@dataclass(frozen=True)
class SaturatingFit:
    """A two-parameter fit of S(T) = T/(d + T/S_max): the burden d (us) and the plateau S_max, with 95% half-widths."""

    d_us: float
    d_ci_us: float
    s_max: float
    s_max_ci: float


def saturating_speedup(t_us, d_us: float, s_max: float):
    """Speedup of a loop of sequential duration T (us) with burden d and a plateau S_max instead of P."""
    return amdahl_speedup(t_us, d_us, s_max)


def fit_saturating(t_us, speedup) -> SaturatingFit:
    """Least-squares fit of d and S_max in S(T) = T/(d + T/S_max), for curves that plateau below P.

    The half-widths are NaN where the points cannot bound them (two points fit exactly).
    """
    from scipy import optimize, stats  # here, not at the top: importing SciPy takes a second, and few runs fit

    t, s = _fit_points(t_us, speedup)
    peak = float(s.max())
    start_d = max(float(np.median(t / s - t / peak)), 1e-6)
    try:
        with warnings.catch_warnings():
            # Two durations fit two parameters exactly: no covariance, which the empty interval below says.
            warnings.simplefilter("ignore", optimize.OptimizeWarning)
            params, cov = optimize.curve_fit(saturating_speedup, t, s, p0=[start_d, peak],
                                             bounds=([0.0, 1e-9], [np.inf, np.inf]), maxfev=20000)
    except (RuntimeError, ValueError):  # no convergence: report no fit rather than a wrong one
        nan = float("nan")
        return SaturatingFit(nan, nan, nan, nan)
    dof = t.size - 2
    half = np.full(2, np.nan)
    if dof > 0 and np.all(np.isfinite(np.diag(cov))):
        half = stats.t.ppf(0.975, dof) * np.sqrt(np.diag(cov))
    return SaturatingFit(d_us=float(params[0]), d_ci_us=float(half[0]), s_max=float(params[1]),
                         s_max_ci=float(half[1]))


def duration_for(t_us, speedup, target: float) -> float:
    """The shortest loop duration at which the measured speedup curve reaches ``target``.

    Interpolated in log T between the two sweep points that bracket the first crossing.
    """
    t = np.asarray(t_us, dtype=float)
    s = np.asarray(speedup, dtype=float)
    order = np.argsort(t)
    t, s = t[order], s[order]
    above = np.flatnonzero(s >= target)
    if above.size == 0:
        return float("nan")
    i = int(above[0])
    if i == 0:
        return float(t[0])
    t0, t1, s0, s1 = t[i - 1], t[i], s[i - 1], s[i]
    frac = (target - s0) / (s1 - s0) if s1 != s0 else 1.0
    return float(np.exp(np.log(t0) + frac * (np.log(t1) - np.log(t0))))
