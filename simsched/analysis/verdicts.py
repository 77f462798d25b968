"""Checks of the published figures: one figure the publications state next to ours, and its verdict's rule.

A check compares one figure the publications state (a value, a ratio, an ordering or a
qualitative claim) with the same figure computed from a sweep's results. Its rule says when
the two agree: within a relative tolerance of a published value, inside a published bound,
or a claim that holds. Checks without results say so instead of passing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

AGREES, DISAGREES, NO_RESULTS = "agrees", "disagrees", "no results"
INPUT = "input"
# The tolerance on a published value that the acceptance of the E1 burdens uses; one for every value check.
VALUE_TOLERANCE = 0.25


@dataclass(frozen=True)
class Check:
    """One published figure next to ours: what it is, both values as text, the rule and the verdict."""

    experiment: str
    figure: str
    published: str
    ours: str
    rule: str
    verdict: str
    value: float | None = None  # ours as a number, which sensitivity follows; None for a claim
    error: float | None = None  # ours / published - 1, for a published value
    kind: str = "outcome"       # "input": a published statistic the workload is generated to match


def _text(value: float, fmt: str) -> str:
    """``value`` formatted, without the exponent ``g`` would give a large one (46320, not 4.632e+04)."""
    if fmt.endswith("g") and abs(value) >= 1e4:
        return f"{value:,.0f}"
    return f"{value:{fmt}}"


def _number(value) -> float | None:
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def close_to(experiment: str, figure: str, published: float, ours, fmt: str = ".3g",
             tolerance: float = VALUE_TOLERANCE, unit: str = "") -> Check:
    """A published value: agrees when ours is within ``tolerance`` of it, relatively."""
    rule = f"within {tolerance:.0%}"
    ours = _number(ours)
    if ours is None:
        return Check(experiment, figure, f"{_text(published, fmt)}{unit}", "", rule, NO_RESULTS)
    error = ours / published - 1.0
    return Check(experiment, figure, f"{_text(published, fmt)}{unit}", f"{_text(ours, fmt)}{unit}", rule,
                 AGREES if abs(error) <= tolerance else DISAGREES, ours, error)


def within_factor(experiment: str, figure: str, published: float, ours, factor: float,
                  fmt: str = ".3g", unit: str = "") -> Check:
    """A published "about" value: agrees when ours is within a factor of it either way."""
    rule = f"within a factor {factor:g}"
    ours = _number(ours)
    if ours is None:
        return Check(experiment, figure, f"about {_text(published, fmt)}{unit}", "", rule, NO_RESULTS)
    error = ours / published - 1.0
    ok = published / factor <= ours <= published * factor
    return Check(experiment, figure, f"about {_text(published, fmt)}{unit}", f"{_text(ours, fmt)}{unit}", rule,
                 AGREES if ok else DISAGREES, ours, error)


def bounded(experiment: str, figure: str, published: str, ours, low: float | None = None,
            high: float | None = None, fmt: str = ".3g", unit: str = "") -> Check:
    """A published bound ("over 200 us", "within 3%"): agrees when ours lies inside it."""
    parts = ([f">= {_text(low, fmt)}{unit}"] if low is not None else []) + ([f"<= {_text(high, fmt)}{unit}"]
                                                                     if high is not None else [])
    rule = " and ".join(parts)
    ours = _number(ours)
    if ours is None:
        return Check(experiment, figure, published, "", rule, NO_RESULTS)
    ok = (low is None or ours >= low) and (high is None or ours <= high)
    return Check(experiment, figure, published, f"{_text(ours, fmt)}{unit}", rule, AGREES if ok else DISAGREES, ours)


def claim(experiment: str, figure: str, published: str, ours: str | None, holds: bool | None,
          rule: str = "holds", value: float | None = None) -> Check:
    """A published ordering or qualitative claim: agrees when it holds in our results."""
    if holds is None:
        return Check(experiment, figure, published, ours or "", rule, NO_RESULTS)
    return Check(experiment, figure, published, ours or "", rule, AGREES if holds else DISAGREES, value)



def verdict_counts(checks: list[Check]) -> dict[str, int]:
    """How many outcome checks (not inputs) agree, disagree and have no results."""
    verdicts = [c.verdict for c in checks if c.kind != INPUT]
    return {v: verdicts.count(v) for v in (AGREES, DISAGREES, NO_RESULTS)}
