"""Row lengths of a square sparse matrix made to show given statistics, dealt to blocks of rows by seeded
streams.

A set of statistics (rows, mean, variance, least and most nonzeros per row) becomes an exact
count of the rows of each length (``fit``): one row of the least length, one of the most, and
the other rows the quantiles of a lognormal excess over the least length, cut at the most,
whose two parameters are solved for the mean and the variance. The counts fix the matrix's
statistics whatever the seed; a seed only decides which rows get which lengths. Rows are
dealt in blocks of ``BLOCK_ROWS``: a binary tree splits the counts between its halves with a
multivariate hypergeometric draw from a stream of each node's own, and each block shuffles
its share with a stream of its own, so that any block can be made alone and no block depends
on the order in which the others are made.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from ..errors import SimschedError

BLOCK_ROWS = 1 << 16
# NumPy's multivariate hypergeometric draw (which deals the counts among blocks) takes totals below 10^9.
MAX_ROWS = 10**9 - 1
# The largest quantiles are computed one by one; the rest are counted per length, which is quicker
# while few lengths lie below them. This many to begin with (more where the lengths below spread wide).
TOP_QUANTILES = 4096
# A fit that misses the variance by more than this share, or by more than VARIANCE_STEPS / rows, is no fit
# (the mean it meets to the nonzero). Whole lengths move the variance of a few rows in steps of 2 / rows.
VARIANCE_TOLERANCE = 0.01
VARIANCE_STEPS = 4


@dataclass(frozen=True)
class RowTargets:
    """The statistics a matrix's row lengths are to show: rows (= columns), mean, variance, fewest and most
    nonzeros in a row."""

    rows: int
    mean: float
    var: float
    min: int
    max: int

    @property
    def nonzeros(self) -> int:
        """The matrix's nonzeros: the mean times the rows, to the nearest whole nonzero."""
        return round(self.mean * self.rows)

    def with_rows(self, rows: int) -> RowTargets:
        """The same statistics per row over ``rows`` rows."""
        return RowTargets(int(rows), self.mean, self.var, self.min, self.max)


def variance_range(rows: int, nonzeros: int, least: int, most: int) -> tuple[float, float]:
    """The least and the most variance of ``rows`` whole row lengths in [least, most] that sum to ``nonzeros``
    with at least one row of each extreme (the sum within what those rows allow)."""
    if rows == 1 or least == most:
        return 0.0, 0.0
    rest, free = nonzeros - least - most, rows - 2
    mean = nonzeros / rows
    if free == 0:
        spread = least * least + most * most
        return spread / rows - mean * mean, spread / rows - mean * mean
    # Least: the other rows as equal as whole lengths can be. Most: as many as can at the extremes.
    q, r = divmod(rest, free)
    low = least * least + most * most + r * (q + 1) ** 2 + (free - r) * q * q
    full, left = divmod(rest - free * least, most - least)
    high = (least * least + most * most + full * most * most + (least + left) ** 2 * (1 if left else 0)
            + (free - full - (1 if left else 0)) * least * least)
    # Exact integer sums of squares, then one division: no cancellation beyond the last one.
    return max(0.0, low / rows - mean * mean), max(0.0, high / rows - mean * mean)


def check_targets(t: RowTargets, owner: str) -> None:
    """Raise naming what is wrong if no square matrix of whole row lengths can show these statistics (and,
    where more rows would do, from how many rows they can)."""
    problem = _problem(t)
    if problem is None:
        return
    more = least_rows(t) if t.rows <= MAX_ROWS else None
    hint = f"; these statistics hold from rows={more} up" if more is not None and more > t.rows else ""
    raise SimschedError(f"{owner}: {problem}{hint}")


def _problem(t: RowTargets) -> str | None:
    """What makes ``t`` unreachable, in words, or None."""
    if t.rows > MAX_ROWS:
        return f"rows={t.rows} is more than row lengths fitted to statistics take (at most {MAX_ROWS})"
    if t.min > t.max:
        return f"min={t.min} exceeds max={t.max}"
    if not t.min <= t.mean <= t.max:
        return f"mean={_g(t.mean)} lies outside [min, max] = [{t.min}, {t.max}]"
    if t.max > t.rows:
        return (f"a row of max={t.max} nonzeros needs as many columns, and the matrix is square with "
                f"rows={t.rows} rows")
    if t.min == t.max and (t.nonzeros != t.min * t.rows or t.var > 0):
        return (f"with min = max = {t.min} every row holds {t.min} nonzeros: the mean must be {t.min} and "
                "the variance 0")
    e, least = t.nonzeros, (t.rows - 1) * t.min + t.max
    most = t.min + (t.rows - 1) * t.max
    if t.rows > 1 and t.min < t.max and not least <= e <= most:
        bound = f"at least {_g(least / t.rows)}" if e < least else f"at most {_g(most / t.rows)}"
        return (f"mean={_g(t.mean)} is not reachable: with a row of min={t.min} and a row of max={t.max} "
                f"among rows={t.rows}, the mean is {bound}")
    low, high = variance_range(t.rows, e, t.min, t.max)
    if not close(min(max(t.var, low), high), t.var, t.rows):
        same = math.isclose(low, high, rel_tol=1e-9)
        reach = f"of {_g(low)}" if same else f"between {_g(low)} and {_g(high)}"
        return (f"var={_g(t.var)} is not reachable: {t.rows} rows of {t.min} to {t.max} nonzeros (each "
                f"extreme at least once) with mean {_g(t.mean)} have a variance {reach}")
    return None


