"""How much of each module the fast test tier runs: the modules it leaves (nearly) unexercised.

Run:  python tools/fast_tier_coverage.py [--min 30]        (needs `pip install coverage`; a few minutes)
Runs ``python -m pytest -m "not slow"`` under coverage (in this process's interpreter, subprocesses the
tests start included) and prints each module of the package with the share of its statements the tier
ran; exits 1 when a module is under --min percent, so a module the fast tier does not reach shows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--min", type=float, default=30.0, help="the least share of a module's statements (%%)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        rc = Path(folder) / "coveragerc"
        rc.write_text(f"[run]\nsource = simsched\nparallel = true\ndata_file = {folder}/.coverage\n"
                      "[report]\nomit = */__main__.py\n")
        # Subprocesses that run Python measure themselves too: Python imports a sitecustomize module it finds on
        # its path at start-up, and this one starts coverage there.
        env = dict(os.environ, COVERAGE_PROCESS_START=str(rc))
        site = Path(folder) / "site"
        site.mkdir()
        (site / "sitecustomize.py").write_text("import coverage\ncoverage.process_startup()\n")
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH", "")]))
        test = subprocess.run([sys.executable, "-m", "coverage", "run", f"--rcfile={rc}", "-m", "pytest", "-q",
                               "-p", "no:cacheprovider", "-m", "not slow"], cwd=ROOT, env=env)
        if test.returncode not in (0, 1):
            return test.returncode
        subprocess.run([sys.executable, "-m", "coverage", "combine", f"--rcfile={rc}", "-q"], cwd=ROOT, check=True)
        out = Path(folder) / "coverage.json"
        subprocess.run([sys.executable, "-m", "coverage", "json", f"--rcfile={rc}", "-q", "-o", str(out)],
                       cwd=ROOT, check=True)
        files = json.loads(out.read_text())["files"]
    shares = {Path(name).relative_to(ROOT).as_posix() if Path(name).is_absolute() else name:
              data["summary"]["percent_covered"] for name, data in files.items()}
    for name, share in sorted(shares.items(), key=lambda item: item[1]):
        print(f"{share:6.1f}%  {name}")
    low = [name for name, share in shares.items() if share < args.min]
    print(f"{len(shares)} modules; {len(low)} under {args.min:g}%: {', '.join(sorted(low)) or 'none'}")
    return 1 if low or test.returncode else 0


if __name__ == "__main__":
    sys.exit(main())
