"""The schedulers by name: every Scheduler subclass with a ``name`` of its own, in this package or a plugin.

See :mod:`simsched.registry` for how a class registers, and :mod:`simsched.plugins` for plugins.
"""

from __future__ import annotations

from typing import Any

from ..errors import SimschedError
from ..registry import SCHEDULERS, import_modules
from ..spec import parse_spec
from .base import Scheduler

import_modules(__name__, __path__)  # every module here: the schedulers they define register themselves

# Scheduler classes by name (the registry itself: a plugin's scheduler appears here once it is imported).
REGISTRY: dict[str, type[Scheduler]] = SCHEDULERS


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
        from .. import plugins

        plugins.load_automatic()  # $SIMSCHED_PLUGINS and installed packages' entry points, once
    if name not in REGISTRY:
        raise SimschedError(f"unknown scheduler {name!r} (known: {', '.join(REGISTRY)})")
    return REGISTRY[name](**{**given, **params})


__all__ = ["REGISTRY", "Scheduler", "get_scheduler"]
