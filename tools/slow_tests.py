"""Write tests/slow_tests.txt: the tests that take at least --seconds (0.5) in a full run, for the fast tier.

Run:  python tools/slow_tests.py [--seconds 0.5]     (a full test run with --durations; minutes)
The fast tier is then ``python -m pytest -m "not slow"``; the full suite (and CI) runs every test.
A test's time counts its call and its setup: a test whose fixture is expensive is slow too.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "slow_tests.txt"
LINE = re.compile(r"^\s*([\d.]+)s (?:call|setup|teardown)\s+(\S.*?)\s*$")
MODULE_SETUP_S = 2.0


def slow_tests(report: str, seconds: float) -> list[str]:
    """Node ids whose call, setup and teardown together took at least ``seconds`` in --durations reports, and
    the files where a setup took MODULE_SETUP_S: a fixture shared by many of the module's tests, which would
    land on whichever of them the fast tier runs first (tests/conftest.py marks a listed file's tests that use
    a fixture of module scope or wider; its other tests are marked by their own times)."""
    spent: dict[str, float] = defaultdict(float)
    modules = set()
    for line in report.splitlines():
        match = LINE.match(line)
        if match:
            spent[match.group(2)] += float(match.group(1))
            if " setup " in line and float(match.group(1)) >= MODULE_SETUP_S:
                modules.add(match.group(2).split("::")[0])
    tests = {test for test, total in spent.items() if total >= seconds}
    return sorted(modules) + sorted(tests)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=0.5)
    parser.add_argument("--report", nargs="+", help="saved `pytest --durations=0` outputs to read instead of running "
                                                    "(a full run's and a fast tier's: setups move when tests go)")
    parser.add_argument("--keep", action="store_true", help="also keep every entry the current list holds (reports "
                                                              "of parts of the suite, read one after another)")
    args = parser.parse_args()
    if args.report:
        report = "\n".join(Path(path).read_text() for path in args.report)
    else:
        run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=0",
                              f"--durations-min={args.seconds / 4}"], cwd=ROOT, capture_output=True, text=True)
        report = run.stdout
        if run.returncode != 0:
            print(report[-2000:], file=sys.stderr)
            return run.returncode
    tests = slow_tests(report, args.seconds)
    if args.keep and OUT.is_file():
        kept = {line.strip() for line in OUT.read_text().splitlines() if line.strip() and not line.startswith("#")}
        merged = kept | set(tests)
        tests = sorted(entry for entry in merged if "::" not in entry) + sorted(entry for entry in merged if "::" in entry)
    OUT.write_text("# Tests of at least %.1f s in a full run (python tools/slow_tests.py): the fast tier,\n"
                   "# python -m pytest -m \"not slow\", leaves them out.\n" % args.seconds + "\n".join(tests) + "\n")
    print(f"{len(tests)} slow tests -> {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
