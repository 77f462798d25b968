"""Shared fixtures: small hand-made machines whose costs are easy to work out by hand."""

from __future__ import annotations

import pytest

from simsched import Machine


def toy_machine(cores: int = 2, sockets: int = 1, same_socket: float = 100.0, socket_hop: float = 0.0,
                transfer_fraction: float = 0.5, atomic: float = 10.0, store: float = 1.0,
                serve_ns: float = 0.0, loop_setup: float = 0.0, chunk: float = 0.0, combine: float = 0.0,
                **clock) -> Machine:
    """A machine with round numbers: one-way latency ``same_socket`` (plus ``socket_hop`` across sockets)."""
    return Machine.from_dict({
        "name": "toy",
        "topology": {"sockets": sockets, "cores_per_socket": cores // sockets},
        "clock": {"base_ghz": 1.0, **clock},
        "latency_ns": {"same_socket": same_socket, "socket_hop": socket_hop,
                       "transfer_fraction": transfer_fraction},
        "coherence": {"protocol": "snoop", "serve_ns": serve_ns},
        "costs_ns": {"atomic": atomic, "store": store, "loop_setup": loop_setup, "chunk": chunk,
                     "combine": combine},
    })


@pytest.fixture
def toy():
    return toy_machine
