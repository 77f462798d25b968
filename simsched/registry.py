"""The registries of named components: a scheduler or workload class is registered by being defined.

A subclass of :class:`~simsched.schedulers.base.Scheduler` or
:class:`~simsched.workloads.Workload` that sets its own ``name`` is added to :data:`SCHEDULERS`
or :data:`WORKLOADS` when Python creates the class (``__init_subclass__``), so the built-in
schedulers and a user's module register the same way: by subclassing. The packages' modules are
found by :func:`import_modules`, so adding a built-in is adding a file. Plugins (modules outside
the package) are loaded by :mod:`simsched.plugins`.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Iterable

from .errors import SimschedError


class Registry(dict):
    """Classes by name, for one kind of component (``scheduler``, ``workload``), in the order they were defined."""

    def __init__(self, kind: str):
        super().__init__()
        self.kind = kind

    def add(self, cls: type) -> type:
        """Register ``cls`` under its own ``name``; a name another class holds is refused."""
        name = cls.__dict__.get("name")
        if not isinstance(name, str) or not name:
            raise SimschedError(f"a {self.kind} class needs a name of its own (class attribute 'name'): "
                                f"{cls.__module__}.{cls.__qualname__}")
        held = self.get(name)
        if held is not None and _where(held) != _where(cls):
            raise SimschedError(f"{self.kind} {name!r} is defined twice: by {_where(held)} and by {_where(cls)}")
        self[name] = cls  # the same class defined again (its module reloaded) replaces itself
        return cls

    def listed(self, cls: type) -> bool:
        return cls.__dict__.get("LISTED", True) and bool(cls.__dict__.get("name"))


def _where(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


SCHEDULERS = Registry("scheduler")
WORKLOADS = Registry("workload")


def on_subclass(registry: Registry, cls: type) -> None:
    """What a registered base class does for each new subclass: register it if it names itself."""
    if registry.listed(cls):
        registry.add(cls)


def import_modules(package: str, path: Iterable[str]) -> None:
    """Import every public module of ``package`` (its ``__path__``): the classes they define register."""
    for module in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
        if not module.name.startswith("_"):
            importlib.import_module(f"{package}.{module.name}")


def describe(registry: Registry) -> list[dict]:
    """Every registered class as its metadata says: name, summary, where it is defined, and its parameters."""
    rows = []
    for name, cls in registry.items():
        params = [{"name": p.name, "type": p.kind.__name__, "default": p.default, "rule": p.rule,
                   "choices": list(p.choices) if p.choices else None, "help": p.help}
                  for p in getattr(cls, "PARAMS", {}).values()]
        rows.append({"name": name, "summary": getattr(cls, "summary", "") or "", "defined_in": cls.__module__,
                     "params": params})
    return rows


def format_description(rows: list[dict], kind: str) -> str:
    """The listing ``simsched schedulers`` and ``simsched workloads`` print."""
    lines = []
    for row in rows:
        where = "" if row["defined_in"].startswith("simsched.") else f"  [{row['defined_in']}]"
        lines.append(f"{row['name']}: {row['summary'] or '(no summary)'}{where}")
        for p in row["params"]:
            default = "none" if p["default"] is None else repr(p["default"])
            allowed = f"; one of {', '.join(p['choices'])}" if p["choices"] else (f"; {p['rule']}" if p["rule"] else "")
            lines.append(f"    {p['name']} ({p['type']}, default {default}{allowed}){': ' + p['help'] if p['help'] else ''}")
    lines.append(f"{len(rows)} {kind}s")
    return "\n".join(lines)
