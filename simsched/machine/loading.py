"""Loading a machine by spec: a built-in or registered name, a file, ``uniform:``, ``scaled:``, a variant."""

from __future__ import annotations

import tomllib
from pathlib import Path

from ..errors import SimschedError
from ..spec import Param, format_spec, parse_spec, resolve_params
from . import files
from .files import _REGISTERED_MACHINES, builtin_machines
from .model import Machine
from .overrides import _check_settings_exist, parse_settings
from .schema import MAX_CORES


def register_machine(name: str, path: str | Path) -> None:
    """Make the machine file ``path`` loadable by ``name`` (as a built-in machine is), e.g. from a plugin."""
    path = Path(path)
    if not isinstance(name, str) or not name or _machine_form(name) != "builtin":
        raise SimschedError(f"register_machine: {name!r} is not a machine name (a name, not a path or a spec)")
    if not path.is_file():
        raise SimschedError(f"register_machine: {name}: no machine file at {path}")
    held = _REGISTERED_MACHINES.get(name)
    if (held is not None and held != path.resolve()) or files._machine_files().joinpath(f"{name}.toml").is_file():
        raise SimschedError(f"register_machine: a machine {name!r} exists already")
    _REGISTERED_MACHINES[name] = path.resolve()


UNIFORM = "uniform"
# uniform:key=value sets these entries of machines/uniform.toml.
UNIFORM_PARAMS = {
    "cores": Param("cores", int, 16, lambda v: 1 <= v <= MAX_CORES, f"in [1, {MAX_CORES}]",
                   help="cores, all one latency apart"),
    "latency_ns": Param("latency_ns", float, 100.0, lambda v: v >= 0, ">= 0",
                        help="one-way core-to-core latency in ns"),
}


def uniform_machine(spec: str) -> Machine:
    """The parametric machine ``uniform:cores=N,latency_ns=L``: equidistant cores, constant clock, no caches."""
    _, given = parse_spec(spec, "machine")
    params = resolve_params(f"machine {UNIFORM}", UNIFORM_PARAMS, given)
    data = tomllib.loads(files._machine_files().joinpath(f"{UNIFORM}.toml").read_text("utf-8"))
    data["topology"]["cores_per_socket"] = params["cores"]
    data["latency_ns"]["same_socket"] = params["latency_ns"]
    data["name"] = format_spec(UNIFORM, params)
    return Machine.from_dict(data, source=f"{UNIFORM}.toml")


SCALED = "scaled"
# scaled:key=value builds a larger (or smaller) machine of the base machine's sockets.
SCALED_PARAMS = {
    "base": Param("base", str, None, help="the machine whose sockets, latencies and costs are repeated"),
    "sockets": Param("sockets", int, None, lambda v: 1 <= v <= MAX_CORES, f"in [1, {MAX_CORES}]",
                     help="sockets (default: the base machine's)"),
    "cores_per_socket": Param("cores_per_socket", int, None, lambda v: 1 <= v <= MAX_CORES, f"in [1, {MAX_CORES}]",
                              help="cores per socket (default: the base machine's)"),
    "socket_links": Param("socket_links", str, None, choices=("full", "ring"),
                          help="how the sockets connect (default: the base machine's, which must be full or ring)"),
}


