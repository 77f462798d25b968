"""The pools sweeps run on: what they accept, how local workers start, and the serial pool's order."""

from __future__ import annotations

import os

import pytest

from simsched.errors import SimschedError
from simsched.pool import JOBS_PER_CPU, SerialPool, check_jobs, check_pool, open_pool, start_method


def test_jobs_below_one_or_above_the_cpus_share_are_refused_in_one_line():
    with pytest.raises(SimschedError, match=r"--jobs must be >= 1, got 0"):
        check_jobs(0)
    too_many = JOBS_PER_CPU * (os.cpu_count() or 1) + 1
    with pytest.raises(SimschedError, match=rf"--jobs {too_many} is more than {JOBS_PER_CPU} per CPU"):
        check_pool(too_many)
    check_jobs(1)


def test_one_job_is_the_serial_pool_which_runs_points_in_order():
    pool = open_pool(1)
    assert isinstance(pool, SerialPool)
    assert list(pool.run(lambda x: {"twice": 2 * x}, [3, 1, 2])) == [(0, {"twice": 6}), (1, {"twice": 2}),
                                                                      (2, {"twice": 4})]
    pool.close()


def test_the_start_method_comes_from_the_environment_and_a_bad_one_is_named(monkeypatch):
    monkeypatch.delenv("SIMSCHED_START_METHOD", raising=False)
    assert start_method() == "fork"
    monkeypatch.setenv("SIMSCHED_START_METHOD", "spawn")
    assert start_method() == "spawn"
    monkeypatch.setenv("SIMSCHED_START_METHOD", "thread")
    with pytest.raises(SimschedError, match="SIMSCHED_START_METHOD='thread': local workers start by fork or spawn"):
        start_method()


def test_a_dask_address_that_is_not_one_is_refused_before_anything_starts():
    with pytest.raises(SimschedError):
        check_pool(1, dask="not an address")
