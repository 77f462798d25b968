"""The tests' warm command-line runner (tests/cli_runner.py): its forked runs answer as subprocesses do."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

import cli_runner
import pytest
from cli_runner import WORKERS, run_batch, run_real_batch, zygote_state

needs_fork = pytest.mark.skipif(not hasattr(os, "fork") or os.name != "posix", reason="no os.fork here")
needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="no /proc")

RUN = ["run", "--machine", "haswell-e5-2695v3", "--threads", "2", "--workload", "uforall:n=8"]

# Small modules a case runs with ``python -m NAME`` from its folder, where the runner's own behaviour, not the
# command line's, is what is looked at.
PROBE = """\
import json, os, sys
print(json.dumps({"argv": sys.argv[1:], "cwd": os.getcwd(), "path0": sys.path[0], "ppid": os.getppid(),
                  "env": {name: os.environ.get(name) for name in ("RUNNER_PROBE", "RUNNER_GONE")}}))
print("to stderr", file=sys.stderr)
code = os.environ.get("RUNNER_EXIT")
if code:
    sys.exit(int(code) if code.isdigit() else code)
"""
BOOM = """\
def fail():
    raise RuntimeError("boom")


fail()
"""
HANG = """\
import os, subprocess, sys, time
print(os.getpid(), flush=True)
if os.environ.get("RUNNER_QUICK"):
    sys.exit(0)