def reachable(t: RowTargets) -> bool:
    """Whether a square matrix of whole row lengths can show ``t``."""
    return _problem(t) is None


def least_rows(t: RowTargets) -> int | None:
    """The fewest rows over which ``t``'s statistics per row are reachable (None: over no number of rows)."""
    # More rows weigh the rows of the extremes less: double from the longest row until reachable, then bisect.
    low = max(t.max, 1)
    if reachable(t.with_rows(low)):
        return low
    high = low * 2
    while not reachable(t.with_rows(high)):
        if high >= MAX_ROWS:
            return None
        low, high = high, min(high * 2, MAX_ROWS)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if reachable(t.with_rows(mid)) else (mid, high)
    return high


def reachable_variance(t: RowTargets) -> float:
    """The variance nearest ``t.var`` that whole lengths of ``t``'s rows, nonzeros, min and max can have."""
    low, high = variance_range(t.rows, t.nonzeros, t.min, t.max)
    return min(max(t.var, low), high)


def close(var: float, target: float, rows: int) -> bool:
    """Whether a variance of ``rows`` whole lengths is as near ``target`` as fitted lengths are made."""
    return math.isclose(var, target, rel_tol=VARIANCE_TOLERANCE, abs_tol=VARIANCE_STEPS / rows)


def _g(value: float) -> str:
    return f"{value:.6g}"


class RowCounts:
    """A matrix's row lengths as the count of rows of each length, and the rows' lengths block by block."""

    def __init__(self, values: np.ndarray, counts: np.ndarray, block_rows: int = BLOCK_ROWS):
        keep = counts > 0
        self.values = np.ascontiguousarray(values[keep], dtype=np.int64)
        self.counts = np.ascontiguousarray(counts[keep], dtype=np.int64)
        self.values.flags.writeable = self.counts.flags.writeable = False
        self.rows = int(self.counts.sum())
        self.nonzeros = int((self.values * self.counts).sum())
        self.block_rows = int(block_rows)
        self.block_count = -(-self.rows // self.block_rows)

    def statistics(self) -> dict[str, float]:
        """Rows, columns, nonzeros and the spread of nonzeros per row, as ``sparse.row_statistics`` gives
        them."""
        mean = self.nonzeros / self.rows
        var = float((self.counts * (self.values - mean) ** 2).sum() / self.rows)
        return {"rows": self.rows, "cols": self.rows, "nnz": self.nonzeros, "mean": mean, "var": var,
                "cv": math.sqrt(var) / mean if mean else 0.0, "min": int(self.values[0]),
                "max": int(self.values[-1])}

    def block_span(self, block: int) -> tuple[int, int]:
        """The first row of ``block`` and the row after its last."""
        return block * self.block_rows, min(self.rows, (block + 1) * self.block_rows)

    def block(self, block: int, seed: int) -> np.ndarray:
        """The lengths of the rows of ``block`` for ``seed``: the same whether or not others were made."""
        if not 0 <= block < self.block_count:
            raise IndexError(f"block {block} of {self.block_count}")
        lo, hi, counts = 0, self.block_count, self.counts
        while hi - lo > 1:
            mid = (lo + hi) // 2
            left = self._split(counts, lo, mid, hi, seed)
            lo, hi, counts = (lo, mid, left) if block < mid else (mid, hi, counts - left)
        return self._shuffle(counts, block, seed)

    def blocks(self, seed: int) -> Iterator[np.ndarray]:
        """Every block's lengths in row order (each node of the tree split once)."""
        stack = [(0, self.block_count, self.counts)]
        while stack:
            lo, hi, counts = stack.pop()
            if hi - lo == 1:
                yield self._shuffle(counts, lo, seed)
                continue
            mid = (lo + hi) // 2
            left = self._split(counts, lo, mid, hi, seed)
            stack.append((mid, hi, counts - left))
            stack.append((lo, mid, left))

    def lengths(self, seed: int) -> np.ndarray:
        """All rows' lengths for ``seed``, in row order."""
        out = np.empty(self.rows, dtype=np.int64)
        for block, lengths in enumerate(self.blocks(seed)):
            start, stop = self.block_span(block)
            out[start:stop] = lengths
        return out

    def _split(self, counts: np.ndarray, lo: int, mid: int, hi: int, seed: int) -> np.ndarray:
        """The counts that go to blocks [lo, mid) of the counts of blocks [lo, hi)."""
        rows = min(self.rows, mid * self.block_rows) - lo * self.block_rows
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(0, lo, hi))))
        return rng.multivariate_hypergeometric(counts, rows, method="marginals")

    def _shuffle(self, counts: np.ndarray, block: int, seed: int) -> np.ndarray:
        rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(1, block))))
        lengths = np.repeat(self.values, counts)
        rng.shuffle(lengths)
        return lengths


