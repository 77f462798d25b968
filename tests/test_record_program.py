"""simsched record: a user's OpenMP program's loops, from the OMPT tool's records into a program trace.

The first part works records out by hand (no runtime needed); the rest builds small OpenMP programs
with the C compiler and records them through the command line on an OMPT runtime, where one is installed.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from cli_runs import refused

from simsched.errors import SimschedError
from simsched.native import loop_instances, ompt, program_validation
from simsched.native.loop_instances import iteration_costs, parse_run
from simsched.native.user_program import Probe, combine
from simsched.workloads.trace import TraceFile, trace_metadata

ROOT = Path(__file__).resolve().parents[1]
SPMV = ROOT / "examples" / "record" / "spmv.c"
MACHINE = "haswell-e5-2695v3"
ROWS, PRODUCTS = 20000, 2

# ---- records by hand ------------------------------------------------------------------------------------

# What ompt.read_events gives: per thread, records with times in ns.
EVENT_DTYPE = np.dtype([("time", "<f8"), ("kind", "<u8"), ("a", "<u8"), ("b", "<u8"), ("c", "<u8")])
PB, PE, IB, IE = ompt.PARALLEL_BEGIN, ompt.PARALLEL_END, ompt.IMPLICIT_BEGIN, ompt.IMPLICIT_END
WB, WE, CHUNK, SB, SE = ompt.WORK_BEGIN, ompt.WORK_END, ompt.CHUNK, ompt.SYNC_BEGIN, ompt.SYNC_END
TASK, COUNT, ITERATION = ompt.TASK_CREATE, ompt.COUNT, ompt.ITERATION
LOOP = 1 << 32  # ompt_work_loop: a runtime that does not say which schedule
DYNAMIC_LOOP, STATIC_LOOP = 11 << 32, 10 << 32  # ompt_work_loop_dynamic, ompt_work_loop_static
SINGLE_EXECUTOR, SINGLE_OTHER = 3 << 32, 4 << 32
EMPTY_NS = 10.0
# Code addresses of the loops, and where a fake debug lookup puts them.
FIRST, SECOND, SINGLE, REGION_CODE = 0x5000, 0x6000, 0x7000, 0x4000
LINES = {0x50: "loop.c:10", 0x60: "loop.c:20"}
CODES = {FIRST: ("/opt/prog", 0x50), SECOND: ("/opt/prog", 0x60), SINGLE: ("/opt/prog", 0x70)}


def _events(*threads: list[tuple], codes=CODES) -> ompt.Events:
    return ompt.Events("hand-made runtime 1.0", [], [np.array(rows, dtype=EVENT_DTYPE) for rows in threads],
                       dict(codes))


def _loop(region: int, code: int, count: int, begin: float, chunks: list[tuple], end: float,
          work: int = LOOP) -> list[tuple]:
    """A thread's records of one loop: chunks as (start, iterations, when handed out)."""
    return ([(begin, WB, region, work, code), (begin, COUNT, region, count, 0)]
            + [(at, CHUNK, region, start, size) for start, size, at in chunks] + [(end, WE, region, work, 0)])


def _one_region(second_span: float = 60.0, inside_chunk: list[tuple] = ()) -> ompt.Events:
    """Two threads, one parallel region, two loops of 4 iterations in chunks of 2; between the loops the
    initial thread runs serial code in a single (170..390 ns) and the team meets at its barrier.

    Chunk spans: loop 0: [0, 2) 100 ns on thread 0, [2, 4) ``second_span`` on thread 1;
    loop 1 (dynamic: thread 1 claims first): [0, 2) 40 ns on thread 1, [2, 4) 100 ns on thread 0.
    """
    master = ([(0, PB, 1, 2, REGION_CODE), (10, IB, 1, 0 << 32 | 2, 1)]
              + _loop(1, FIRST, 4, 20, [(0, 2, 30)], 130)[:-1] + list(inside_chunk) + [(130, WE, 1, LOOP, 0)]
              + [(140, SB, 1, 1, 0), (160, SE, 1, 1, 0),
                 (170, WB, 1, SINGLE_EXECUTOR, SINGLE), (170, COUNT, 1, 1, 0),
                 (390, WE, 1, SINGLE_EXECUTOR, 0),
                 (400, SB, 1, 1, 0), (450, SE, 1, 1, 0)]
              + _loop(1, SECOND, 4, 460, [(2, 2, 470)], 570, DYNAMIC_LOOP)
              + [(580, SB, 1, 1, 0), (600, SE, 1, 1, 0), (610, IE, 1, 0, 1), (620, PE, 1, 0, 0)])
    worker = ([(12, IB, 1, 1 << 32 | 2, 1)]
              + _loop(1, FIRST, 4, 22, [(2, 2, 25)], 25 + second_span)
              + [(90, SB, 1, 1, 0), (160, SE, 1, 1, 0),
                 (165, WB, 1, SINGLE_OTHER, SINGLE), (165, COUNT, 1, 1, 0), (166, WE, 1, SINGLE_OTHER, 0),
                 (170, SB, 1, 1, 0), (450, SE, 1, 1, 0)]
              + _loop(1, SECOND, 4, 455, [(0, 2, 458)], 498, DYNAMIC_LOOP)
              + [(560, SB, 1, 1, 0), (600, SE, 1, 1, 0), (605, IE, 1, 1, 1)])
    return _events(master, worker)


def _two_regions() -> ompt.Events:
    """Two threads, two parallel regions that run the same loop (4 iterations, chunks of 2, 100 ns each);
    between them the initial thread runs 1000 ns of serial code outside any region."""
    master = ([(0, PB, 1, 2, REGION_CODE), (5, IB, 1, 0 << 32 | 2, 1)]
              + _loop(1, FIRST, 4, 10, [(0, 2, 15)], 115)
              + [(120, SB, 1, 1, 0), (130, SE, 1, 1, 0), (135, IE, 1, 0, 1), (140, PE, 1, 0, 0),
                 (1140, PB, 2, 2, REGION_CODE), (1150, IB, 2, 0 << 32 | 2, 1)]
              + _loop(2, FIRST, 4, 1160, [(0, 2, 1165)], 1265)
              + [(1270, SB, 2, 1, 0), (1280, SE, 2, 1, 0), (1285, IE, 2, 0, 1), (1290, PE, 2, 0, 0)])
    worker = ([(6, IB, 1, 1 << 32 | 2, 1)] + _loop(1, FIRST, 4, 11, [(2, 2, 14)], 114)
              + [(118, SB, 1, 1, 0), (130, SE, 1, 1, 0), (133, IE, 1, 1, 1),
                 (1152, IB, 2, 1 << 32 | 2, 1)] + _loop(2, FIRST, 4, 1161, [(2, 2, 1163)], 1263)
              + [(1268, SB, 2, 1, 0), (1280, SE, 2, 1, 0), (1283, IE, 2, 1, 1)])
    return _events(master, worker)


