"""The scheduler registry: names from SCHEDULERS.md mapped to their implementations."""

from __future__ import annotations

from typing import Any

from ..errors import SimschedError
from ..spec import parse_spec
from .base import Scheduler
from .finegrain import FineGrainCentral, FineGrainTree, FineGrainTreeFull
from .selfsched import OmpDynamic, OmpGuided
from .static import OmpStatic

REGISTRY: dict[str, type[Scheduler]] = {
    cls.name: cls
    for cls in (OmpStatic, FineGrainTree, FineGrainCentral, FineGrainTreeFull, OmpDynamic, OmpGuided)
}


def get_scheduler(spec: str | Scheduler, **params: Any) -> Scheduler:
    """A scheduler from a ``name:key=value,...`` spec (keyword ``params`` override the spec's)."""
    if isinstance(spec, Scheduler):
        if params:
            return type(spec)(**{**spec.params, **params})
        return spec
    name, given = parse_spec(spec, "scheduler")
    if name not in REGISTRY:
        raise SimschedError(f"unknown scheduler {name!r} (known: {', '.join(REGISTRY)})")
    return REGISTRY[name](**{**given, **params})


__all__ = ["REGISTRY", "Scheduler", "get_scheduler"]
