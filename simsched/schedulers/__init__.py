"""The scheduler registry: names from SCHEDULERS.md mapped to their implementations.

Every concrete Scheduler subclass with a ``name`` in the modules below is registered.
"""

from __future__ import annotations

from typing import Any

from ..errors import SimschedError
from ..spec import parse_spec
from . import (adaptive, binlpt, dls, finegrain, hybrid, ich, lbs, selfsched, static, staticsteal,  # noqa: F401
               stealing, tbb)  # (registration)
from .base import Scheduler


def _concrete(cls):
    for sub in cls.__subclasses__():
        if sub.name:
            yield sub
        yield from _concrete(sub)


REGISTRY: dict[str, type[Scheduler]] = {cls.name: cls for cls in _concrete(Scheduler)}


def get_scheduler(spec: str | Scheduler, **params: Any) -> Scheduler:
    """A scheduler from a ``name:key=value,...`` spec (keyword ``params`` override the spec's)."""
    if isinstance(spec, Scheduler):
        if params:
            # Only what was set: a default that is no value of its type (grain=None) is not a parameter to give.
            given = {key: value for key, value in spec.params.items() if value != spec.PARAMS[key].default}
            return type(spec)(**{**given, **params})
        return spec
    name, given = parse_spec(spec, "scheduler")
    if name not in REGISTRY:
        raise SimschedError(f"unknown scheduler {name!r} (known: {', '.join(REGISTRY)})")
    return REGISTRY[name](**{**given, **params})


__all__ = ["REGISTRY", "Scheduler", "get_scheduler"]