if os.environ.get("RUNNER_GRANDCHILD"):
    print(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"]).pid, flush=True)
time.sleep(60)
"""


@pytest.fixture
def modules(tmp_path) -> Path:
    for name, text in (("probe", PROBE), ("boom", BOOM), ("hang", HANG)):
        (tmp_path / f"{name}.py").write_text(text)
    return tmp_path


def same(forked, real) -> None:
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)


def test_exit_statuses_and_output_are_the_real_command_lines():
    cases = {"ok": (RUN + ["--scheduler", "omp-static", "--json"],),
             "bad-input": (RUN + ["--scheduler", "omp-bogus"],),
             "argparse-refusal": (["run", "--threads", "x"],),
             "argparse-help": (["--help"],)}
    forked, real = run_batch(cases, timeout=120), run_real_batch(cases, timeout=120)
    for name in cases:
        same(forked[name], real[name])
    assert forked["ok"].returncode == 0 and json.loads(forked["ok"].stdout)["threads"] == 2
    assert forked["ok"].stderr == ""
    assert forked["bad-input"].returncode == 2 and forked["bad-input"].stdout == ""
    assert forked["bad-input"].stderr.startswith("simsched: error: unknown scheduler 'omp-bogus'")
    assert forked["argparse-refusal"].returncode == 2 and "--threads" in forked["argparse-refusal"].stderr
    assert forked["argparse-help"].returncode == 0 and "usage:" in forked["argparse-help"].stdout
    assert forked["ok"].args == [sys.executable, "-m", "simsched.cli", *cases["ok"][0]]


def test_an_uncaught_exception_is_the_interpreters_traceback_and_status_1(modules):
    forked, real = (run({"boom": ([], modules)}, timeout=60, module="boom")["boom"]
                    for run in (run_batch, run_real_batch))
    same(forked, real)
    assert forked.returncode == 1 and forked.stdout == ""
    lines = forked.stderr.splitlines()
    assert lines[0] == "Traceback (most recent call last):" and lines[-1] == "RuntimeError: boom"
    assert "cli_runner" not in forked.stderr  # the runner's own frames are no part of it


@pytest.mark.parametrize("code, status, stderr", [("7", 7, "to stderr\n"), ("bye", 1, "to stderr\nbye\n")])
def test_sys_exit_ends_a_run_as_the_interpreter_does(modules, code, status, stderr):
    case = {"exit": ([], modules, {"RUNNER_EXIT": code})}
    for run in (run_batch, run_real_batch):
        proc = run(case, timeout=60, module="probe")["exit"]
        assert (proc.returncode, proc.stderr) == (status, stderr)


@needs_fork
def test_each_case_runs_in_its_folder_and_environment(modules, tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    (other / "probe.py").write_text(PROBE)
    monkeypatch.setenv("RUNNER_GONE", "inherited")
    cases = {"here": (["a", 1], modules, {"RUNNER_PROBE": "here"}),
             "there": (["b"], other, {"RUNNER_GONE": None}),
             "plain": (["c"], other)}
    results = run_batch(cases, timeout=60, module="probe")
    seen = {name: json.loads(proc.stdout) for name, proc in results.items()}
    assert seen["here"]["argv"] == ["a", "1"] and seen["here"]["env"] == {"RUNNER_PROBE": "here",
                                                                           "RUNNER_GONE": "inherited"}
    assert seen["there"]["env"] == {"RUNNER_PROBE": None, "RUNNER_GONE": None}
    assert seen["plain"]["env"] == {"RUNNER_PROBE": None, "RUNNER_GONE": "inherited"}
    assert seen["here"]["cwd"] == seen["here"]["path0"] == str(modules.resolve())
    assert seen["there"]["cwd"] == seen["there"]["path0"] == str(other.resolve())
    zygote = zygote_state()["pid"]
    assert {s["ppid"] for s in seen.values()} == {zygote}  # forked, all of them
    assert all(proc.stderr == "to stderr\n" and proc.returncode == 0 for proc in results.values())


@needs_fork
def test_real_cases_and_changed_startup_variables_run_as_genuine_subprocesses(modules):
    cases = {"forked": ([], modules), "real": ([], modules),
             "hash-seed": ([], modules, {"PYTHONHASHSEED": "7"})}
    results = run_batch(cases, timeout=60, real=["real"], module="probe")
    parents = {name: json.loads(proc.stdout)["ppid"] for name, proc in results.items()}
    assert parents == {"forked": zygote_state()["pid"], "real": os.getpid(), "hash-seed": os.getpid()}


def test_without_fork_every_case_is_a_real_subprocess(modules, monkeypatch):
    monkeypatch.setattr(cli_runner, "_can_fork", lambda: False)
    results = run_batch({"a": ([], modules), "b": ([], modules)}, timeout=60, module="probe")
    assert {json.loads(proc.stdout)["ppid"] for proc in results.values()} == {os.getpid()}


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has stopped running
    except FileNotFoundError:
        return True


@needs_fork
@needs_proc
def test_a_run_past_its_timeout_is_killed_with_what_it_started(modules):
    started = time.monotonic()
    cases = {"hang": ([], modules, {"RUNNER_GRANDCHILD": "1"}), "quick": ([], modules, {"RUNNER_QUICK": "1"})}
    results = run_batch(cases, timeout=3, module="hang")
    assert time.monotonic() - started < 45  # not the 60 s the module sleeps
    hung = results["hang"]
    assert hung.returncode == -9 and hung.stderr.endswith("cli_runner: killed after 3 s\n")
    pids = [int(line) for line in hung.stdout.split()]
    assert len(pids) == 2  # the run and the process it started
    deadline = time.monotonic() + 10
    while not all(_gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(_gone(pid) for pid in pids)
    assert results["quick"].returncode == 0 and results["quick"].stderr == ""  # the batch's other run


def test_a_real_subprocess_past_its_timeout_is_killed_too(modules):
    hung = run_real_batch({"hang": ([], modules)}, timeout=3, module="hang")["hang"]
    assert hung.returncode == -9 and hung.stderr.endswith("cli_runner: killed after 3 s\n")


@needs_fork
def test_many_concurrent_requests_all_complete(modules):
    cases = {n: ([n], modules, {"RUNNER_EXIT": str(n % 5)}) for n in range(4 * WORKERS + 1)}
    results = run_batch(cases, timeout=120, module="probe")
    assert sorted(results) == sorted(cases)
    for n, proc in results.items():
        assert proc.returncode == n % 5 and json.loads(proc.stdout)["argv"] == [str(n)], (n, proc)
    state = zygote_state()
    assert state["running"] == 0


@needs_fork
def test_the_zygote_forks_single_threaded_and_without_pyplot():
    run_batch({"ok": (RUN + ["--scheduler", "omp-dynamic"],)}, timeout=120)
    state = zygote_state()
    assert state["pyplot"] is False  # each run picks its plotting backend itself
    if state["threads"] is not None:
        assert state["threads"] == 1


@needs_fork
@needs_proc
def test_a_dead_zygote_is_started_again():
    before = zygote_state()["pid"]
    os.kill(before, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while not _gone(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    proc = run_batch({"ok": (["schedulers"],)}, timeout=120)["ok"]
    assert proc.returncode == 0 and "omp-static" in proc.stdout
    assert zygote_state()["pid"] != before


def test_a_missing_folder_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent"):
        run_batch({"x": (["schedulers"], tmp_path / "absent")})
