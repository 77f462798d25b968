"""The fast tier's list: tools/slow_tests.py reads pytest --durations reports into tests/slow_tests.txt."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _tool():
    spec = importlib.util.spec_from_file_location("slow_tests_tool", ROOT / "tools" / "slow_tests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_test_is_slow_by_its_call_setup_and_teardown_together_and_a_costly_setup_marks_its_file():
    report = """
0.30s call     tests/test_a.py::test_one
0.25s setup    tests/test_a.py::test_one
0.40s call     tests/test_a.py::test_two[x y]
2.50s setup    tests/test_b.py::test_first
0.10s call     tests/test_b.py::test_other
== 3 passed in 4.00s ==
"""
    # test_one: 0.55 s in all; test_two 0.40 s; test_b's 2.5 s setup is a fixture its other tests share: the file
    # is listed (for its tests that use such a fixture) and the test that paid for it too.
    assert _tool().slow_tests(report, 0.5) == ["tests/test_b.py", "tests/test_a.py::test_one",
                                               "tests/test_b.py::test_first"]


def test_in_a_listed_file_only_the_tests_sharing_a_module_fixture_are_slow(pytester):
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makeini("[pytest]\nmarkers = slow: measured slow\n")
    pytester.makepyfile(test_shared="""
import pytest

@pytest.fixture(scope="module")
def costly():
    return 1

@pytest.fixture
def cheap():
    return 2

def test_uses_the_shared_fixture(costly):
    assert costly == 1

def test_uses_only_its_own(cheap, tmp_path):
    assert cheap == 2

def test_listed_by_its_own_time():
    pass
""")
    (pytester.path / "slow_tests.txt").write_text("# header\ntest_shared.py\ntest_shared.py::test_listed_by_its_own_time\n")
    result = pytester.runpytest("-m", "not slow", "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, deselected=2)
    result.stdout.no_fnmatch_line("*test_uses_the_shared_fixture*")


def test_the_list_names_tests_and_files_that_exist():
    listed = [line.strip() for line in (ROOT / "tests" / "slow_tests.txt").read_text().splitlines()
              if line.strip() and not line.startswith("#")]
    assert listed
    for entry in listed:
        assert (ROOT / entry.split("::")[0]).is_file(), entry
