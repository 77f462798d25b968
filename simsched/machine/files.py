"""The machine files simsched ships, and those plugins register by name."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def _machine_files():
    """The folder of built-in machine files: package data when installed, ``machines/`` in a checkout."""
    try:
        return resources.files("simsched.machines")
    except ModuleNotFoundError:
        # Imported from a source tree (not through the installed package's mapping).
        return Path(__file__).resolve().parent.parent.parent / "machines"


def builtin_machine_bytes(name: str) -> bytes | None:
    """The bytes of the built-in machine file ``name``, or None where there is none."""
    resource = _machine_files().joinpath(f"{name}.toml")
    return resource.read_bytes() if resource.is_file() else None


def value_sources(name: str) -> dict[str, str]:
    """Each ``section.key`` of a built-in machine file with the comment giving its source, continued lines joined."""
    raw = builtin_machine_bytes(name)
    if raw is None:
        return {}
    sources: dict[str, str] = {}
    section, last = "", None
    for line in raw.decode("utf-8").splitlines():
        text = line.strip()
        if text.startswith("["):
            section, last = text.strip("[]").strip(), None
        elif text.startswith("#"):
            if last is not None and line[:1].isspace():  # an indented comment continues the value's source
                sources[last] += " " + text.lstrip("#").strip()
            else:
                last = None
        elif "=" in text and "#" in text:
            key = text.split("=", 1)[0].strip()
            last = f"{section}.{key}" if section else key
            sources[last] = text.split("#", 1)[1].strip()
        else:
            last = None
    return sources


def builtin_machines() -> list[str]:
    """Names of the machine files shipped with simsched, and of those plugins registered."""
    shipped = [p.name[:-5] for p in _machine_files().iterdir() if p.name.endswith(".toml")]
    return sorted(set(shipped) | set(_REGISTERED_MACHINES))


# Machines plugins add by name: name -> machine file.
_REGISTERED_MACHINES: dict[str, Path] = {}
