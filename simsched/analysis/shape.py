"""Loop shapes: what stays fixed while a burden sweep varies a loop's duration.

A workload's shape is its name and every parameter but its duration parameters (those that
scale all iteration costs alike, such as uforall's ``total_us``), resolved to their values.
Workloads that differ only in duration parameters are one shape at different durations.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..errors import SimschedError

AXIS_HINT = "fit needs one loop shape swept over its duration (e.g. uforall's total_us)"


def loop_shape(spec: str) -> tuple[str, tuple[tuple[str, object], ...]]:
    """(workload name, its non-duration parameters with their resolved values) of a workload spec."""
    from ..workloads import get_workload

    workload = get_workload(spec)
    fixed = tuple(sorted((k, v) for k, v in workload.params.items() if k not in workload.DURATION_PARAMS))
    return workload.name, fixed


def check_one_shape(workloads: Iterable[str]) -> None:
    """Refuse workloads of more than one loop shape, naming the first thing that differs."""
    shapes = list(dict.fromkeys(loop_shape(spec) for spec in dict.fromkeys(workloads)))
    if len(shapes) < 2:
        return
    names = list(dict.fromkeys(name for name, _ in shapes))
    if len(names) > 1:
        raise SimschedError(f"the results mix loop shapes: workloads {', '.join(names)}; {AXIS_HINT}")
    name = names[0]
    values: dict[str, list] = {}
    for _, fixed in shapes:
        for key, value in fixed:
            values.setdefault(key, []).append(value)
    differ = [key for key, seen in values.items() if len(set(seen)) > 1]
    detail = ", ".join(f"{key} ({', '.join(map(str, sorted(set(values[key]))))})" for key in differ)
    raise SimschedError(f"the results mix loop shapes: {name}'s {detail} differ; {AXIS_HINT}")


def check_duration_axis(workloads: Iterable[str], durations_us: Iterable[float]) -> None:
    """Refuse results of mixed loop shapes, or of one shape at a single loop duration."""
    from ..workloads import get_workload

    workloads = list(dict.fromkeys(workloads))
    check_one_shape(workloads)
    if len({round(float(t), 9) for t in durations_us}) < 2:
        workload = get_workload(workloads[0])
        known = " or ".join(workload.DURATION_PARAMS)
        which = f"vary {workload.name}'s {known}" if known else f"{workload.name} has no duration parameter"
        raise SimschedError(f"the results have no loop-duration axis: every run has the same loop duration "
                            f"({which})")


def has_duration_axis(workloads: Iterable[str], durations_us: Iterable[float]) -> bool:
    """Whether results are one loop shape at two or more loop durations, as a burden fit needs."""
    from ..spec import parse_spec

    workloads = list(dict.fromkeys(workloads))
    if len({round(float(t), 9) for t in durations_us}) < 2:
        return False
    # Names first: they differ without building any workload (an application's graph, a trace's file).
    if len({parse_spec(spec, "workload")[0] for spec in workloads}) > 1:
        return False
    return len({loop_shape(spec) for spec in workloads}) == 1
