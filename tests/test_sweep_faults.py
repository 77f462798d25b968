"""Sweeps under faults: a killed sweep, two sweeps at once, a damaged journal, a full disk, bad output
folders, too many jobs, an unreachable Dask scheduler; each ends with one line, nothing lost, nothing left."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from test_sweeps import (SLOW, SLOW_POINTS, SMALL, SMALL_POINTS, _env, check_complete, cli, descendants,
                         figures, journal, left_behind, wait_for_rows, write)

from simsched.cli import main


def one_error(proc: subprocess.CompletedProcess, code: int = 2) -> str:
    """The single error line a refused command printed (and checks that it printed nothing else)."""
    assert proc.returncode == code, (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("simsched: error: "), proc.stderr
    return lines[0]


def run_main(capsys, *args, cwd: Path) -> tuple[int, str, str]:
    """``simsched ARGS`` in this process, in folder ``cwd``: its exit status, stdout and stderr."""
    here = Path.cwd()
    os.chdir(cwd)
    try:
        status = main([str(a) for a in args])
    finally:
        os.chdir(here)
    out, err = capsys.readouterr()
    return status, out, err


def refused(capsys, *args, cwd: Path) -> str:
    """The one error line of a command that must be refused with status 2."""
    status, out, err = run_main(capsys, *args, cwd=cwd)
    assert status == 2 and err.count("\n") == 1 and err.startswith("simsched: error: "), (status, err)
    return err.rstrip("\n")


def cli_limited(max_bytes: int, *args, cwd) -> subprocess.CompletedProcess:
    """The CLI with no file allowed to grow beyond ``max_bytes``: writes past it fail as on a full disk."""
    code = ("import resource, runpy, sys\n"
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({max_bytes}, {max_bytes}))\n"
            "sys.argv = ['simsched', *sys.argv[1:]]\n"
            "runpy.run_module('simsched.cli', run_name='__main__')\n")
    return cli_python(["-c", code, *map(str, args)], cwd=cwd)


def cli_python(args: list[str], cwd, stdout=subprocess.PIPE) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, *args], stdout=stdout, stderr=subprocess.PIPE, text=True, cwd=cwd,
                          timeout=300, env=_env())
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """A complete sweep of SMALL: the folder every damaged copy is compared with."""
    where = tmp_path_factory.mktemp("reference")
    config = write(where, SMALL.replace("NAME", "small"))
    assert cli("sweep", config, "--jobs", "1", "--out", "ref", cwd=where).returncode == 0
    return where / "ref"


def copy_of(reference: Path, tmp_path: Path) -> tuple[Path, Path]:
    """A copy of the reference sweep's folder without its table, and its config."""
    folder = tmp_path / "small"
    shutil.copytree(reference, folder)
    (folder / "results.csv").unlink()
    return folder, write(tmp_path, SMALL.replace("NAME", "small"))


