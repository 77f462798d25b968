"""iCh as Booth and Lane describe it: each thread's progress on a line of its own, the mean read from all."""

import json
import subprocess
import sys

import pytest
import simpy

from simsched.cli import main
from simsched.memory import Memory

HASWELL = "haswell-e5-2695v3"


def cli(*args):
    """``python -m simsched.cli ARGS``: (exit status, stdout, stderr)."""
    done = subprocess.run([sys.executable, "-m", "simsched.cli", *args], capture_output=True, text=True,
                          timeout=120, check=False)
    return done.returncode, done.stdout, done.stderr


def run_json(capsys, scheduler, workload, threads, *more):
    """``simsched run --json`` in-process: the run's object."""
    assert main(["run", "--machine", HASWELL, *more, "--scheduler", scheduler, "--threads", str(threads),
                 "--workload", workload, "--json", "--no-chunk-table"]) == 0
    return json.loads(capsys.readouterr().out)


def lines_held_elsewhere(count):
    """A memory of ``count`` + 1 cores (one-way latency 100: a transfer 50) and ``count`` lines, line j
    written by core j + 1 long ago, so that reading each from core 0 costs one transfer."""
    cores = range(count + 1)
    mem = Memory(simpy.Environment(), [[0.0 if a == b else 100.0 for b in cores] for a in cores],
                 {"atomic": 10.0, "store": 1.0}, serve_ns=0.0)
    lines = [mem.line(f"k[{j}]", j, home=j + 1) for j in range(count)]
    for line in lines:
        line.written_at = -1000.0
    return mem, lines


@pytest.mark.parametrize("overlap, done", [(1, 4 * 50.0), (2, 2 * 50.0), (3, 2 * 50.0), (4, 50.0),
                                           (10, 50.0)])
def test_independent_reads_overlap_as_far_as_the_fill_buffers_go(overlap, done):
    mem, lines = lines_held_elsewhere(4)
    values, t = mem.read_all(lines, 0, 0.0, overlap)
    assert values == [0, 1, 2, 3] and t == done
    assert mem.transfers == 4 and mem.atomics == 0
    # Read again with nothing written since: every line is a hit, and the reads cost nothing.
    assert mem.read_all(lines, 0, t, overlap) == (values, t)
    assert mem.transfers == 4


def test_a_read_waits_for_a_write_it_has_not_seen_yet():
    mem, lines = lines_held_elsewhere(2)
    mem.store(lines[1], 2, 7, at=30.0)            # written at 30: core 0 sees it 100 ns later, not 50
    values, t = mem.read_all(lines, 0, 40.0, 2)
    assert values == [0, 7] and t == 130.0


def test_ich_pays_no_atomic_per_chunk(capsys):
    # Each chunk's take locks the own queue (one atomic); so does each steal attempt and each take that finds
    # the queue empty (once per worker per loop, and once more after each successful steal). Nothing else is
    # atomic: the progress is a plain store to the thread's own line and the mean is read.
    r = run_json(capsys, "ich", "exp-dec:n=20000", 8)
    c = r["counters"]
    assert c["chunks"] > 500 and c["d_doubled"] > 0
    assert c["atomics"] == c["chunks"] + c["steal_attempts"] + c["steals"] + 8


def test_reading_the_counters_after_every_chunk_is_what_costs(capsys):
    workload = "uforall:n=20000,cost_ns=200"
    every = run_json(capsys, "ich", workload, 28)
    rarely = run_json(capsys, "ich:mu_every=1000", workload, 28)
    # Up to 27 transfers per chunk against a few per worker: the counters are read where they are written.
    assert every["counters"]["transfers"] > 10 * every["counters"]["chunks"]
    assert rarely["counters"]["transfers"] < 3 * rarely["counters"]["chunks"]
    assert rarely["counters"]["d_halved"] + rarely["counters"]["d_doubled"] == 0  # never classified
    assert every["state_ns"]["schedule"] > 2 * rarely["state_ns"]["schedule"]
    assert every["makespan_ns"] > rarely["makespan_ns"]


def test_reads_one_after_another_cost_more_than_overlapped_ones(capsys):
    workload = "uforall:n=20000,cost_ns=200"
    overlapped = run_json(capsys, "ich", workload, 28)
    chained = run_json(capsys, "ich", workload, 28, "--set", "cache.l1.outstanding_misses=1")
    assert chained["state_ns"]["schedule"] > 2 * overlapped["state_ns"]["schedule"]
    assert chained["makespan_ns"] > overlapped["makespan_ns"]


@pytest.mark.parametrize("spec, message", [
    ("ich:mu_every=0", "scheduler ich: parameter mu_every=0 must be >= 1"),
    ("ich:mu_every=1.5", "scheduler ich: parameter mu_every='1.5' is not an integer"),
    ("ich:mu_every=x", "scheduler ich: parameter mu_every='x' is not an integer"),
])
def test_bad_mu_every_is_refused_in_one_line(spec, message):
    rc, out, err = cli("run", "--machine", HASWELL, "--scheduler", spec, "--threads", "2",
                       "--workload", "uforall:n=10")
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [f"simsched: error: {message}"]


def test_native_mode_refuses_a_mu_every_it_does_not_implement():
    from simsched import native

    if not native.available():
        pytest.skip("native runtime not built")
    rc, out, err = cli("native", "run", "--scheduler", "ich:mu_every=2", "--threads", "1",
                       "--workload", "uforall:n=100,cost_ns=10")
    assert rc == 2 and out == ""
    assert err.strip().splitlines() == [("simsched: error: native mode: ich's threads read every progress "
                                         "counter after each chunk, so mu_every=2 has no native counterpart")]
