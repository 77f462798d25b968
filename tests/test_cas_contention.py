"""Contended compare-and-swap: a failed CAS leaves the line with its core, and a prompt retry runs there."""

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import simpy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simsched import cli
from simsched.memory import Memory

VM = str(Path(__file__).parent.parent / "machines" / "calibrated" / "vm-16cpu-2026-11-27.toml")

# Three cores: 0 is 100 ns from both others, 1 and 2 are 60 ns apart. At a transfer fraction of 0.5 the
# transfers are 50 ns (0-1, 0-2) and 30 ns (1-2); an atomic costs 10 ns.
TRIANGLE = [[0.0, 100.0, 100.0], [100.0, 0.0, 60.0], [100.0, 60.0, 0.0]]


def triangle_memory(hold=True):
    env = simpy.Environment()
    return env, Memory(env, TRIANGLE, {"atomic": 10.0, "store": 1.0}, 0.0, 0.5, hold=hold)


def race(hold: bool):
    """Cores 1 and 2 both try to move the counter from 0 at time 0; core 0, believing it is 1, tries at 70.

    Each runs a CAS loop that retries with the value its failed CAS found: a try the core may issue on
    the line it holds (``Memory.holds``) is chained there, any other is queued when it is issued. With
    ``hold`` off (``coherence.hold = "none"``) no try is ever held.
    """
    env, mem = triangle_memory(hold)
    line = mem.line("next", 0, home=0)
    log = []

    def claimer(core, start, believed, step):
        yield env.timeout(start)
        expected, t = believed, env.now
        while True:
            if not mem.holds(line, core, t):
                yield env.timeout(t - env.now)
            ok, found, t = mem.cas(line, core, expected, expected + step, at=t)
            log.append((core, expected, ok, found, t))
            if ok:
                return
            expected = found

    env.process(claimer(1, 0.0, 0, 1))
    env.process(claimer(2, 0.0, 0, 2))
    env.process(claimer(0, 70.0, 1, 5))
    env.run()
    return log, line.value, mem


def test_the_hold_window_is_half_the_shortest_transfer_to_another_core():
    _, mem = triangle_memory()
    assert mem.hold_ns == [25.0, 15.0, 15.0]
    env = simpy.Environment()
    alone = Memory(env, [[0.0]], {"atomic": 10.0, "store": 1.0}, 0.0, 0.5)
    assert alone.hold_ns == [math.inf]


def test_a_failed_cas_retried_within_the_window_runs_on_the_held_line():
    log, value, mem = race(hold=True)
    assert log == [
        (1, 0, True, 0, 60.0),     # transfer 0 -> 1 (50) + atomic
        (2, 0, False, 1, 100.0),   # queued behind core 1: transfer 1 -> 2 (30) + atomic; finds 1
        (2, 1, True, 1, 110.0),    # the retry, on the line core 2 holds: one atomic, ahead of core 0
        (0, 1, False, 3, 170.0),   # core 0's request (issued at 70) is served after it and finds 3
        (0, 3, True, 3, 180.0),    # core 0's retry, on the line it now holds
    ]
    assert value == 8
    assert (mem.cas_failures, mem.atomics, mem.transfers) == (2, 5, 3)


def test_the_same_race_with_no_hold_queues_the_retry_behind_the_late_request():
    # Core 2's retry, issued at 100, comes after core 0's request issued at 70: core 0 wins with a stale
    # belief that happens to be current, and core 2 fails a second time.
    log, value, mem = race(hold=False)
    assert log == [
        (1, 0, True, 0, 60.0),
        (2, 0, False, 1, 100.0),
        (0, 1, True, 1, 160.0),    # transfer 2 -> 0 (50) + atomic after core 2's failed CAS
        (2, 1, False, 6, 220.0),   # transfer 0 -> 2 (50) + atomic
        (2, 6, True, 6, 230.0),    # nobody issued meanwhile: the line is still core 2's
    ]
    assert value == 8
    assert (mem.cas_failures, mem.transfers) == (2, 4)


def test_holds_ends_with_the_window_and_belongs_to_the_last_core():
    _, mem = triangle_memory()
    line = mem.line("next", 0, home=0)
    mem.cas(line, 1, 0, 1)                       # core 1 holds the line from 60
    ok, _, done = mem.cas(line, 2, 0, 2)          # fails; core 2 holds it from 100
    assert (ok, done) == (False, 100.0)
    assert mem.holds(line, 2, 100.0) and mem.holds(line, 2, 115.0)
    assert not mem.holds(line, 2, 115.5)          # past core 2's 15 ns window
    assert not mem.holds(line, 1, 100.0)          # core 1's request no longer has the line
    _, mem = triangle_memory(hold=False)
    line = mem.line("next", 0, home=0)
    mem.cas(line, 2, 1, 2)
    assert not mem.holds(line, 2, 60.0)           # no window at all: not even at the completion