def _single_loop(count: int, chunks: list[tuple[int, int]], extra: list[tuple] = (), depth: int = 1
                 ) -> ompt.Events:
    """One thread, one loop of ``count`` iterations whose chunks (start, iterations) last 100 ns each."""
    at = [(start, size, 100.0 * (k + 1)) for k, (start, size) in enumerate(chunks)]
    rows = ([(0, PB, 1, 1, REGION_CODE), (50, IB, 1, 1, depth)] + list(extra)
            + _loop(1, FIRST, count, 60, at, 100.0 * (len(chunks) + 1))
            + [(5000, IE, 1, 0, depth), (5010, PE, 1, 0, 0)])
    return _events(sorted(rows, key=lambda row: row[0]))


@pytest.fixture
def lines(monkeypatch):
    """Resolve the hand-made code addresses to source lines, as addr2line would with debug info."""
    monkeypatch.setattr(ompt, "source_line", lambda file, offset: LINES.get(offset, f"prog+{offset:#x}"))


def test_parse_run_finds_each_loop_instance_in_program_order_with_its_chunks(lines):
    run = parse_run(_one_region())
    assert run.names == ["loop.c:10#0", "loop.c:20#0"]  # the single between them is no loop
    first, second = run.instances
    assert (first.region, first.position, first.code, first.count) == (1, 0, FIRST, 4)
    assert (second.region, second.position, second.code, second.count) == (1, 1, SECOND, 4)
    assert first.begins == {0: 20.0, 1: 22.0} and first.ends == {0: 130.0, 1: 85.0}
    # Rows (thread, start, iterations, begin, end): a chunk lasts until its thread's loop ends.
    assert first.chunk_table().tolist() == [[0, 0, 2, 30, 130], [1, 2, 2, 25, 85]]
    assert second.chunk_table().tolist() == [[0, 2, 2, 470, 570], [1, 0, 2, 458, 498]]
    assert run.shape == [("loop.c:10#0", 4), ("loop.c:20#0", 4)]
    assert run.span_ns == 570.0 - 20.0
    assert run.notes == [] and run.runtime_version == "hand-made runtime 1.0"


def test_each_iteration_costs_its_chunks_span_less_an_empty_chunk_spread_over_the_chunk(lines):
    run = parse_run(_one_region())
    # Loop 0: [0, 2) (100 - 10) / 2 on thread 0; [2, 4) (60 - 10) / 2 on thread 1.
    assert iteration_costs(run.instances[0], run.names[0], EMPTY_NS).tolist() == [45, 45, 25, 25]
    # Loop 1: [0, 2) (40 - 10) / 2 on thread 1; [2, 4) (100 - 10) / 2 on thread 0.
    assert iteration_costs(run.instances[1], run.names[1], EMPTY_NS).tolist() == [15, 15, 45, 45]
    # A chunk shorter than an empty one costs nothing, not less.
    assert iteration_costs(run.instances[1], run.names[1], 70.0).tolist() == [0, 0, 15, 15]


def test_serial_code_is_the_initial_threads_gap_less_its_barriers_forks_and_joins(lines):
    one = parse_run(_one_region())
    # 130..460 on thread 0 is 330 ns, of which barriers 140..160 and 400..450: 10 + 240 + 10 serial.
    assert one.serial_ns == [0.0, 260.0]
    assert one.unseen_ns == 260.0  # in the region, neither a loop nor the runtime: the single's code
    two = parse_run(_two_regions())
    # 115..1160 is 1045 ns, less the barrier 120..130, the join 135..140 and the fork 1140..1150.
    assert two.serial_ns == [0.0, 1020.0]


def test_instances_of_one_loop_are_numbered_in_program_order(lines):
    run = parse_run(_two_regions())
    assert run.names == ["loop.c:10#0", "loop.c:10#1"]
    assert [inst.region for inst in run.instances] == [1, 2]
    costs = [iteration_costs(inst, name, EMPTY_NS).tolist() for inst, name in zip(run.instances, run.names)]
    assert costs == [[45, 45, 45, 45]] * 2


def test_a_loop_without_debug_information_is_named_by_its_object_and_offset_or_its_address():
    run = parse_run(_two_regions())  # /opt/prog is not there: no line to read
    assert run.names == ["prog+0x50#0", "prog+0x50#1"]
    run = parse_run(_events(*_two_regions().threads, codes={}))
    assert run.names == [f"{FIRST:#x}#0", f"{FIRST:#x}#1"]


def test_a_record_inside_a_chunk_does_not_end_it(lines):
    # A task created (or any record) in the middle of a chunk: the chunk still lasts until the loop's end.
    run = parse_run(_one_region(inside_chunk=[(50, TASK, 1, 4, 0x9000)]))
    assert run.instances[0].chunk_table()[0].tolist() == [0, 0, 2, 30, 130]
    assert iteration_costs(run.instances[0], run.names[0], EMPTY_NS).tolist() == [45, 45, 25, 25]
    events = _single_loop(6, [(0, 2), (2, 2), (4, 2)])
    rows = list(events.threads[0])
    rows.insert(4, (150.0, ITERATION, 1, 0, 0))  # after the first chunk's report, at 100 ns
    run = parse_run(_events([tuple(r) for r in rows]))
    assert run.instances[0].chunk_table()[:, 3:].tolist() == [[100, 200], [200, 300], [300, 400]]


def test_a_loop_with_a_step_other_than_one_is_covered_by_its_logical_iterations(lines):
    # for (i = 10; i < 30; i += 4): 5 iterations; chunks of 2 report the loop variable's first value.
    run = parse_run(_single_loop(5, [(18, 2), (10, 2), (26, 1)]))
    costs = iteration_costs(run.instances[0], run.names[0], EMPTY_NS)
    # Ordered by iteration: [10, 14] 90 / 2, [18, 22] 90 / 2, [26] 90 (every chunk lasts 100 ns).
    assert costs.tolist() == [45, 45, 45, 45, 90]