def test_pool_workers_die_with_a_sweep_killed_by_sigkill_and_the_next_run_resumes(tmp_path):
    config = write(tmp_path, SLOW)
    proc = subprocess.Popen([sys.executable, "-m", "simsched.cli", "sweep", str(config), "--jobs", "2"],
                            cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for_rows(tmp_path / "results" / "slow", 2, proc)
        workers = descendants(proc.pid)
        proc.kill()
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert len(workers) >= 2
    assert not left_behind(workers)
    # The kernel let go of the killed sweep's lock; the file it leaves is taken over by the same command.
    assert (tmp_path / "results" / "slow" / "sweep.lock").exists()
    saved = len(journal(tmp_path / "results" / "slow"))
    again = cli("sweep", config, "--jobs", "2", cwd=tmp_path)
    assert again.returncode == 0, again.stderr
    assert f"{saved} already saved" in again.stdout
    check_complete(tmp_path / "results" / "slow", SLOW_POINTS)
    assert not (tmp_path / "results" / "slow" / "sweep.lock").exists()


def test_a_second_sweep_into_a_folder_in_use_is_refused_naming_the_first(tmp_path):
    config = write(tmp_path, SLOW)
    folder = tmp_path / "results" / "slow"
    first = subprocess.Popen([sys.executable, "-m", "simsched.cli", "sweep", str(config), "--jobs", "1"],
                             cwd=tmp_path, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
    try:
        wait_for_rows(folder, 1, first)
        first.send_signal(signal.SIGSTOP)  # the first sweep holds the folder for as long as the test needs
        rows = (folder / "runs.jsonl").read_bytes()
        second = cli("sweep", config, "--jobs", "1", cwd=tmp_path)
        line = one_error(second)
        assert line.startswith(f"simsched: error: results/slow is in use by another sweep "
                               f"(pid {first.pid} on {socket.gethostname()}, started ")
        assert (folder / "runs.jsonl").read_bytes() == rows  # the second sweep computed and wrote nothing
        first.send_signal(signal.SIGCONT)
        _, err = first.communicate(timeout=240)
        assert first.returncode == 0, err
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGCONT)
            first.kill()
            first.wait(timeout=60)
    check_complete(folder, SLOW_POINTS)  # every point once: none computed twice
    assert not (folder / "sweep.lock").exists()
    assert cli("sweep", config, "--jobs", "1", cwd=tmp_path).returncode == 0  # free again once the first ends


def _lines(reference: Path) -> list[bytes]:
    return (reference / "runs.jsonl").read_bytes().split(b"\n")[:-1]


def _without_figure(line: bytes) -> bytes:
    row = json.loads(line)
    del row["makespan_ns"]
    return json.dumps(row).encode()


RANDOM = np.random.default_rng(5).bytes(5000)
# Each damage: the damaged journal from the reference's lines, and the lines it sets aside.
DAMAGE = {
    "garbage line in the middle": (lambda ls: ls[:5] + [b"not a row"] + ls[5:], lambda ls: [b"not a row"]),
    "a list": (lambda ls: ls[:5] + [b"[1, 2, 3]"] + ls[5:], lambda ls: [b"[1, 2, 3]"]),
    "a row without makespan_ns": (lambda ls: ls[:7] + [_without_figure(ls[7])] + ls[8:],
                                  lambda ls: [_without_figure(ls[7])]),
    "carriage return inside a string": (lambda ls: ls[:5] + [ls[5].replace(b"omp", b"o\rmp", 1)] + ls[6:],
                                        lambda ls: [ls[5].replace(b"omp", b"o\rmp", 1)]),
    "5 KB of random bytes first": (lambda ls: [RANDOM + ls[0]] + ls[1:],
                                   lambda ls: (RANDOM + ls[0]).split(b"\n")),
    "a torn last line": (lambda ls: ls + [ls[3][:40]], lambda ls: [ls[3][:40]]),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_a_damaged_journal_keeps_every_valid_row_sets_the_rest_aside_and_reruns_what_is_missing(
        reference, tmp_path, capsys, damage):
    folder, config = copy_of(reference, tmp_path)
    lines = _lines(reference)
    make, aside = DAMAGE[damage]
    damaged = b"\n".join(make(lines))
    (folder / "runs.jsonl").write_bytes(damaged + (b"" if damage == "a torn last line" else b"\n"))
    set_aside = aside(lines)
    valid = {json.loads(line)["point_id"] for line in lines if line in damaged.split(b"\n")}
    status, out, err = run_main(capsys, "sweep", config, "--jobs", "1", "--out", folder, cwd=tmp_path)
    assert status == 0, err
    count = "1 line holds" if len(set_aside) == 1 else f"{len(set_aside)} lines hold"
    assert err.splitlines() == [
        f"simsched: warning: {folder}/runs.jsonl: {count} no finished point's row (torn by a kill, or "
        f"damaged), moved to {folder}/runs.rejected; the points the journal lacks run again"]
    assert (folder / "runs.rejected").read_bytes() == b"".join(line + b"\n" for line in set_aside)
    assert f"{len(valid)} already saved, {SMALL_POINTS - len(valid)} run now" in out
    check_complete(folder, SMALL_POINTS)
    pd.testing.assert_frame_equal(figures(folder), figures(reference))


def test_a_carriage_return_between_a_rows_fields_is_json_whitespace_and_loses_nothing(reference, tmp_path,
                                                                                       capsys):
    folder, config = copy_of(reference, tmp_path)
    lines = _lines(reference)
    lines[5] = lines[5].replace(b'", "', b'",\r "', 1)
    (folder / "runs.jsonl").write_bytes(b"".join(line + b"\n" for line in lines))
    status, out, err = run_main(capsys, "sweep", config, "--jobs", "1", "--out", folder, cwd=tmp_path)
    assert status == 0 and err == ""
    assert f"{SMALL_POINTS} already saved, 0 run now" in out
    assert not (folder / "runs.rejected").exists()
    pd.testing.assert_frame_equal(figures(folder), figures(reference))


def test_a_full_disk_while_the_config_is_copied_leaves_no_part_of_it_and_no_folder(tmp_path):
    # A config longer than the file-size limit: its copy beside the results is the first write to fail.
    config = write(tmp_path, SMALL.replace("NAME", "small") + "# padding\n" * 400)
    proc = cli_limited(2000, "sweep", config, "--jobs", "1", "--out", "new/o", cwd=tmp_path)
    line = one_error(proc)
    assert "experiment.toml" in line and "File too large" in line, line
    assert not (tmp_path / "new").exists()


def test_a_full_disk_while_the_journal_is_written_stops_with_one_line_and_whole_rows(reference, tmp_path):
    config = write(tmp_path, SMALL.replace("NAME", "small"))
    folder = tmp_path / "results" / "small"
    # The journal may grow to a few rows; the row after them finds the disk full.
    limit = 4 * len(_lines(reference)[0]) + 100
    proc = cli_limited(limit, "sweep", config, "--jobs", "2", cwd=tmp_path)
    line = one_error(proc)
    assert line.startswith("simsched: error: cannot write results/small/runs.jsonl: File too large; "
                           "the points saved before are kept")
    data = (folder / "runs.jsonl").read_bytes()
    assert data.endswith(b"\n") and all(json.loads(row)["error"] == "" for row in data.splitlines())
    saved = len(data.splitlines())
    assert 0 < saved < SMALL_POINTS
    assert not (folder / "sweep.lock").exists() and not (folder / "results.csv").exists()
    again = cli("sweep", config, "--jobs", "2", cwd=tmp_path)
    assert again.returncode == 0 and f"{saved} already saved" in again.stdout and again.stderr == ""
    check_complete(folder, SMALL_POINTS)
    pd.testing.assert_frame_equal(figures(folder), figures(reference))


def test_a_full_disk_while_the_table_is_written_leaves_no_part_of_it_and_the_journal_whole(reference,
                                                                                             tmp_path):
    folder, config = copy_of(reference, tmp_path)
    before = (folder / "runs.jsonl").read_bytes()
    proc = cli_limited(1000, "sweep", config, "--jobs", "1", "--out", folder, cwd=tmp_path)
    assert one_error(proc) == f"simsched: error: cannot write {folder}/results.csv: File too large"
    assert (folder / "runs.jsonl").read_bytes() == before
    assert sorted(p.name for p in folder.iterdir()) == ["experiment.toml", "runs.jsonl", "sweep.json"]
    assert cli("sweep", config, "--jobs", "1", "--out", folder, cwd=tmp_path).returncode == 0
    pd.testing.assert_frame_equal(figures(folder), figures(reference))


@pytest.mark.parametrize("command", [
    ["run", "--machine", "haswell-e5-2695v3", "--scheduler", "omp-static", "--threads", "4",
     "--workload", "uforall:n=256", "--json"],
    ["sweep", "CONFIG", "--jobs", "1", "--out", "swept"],
    ["fit", "REFERENCE", "--json"],
], ids=["run", "sweep", "fit"])
def test_standard_output_on_a_full_device_is_one_line(reference, tmp_path, command):
    config = write(tmp_path, SMALL.replace("NAME", "small"))
    args = [{"CONFIG": str(config), "REFERENCE": str(reference)}.get(a, a) for a in command]
    with open("/dev/full", "w") as full:
        proc = cli_python(["-m", "simsched.cli", *args], cwd=tmp_path, stdout=full)
    assert one_error(proc).endswith(": No space left on device")
    if command[0] == "sweep":  # the results were saved whole before the summary could not be printed
        check_complete(tmp_path / "swept", SMALL_POINTS)
        assert not (tmp_path / "swept" / "sweep.lock").exists()
        pd.testing.assert_frame_equal(figures(tmp_path / "swept"), figures(reference))


@pytest.mark.parametrize("link, target", [
    ("dangling", "no/such/folder"),
    ("loop", "loop"),
], ids=["dangling", "looping"])
@pytest.mark.parametrize("below", [False, True], ids=["out", "folder-above-out"])
def test_a_symbolic_link_to_nothing_as_out_is_one_line_and_nothing_is_made(tmp_path, capsys, link, target,
                                                                            below):
    config = write(tmp_path, SMALL.replace("NAME", "small"))
    os.symlink(target, tmp_path / link)
    out = f"{link}/inner" if below else link
    reason = "No such file or directory" if link == "dangling" else "Too many levels of symbolic links"
    assert refused(capsys, "sweep", config, "--jobs", "1", "--out", out, cwd=tmp_path) == (
        f"simsched: error: cannot create the results folder {out}: {link} is a symbolic link to nothing "
        f"({reason})")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["exp.toml", link])
    assert os.readlink(tmp_path / link) == target


def test_an_experiment_name_too_long_for_a_folder_is_one_line_and_leaves_no_results_folder(tmp_path, capsys):
    config = write(tmp_path, SMALL.replace("NAME", "x" * 300))
    line = refused(capsys, "sweep", config, "--jobs", "1", cwd=tmp_path)
    name = "x" * 300
    assert line == f"simsched: error: cannot create the results folder results/{name}: File name too long"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.toml"]


def _read_only(monkeypatch, root: Path) -> None:
    """Make every folder below ``root`` refuse new entries, as a read-only file system does."""
    def refuse(call, creates):
        def guarded(path, *args, **kwargs):
            if Path(path).is_relative_to(root) and creates(*args):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return call(path, *args, **kwargs)
        return guarded

    monkeypatch.setattr(os, "mkdir", refuse(os.mkdir, lambda *args: True))
    monkeypatch.setattr(os, "open", refuse(os.open, lambda flags, *args: flags & os.O_CREAT))


def test_a_read_only_out_is_one_line_and_its_results_stay_as_they_were(reference, tmp_path, monkeypatch,
                                                                        capsys):
    folder, config = copy_of(reference, tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    _read_only(monkeypatch, tmp_path)
    assert main(["sweep", str(config), "--jobs", "1", "--out", str(folder)]) == 2
    assert capsys.readouterr().err == (f"simsched: error: cannot write in the results folder {folder}: "
                                       "Read-only file system\n")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    # A new folder inside a read-only one: nothing is made.
    assert main(["sweep", str(config), "--jobs", "1", "--out", str(tmp_path / "new" / "deeper")]) == 2
    assert capsys.readouterr().err == ("simsched: error: cannot create the results folder "
                                       f"{tmp_path}/new/deeper: Read-only file system\n")
    assert not (tmp_path / "new").exists()


def test_too_many_jobs_are_refused_before_anything_starts(tmp_path, capsys):
    from simsched.pool import check_jobs

    config = write(tmp_path, SMALL.replace("NAME", "small"))
    cpus = os.cpu_count()
    assert refused(capsys, "sweep", config, "--jobs", 4 * cpus + 1, cwd=tmp_path) == (
        f"simsched: error: --jobs {4 * cpus + 1} is more than 4 per CPU of this machine "
        f"({4 * cpus} for {cpus} CPUs): each point keeps one CPU busy")
    for command in ("sweep", "sensitivity"):
        assert refused(capsys, command, config, "--jobs", 1000000, cwd=tmp_path).startswith(
            "simsched: error: --jobs 1000000 is more than 4 per CPU")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.toml"]
    check_jobs(4 * cpus)  # the most that is allowed


def _closed_port() -> int:
    """A local port nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_unreachable_dask_scheduler_is_refused_at_once_and_leaves_the_folder_as_it_was(reference, tmp_path,
                                                                                          capsys):
    config = write(tmp_path, SMALL.replace("NAME", "small"))
    address = f"tcp://127.0.0.1:{_closed_port()}"
    # Refused by the connection, not after Dask's own timeout.
    assert refused(capsys, "sweep", config, "--dask", address, cwd=tmp_path) == (
        f"simsched: error: --dask: cannot reach a Dask scheduler at {address}: Connection refused")
    assert refused(capsys, "sweep", config, "--dask", "tcp://nosuch.invalid:8786", cwd=tmp_path).startswith(
        "simsched: error: --dask: cannot reach a Dask scheduler at tcp://nosuch.invalid:8786: ")
    assert refused(capsys, "sweep", config, "--dask", "tcp://127.0.0.1:99999", cwd=tmp_path) == (
        "simsched: error: --dask: tcp://127.0.0.1:99999 has no valid port (1 to 65535 after the last ':')")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.toml"]
    # Nor does --force replace saved results for a cluster it cannot reach.
    folder, config = copy_of(reference, tmp_path)
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    refused(capsys, "sweep", config, "--dask", address, "--force", "--out", folder, cwd=tmp_path)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before


def test_a_pool_that_fails_to_start_removes_the_folder_it_was_given(tmp_path, monkeypatch, capsys):
    from simsched import pool
    from simsched.errors import SimschedError

    def fails(self, jobs):
        raise SimschedError("the workers cannot start")

    monkeypatch.setattr(pool.ProcessPool, "__init__", fails)
    config = write(tmp_path, SMALL.replace("NAME", "small"))
    assert main(["sweep", str(config), "--jobs", "2", "--out", str(tmp_path / "a" / "b")]) == 2
    assert capsys.readouterr().err == "simsched: error: the workers cannot start\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.toml"]
