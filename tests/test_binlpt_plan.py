"""BinLPT's plan: the master's estimate reads, cut, sort and LPT deal, charged from their operation count."""

import json

import pytest

import simsched
from simsched.cli import main
from simsched.schedulers.binlpt import plan_cycles

TOY = """name = "toy"
[topology]
sockets = 1
cores_per_socket = 4
[clock]
base_ghz = {ghz}
[latency_ns]
same_socket = 100
socket_hop = 0
[coherence]
protocol = "snoop"
serve_ns = 0
[costs_ns]
atomic = 10
store = 1
loop_setup = 0
chunk = 0
combine = 0
"""


def master_plan_ns(tmp_path, scheduler, workload, threads, machine=None, ghz=1.0):
    """``simsched run --trace`` in-process: the master's first stretch of scheduling (publishing the loop, one
    store, then the plan), and the trace's events."""
    if machine is None:
        machine = tmp_path / "toy.toml"
        machine.write_text(TOY.format(ghz=ghz))
    trace = tmp_path / "trace.json"
    assert main(["run", "--machine", str(machine), "--scheduler", scheduler, "--threads", str(threads),
                 "--workload", workload, "--trace", str(trace)]) == 0
    events = [e for e in json.loads(trace.read_text())["traceEvents"] if e["ph"] == "X"]
    first = min((e for e in events if e["tid"] == 0), key=lambda e: e["ts"])
    assert first["name"] == "schedule" and first["ts"] == 0
    return first["dur"] * 1000, events


def test_the_plan_of_a_small_loop_by_hand():
    # n = 16, K = 4 chunks, P = 2: 16 estimate reads, 3 binary searches of the 17 running sums (5
    # comparisons each), a sort of 4 chunks (4 x 2) and 4 heap operations over 2 queues (4 x 1).
    assert plan_cycles(16, 4, 4, 2) == 16 + 3 * 5 + 4 * 2 + 4 * 1 == 43
    assert plan_cycles(1, 1, 1, 1) == 1     # one iteration, one chunk, one thread: one read, nothing to order


def test_the_master_pays_the_plan_and_the_others_wait_for_it(tmp_path, capsys):
    # At 1 GHz with no turbo a cycle is 1 ns: the master stores the descriptor (1 ns), then plans for 43.
    ns, events = master_plan_ns(tmp_path, "binlpt:chunks=4", "uforall:n=16,cost_ns=100", 2)
    assert ns == pytest.approx(1 + 43, abs=1e-6)
    # Worker 1 runs nothing before the fork barrier releases it, after the plan.
    computed = [e for e in events if e["tid"] == 1 and e["name"] == "compute"]
    assert min(e["ts"] for e in computed) * 1000 > 44
    # Twice the clock, half the time: 32 + 3 x 6 + 4 x 2 + 4 x 1 = 62 cycles, 31 ns at 2 GHz.
    ns, _ = master_plan_ns(tmp_path, "binlpt:chunks=4", "uforall:n=32,cost_ns=100", 2, ghz=2.0)
    assert ns == pytest.approx(1 + 62 / 2, abs=1e-6)


@pytest.mark.parametrize("n, chunks, threads", [(1000, 4, 2), (2000, 4, 2), (2000, 64, 2), (2000, 64, 4)])
def test_the_plan_grows_with_n_and_k_as_documented(tmp_path, capsys, n, chunks, threads):
    ns, _ = master_plan_ns(tmp_path, f"binlpt:chunks={chunks}", f"uforall:n={n},cost_ns=100", threads)
    assert ns == pytest.approx(1 + plan_cycles(n, chunks, chunks, threads), abs=1e-6)
    capsys.readouterr()


def test_plan_cycles_grow_with_n_k_and_p():
    assert plan_cycles(2000, 4, 4, 2) - plan_cycles(1000, 4, 4, 2) == 1000 + 3 * (11 - 10)
    assert plan_cycles(2000, 64, 64, 2) - plan_cycles(2000, 4, 4, 2) == 60 * 11 + (64 * 6 - 4 * 2) + (64 - 4)
    assert plan_cycles(2000, 64, 64, 28) - plan_cycles(2000, 64, 64, 2) == 64 * (5 - 1)


def test_a_cycle_is_the_masters_in_that_run(tmp_path):
    # Haswell at 28 threads: the master's clock falls from the 3.3 GHz single-core turbo to the 2.8 GHz
    # all-core one, which stretches its work by the machine's speed factor; a cycle is that factor / 3.3 ns
    # (1 / 2.8 ns). The first stretch is the loop's set-up (54 ns) and the descriptor's store (0.5 ns), then
    # the plan; the trace gives times to the ns.
    n = 28000
    cycle = simsched.load_machine("haswell-e5-2695v3").speed_factors(28)[0] / 3.3
    assert cycle == pytest.approx(1 / 2.8)
    ns, _ = master_plan_ns(tmp_path, "binlpt", f"uforall:n={n},cost_ns=100", 28, machine="haswell-e5-2695v3")
    assert ns == pytest.approx(54 + 0.5 + plan_cycles(n, 384, 384, 28) * cycle, abs=0.5)


def test_the_plan_is_made_for_every_loop_it_runs():
    # Each loop run costs the master its plan again: at least plan_cycles at the fastest (single-core) clock.
    runs = {repeat: simsched.simulate("haswell-e5-2695v3", "binlpt:chunks=8", "uforall:n=40000,cost_ns=100",
                                      4, repeat=repeat) for repeat in (1, 3)}
    plan_ns = plan_cycles(40000, 8, 8, 4) / 3.3
    assert runs[1].state_ns["schedule"][0] > plan_ns
    assert runs[3].state_ns["schedule"][0] - runs[1].state_ns["schedule"][0] > 2 * plan_ns
