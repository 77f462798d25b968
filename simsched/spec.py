"""Component specs: the ``name:key=value,...`` strings that name schedulers and workloads."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

from .errors import SimschedError


# The largest magnitude of an integer parameter: every count and size a component takes stays far below
# it, it converts to a float exactly, and sums of many such values still fit the 64-bit integers of arrays
# and compiled code.
MAX_INT = 2**53


@dataclass(frozen=True)
class Param:
    """One user-settable parameter of a component: its type, default and allowed range."""

    name: str
    kind: type
    default: Any
    check: Callable[[Any], bool] | None = None
    rule: str = ""
    choices: tuple[str, ...] | None = None
    help: str = ""

    def convert(self, raw: Any, owner: str) -> Any:
        """Return ``raw`` as this parameter's type, or raise naming what is wrong."""
        value = raw
        try:
            if self.kind is int:
                if isinstance(raw, bool):
                    raise ValueError
                if isinstance(raw, str):
                    value = int(raw.strip())
                elif isinstance(raw, float):
                    if not raw.is_integer():
                        raise ValueError
                    value = int(raw)
                else:
                    value = int(raw)
            elif self.kind is float:
                if isinstance(raw, bool):
                    raise ValueError
                value = float(raw)
            elif self.kind is str:
                value = str(raw)
        except (TypeError, ValueError):
            kind = {int: "an integer", float: "a number", str: "a string"}[self.kind]
            raise SimschedError(f"{owner}: parameter {self.name}={raw!r} is not {kind}") from None
        if self.kind is float and not math.isfinite(value):
            raise SimschedError(f"{owner}: parameter {self.name}={raw!r} must be finite")
        if self.kind is int and not -MAX_INT <= value <= MAX_INT:
            raise SimschedError(f"{owner}: parameter {self.name}={value} is out of range: an integer "
                                f"parameter is at most 2**53 = {MAX_INT} in size")
        if self.choices is not None and value not in self.choices:
            raise SimschedError(
                f"{owner}: parameter {self.name}={value!r} must be one of {', '.join(self.choices)}"
            )
        if self.check is not None and not self.check(value):
            raise SimschedError(f"{owner}: parameter {self.name}={value!r} must be {self.rule}")
        return value


def parse_spec(text: str, what: str) -> tuple[str, dict[str, str]]:
    """Split ``name:key=value,key=value`` into the name and its raw parameter strings."""
    if not isinstance(text, str) or not text.strip():
        raise SimschedError(f"empty {what} name")
    name, _, rest = text.strip().partition(":")
    params: dict[str, str] = {}
    if rest.strip():
        for item in rest.split(","):
            key, eq, value = item.partition("=")
            key = key.strip()
            if not eq or not key:
                raise SimschedError(f"{what} {text!r}: expected key=value, got {item.strip()!r}")
            if key in params:
                raise SimschedError(f"{what} {text!r}: parameter {key} given twice")
            params[key] = value.strip()
    return name.strip(), params


def resolve_params(owner: str, schema: dict[str, Param], given: dict[str, Any]) -> dict[str, Any]:
    """Check ``given`` against ``schema`` and return every parameter with defaults filled in."""
    unknown = sorted(set(given) - set(schema))
    if unknown:
        known = ", ".join(schema) or "none"
        raise SimschedError(f"{owner}: unknown parameter {unknown[0]!r} (known: {known})")
    resolved = {}
    for name, param in schema.items():
        if name in given:
            resolved[name] = param.convert(given[name], owner)
        else:
            resolved[name] = param.default
    return resolved


def refuse_other_modes(owner: str, selector: str, chosen: str, keys_by_mode: dict[str, tuple[str, ...]],
                       given) -> None:
    """Refuse a parameter that only another value of ``selector`` takes (the mistake, whatever its value).

    ``keys_by_mode`` maps each value of ``selector`` to the parameters only it takes; an unknown
    ``chosen`` is left for the parameter check to refuse.
    """
    if chosen not in keys_by_mode:
        return
    for other, keys in keys_by_mode.items():
        stray = [k for k in keys if k in given and other != chosen]
        if stray:
            raise SimschedError(f"{owner}: parameter {stray[0]} does not apply: it is for {selector}={other}, "
                                f"not {selector}={chosen}")


def format_spec(name: str, params: dict[str, Any]) -> str:
    """The canonical spec string for a component with these parameters."""
    if not params:
        return name
    return name + ":" + ",".join(f"{k}={_fmt(v)}" for k, v in params.items())


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return repr(value) if not value.is_integer() else str(int(value)) if abs(value) < 1e15 else repr(value)
    return str(value)
