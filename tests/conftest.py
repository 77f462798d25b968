"""Shared fixtures: small hand-made machines whose costs are easy to work out by hand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import simsched.cli
from simsched import Machine


def run_with_a_stale_extension(extension: str, module: str, attribute: str, workload: str) -> tuple[str, str]:
    """Import ``simsched.<module>`` in a fresh interpreter where ``simsched.<extension>`` is an empty module (as
    one built from an older source would look to it), then simulate ``workload``: the two lines it prints,
    whether ``<module>.<attribute>`` is None with the warnings raised ('|'-separated), and whether the run ended."""
    script = ("import sys, types, warnings\n"
              "import simsched\n"
              f"sys.modules['simsched.{extension}'] = types.ModuleType('simsched.{extension}')\n"
              "with warnings.catch_warnings(record=True) as caught:\n"
              "    warnings.simplefilter('always')\n"
              f"    import simsched.{module} as module\n"
              f"print(module.{attribute} is None, *[str(w.message) for w in caught], sep='|')\n"
              "from simsched import simulate\n"
              f"print(simulate('haswell-e5-2695v3', 'omp-dynamic', {workload!r}, 4).makespan_ns > 0)\n")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    first, second = proc.stdout.splitlines()
    return first, second


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


@pytest.fixture
def main(capsys, monkeypatch):
    """The command line in this process (no interpreter to start): its status, stdout and stderr."""
    def call(*args, cwd=None) -> subprocess.CompletedProcess:
        if cwd is not None:
            monkeypatch.chdir(cwd)
        capsys.readouterr()
        status = simsched.cli.main(list(map(str, args)))
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(args, status, out, err)
    return call


@pytest.fixture
def run_json(main):
    """``simsched run --json`` in this process, with any further arguments: its JSON."""
    def call(workload: str, scheduler: str = "omp-static", threads: int = 4, machine: str = "haswell-e5-2695v3",
             cwd=None, *extra) -> dict:
        proc = main("run", "--machine", machine, "--scheduler", scheduler, "--threads", threads,
                    "--workload", workload, "--json", *extra, cwd=cwd)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)
    return call


# The fast tier: ``python -m pytest -m "not slow"`` leaves out the tests tools/slow_tests.py measured slow.
SLOW_TESTS = Path(__file__).with_name("slow_tests.txt")


def _shares_an_expensive_fixture(item) -> bool:
    """Whether a test uses a fixture its file makes once for many tests (module scope or wider): where such a
    fixture is slow to make, whichever of its tests runs first pays for it."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    module = item.nodeid.split("::")[0]
    return any(defs and defs[-1].baseid == module and defs[-1].scope in ("module", "package", "session")
               for defs in definitions)


def pytest_collection_modifyitems(config, items):
    slow = {line.strip() for line in SLOW_TESTS.read_text().splitlines()
            if line.strip() and not line.startswith("#")} if SLOW_TESTS.is_file() else set()
    for item in items:
        # A test measured slow; or, in a file listed whole (a shared fixture slow to make), a test that uses one.
        if item.nodeid in slow or (item.nodeid.split("::")[0] in slow and _shares_an_expensive_fixture(item)):
            item.add_marker(pytest.mark.slow)
