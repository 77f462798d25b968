"""One figure measured from a probe's repeated samples: a low percentile of them, with their spread."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import SimschedError

# Each figure is this percentile of its probe's samples (see Figure).
LOW_PERCENTILE = 10


@dataclass(frozen=True)
class Figure:
    """One measured figure from a probe's repeated samples: a low percentile, with the samples' spread.

    Other work on a shared host only ever makes a sample slower, so the fastest samples are the
    hardware's: the figure is their LOW_PERCENTILE-th percentile, not the least, which one lucky
    sample would set. A probe run in several tries takes the median of its tries' low percentiles,
    and ``apart`` says how far those are apart (1: they agree).
    """

    value: float
    median: float
    high: float
    samples: int
    apart: float = 1.0

    @classmethod
    def of(cls, samples, percentile: float = LOW_PERCENTILE) -> "Figure":
        """The figure of one set of ``samples``: their ``percentile``, median and 90th percentile."""
        values = _finite(samples)
        low, median, high = np.percentile(values, [percentile, 50, 90])
        return cls(float(low), float(median), float(high), int(values.size))

    @classmethod
    def of_tries(cls, tries) -> "Figure":
        """The figure of a probe's tries (a set of samples each): the median of their low percentiles."""
        lows = [float(np.percentile(_finite(t), LOW_PERCENTILE)) for t in tries]
        values = np.concatenate([_finite(t) for t in tries])
        median, high = np.percentile(values, [50, 90])
        return cls(float(np.median(lows)), float(median), float(high), int(values.size), tries_agree(lows))

    def spread(self, unit: str = "ns", digits: int = 1) -> str:
        """The figure and its spread in words: ``48.1 ns (median 50.2, 90th percentile 61.0 of 1000)``."""
        apart = f", tries {self.apart:.2f}x apart" if self.apart != 1.0 else ""
        return (f"{self.value:.{digits}f} {unit} (median {self.median:.{digits}f}, 90th percentile "
                f"{self.high:.{digits}f} of {self.samples}{apart})")


def _finite(samples) -> np.ndarray:
    values = np.asarray(samples, dtype=float).ravel()
    if values.size == 0 or not np.isfinite(values).all():
        raise SimschedError("calibration: a probe returned no samples or non-finite ones")
    return values


def tries_agree(lows) -> float:
    """How far a probe's tries are apart: the largest of their low percentiles over the least (1: agreed)."""
    lows = np.asarray(lows, dtype=float)
    return float(lows.max() / lows.min()) if lows.size and lows.min() > 0 else float("inf")
