"""Machine settings given as text: the ``section.key=value`` lists of ``--set`` and of machine variants."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import SimschedError
from ..hierarchy import DRAM_OPTIONAL_KEYS
from ..noise import NOISE_KEYS
from .schema import _NOISE_SECTION, SCHEMA

if TYPE_CHECKING:
    from .model import Machine


def parse_settings(text: str, source: str) -> dict[str, Any]:
    """``section.key=value,...`` as a dict of TOML values, refusing anything else with one line."""
    changes: dict[str, Any] = {}
    for item in _top_level_items(text):
        key, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not key or not value:
            raise SimschedError(f"{source}: expected section.key=value, got {item.strip()!r}")
        if "." not in key:
            raise SimschedError(f"{source}: {key!r} names no section: write section.key, e.g. latency_ns.{key}")
        if key in changes:
            raise SimschedError(f"{source}: {key} is set twice")
        try:
            changes[key] = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            raise SimschedError(f"{source}: {key}={value} is not a TOML value (a number, true/false or "
                                f"a quoted string)") from None
    return changes


def _top_level_items(text: str) -> list[str]:
    """``text`` split at the commas outside brackets and quotes, so that a list value stays whole."""
    items, depth, quote, start = [], 0, "", 0
    for i, char in enumerate(text):
        if quote:
            quote = "" if char == quote else quote
        elif char in "\"'":
            quote = char
        elif char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
        elif char == "," and depth == 0:
            items.append(text[start:i])
            start = i + 1
    items.append(text[start:])
    return items


def with_settings(machine: str, settings: list[str]) -> str:
    """The machine spec ``machine`` with ``--set`` settings (``section.key=value`` each) added to its variant list."""
    if not settings:
        return machine
    parse_settings(",".join(settings), "--set")  # refuse a malformed setting here, naming the option
    base, bracket, inner = machine.partition("[")
    if bracket and machine.endswith("]") and not Path(machine).exists():
        return f"{base}[{inner[:-1]},{','.join(settings)}]"
    return f"{machine}[{','.join(settings)}]"


def format_setting(value: Any) -> str:
    """A value as TOML writes it, so that a variant's name reads back as the same variant."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


def setting_at(data: dict[str, Any], dotted: str) -> Any:
    """The value at ``section.key`` (or a nested ``cache.l3.key``) of machine data; None where there is none."""
    value: Any = data
    for name in dotted.split("."):
        value = value.get(name) if isinstance(value, dict) else None
    return value


def _check_settings_exist(machine: Machine, changes: dict[str, Any], source: str) -> None:
    """Refuse a key the machine neither has nor could have: a misspelt key must not add a new value."""
    for dotted in changes:
        *tables, key = dotted.split(".")
        optional = NOISE_KEYS if tables == [_NOISE_SECTION] else SCHEMA.get(tables[0], {}) if len(tables) == 1 else {}
        if key in optional:
            continue  # an optional key the file leaves out, e.g. coherence.serve_ns
        if tables == ["dram"] and "dram" in machine.data and key in DRAM_OPTIONAL_KEYS:
            continue  # how the machine's DRAM loads, e.g. dram.queueing
        if setting_at(machine.data, dotted) is None:
            known = ", ".join(sorted(k for k, v in machine.data.items() if isinstance(v, dict)))
            raise SimschedError(f"{source}: machine {machine.name} has no {dotted} (its sections: {known})")
