"""A program's sequential code between loops (``Loop.serial_ns``): run by the master, outside every loop's time."""

import numpy as np
import pytest

from simsched.engine import Simulation
from simsched.errors import SimschedError
from simsched.loop import Loop
from simsched.machine import load_machine
from simsched.schedulers import REGISTRY, get_scheduler

MACHINE = load_machine("xeon-e5-4620")


def program(serial_ns):
    return [Loop(np.full(40, 200.0), serial_ns=serial_ns), Loop(np.full(24, 500.0), serial_ns=serial_ns)]


def run(name, serial_ns, threads=3):
    sim = Simulation(MACHINE, threads, seed=3)
    sim.load(program(serial_ns))
    return sim.run(get_scheduler(name))


def test_one_thread_adds_exactly_the_serial_code():
    # On one thread nothing overlaps: each loop's serial code adds its length to the makespan and the
    # master's compute, and leaves the loops' own times as they were.
    bare, serial = run("omp-static", 0.0, threads=1), run("omp-static", 7000.0, threads=1)
    assert serial.makespan_ns == pytest.approx(bare.makespan_ns + 14000.0)
    assert serial.loop_ns == pytest.approx(bare.loop_ns)
    assert serial.state_ns["compute"][0] == pytest.approx(bare.state_ns["compute"][0] + 14000.0)
    assert serial.serial_ns == 14000.0
    assert serial.sequential_ns == pytest.approx(bare.sequential_ns + 14000.0)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_every_scheduler_runs_the_serial_code_once_and_accounts_all_time(name):
    result = run(name, 5000.0)
    total = sum(float(v.sum()) for v in result.state_ns.values())
    assert total == pytest.approx(result.makespan_ns * result.threads)
    assert result.makespan_ns == pytest.approx(10000.0 + sum(result.loop_ns))
    if name != "cellss":  # the master is a worker (cellss's master is the PPE): the serial code is its compute
        bare = run(name, 0.0)
        assert result.state_ns["compute"].sum() - bare.state_ns["compute"].sum() == pytest.approx(10000.0, abs=1e-6)
    chunks = result.chunks
    assert sorted(chunks.loop.unique()) == [0, 1]
    assert (chunks.groupby("loop").apply(lambda c: (c.hi - c.lo).sum(), include_groups=False) == [40, 24]).all()


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_serial_code_is_refused(bad):
    with pytest.raises(SimschedError, match="serial_ns"):
        Loop([1.0], serial_ns=bad)


def test_inner_loops_have_no_serial_code():
    with pytest.raises(SimschedError, match="inner loop"):
        Loop([1.0, 1.0], inner={0: Loop([1.0], serial_ns=5.0)})