def test_a_herd_on_the_calibrated_vm_fails_each_claim_at_most_once():
    # Sixteen cores on the calibrated matrix claim guided chunks of one counter with the CAS loop above.
    # Each claim's first CAS may find the counter moved; its retry runs on the held line and cannot fail.
    from simsched.machine import load_machine

    machine = load_machine(VM)
    cores = machine.placement(16)
    env = simpy.Environment()
    mem = Memory(env, machine.latency[np.ix_(cores, cores)], machine.costs, machine.serve_ns,
                 machine.transfer_fraction)
    n, threads = 160, 16
    line = mem.line("next", 0, home=0)
    claims = [0]
    owner = [0] * n

    def worker(w):
        while True:
            lo, t = mem.read(line, w)
            if lo >= n:
                return
            claims[0] += 1
            while lo < n:
                hi = min(lo + max(1, -(-(n - lo) // threads)), n)
                if not mem.holds(line, w, t):
                    yield env.timeout(t - env.now)
                ok, found, t = mem.cas(line, w, lo, hi, at=t)
                if ok:
                    break
                lo = found
            if lo >= n:
                return
            for i in range(lo, hi):
                owner[i] += 1
            yield env.timeout(t + 100.0 * (hi - lo) - env.now)

    for w in range(threads):
        env.process(worker(w))
    env.run()
    assert owner == [1] * n
    assert 0 < mem.cas_failures <= claims[0]


def run_cli(tmp_path, machine, scheduler, threads, workload, repeat=1, *settings):
    chunks = tmp_path / "chunks.csv"
    code = cli.main(["run", "--machine", machine, "--scheduler", scheduler, "--threads", str(threads),
                     "--workload", workload, "--repeat", str(repeat), "--chunks", str(chunks), *settings])
    assert code == 0
    with chunks.open() as f:
        rows = [row for row in csv.reader(f) if row and not row[0].startswith("#")]
    return rows[1:] if rows and rows[0][0] == "worker" else rows


CAS_CLAIMERS = ["omp-guided", "omp-guided:chunk=3", "wf", "awf-b", "awf-c", "awf-e", "af", "static-steal"]


@settings(max_examples=24, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(scheduler=st.sampled_from(CAS_CLAIMERS), threads=st.integers(2, 16), per_thread=st.integers(1, 12),
       cost=st.sampled_from([0, 10, 100]), hold=st.sampled_from(["request", "none"]))
def test_every_iteration_runs_once_under_cas_contention(tmp_path, scheduler, threads, per_thread, cost, hold):
    n, repeat = threads * per_thread, 2
    rows = run_cli(tmp_path, VM, scheduler, threads, f"uforall:n={n},cost_ns={cost}", repeat,
                   "--set", f'coherence.hold="{hold}"')
    runs = np.zeros((repeat, n), dtype=int)
    for _, loop, lo, hi, *_ in rows:
        runs[int(loop), int(lo):int(hi)] += 1
    assert (runs == 1).all()


def test_a_hold_other_than_request_or_none_is_refused(capsys):
    code = cli.main(["run", "--machine", VM, "--set", 'coherence.hold="sometimes"', "--scheduler",
                     "omp-guided", "--threads", "4", "--workload", "uforall:n=40"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert err == [("simsched: error: host (modified): coherence.hold must be request or none, "
                    "got 'sometimes'")]


def run_json(capsys, machine, scheduler, threads, workload, repeat, *settings):
    code = cli.main(["run", "--machine", machine, "--scheduler", scheduler, "--threads", str(threads),
                     "--workload", workload, "--repeat", str(repeat), "--json", *settings])
    assert code == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("scheduler", ["omp-guided", "omp-guided:chunk=4", "omp-guided:runtime=llvm"])
def test_at_16_threads_on_the_calibrated_vm_a_guided_claim_fails_at_most_once(capsys, scheduler):
    # A failed CAS's retry runs on the line the failure left with its core and cannot fail, so each claim
    # fails at most once. The claims are the chunks and each worker's last claim of each loop, which finds
    # the loop spent.
    threads, repeat = 16, 5
    result = run_json(capsys, VM, scheduler, threads, "uforall:n=160,cost_ns=100", repeat)
    counters = result["counters"]
    assert 0 < counters["cas_failures"] <= counters["chunks"] + threads * repeat


def test_with_no_hold_the_retries_queue_and_fail_again(capsys):
    # coherence.hold = "none": each retry queues behind the requests issued while its failed CAS was
    # served, and most of the time one of those claims first, so claims fail more than once.
    threads, repeat = 16, 5
    held = run_json(capsys, VM, "omp-guided", threads, "uforall:n=160,cost_ns=100", repeat)
    queued = run_json(capsys, VM, "omp-guided", threads, "uforall:n=160,cost_ns=100", repeat,
                      "--set", 'coherence.hold="none"')
    assert held["counters"]["chunks"] == queued["counters"]["chunks"]
    bound = held["counters"]["chunks"] + threads * repeat
    assert queued["counters"]["cas_failures"] > 2 * bound
    assert queued["makespan_ns"] > 2 * held["makespan_ns"]


def test_wf_counts_at_most_one_failed_claim_per_claim_at_16_threads(capsys):
    result = run_json(capsys, VM, "wf", 16, "uforall:n=160,cost_ns=100", 5)
    counters = result["counters"]
    assert 0 < counters["failed_claims"] <= counters["claims"]