@pytest.mark.parametrize("count, chunks", [
    (4, [(0, 2), (1, 2)]),  # overlapping
    (4, [(0, 2), (2, 2), (2, 2)]),  # a chunk twice
    (4, [(0, 2), (3, 1)]),  # a gap
    (4, [(0, 2), (3, 2)]),  # a gap, as many iterations as the loop
    (4, [(0, 2), (2, 2), (4, 2)]),  # past the end
    (6, [(0, 2), (2, 2)]),  # short of the end
    (4, [(0, 0), (0, 4)]),  # an empty chunk
], ids=["overlap", "twice", "gap", "gap-same-total", "past-end", "short", "empty-chunk"])
def test_chunks_that_do_not_cover_a_loop_exactly_once_are_refused_naming_it(lines, count, chunks):
    run = parse_run(_single_loop(count, chunks))
    message = rf"^loop loop\.c:10#0: the runtime's chunks do not cover its {count} iterations exactly once$"
    with pytest.raises(SimschedError, match=message):
        iteration_costs(run.instances[0], run.names[0], EMPTY_NS)


def test_a_loop_the_runtime_gave_no_chunks_is_refused(lines):
    run = parse_run(_single_loop(4, []))
    with pytest.raises(SimschedError, match=r"^loop loop\.c:10#0: the runtime reported no chunks .*runtime"):
        iteration_costs(run.instances[0], run.names[0], EMPTY_NS)


def test_a_loop_of_no_iterations_is_left_out_and_its_time_is_serial_code(lines):
    # Loops at 20..120 (2 iterations), 130..140 (none, as the runtime reports a loop whose bounds meet) and
    # 150..250: the middle one's 10 ns count in the 30 ns between the others.
    rows = ([(0, PB, 1, 1, REGION_CODE), (10, IB, 1, 1, 1)] + _loop(1, FIRST, 2, 20, [(0, 2, 20)], 120)
            + _loop(1, SINGLE, 0, 130, [], 140) + _loop(1, SECOND, 2, 150, [(0, 2, 150)], 250)
            + [(260, IE, 1, 0, 1), (270, PE, 1, 0, 0)])
    run = parse_run(_events(rows))
    assert run.names == ["loop.c:10#0", "loop.c:20#0"] and run.serial_ns == [0.0, 30.0]
    assert iteration_costs(loop_instances.Instance(1, 0, FIRST, 0), "loop.c:10#0", EMPTY_NS).size == 0


def test_nested_regions_tasks_and_single_iterations_leave_notes(lines):
    assert parse_run(_single_loop(2, [(0, 2)])).notes == []
    nested = parse_run(_single_loop(2, [(0, 2)], depth=2))
    assert len(nested.notes) == 1 and nested.notes[0].startswith("nested parallel regions")
    tasks = parse_run(_single_loop(2, [(0, 2)], extra=[(55, TASK, 1, 4, 0x9000), (56, TASK, 1, 4, 0x9000)]))
    assert tasks.notes == [("2 explicit task(s) created: the trace does not hold tasks, their time counts in "
                            "the loops or serial code around them")]
    single = parse_run(_single_loop(2, [(0, 2)], extra=[(55, ITERATION, 1, 0, 0)]))
    assert len(single.notes) == 1 and "single iterations" in single.notes[0]


def test_a_loop_the_initial_thread_does_not_run_is_refused():
    worker_only = _events([], [tuple(r) for r in _single_loop(2, [(0, 2)]).threads[0]])
    with pytest.raises(SimschedError, match="the initial thread did not take part in a loop"):
        parse_run(worker_only)


RUNTIME = ompt.Runtime("libiomp5", Path("/opt/intel/libiomp5.so"))
PROBE = Probe(empty_chunk_ns=EMPTY_NS, tool_ns_per_chunk=4.0, runtime_ns_per_chunk=6.0)


def _combine(runs, command=("./prog", "a b")):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        recording = combine(runs, list(command), RUNTIME, PROBE, threads=2, block=2)
    return recording, [str(w.message) for w in caught]


def test_combine_takes_each_iterations_median_over_the_runs(lines):
    # Thread 1's chunk [2, 4) of loop 0 lasts 20, 60 and 40 ns: its iterations cost (40 - 10) / 2.
    runs = [parse_run(_one_region(span)) for span in (20.0, 60.0, 40.0)]
    recording, notes = _combine(runs)
    assert recording.names == ["loop.c:10#0", "loop.c:20#0"]
    assert recording.phases == ["loop.c:10", "loop.c:20"]
    assert [c.tolist() for c in recording.loops] == [[45, 45, 15, 15], [15, 15, 45, 45]]
    assert recording.serial_ns == [0.0, 260.0]
    meta = recording.meta
    assert (meta["repeat"], meta["runs_kept"], meta["schedule"], meta["block"], meta["threads"]) == \
        (3, 3, "static,2", 2, 2)
    assert (meta["empty_chunk_ns"], meta["tool_ns_per_chunk"], meta["runtime_ns_per_chunk"]) == \
        (10.0, 4.0, 6.0)
    assert meta["program"] == ["./prog", "a b"] and meta["command_line"] == "./prog 'a b'"
    assert (meta["runtime"], meta["runtime_path"], meta["runtime_version"]) == \
        ("libiomp5", "/opt/intel/libiomp5.so", "hand-made runtime 1.0")
    # The single's 260 ns in the region is no loop, and loop.c:20 ran dynamic under OMP_SCHEDULE=static,K
    # (its schedule compiled in): each said once, as notes kept in the metadata.
    assert len(notes) == 2 and meta["notes"] == notes
    assert "loop.c:20 ran a schedule compiled into them" in notes[0]
    assert "outside every reported loop" in notes[1]
    table = recording.chunks
    assert list(table.columns) == ["run", "loop", "thread", "start", "iterations", "begin_ns", "end_ns"]
    assert len(table) == 3 * 4 and table.groupby(["run", "loop"])["iterations"].sum().eq(4).all()