@lru_cache(maxsize=64)
def fit(t: RowTargets) -> RowCounts:
    """The exact count of rows of each length that shows ``t`` (checked first; raises if none can)."""
    check_targets(t, "row lengths")
    e, var = t.nonzeros, reachable_variance(t)
    if t.rows == 1 or t.min == t.max:
        return RowCounts(np.array([t.min]), np.array([t.rows]))
    if t.max == t.min + 1 or t.rows == 2:
        # Two lengths, or two rows: the mean alone decides.
        top = e - t.min * t.rows if t.max == t.min + 1 else 1
        return RowCounts(np.array([t.min, t.max]), np.array([t.rows - top, top]))
    body = _Body(t.rows - 2, t.min, t.max)
    squares = t.rows * (var + (e / t.rows) ** 2)
    values, counts = body.fit(e - t.min - t.max, squares - t.min ** 2 - t.max ** 2)
    counts[0] += 1  # the rows of the extremes: values run from min to max
    counts[-1] += 1
    made = RowCounts(values, counts)
    if not math.isclose(made.statistics()["var"], var, rel_tol=VARIANCE_TOLERANCE / 10):
        _polish(values, counts, round(squares))
        made = RowCounts(values, counts)
    got = made.statistics()["var"]
    if not close(got, t.var, t.rows):
        raise SimschedError(f"row lengths: cannot fit var={_g(t.var)} with mean {_g(t.mean)}, min {t.min} "
                            f"and max {t.max} over {t.rows} rows (the nearest fit has {_g(got)})")
    return made


class _Body:
    """The quantiles of min + floor(X), X lognormal, cut at max, at (j + 1/2) / rows for j < rows."""

    def __init__(self, rows: int, least: int, most: int):
        self.rows, self.least, self.most = rows, least, most
        self.top_z: dict[int, np.ndarray] = {}

    def _z(self, top: int) -> np.ndarray:
        """The standard normal quantiles of the ``top`` largest points (from the upper tail: no precision
        lost)."""
        if top not in self.top_z:
            from scipy.special import ndtri

            j = np.arange(self.rows - top, self.rows)
            self.top_z[top] = -ndtri((self.rows - j - 0.5) / self.rows)
        return self.top_z[top]

    def _top(self, mu: float, s: float, top: int) -> np.ndarray:
        x = np.minimum(mu + s * self._z(top), math.log(self.most - self.least + 1.0))
        return np.minimum(self.least + np.floor(np.exp(x)), self.most)

    def _below(self, mu: float, s: float, points: int, upto: int) -> tuple[np.ndarray, np.ndarray]:
        """For lengths k in (least, upto]: how many of the ``points`` lowest quantiles reach k."""
        from scipy.special import ndtr

        k = np.arange(self.least + 1, upto + 1, dtype=float)
        reach = points - np.ceil(self.rows * ndtr((np.log(k - self.least) - mu) / s) - 0.5)
        return k, np.clip(reach, 0, points)

    def _parts(self, mu: float, s: float):
        top = min(self.rows, TOP_QUANTILES)
        while True:
            big = self._top(mu, s, top)
            # The lowest of the top points bounds the rest; count per length below it while that is cheap.
            if top == self.rows or big[0] - self.least <= 8 * top:
                return big, self.rows - top, int(big[0])
            top = min(self.rows, top * 4)

    def moments(self, mu: float, s: float) -> tuple[float, float]:
        """The sum and the sum of squares of the points."""
        big, points, upto = self._parts(mu, s)
        total, squares = float(big.sum()), float((big * big).sum())
        if points:
            k, reach = self._below(mu, s, points, upto)
            total += points * self.least + float(reach.sum())
            squares += points * self.least ** 2 + float(((2 * k - 1) * reach).sum())
        return total, squares

    def counts(self, mu: float, s: float) -> tuple[np.ndarray, np.ndarray]:
        """Rows of each length from min to max (the points' lengths, counted)."""
        big, points, upto = self._parts(mu, s)
        counts = np.zeros(self.most - self.least + 1, dtype=np.int64)
        np.add.at(counts, big.astype(np.int64) - self.least, 1)
        if points:
            _, reach = self._below(mu, s, points, upto)
            at_least = np.concatenate([[points], reach.astype(np.int64), [0]])
            counts[: upto - self.least + 1] += at_least[:-1] - at_least[1:]
        return np.arange(self.least, self.most + 1, dtype=np.int64), counts

    def fit(self, total: int, squares: float) -> tuple[np.ndarray, np.ndarray]:
        """The counts of the points whose lengths sum to ``total`` and their squares to about ``squares``."""
        from scipy.optimize import brentq
        from scipy.special import ndtri

        z_top = float(-ndtri(0.5 / self.rows))
        span = math.log(self.most - self.least + 1.0)

        def mu_for(s: float) -> float:
            # Below ``floor`` every point is min, above ``ceiling`` every point is max. Start from where an
            # uncut lognormal has the mean, widening the bracket from there: far from it the lengths spread
            # wide and cost more to count.
            floor, ceiling = -s * z_top - 1.0, span + s * z_top + 1.0

            def gap(mu: float) -> float:
                return self.moments(mu, s)[0] - total

            guess = min(max(math.log(max(total / self.rows - self.least, 0.5)) - s * s / 2, floor), ceiling)
            low, high, step = guess, guess, 0.5
            while low > floor and gap(low) > 0:
                low, step = max(floor, low - step), step * 2
            step = 0.5
            while high < ceiling and gap(high) < 0:
                high, step = min(ceiling, high + step), step * 2
            return brentq(gap, low, high, xtol=1e-13, rtol=1e-15)

        solved: dict[float, tuple[float, float]] = {}

        def excess(log_s: float) -> float:
            if log_s not in solved:
                s = math.exp(log_s)
                mu = mu_for(s)
                solved[log_s] = (mu, self.moments(mu, s)[1] - squares)
            return solved[log_s][1]

        # A wider lognormal with the same sum spreads the lengths more: bracket the spread, then solve for it.
        low, high = 0.0, 0.0
        while excess(low) > 0 and low > math.log(1e-6):
            low -= 2.0
        while excess(high) < 0 and high < math.log(64.0):
            high += 1.0
        if excess(low) > 0 or excess(high) < 0:
            # Out of the lognormal's reach: the nearest (the caller checks it).
            log_s = low if excess(low) > 0 else high
        else:
            log_s = brentq(excess, low, high, xtol=1e-10)
        excess(log_s)
        values, counts = self.counts(solved[log_s][0], math.exp(log_s))
        _settle(values, counts, total)
        return values, counts


