"""Plugins: modules outside simsched that add schedulers, workloads or machines by defining them.

A plugin is a Python file (``my_scheduler.py``) or an importable module (``mylab.schedulers``).
Importing it is all it takes: its Scheduler and Workload subclasses register as they are
defined, and it may call :func:`simsched.machine.register_machine`. Plugins come from

- ``--plugin MODULE_OR_FILE`` on the command line (repeatable), and an experiment file's
  ``plugins = [...]`` (files relative to the experiment file);
- ``$SIMSCHED_PLUGINS``, a list separated by the path separator (``:`` on POSIX);
- installed packages' entry points in the groups ``simsched.schedulers``,
  ``simsched.workloads`` and ``simsched.machines``.

:func:`activate` loads plugins and adds them to ``$SIMSCHED_PLUGINS``, so every process this one
starts (sweep workers under any start method, a local Dask cluster) loads them too: each loads
the environment's plugins and the entry points the first time a name is not found.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Iterable

from .errors import SimschedError

ENV = "SIMSCHED_PLUGINS"
ENTRY_POINT_GROUPS = ("simsched.schedulers", "simsched.workloads", "simsched.machines")
_loaded: dict[str, ModuleType] = {}
_automatic_done = False


def _is_file(spec: str) -> bool:
    return spec.endswith(".py") or os.sep in spec or (os.altsep is not None and os.altsep in spec)


def canonical(spec: str, base: Path | None = None) -> str:
    """A plugin as every process names it: a file's absolute path (``base`` resolves a relative one), else
    the module's dotted name."""
    spec = spec.strip()
    if not spec:
        raise SimschedError("plugin: an empty name (give a Python file or an importable module)")
    if _is_file(spec):
        path = Path(spec).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        return str(path.resolve())
    return spec


def load(spec: str, base: Path | None = None) -> ModuleType:
    """Import the plugin ``spec`` once (a file or a module): what it defines registers itself."""
    name = canonical(spec, base)
    if name in _loaded:
        return _loaded[name]
    try:
        if _is_file(name):
            path = Path(name)
            if not path.is_file():
                raise SimschedError(f"plugin {spec}: no such file")
            # A module name of the file's own: two plugin files with one stem stay two modules.
            digest = hashlib.sha1(str(path).encode()).hexdigest()[:10]
            module_name = f"simsched_plugin_{path.stem}_{digest}"
            loader_spec = importlib.util.spec_from_file_location(module_name, path)
            if loader_spec is None or loader_spec.loader is None:
                raise SimschedError(f"plugin {spec}: not a Python file")
            module = importlib.util.module_from_spec(loader_spec)
            sys.modules[module_name] = module  # before running it: dataclasses and pickling look it up there
            try:
                loader_spec.loader.exec_module(module)
            except BaseException:
                sys.modules.pop(module_name, None)
                raise
        else:
            try:
                module = importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if exc.name is not None and name.startswith(exc.name):
                    raise SimschedError(f"plugin {spec}: no such module (and no file: a file plugin "
                                        "ends in .py)") from None
                raise
    except SimschedError as exc:
        if str(exc).startswith("plugin "):
            raise
        raise SimschedError(f"plugin {spec}: {exc}") from None
    except Exception as exc:  # the plugin's own code failed: say where, in one line
        raise SimschedError(f"plugin {spec} failed to load: {type(exc).__name__}: {exc}".splitlines()[0]) from None
    _loaded[name] = module
    return module


def from_environment() -> list[str]:
    """The plugins ``$SIMSCHED_PLUGINS`` names."""
    return [part for part in os.environ.get(ENV, "").split(os.pathsep) if part.strip()]


def activate(specs: Iterable[str], base: Path | None = None) -> list[str]:
    """Load ``specs`` and add them to ``$SIMSCHED_PLUGINS`` for the processes this one starts; their names."""
    names = []
    for spec in specs:
        load(spec, base)
        names.append(canonical(spec, base))
    known = from_environment()
    added = [name for name in names if name not in known]
    if added:
        os.environ[ENV] = os.pathsep.join(known + added)
    return names


def load_automatic() -> None:
    """Load ``$SIMSCHED_PLUGINS`` and the installed entry points (once per process; again if the variable
    changed)."""
    global _automatic_done
    for spec in from_environment():
        load(spec)
    if _automatic_done:
        return
    _automatic_done = True
    from importlib.metadata import entry_points

    for group in ENTRY_POINT_GROUPS:
        for point in entry_points(group=group):
            try:
                point.load()
            except Exception as exc:
                raise SimschedError(f"plugin {point.name} ({point.value}, entry point of {group}) failed to "
                                    f"load: {type(exc).__name__}: {exc}".splitlines()[0]) from None


def loaded() -> list[str]:
    """The plugins this process has loaded, as :func:`canonical` names them."""
    return list(_loaded)