def scaled_machine(spec: str) -> Machine:
    """The parametric machine ``scaled:base=NAME,sockets=S,cores_per_socket=C``: the base machine, resized.

    Latencies, costs, clocks and caches are the base machine's; the core groups must still
    divide the new socket. A base with a measured latency matrix or explicit socket links
    cannot be resized (nothing says what the new cores' latencies would be).
    """
    _, given = parse_spec(spec, "machine")
    params = resolve_params(f"machine {SCALED}", SCALED_PARAMS, given)
    if params["base"] is None:
        raise SimschedError(f"machine {spec!r}: give the machine to scale, e.g. scaled:base=xeon-e7-4860v2,sockets=16")
    base = load_machine(params["base"])
    if "matrix" in base.data["latency_ns"]:
        raise SimschedError(f"machine {spec!r}: {base.name} gives a measured latency matrix, which cannot be resized")
    changes = {f"topology.{key}": value for key, value in params.items() if key != "base" and value is not None}
    links = changes.get("topology.socket_links", base.topology.get("socket_links", "full"))
    if not isinstance(links, str):
        raise SimschedError(f"machine {spec!r}: {base.name} lists its socket links one by one; "
                            "choose socket_links=full or socket_links=ring for the scaled machine")
    sockets = changes.get("topology.sockets", base.sockets)
    if sockets > 1 and "socket_hop" not in base.data["latency_ns"]:
        raise SimschedError(f"machine {spec!r}: {base.name} has one socket and no latency_ns.socket_hop "
                            "to join more")
    cores = sockets * changes.get("topology.cores_per_socket", base.cores_per_socket)
    if cores > MAX_CORES:
        raise SimschedError(f"machine {spec!r}: {cores} cores; at most {MAX_CORES} are supported")
    changes["name"] = format_spec(SCALED, {key: value for key, value in params.items() if value is not None})
    changes["description"] = (f"{base.description} -- resized to {sockets} socket(s) x "
                              f"{cores // sockets} cores (what-if)")
    try:
        return base.replace(**changes)
    except SimschedError as error:
        raise SimschedError(f"machine {spec!r}: {error}") from None


def _machine_form(text: str) -> str:
    """The kind of machine spec ``text`` is: variant, uniform, scaled, file or builtin (a file on disk wins)."""
    exists = Path(text).exists()
    if text.endswith("]") and "[" in text and not exists:
        return "variant"
    if text.startswith(f"{UNIFORM}:") and not exists:
        return UNIFORM
    if text.startswith(f"{SCALED}:") and not exists:
        return SCALED
    if text.endswith(".toml") or exists:
        return "file"
    return "builtin"


def machine_files(name_or_path: str | Path | Machine) -> list[Path]:
    """The user's machine files that loading this machine spec reads (built-in machines are not listed)."""
    if isinstance(name_or_path, Machine):
        return []
    text = str(name_or_path)
    form = _machine_form(text)
    if form == "variant":
        return machine_files(text[:-1].partition("[")[0])
    if form == SCALED:
        base = parse_spec(text, "machine")[1].get("base")
        return machine_files(base) if base else []
    return [Path(text)] if form == "file" else []


def load_machine(name_or_path: str | Path | Machine) -> Machine:
    """Load a built-in machine by name, a machine file by path, ``uniform:cores=N,latency_ns=L`` or ``scaled:base=...``.

    Any of these followed by ``[section.key=value,...]`` is that machine with those values
    changed (see :meth:`Machine.replace`), e.g. ``xeon-e7-4860v2[latency_ns.socket_hop=75]``.
    """
    if isinstance(name_or_path, Machine):
        return name_or_path
    text = str(name_or_path)
    path = Path(text)
    form = _machine_form(text)
    if form == "variant":
        base, _, settings = text[:-1].partition("[")
        machine = load_machine(base)
        changes = parse_settings(settings, f"machine {text}")
        _check_settings_exist(machine, changes, f"machine {text}")
        return machine.replace(**changes)
    if form == UNIFORM:
        return uniform_machine(text)
    if form == SCALED:
        return scaled_machine(text)
    if form == "file":
        if not path.is_file():
            # A relative path is read from the working folder, which is not always the config's.
            relative = "" if path.is_absolute() else f" (relative to {Path.cwd()})"
            raise SimschedError(f"machine file not found: {text}{relative}")
        from ..filesize import MACHINE_FILE_BYTES, read_limited

        raw = read_limited(path, "machine file", MACHINE_FILE_BYTES)
        source = str(path)
    else:
        resource = files._machine_files().joinpath(f"{text}.toml")
        if not resource.is_file() and text not in _REGISTERED_MACHINES:
            from .. import plugins

            plugins.load_automatic()  # a plugin may register it
        if text in _REGISTERED_MACHINES:
            resource = _REGISTERED_MACHINES[text]
        if not resource.is_file():
            known = ", ".join(builtin_machines())
            raise SimschedError(f"unknown machine {text!r} (built-in: {known})")
        raw = resource.read_bytes()
        source = f"{text}.toml"
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SimschedError(f"{source}: not valid TOML: {exc}") from None
    return Machine.from_dict(data, source=source)