def test_combine_drops_a_run_of_another_shape_with_a_warning(lines):
    runs = [parse_run(_one_region(20.0)), parse_run(_one_region(60.0)), parse_run(_two_regions())]
    recording, notes = _combine(runs)
    assert recording.names == ["loop.c:10#0", "loop.c:20#0"]
    assert recording.loops[0].tolist() == [45, 45, 15, 15]  # the median of 5 and 25
    assert (recording.meta["repeat"], recording.meta["runs_kept"]) == (3, 2)
    assert any(note.startswith("the program's loops differ between runs (1 of 3 runs") for note in notes)
    assert sorted(recording.chunks["run"].unique()) == [0, 1, 2]  # the chunk table keeps every run


@pytest.mark.parametrize("schedule, scheduler", [
    ("static", "omp-static:runtime=llvm"),
    ("static,8", "omp-static:chunk=8,runtime=llvm"),
    ("dynamic", "omp-dynamic:chunk=1,runtime=llvm"),
    ("dynamic,64", "omp-dynamic:chunk=64,runtime=llvm"),
    ("guided", "omp-guided:runtime=llvm"),
    (" Guided,4 ", "omp-guided:chunk=4,runtime=llvm"),
])
def test_scheduler_for_models_each_omp_schedule_value(schedule, scheduler):
    assert program_validation.scheduler_for(schedule) == scheduler


@pytest.mark.parametrize("schedule, needle", [
    ("bogus", "is not an OMP_SCHEDULE value"),
    ("auto", "is not an OMP_SCHEDULE value"),
    ("", "is not an OMP_SCHEDULE value"),
    ("dynamic,0", "the chunk size must be an integer >= 1"),
    ("dynamic,-4", "the chunk size must be an integer >= 1"),
    ("guided,x", "the chunk size must be an integer >= 1"),
    ("static,1.5", "the chunk size must be an integer >= 1"),
    ("static,", "the chunk size must be an integer >= 1"),
])
def test_scheduler_for_refuses_values_it_does_not_model(schedule, needle):
    message = re.escape(f"--schedules: {schedule!r}") + ".*" + re.escape(needle)
    with pytest.raises(SimschedError, match=message):
        program_validation.scheduler_for(schedule)


def test_split_schedules_splits_on_spaces_and_semicolons_and_refuses_bad_values():
    assert program_validation.split_schedules("static dynamic,64") == ["static", "dynamic,64"]
    assert program_validation.split_schedules(" static;guided,4 ;dynamic ") == ["static", "guided,4", "dynamic"]
    for text, needle in [("", "no schedule given"), (" ; ", "no schedule given"),
                         ("static bogus", "'bogus'")]:
        with pytest.raises(SimschedError, match=needle):
            program_validation.split_schedules(text)


# ---- programs recorded through the command line ----------------------------------------------------------

# A loop counting down whose iterations cost more the lower i is, and a slow program for interrupting.
DOWN_C = """
#include <stdio.h>
int main(void)
{
    double sum = 0.0;
#pragma omp parallel for schedule(runtime) reduction(+ : sum)
    for (long i = 3999; i >= 0; i--)
        for (long k = 0; k < (i < 2000 ? 4000 : 40); k++)
            sum += 1.0 / (i + k + 1.0);
    printf("%g\\n", sum);
    return 0;
}
"""

SLOW_C = """
#include <unistd.h>
int main(void)
{
    volatile double s = 0;
    for (int r = 0; r < 600; r++) {
#pragma omp parallel for schedule(runtime)
        for (long i = 0; i < 1000; i++)
            s += i;
        usleep(100000);
    }
    return 0;
}
"""

TASKS_C = """
#include <stdio.h>
int main(void)
{
    double sum = 0.0;
#pragma omp parallel for schedule(runtime) reduction(+ : sum)
    for (int i = 0; i < 4000; i++) {
        if (i % 100 == 0) {
#pragma omp task
            {
                volatile double x = i * 0.5;
                (void)x;
            }
        }
        for (int k = 0; k < 200; k++)
            sum += 1.0 / (i + k + 1.0);
    }
    printf("%g\\n", sum);
    return 0;
}
"""
EXITS_C = """
#include <stdio.h>
#include <stdlib.h>
int main(void)
{
    double sum = 0.0;
#pragma omp parallel for schedule(runtime) reduction(+ : sum)
    for (int i = 0; i < 1000; i++)
        sum += i;
    fprintf(stderr, "giving up after %g\\n", sum);
    exit(3);
}
"""
# Leaves a mark when it runs: the refusals that must come before any run check that it never did.
MARKS_C = """
#include <stdio.h>
int main(int argc, char **argv)
{
    FILE *mark = fopen(argc > 1 ? argv[1] : "mark", "w");
    if (mark)
        fclose(mark);
    double sum = 0.0;
#pragma omp parallel for schedule(runtime) reduction(+ : sum)
    for (int i = 0; i < 1000; i++)
        sum += i;
    printf("%g\\n", sum);
    return 0;
}
"""
NESTED_C = """
#include <stdio.h>
int main(void)
{
    static double a[64][64];
#pragma omp parallel for schedule(runtime)
    for (int i = 0; i < 64; i++) {
#pragma omp parallel for schedule(runtime)
        for (int j = 0; j < 64; j++)
            a[i][j] = i * j;
    }
    printf("%g\\n", a[3][5]);
    return 0;
}
"""
SERIAL_C = """
#include <stdio.h>
int main(void) { puts("no threads here"); return 0; }
"""


def _compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")


def _build(compiler: str, source: Path | str, binary: Path, openmp: bool = True) -> Path:
    if isinstance(source, str):
        path = binary.with_suffix(".c")
        path.write_text(source)
        source = path
    flags = ["-O2", "-g"] + (["-fopenmp"] if openmp else [])
    built = subprocess.run([compiler, *flags, str(source), "-o", str(binary), "-lm"], capture_output=True,
                           text=True, timeout=120, check=False)
    if built.returncode != 0:
        pytest.skip(f"the C compiler here does not build OpenMP programs: {built.stderr.strip()[:200]}")
    return binary


