"""SimPy's internals that the simulator reaches past SimPy's public interface: named once, checked at import.

The hot loops read and advance an environment's clock, push onto its event heap and number
events as SimPy does, at the cost of an attribute access each (a function or property per
event would cost more than the rest of the step). This module is the one place that names
what SimPy keeps in private attributes, for the releases in ``TESTED``:

* ``Environment``, the run's environment: SimPy's own with its clock, event heap, event
  numbering and running process in slots, which the simulator reads and sets under names of
  its own (``clock``, ``heap``, ``event_ids``, ``running``) at the speed of any attribute. The
  compiled loops (``simsched._speedups``) read the clock through the same slot. Its processes
  (``Process``) keep the event they wait on in a slot too, read as ``waits_on``.
* ``fire_at``, ``succeeded`` and ``processed_event``, which set an event's outcome as
  ``Event.succeed`` does, and ``event_count``.

``check`` runs at import and refuses, in one line, a SimPy that keeps them elsewhere.
"""

from __future__ import annotations

from heapq import heappush
from typing import Any

import simpy
from simpy.core import NORMAL, BoundClass
from simpy.events import Event

from .errors import SimschedError

# The SimPy releases whose internals these are (pyproject.toml pins the same range).
TESTED = "simpy>=4.1,<4.2"

# An environment's clock, event heap (entries (time, priority, event number, event), NORMAL the usual
# priority), event number counter, and the process being resumed (None between steps).
NOW, QUEUE, EVENT_IDS, ACTIVE_PROCESS = "_now", "_queue", "_eid", "_active_proc"
# A triggered event's outcome: whether it succeeded, and its value.
OK, VALUE = "_ok", "_value"
# The event a process waits on (while it runs: the one that resumed it).
TARGET = "_target"

# The names the simulator reads and sets the environment's clock, heap, numbering and running process by, and
# the event a process waits on.
ALIASES = {"clock": NOW, "heap": QUEUE, "event_ids": EVENT_IDS, "running": ACTIVE_PROCESS}
WAITS_ON = "waits_on"


def check() -> None:
    """Refuse, as one line, a SimPy whose environments, events or processes lack the attributes named here."""
    env = simpy.Environment()
    state = vars(env)
    missing = [f"Environment.{name}" for name in (NOW, QUEUE, EVENT_IDS, ACTIVE_PROCESS) if name not in state]
    if not missing:
        if not isinstance(state[QUEUE], list) or not hasattr(state[EVENT_IDS], "__next__"):
            missing = [f"Environment.{QUEUE} as a list and Environment.{EVENT_IDS} as a counter"]
        else:
            event = env.event()
            event.succeed()
            process = env.process(_ for _ in ())
            missing = [f"{what}.{name}" for what, attributes, names in
                       (("Event", vars(event), (OK, VALUE)), ("Process", vars(process), (TARGET,)))
                       for name in names if name not in attributes]
    if missing:
        version = getattr(simpy, "__version__", "of unknown version")
        raise SimschedError(f"SimPy {version} is not one simsched runs on: it has no {', '.join(missing)} "
                            f"(install {TESTED})")


check()


class Process(simpy.Process):
    """A SimPy process whose awaited event sits in a slot, which the simulator reads as ``waits_on``."""

    __slots__ = (TARGET,)


class Environment(simpy.Environment):
    """A SimPy environment whose clock, event heap, event numbering and running process sit in slots.

    SimPy's code reaches them under its names; the simulator's under its own: ``clock`` (the
    current time, which a passed wait advances), ``heap``, ``event_ids`` and ``running``. Its
    ``process`` makes a ``Process``.
    """

    __slots__ = (NOW, QUEUE, EVENT_IDS, ACTIVE_PROCESS)
    process = BoundClass(Process)


# The same slots under the simulator's names: a slot's descriptor reads its place in the object whatever it is
# called, and an attribute read through it costs what any attribute's does.
for _alias, _name in ALIASES.items():
    setattr(Environment, _alias, vars(Environment)[_name])
setattr(Process, WAITS_ON, vars(Process)[TARGET])
# SimPy binds its bound classes (env.timeout, env.event ...) to each environment as it is made, but only
# those in the environment's own class: so SimPy's are listed here too.
for _name, _bound in vars(simpy.Environment).items():
    if type(_bound) is BoundClass and _name not in vars(Environment):
        setattr(Environment, _name, _bound)
del _alias, _name, _bound


def clock_slot():
    """The descriptor of the slot that holds an ``Environment``'s clock, which the compiled loops read it through."""
    return vars(Environment)[NOW]


def event_slots():
    """The descriptors of the slots of an ``Environment``'s event heap and numbering, for the compiled event loop."""
    return vars(Environment)[QUEUE], vars(Environment)[EVENT_IDS]


def event_count(env: simpy.Environment) -> int:
    """How many events ``env`` has scheduled (SimPy numbers each); it takes a number too: call it at the end."""
    return next(env._eid)


def processed_event() -> Event:
    """An event SimPy takes as processed, with value None: a process that yields it resumes at once."""
    event = Event(simpy.Environment())
    event._ok = True
    event._value = None
    event.callbacks = None
    return event


def succeeded(event: Event, value: Any = None) -> Event:
    """Set ``event``'s outcome to success with ``value``, as ``Event.succeed`` does, without scheduling it."""
    event._ok, event._value = True, value
    return event


def fire_at(env, event: Event, when: float, value: Any = None) -> None:
    """Trigger ``event`` at absolute time ``when`` (what ``simpy.Timeout`` does, without a new object)."""
    event._ok = True
    event._value = value
    now = env._now
    delay = when - now
    # Environment.schedule's push, inlined (the same time and numbering): every wait of a run comes here.
    heappush(env._queue, (now + delay if delay > 0 else now, NORMAL, next(env._eid), event))
