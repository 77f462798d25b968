"""SimPy's internals behind simsched.simpy_access, and the scheduler modules' names as the command line shows them."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
import simpy

from simsched import memory, simpy_access
from simsched.cli import main
from simsched.engine import ChunkSink, Simulation
from simsched.errors import SimschedError
from tests.conftest import run_with_a_stale_extension

HASWELL = "haswell-e5-2695v3"

# Run the command line on a SimPy whose environments keep no event numbering where simsched reaches for it.
WITHOUT_NUMBERING = """
import runpy, sys
import simpy
made = simpy.Environment.__init__
def without_numbering(self, *args, **kwargs):
    made(self, *args, **kwargs)
    del self._eid
simpy.Environment.__init__ = without_numbering
sys.argv = ["simsched", *sys.argv[1:]]
runpy.run_module("simsched.cli", run_name="__main__")
"""


def test_the_command_line_refuses_a_simpy_without_the_internals_in_one_line():
    done = subprocess.run([sys.executable, "-c", WITHOUT_NUMBERING, "run", "--machine", HASWELL, "--scheduler", "ich",
                           "--threads", "2", "--workload", "uniform:n=100"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"simsched: error: SimPy {simpy.__version__} is not one simsched runs on: it has no "
                           "Environment._eid (install simpy>=4.1,<4.2)\n")


@pytest.mark.parametrize("kind, attribute, named", [
    ("Environment", "_now", "Environment._now"),
    ("Environment", "_active_proc", "Environment._active_proc"),
    ("Event", "_value", "Event._value"),
    ("Process", "_target", "Process._target"),
])
def test_check_names_what_the_running_simpy_lacks(monkeypatch, kind, attribute, named):
    cls = {"Environment": simpy.Environment, "Event": simpy.Event, "Process": simpy.Process}[kind]
    if kind == "Event":
        succeed = cls.succeed

        def without(self, *args, **kwargs):
            made = succeed(self, *args, **kwargs)
            self.__dict__.pop(attribute)
            return made

        monkeypatch.setattr(cls, "succeed", without)
    else:
        init = cls.__init__

        def without(self, *args, **kwargs):
            init(self, *args, **kwargs)
            self.__dict__.pop(attribute)

        monkeypatch.setattr(cls, "__init__", without)
    with pytest.raises(SimschedError) as refused:
        simpy_access.check()
    assert str(refused.value) == (f"SimPy {simpy.__version__} is not one simsched runs on: it has no {named} "
                                  "(install simpy>=4.1,<4.2)")


def test_the_installed_simpy_passes_and_the_pin_names_the_same_releases():
    simpy_access.check()
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    assert f'    "{simpy_access.TESTED}",\n' in pyproject.read_text(encoding="utf-8")


def test_the_environment_keeps_simpys_clock_heap_and_numbering_under_the_simulators_names():
    env = simpy_access.Environment()
    assert {"timeout", "event", "process"} <= set(vars(env))   # SimPy's bound classes, bound as it binds them
    env.clock = 5.0
    assert env.now == 5.0
    seen = []

    def worker():
        yield env.timeout(2.0)
        seen.append((env.clock, env.running is process, type(env.running.waits_on).__name__))

    process = env.process(worker())
    assert type(process) is simpy_access.Process
    assert len(env.heap) == 1 and env.heap[0][3] is not None   # the process's start, queued
    env.run()
    assert seen == [(7.0, True, "Timeout")]
    # Two events scheduled (the start, the timeout) and the process's end: the next number is 3.
    assert simpy_access.event_count(env) == 3


def test_fire_at_schedules_as_a_timeout_would():
    env = simpy_access.Environment()
    fired = env.event()
    simpy_access.fire_at(env, fired, 4.5, "value")
    assert fired.triggered and fired.value == "value" and env.heap[0][:2] == (4.5, simpy_access.NORMAL)
    env.run()
    assert env.now == 4.5


@pytest.mark.skipif(memory.speedups is None, reason="the compiled loops are not built")
def test_the_compiled_loops_take_only_a_slot_as_the_clock():
    with pytest.raises(TypeError, match="member descriptor"):
        memory.speedups.bind_clock(simpy_access.Environment)


@pytest.mark.parametrize("scheduler", ["omp-dynamic:chunk=2", "stealing", "ich"])
def test_the_hot_loops_record_their_chunks_through_a_named_sink(monkeypatch, capsys, scheduler):
    handed = []
    inline_chunks = Simulation.inline_chunks

    def kept(self, worker, loop):
        handed.append(inline_chunks(self, worker, loop))
        return handed[-1]

    monkeypatch.setattr(Simulation, "inline_chunks", kept)
    assert main(["run", "--machine", HASWELL, "--scheduler", scheduler, "--threads", "3", "--workload",
                 "uforall:n=40,cost_ns=100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["chunks"] > 3
    assert len(handed) == 3 and all(type(sink) is ChunkSink for sink in handed)
    prefix, slow, plain, pending, full, flush, mark = handed[0]     # still a tuple to unpack
    assert handed[0]._fields == ("prefix", "slow", "plain", "pending", "full", "flush", "mark")
    assert (prefix(40) - prefix(0), plain, mark) == (4000.0, True, None) and slow > 0 and full > 0


# The built-in schedulers in the order the listing and its errors name them (the order they register in).
BUILT_IN = ["omp-static", "omp-dynamic", "omp-guided", "tss", "fac2", "taskloop", "wf", "awf-b", "awf-c", "awf-d",
            "awf-e", "af", "binlpt", "fsc", "mfsc", "fac", "tfss", "fiss", "viss", "rnd", "pls", "fg-tree",
            "fg-central", "fg-tree-full", "cilk", "hybrid", "cilk-fg", "stealing", "ich", "lbs", "adapt-g",
            "adapt-l", "distrib", "offload", "cellss", "static-steal", "nonmonotonic-dynamic", "tbb-simple",
            "tbb-auto", "tbb-affinity"]


def test_the_scheduler_listing_keeps_its_order_and_names_each_stealing_schedulers_module(capsys):
    assert main(["schedulers", "--json"]) == 0
    rows = [row for row in json.loads(capsys.readouterr().out) if row["defined_in"].startswith("simsched.")]
    assert [row["name"] for row in rows] == BUILT_IN
    where = {row["name"]: row["defined_in"] for row in rows}
    assert (where["stealing"], where["ich"], where["cilk"]) == (
        "simsched.schedulers.stealing", "simsched.schedulers.ich", "simsched.schedulers.forkjoin")


def test_compiled_loops_built_from_an_older_source_give_way_to_the_python_loops_with_a_warning():
    # An extension that does not take the clock's slot (built before the loops read it there) must not run.
    first, second = run_with_a_stale_extension("_speedups", "memory", "speedups", "uniform:n=100")
    assert first.startswith("True|simsched's compiled loops are out of date")
    assert second == "True"


def mixed_run(run_until):
    """Two SimPy processes with timeouts and a driven worker whose waits tie with theirs: the log of what ran when."""
    env = simpy_access.Environment()
    log = []

    def ticker(name, step):
        for _ in range(4):
            yield env.timeout(step)
            log.append((env.now, name, simpy_access.event_count(env)))

    def steps():
        for when in (1.0, 1.5, 2.0, 2.0, 3.0, 7.5):
            log.append((env.now, "driven", when))
            yield when
        return 8.0, "its value"

    def driven():
        value = yield from Simulation.drive(type("Sim", (), {"env": env})(), steps())
        log.append((env.now, "driven returned", value))
        return value

    env.process(ticker("a", 1.0))
    env.process(ticker("b", 0.5))
    main = env.process(driven())
    value = run_until(env, main)
    return value, log, simpy_access.event_count(env), env.now


@pytest.mark.skipif(memory.speedups is None, reason="the compiled loops are not built")
def test_the_compiled_event_loop_runs_what_simpy_runs_in_its_order(monkeypatch):
    from simsched import engine
    compiled = mixed_run(engine.run_until)
    # A compiled driver's waits popped by SimPy's own loop (a driver is the event of its waits).
    assert mixed_run(lambda env, until: env.run(until=until)) == compiled
    monkeypatch.setattr(memory, "speedups", None)
    reference = mixed_run(engine.run_until)
    assert compiled == reference
    value, log, events, now = compiled
    assert value == "its value" and now == 8.0 and ("driven returned" in {what for _, what, _ in log})


@pytest.mark.skipif(memory.speedups is None, reason="the compiled loops are not built")
def test_a_simulations_event_numbers_are_counted_as_simpys_count():
    numbers = memory.speedups.Numbers()
    assert iter(numbers) is numbers and [next(numbers) for _ in range(3)] == [0, 1, 2]
    assert repr(numbers) == "Numbers(3)"
    from simsched.engine import simulate
    compiled = simulate("uniform:cores=4", "omp-dynamic", "uniform:n=200", 4, seed=1)
    monkey = memory.speedups
    try:
        memory.speedups = None   # SimPy's count() and loop
        reference = simulate("uniform:cores=4", "omp-dynamic", "uniform:n=200", 4, seed=1)
    finally:
        memory.speedups = monkey
    assert compiled.events == reference.events and compiled.makespan_ns == reference.makespan_ns


@pytest.mark.skipif(memory.speedups is None, reason="the compiled loops are not built")
def test_waits_left_by_a_compiled_run_are_simpys_to_run_next():
    # A compiled run keeps its drivers' waits in a heap of its own; when it stops (here at 2.25, with
    # waits of the driven worker still pending) they go back to SimPy's heap, numbered as they were.
    def in_two(first, second):
        def run(env, until):
            first(env, env.timeout(2.25))
            return second(env, until)
        return run

    def simpy(env, until):
        return env.run(until=until)

    reference = mixed_run(in_two(simpy, simpy))
    assert mixed_run(in_two(memory.speedups.run, simpy)) == reference
    assert mixed_run(in_two(memory.speedups.run, memory.speedups.run)) == reference
    assert mixed_run(in_two(simpy, memory.speedups.run)) == reference


@pytest.mark.skipif(memory.speedups is None, reason="the compiled loops are not built")
@pytest.mark.parametrize("compiled", [True, False])
def test_a_failing_process_ends_the_compiled_run_as_it_ends_simpys(monkeypatch, compiled):
    from simsched import engine
    if not compiled:
        monkeypatch.setattr(memory, "speedups", None)
    env = simpy_access.Environment()

    def failing():
        yield env.timeout(2.0)
        raise ValueError("the worker broke")

    def waiting():
        yield env.timeout(10.0)

    env.process(failing())
    with pytest.raises(ValueError, match="the worker broke") as caught:
        engine.run_until(env, env.process(waiting()))
    assert isinstance(caught.value.__cause__, ValueError) and env.now == 2.0


@pytest.mark.skipif(memory.speedups is None, reason="the compiled loops are not built")
def test_the_compiled_event_loop_answers_a_signal_while_a_worker_runs_alone():
    # A worker alone passes its waits without the queue and without a Python frame between them: the loop
    # must still let Ctrl-C (here an alarm's handler) end the run.
    import signal

    env = simpy_access.Environment()

    def ring(signum, frame):
        raise KeyboardInterrupt

    def forever():
        yield from Simulation.drive(type("Sim", (), {"env": env})(), itertools.count(1.0))

    old = signal.signal(signal.SIGALRM, ring)
    signal.setitimer(signal.ITIMER_REAL, 0.2)
    try:
        with pytest.raises(KeyboardInterrupt):
            memory.speedups.run(env, env.process(forever()))
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    assert env.now > 1000.0