@pytest.fixture(scope="module")
def programs(tmp_path_factory) -> dict[str, Path]:
    """The example SpMV and small test programs, built once (skipped where no compiler builds OpenMP)."""
    compiler = _compiler()
    if compiler is None:
        pytest.skip("no C compiler here")
    folder = tmp_path_factory.mktemp("programs")
    built = {"spmv": _build(compiler, SPMV, folder / "spmv")}
    for name, source in [("tasks", TASKS_C), ("exits", EXITS_C), ("marks", MARKS_C), ("nested", NESTED_C)]:
        built[name] = _build(compiler, source, folder / name)
    built["serial"] = _build(compiler, SERIAL_C, folder / "serial", openmp=False)
    built["down"] = _build(compiler, DOWN_C, folder / "down")
    built["slow"] = _build(compiler, SLOW_C, folder / "slow")
    built["nopie"] = folder / "spmv_nopie"
    nopie = subprocess.run([compiler, "-O2", "-g", "-fopenmp", "-no-pie", str(SPMV), "-o", str(built["nopie"]),
                            "-lm"], capture_output=True, text=True, timeout=120, check=False)
    if nopie.returncode != 0:
        del built["nopie"]  # a compiler that cannot link a non-PIE executable: that test skips
    script = folder / "twice.sh"
    script.write_text(f"#!/bin/sh\n{built['spmv']} 2000 1 >/dev/null && {built['spmv']} 2000 1\n")
    script.chmod(0o755)
    built["twice"] = script
    return built