def _settle(values: np.ndarray, counts: np.ndarray, total: int) -> None:
    """Move rows by one nonzero (from the most common length) until the lengths sum to ``total``."""
    gap = total - int((values * counts).sum())
    if gap == 0:
        return
    step = 1 if gap > 0 else -1
    # The most common length that can move that way (lengths stay within min..max).
    movable = counts[:-1] if step > 0 else counts[1:]
    at = int(np.argmax(movable)) + (0 if step > 0 else 1)
    moved = min(abs(gap), int(counts[at]))
    counts[at] -= moved
    counts[at + step] += moved


def _polish(values: np.ndarray, counts: np.ndarray, squares: int, moves: int = 10_000) -> None:
    """Move pairs of rows apart or together by a nonzero each (their sum kept, neither extreme emptied) while
    that brings the sum of squared lengths nearer ``squares``: the few rows quantiles spread too coarsely."""
    last = counts.size - 1
    for _ in range(moves):
        gap = squares - int((values * values * counts).sum())
        occupied = np.flatnonzero(counts)
        if occupied.size > 4096:  # so many lengths that the quantiles spread them finely enough
            return
        best, change = None, 0
        for i in occupied:
            # Rows i and j apart (i down, j up) change the squares by 2 (j - i) + 2, together (i up, j down)
            # by 2 - 2 (j - i): try the occupied j nearest to closing the gap, and its neighbours.
            for sign in (1, -1):
                want = i + sign * (gap - 2) / 2
                at = int(np.searchsorted(occupied, want))
                for j in occupied[max(at - 1, 0): at + 1]:
                    j = int(j)
                    if j < i or (j == i and counts[i] < 2):
                        continue
                    lo, hi = (i - 1, j + 1) if sign > 0 else (i + 1, j - 1)
                    delta = 2 * (j - i) + 2 if sign > 0 else 2 - 2 * (j - i)
                    if lo < 0 or hi > last or lo > hi or abs(gap - delta) >= abs(gap - change):
                        continue
                    if all(counts[x] - (i == x) - (j == x) + (lo == x) + (hi == x) >= 1 for x in (0, last)):
                        best, change = (i, j, lo, hi), delta
        if best is None:
            return
        i, j, lo, hi = best
        counts[i] -= 1
        counts[j] -= 1
        counts[lo] += 1
        counts[hi] += 1