def _missing(reason: str):
    """Skip for want of a runtime or the tool, unless this run must record (CI sets SIMSCHED_REQUIRE_OMPT=1)."""
    if os.environ.get("SIMSCHED_REQUIRE_OMPT") == "1":
        pytest.fail(f"SIMSCHED_REQUIRE_OMPT=1, but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def runtime(programs) -> ompt.Runtime:
    """The OMPT runtime recordings run on, with the tool built (skipped where either is missing)."""
    try:
        found = ompt.find_runtime()
    except ompt.NoRuntime as exc:
        _missing(f"no OMPT runtime here: {exc}")
    try:
        ompt.tool_path()
    except SimschedError as exc:
        _missing(str(exc))
    return found


def _record(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "simsched.cli", "record", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=300, check=False)


@pytest.fixture(scope="module")
def recorded(programs, runtime, tmp_path_factory):
    """The SpMV program recorded once: the command, what the CLI said, the trace."""
    folder = tmp_path_factory.mktemp("recorded")
    command = [str(programs["spmv"]), str(ROWS), str(PRODUCTS)]
    proc = _record("--out", folder / "t.parquet", "--repeat", 2, "--", *command)
    assert proc.returncode == 0, proc.stderr
    return command, proc, folder / "t.parquet"


@pytest.fixture(scope="module")
def recorded_again(programs, runtime, tmp_path_factory):
    """The same program recorded a second time, at a chunk size given, into a CSV trace."""
    folder = tmp_path_factory.mktemp("again")
    proc = _record("--out", folder / "again.csv", "--repeat", 1, "--block", 64, "--",
                   programs["spmv"], ROWS, PRODUCTS)
    assert proc.returncode == 0, proc.stderr
    return proc, folder / "again.csv"


def _expected_names() -> list[str]:
    """spmv.c's loops by the line of each 'for' under a '#pragma omp parallel for': the init loop, then the
    product loop once per product."""
    lines = SPMV.read_text().splitlines()
    sites = [f"spmv.c:{k + 2}" for k, line in enumerate(lines)
             if line.strip().startswith("#pragma omp parallel for")]
    assert len(sites) == 2 and lines[int(sites[0].split(":")[1]) - 1].strip().startswith("for")
    return [f"{sites[0]}#0"] + [f"{sites[1]}#{p}" for p in range(PRODUCTS)]


def _trace(path: Path) -> list:
    return list(TraceFile(path).loops())


def test_record_writes_every_loop_instance_in_program_order(recorded):
    command, proc, path = recorded
    loops = _trace(path)
    assert [loop.name for loop in loops] == _expected_names() == ["spmv.c:42#0", "spmv.c:53#0", "spmv.c:53#1"]
    assert [loop.phase for loop in loops] == [name.rpartition("#")[0] for name in _expected_names()]
    assert [loop.costs.size for loop in loops] == [ROWS] * (1 + PRODUCTS)  # one row per iteration
    assert all(np.all(loop.costs >= 0) and loop.costs.sum() > 0 for loop in loops)
    meta = trace_metadata(path)
    assert proc.stdout.startswith(f"recorded {1 + PRODUCTS} loop instance(s) of {shlex.join(command)} on 2 "
                                  f"threads under OMP_SCHEDULE={meta['schedule']} (")
    assert proc.stdout.rstrip().endswith(f"wrote {path}")


def test_the_serial_code_between_products_is_recorded(recorded):
    loops = _trace(recorded[2])
    assert loops[0].serial_ns == 0.0  # before the first loop: not modelled
    # After each product the program normalises the vector on the initial thread alone.
    assert all(loop.serial_ns > 0 for loop in loops[2:])


def test_the_chunk_table_tiles_each_instance_exactly_once(recorded):
    _, _, path = recorded
    meta = trace_metadata(path)
    table = pd.read_csv(path.with_name(meta["chunk_table"]))
    assert meta["chunk_table"] == "t.chunks.csv"
    assert list(table.columns) == ["run", "loop", "thread", "start", "iterations", "begin_ns", "end_ns"]
    assert sorted(table.groupby(["run", "loop"]).groups) == \
        [(r, k) for r in range(2) for k in range(1 + PRODUCTS)]
    block = meta["block"]
    for (run, loop), chunks in table.groupby(["run", "loop"]):
        chunks = chunks.sort_values("start")
        starts, sizes = chunks["start"].to_numpy(), chunks["iterations"].to_numpy()
        assert starts[0] == 0 and np.array_equal(starts[1:], np.cumsum(sizes)[:-1]), (run, loop)
        assert sizes.sum() == ROWS, (run, loop)
        # Under OMP_SCHEDULE=static,K every chunk but the last has K iterations.
        assert np.all(sizes[:-1] == block) and 1 <= sizes[-1] <= block, (run, loop)
        assert set(chunks["thread"]) == {0, 1}
        assert np.all(chunks["end_ns"] >= chunks["begin_ns"])


def test_the_recording_says_how_it_was_made(recorded, runtime):
    command, _, path = recorded
    meta = trace_metadata(path)
    assert {"runtime", "runtime_version", "schedule", "threads", "block", "repeat", "empty_chunk_ns",
            "tool_ns_per_chunk", "host", "command_line", "program", "chunk_table"} <= set(meta)
    assert meta["runtime"] == runtime.label and meta["runtime_path"] == str(runtime.path)
    assert isinstance(meta["runtime_version"], str) and meta["runtime_version"]
    assert meta["schedule"] == f"static,{meta['block']}" and 1 <= meta["block"] <= ROWS // 2
    assert (meta["threads"], meta["repeat"], meta["runs_kept"]) == (2, 2, 2)
    assert meta["empty_chunk_ns"] > 0 and meta["tool_ns_per_chunk"] >= 0
    assert meta["host"] == (platform.node() or "unknown")
    assert meta["program"] == command and meta["command_line"] == shlex.join(command)
    assert not any("task" in note or "nested" in note for note in meta["notes"])


def test_two_recordings_have_the_same_loops(recorded, recorded_again):
    first, again = _trace(recorded[2]), recorded_again[1]
    second = _trace(again)
    assert [loop.name for loop in second] == [loop.name for loop in first]
    assert [loop.costs.size for loop in second] == [loop.costs.size for loop in first]
    meta = trace_metadata(again)
    assert (meta["schedule"], meta["block"], meta["repeat"], meta["chunk_table"]) == \
        ("static,64", 64, 1, "again.chunks.csv")
    table = pd.read_csv(again.with_name("again.chunks.csv"))
    for _, chunks in table.groupby("loop"):
        sizes = chunks.sort_values("start")["iterations"].to_numpy()
        assert np.all(sizes[:-1] == 64) and sizes.sum() == ROWS


def test_the_recorded_trace_simulates(recorded, run_json):
    result = run_json(f"trace:path={recorded[2]}", "omp-dynamic:chunk=4", 2, MACHINE)
    assert result["loop_names"] == _expected_names()
    assert result["chunks"] == (1 + PRODUCTS) * (ROWS // 4)
    assert result["makespan_ns"] > 0 and result["serial_ns"] > 0


def test_validate_prints_each_loop_and_the_program_measured_and_simulated(recorded):
    command, _, path = recorded
    proc = _record("--validate", "--trace", path, "--machine", MACHINE, "--rounds", 1, "--schedules",
                   "static dynamic,64", "--json", "--", *command)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)  # one JSON object, nothing else
    sites = list(dict.fromkeys(name.rpartition("#")[0] for name in _expected_names()))
    assert [(row["loop"], row["schedule"]) for row in report["rows"]] == \
        [(site, schedule) for schedule in ("static", "dynamic,64") for site in sites]
    for row in report["rows"]:
        assert {"loop", "schedule", "measured_ns", "simulated_ns", "error"} <= set(row)
        assert row["measured_ns"] > 0 and row["simulated_ns"] > 0
        assert row["error"] == pytest.approx(row["simulated_ns"] / row["measured_ns"] - 1)
    assert [row["instances"] for row in report["rows"]] == [1, PRODUCTS] * 2
    assert [(p["schedule"], p["scheduler"], p["same_loops"]) for p in report["program"]] == \
        [("static", "omp-static:runtime=llvm", True),
         ("dynamic,64", "omp-dynamic:chunk=64,runtime=llvm", True)]
    assert all(p["measured_ns"] > 0 and p["simulated_ns"] > 0 for p in report["program"])
    assert (report["machine"], report["threads"], report["rounds"], report["trace"]) == \
        (MACHINE, 2, 1, str(path))


def test_validate_without_a_trace_records_first_and_keeps_stdout_to_the_json(programs, runtime, tmp_path):
    machine = tmp_path / "machine.toml"
    machine.write_text((ROOT / "machines" / f"{MACHINE}.toml").read_text())
    proc = _record("--validate", "--machine", machine, "--repeat", 1, "--rounds", 1, "--schedules", "guided",
                   "--json", "--", programs["spmv"], 2000, 1, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert [row["schedule"] for row in report["rows"]] == ["guided", "guided"]
    assert report["trace"].endswith("recording.npz") and not Path(report["trace"]).exists()
    assert "recorded 2 loop instance(s)" in proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["machine.toml"]  # the recording was scratch


def test_a_program_that_creates_tasks_records_with_a_warning(programs, runtime, tmp_path):
    out = tmp_path / "tasks.parquet"
    proc = _record("--out", out, "--repeat", 1, "--block", 50, "--", programs["tasks"])
    assert proc.returncode == 0, proc.stderr
    warned = [line for line in proc.stderr.splitlines()
              if line.startswith("simsched: warning: ") and "task" in line]
    assert len(warned) == 1 and "40 explicit task(s)" in warned[0], proc.stderr
    assert "Traceback" not in proc.stderr
    # A chunk lasts until its thread's next chunk (or the loop's end), whatever tasks it creates.
    table = pd.read_csv(tmp_path / "tasks.chunks.csv")
    assert table["iterations"].sum() == 4000
    for _, chunks in table.groupby("thread"):
        chunks = chunks.sort_values("begin_ns")
        assert np.array_equal(chunks["end_ns"].to_numpy()[:-1], chunks["begin_ns"].to_numpy()[1:])


# ---- bad input ------------------------------------------------------------------------------------------

@pytest.fixture
def refuse(main, tmp_path, monkeypatch):
    """``simsched record`` in this process, refused: one line naming every needle, status 2, and nothing
    written (no trace, no chunk table, no scratch folder left)."""
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    def call(args: list, *needles: str, cwd=None) -> str:
        before = sorted(tmp_path.rglob("*"))
        line = refused(main("record", *args, cwd=cwd), *needles)
        assert sorted(tmp_path.rglob("*")) == before
        assert not (tmp_path / "t.parquet").exists() and not (tmp_path / "t.chunks.csv").exists()
        return line
    return call


def test_a_missing_program_is_refused(refuse, tmp_path):
    refuse(["--out", tmp_path / "t.parquet", "--", tmp_path / "absent"],
           f"program '{tmp_path / 'absent'}' not found")
    refuse(["--out", tmp_path / "t.parquet", "--", "simsched-no-such-program"],
           "program 'simsched-no-such-program' not found")
    refuse(["--out", tmp_path / "t.parquet"], "no program to record")


def test_a_file_that_is_not_executable_or_a_folder_is_refused(refuse, tmp_path):
    plain = tmp_path / "plain"
    plain.write_text("not a program\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    refuse(["--out", tmp_path / "t.parquet", "--", plain], f"program '{plain}' is not an executable file")
    refuse(["--out", tmp_path / "t.parquet", "--", folder], f"program '{folder}' is not an executable file")


def test_a_program_without_openmp_is_refused(refuse, programs, tmp_path):
    refuse(["--out", tmp_path / "t.parquet", "--", programs["serial"]], "uses no OpenMP runtime",
           "no parallel loops to record")
    true = shutil.which("true")
    if true and Path(true).read_bytes()[:4] == b"\x7fELF":
        refuse(["--out", tmp_path / "t.parquet", "--", true], "uses no OpenMP runtime")


def test_a_program_that_fails_is_refused_with_its_last_words(refuse, programs, runtime, tmp_path):
    refuse(["--out", tmp_path / "t.parquet", "--repeat", 1, "--", programs["spmv"], 0],
           "the program exited with status 2: usage: spmv [rows >= 1] [products >= 1]")
    refuse(["--out", tmp_path / "t.parquet", "--repeat", 2, "--block", 8, "--", programs["exits"]],
           "run 1 of 2 (OMP_SCHEDULE=static,8): the program exited with status 3: giving up after 499500")


def test_nested_parallel_loops_are_refused(refuse, programs, runtime, tmp_path):
    refuse(["--out", tmp_path / "t.parquet", "--repeat", 1, "--block", 4, "--", programs["nested"]],
           "nested or orphaned parallel regions are not supported")


def test_a_runtime_that_is_not_an_ompt_runtime_is_refused(refuse, programs, tmp_path):
    fake = tmp_path / "libfoo.so"
    fake.write_text("not a library\n")
    refuse(["--out", tmp_path / "t.parquet", "--runtime", fake, "--", programs["spmv"]],
           f"--runtime {fake}: not an OMPT runtime")
    refuse(["--out", tmp_path / "t.parquet", "--runtime", tmp_path / "absent.so", "--", programs["spmv"]],
           f"--runtime {tmp_path / 'absent.so'}: no such file")


def test_gccs_libgomp_is_refused_as_a_runtime(refuse, programs, tmp_path):
    found = [p for p in ("/usr/lib/x86_64-linux-gnu/libgomp.so.1", "/usr/lib/aarch64-linux-gnu/libgomp.so.1",
                         "/usr/lib64/libgomp.so.1", "/usr/lib/libgomp.so.1") if Path(p).is_file()]
    if not found:
        pytest.skip("no libgomp.so.1 where it is usually installed")
    refuse(["--out", tmp_path / "t.parquet", "--runtime", found[0], "--", programs["spmv"]],
           "libgomp.so.1: not an OMPT runtime")


def test_simsched_omp_runtime_must_name_a_runtime(refuse, programs, tmp_path, monkeypatch):
    monkeypatch.setenv("SIMSCHED_OMP_RUNTIME", str(tmp_path / "absent.so"))
    refuse(["--out", tmp_path / "t.parquet", "--", programs["spmv"]],
           f"SIMSCHED_OMP_RUNTIME {tmp_path / 'absent.so'}: no such file")
    fake = tmp_path / "libfoo.so"
    fake.write_text("not a library\n")
    monkeypatch.setenv("SIMSCHED_OMP_RUNTIME", str(fake))
    refuse(["--out", tmp_path / "t.parquet", "--", programs["spmv"]], "SIMSCHED_OMP_RUNTIME",
           "not an OMPT runtime")


def test_a_libgomp_program_with_no_ompt_runtime_installed_is_refused(refuse, programs, tmp_path, monkeypatch):
    if shutil.which("readelf") is None:
        pytest.skip("no readelf here to read what the program links")
    monkeypatch.delenv("SIMSCHED_OMP_RUNTIME", raising=False)
    monkeypatch.setattr(ompt, "_candidates", list)  # no runtime installed where simsched looks
    refuse(["--out", tmp_path / "t.parquet", "--", programs["spmv"]], "GCC's libgomp",
           "pip install --no-deps intel-openmp")


@pytest.mark.parametrize("args, needle", [
    ([], "record needs --out FILE"),
    (["--out", "{tmp}/t.txt"], "--out {tmp}/t.txt: a trace is a .parquet, .csv, .npz file"),
    (["--out", "{tmp}/t.parquet", "--threads", 0], "--threads must be an integer in [1, 4096], got 0"),
    (["--out", "{tmp}/t.parquet", "--repeat", 0], "--repeat must be an integer in [1, 1000], got 0"),
    (["--out", "{tmp}/t.parquet", "--block", 0], "--block must be an integer in [1, 2147483647], got 0"),
    (["--out", "{tmp}/t.parquet", "--schedules", "static"], "--trace, --schedules and --json go with"),
    (["--out", "{tmp}/t.parquet", "--trace", "{tmp}/t.parquet"], "--trace, --schedules and --json go with"),
    (["--validate", "--machine", MACHINE, "--schedules", "static bogus"], "--schedules: 'bogus' is not an"),
    (["--validate", "--machine", MACHINE, "--schedules", "static,"], "--schedules: 'static,': the chunk"),
    (["--validate", "--machine", "{tmp}/absent.toml"], "absent.toml"),
    (["--validate", "--machine", MACHINE, "--rounds", 0], "--rounds must be an integer in [1, 1000], got 0"),
    (["--validate", "--machine", MACHINE, "--trace", "{tmp}/absent.parquet"], "absent.parquet: no such file"),
    (["--validate", "--machine", MACHINE, "--trace", "{tmp}/marks.c"], "unknown suffix '.c'"),
    (["--validate", "--machine", MACHINE, "--trace", "{tmp}/fake.parquet"], "fake.parquet: cannot read it"),
    (["--validate", "--machine", MACHINE, "--trace", "{tmp}/fake.parquet", "--out", "{tmp}/t.parquet"],
     "--out and --trace"),
], ids=["no-out", "out-suffix", "threads-0", "repeat-0", "block-0", "schedules-alone", "trace-alone",
        "bogus-schedule", "empty-chunk", "machine-absent", "rounds-0", "trace-absent", "trace-suffix",
        "trace-not-parquet", "out-with-trace"])
def test_bad_options_are_refused_before_the_program_runs(refuse, programs, runtime, tmp_path, args, needle):
    (tmp_path / "marks.c").write_text(MARKS_C)
    (tmp_path / "fake.parquet").write_text("not parquet\n")
    mark = tmp_path / "mark"
    args = [str(a).replace("{tmp}", str(tmp_path)) for a in args]
    refuse([*args, "--", programs["marks"], mark], needle.replace("{tmp}", str(tmp_path)))
    assert not mark.exists()  # refused before the program ran


def test_validate_needs_a_machine_where_no_host_toml_is(refuse, programs, tmp_path):
    refuse(["--validate", "--", programs["spmv"]], "--validate simulates on host.toml, which is not here",
           "simsched native calibrate", cwd=tmp_path)


def _counting_down(chunks_by_thread: list[list[tuple]], work: int = STATIC_LOOP) -> ompt.Events:
    """One loop of 8 iterations whose chunks report their lowest value, on as many threads as given."""
    threads = []
    for t, chunks in enumerate(chunks_by_thread):
        rows = [(0, PB, 1, 2, REGION_CODE)] if t == 0 else []
        rows += [(1, IB, 1, t << 32 | len(chunks_by_thread), 1)]
        rows += _loop(1, FIRST, 8, 2, chunks, 1000, work)
        threads.append(rows + [(1001, IE, 1, t, 1)] + ([(1002, PE, 1, 0, 0)] if t == 0 else []))
    return _events(*threads)


def test_a_loop_that_counts_down_gets_its_costs_in_the_order_it_ran(lines):
    # for (i = 7; i >= 0; i--) under static,2 on 2 threads: thread 0 runs values 7-6 then 3-2, thread 1 5-4
    # then 1-0; each chunk reports its lowest value. Spans 110, 50 (thread 0), 30, 10 (thread 1), less 10.
    events = _counting_down([[(6, 2, 10), (2, 2, 120)], [(4, 2, 10), (0, 2, 40)]])
    events.threads[0]["time"][events.threads[0]["kind"] == WE] = 170
    events.threads[1]["time"][events.threads[1]["kind"] == WE] = 50
    run = parse_run(events)
    assert iteration_costs(run.instances[0], run.names[0], EMPTY_NS).tolist() == [50, 50, 10, 10, 20, 20, 0, 0]


def test_one_chunk_a_thread_counting_down_is_told_by_thread_0_holding_the_highest(lines):
    # for (i = 7; i >= 0; i--) under static: thread 0 runs values 7-4, thread 1 values 3-0.
    events = _counting_down([[(4, 4, 10)], [(0, 4, 10)]])
    events.threads[0]["time"][events.threads[0]["kind"] == WE] = 410  # 400 ns, less 10: 97.5 an iteration
    events.threads[1]["time"][events.threads[1]["kind"] == WE] = 50
    run = parse_run(events)
    assert iteration_costs(run.instances[0], run.names[0], EMPTY_NS).tolist() == [97.5] * 4 + [7.5] * 4


def test_chunks_off_the_steps_grid_are_refused(lines):
    # Starts 10, 18 with chunks of 2 say a step of 4; 27 is not on that grid (a floor division would put it there).
    events = _counting_down([[(10, 2, 10), (27, 1, 30)], [(18, 2, 10)]])
    events.threads[0]["b"][events.threads[0]["kind"] == COUNT] = 5
    run = parse_run(events)
    with pytest.raises(SimschedError, match="exactly once"):
        iteration_costs(run.instances[0], run.names[0], EMPTY_NS)



def test_a_loop_that_counts_down_is_recorded_in_the_order_it_ran(programs, runtime, tmp_path):
    out = tmp_path / "down.npz"
    proc = _record("--out", out, "--repeat", 1, "--block", 100, "--", programs["down"])
    assert proc.returncode == 0, proc.stderr
    (loop,) = _trace(out)
    # The program runs i = 3999 first: the cheap half (i >= 2000) comes first in the trace, the dear one last.
    cheap, dear = loop.costs[:2000].sum(), loop.costs[2000:].sum()
    assert dear > 10 * cheap


def test_a_program_not_built_position_independent_is_named_by_file_and_line(programs, runtime, tmp_path):
    if "nopie" not in programs:
        pytest.skip("the compiler here does not link -no-pie executables")
    out = tmp_path / "nopie.npz"
    proc = _record("--out", out, "--repeat", 1, "--", programs["nopie"], 2000, 1)
    assert proc.returncode == 0, proc.stderr
    assert [loop.name for loop in _trace(out)] == _expected_names()[:2]


def test_a_program_that_runs_two_openmp_processes_is_refused(refuse, programs, runtime, tmp_path):
    refuse(["--out", tmp_path / "t.parquet", "--block", 8, "--", programs["twice"]], "2 OpenMP processes",
           "one OpenMP program at a time")


def test_a_cut_off_record_file_is_one_line(tmp_path):
    whole = tmp_path / "run.events.123"
    header = np.array([ompt.MAGIC, 1, 0, 0, 1, 1, 1, 0], dtype="<u8").tobytes()
    thread = np.array([0, 3], dtype="<u8").tobytes()  # thread 0 with 3 records, of which only one is there
    whole.write_bytes(header + b"\0" * ompt.VERSION_BYTES + thread + b"\0" * ompt.RECORD_DTYPE.itemsize)
    with pytest.raises(SimschedError, match="end early"):
        ompt.read_events(tmp_path / "run.events")
    whole.write_bytes(b"not the tool's")
    with pytest.raises(SimschedError, match="end early|not a recording"):
        ompt.read_events(tmp_path / "run.events")


def test_sigterm_stops_the_program_and_leaves_nothing(programs, runtime, tmp_path):
    import signal
    import time

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen([sys.executable, "-m", "simsched.cli", "record", "--out", str(tmp_path / "s.npz"),
                             "--block", "8", "--", str(programs["slow"])], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not _running(programs["slow"]):
        time.sleep(0.1)
    assert _running(programs["slow"]), "the program never started"
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM and "Traceback" not in err, err
    time.sleep(0.5)
    assert not _running(programs["slow"])
    assert list(scratch.iterdir()) == [] and not (tmp_path / "s.npz").exists()


def _running(program: Path) -> bool:
    """Whether a process runs ``program`` (read from /proc)."""
    for status in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if status.read_bytes().split(b"\0")[0] == str(program).encode():
                return True
        except OSError:
            continue
    return False


def test_a_block_made_inside_a_chunk_is_taken_off_it(lines):
    # Thread 0's chunk [0, 2) runs 30..130 ns, but 60 ns of it the tool spent making a block of records.
    tool = (30, ompt.TOOL, 0, 60, 0)
    events = _one_region(inside_chunk=[tool])
    run = parse_run(events)
    assert iteration_costs(run.instances[0], run.names[0], EMPTY_NS).tolist() == [15, 15, 25, 25]
