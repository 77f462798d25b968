"""Regenerate the matrices shipped for the spmv workload and print their row statistics (a Markdown table).

Run:  python tools/make_matrices.py [DIR] [--seed N]   (DIR defaults to simsched/workloads/matrices)
The same seed writes the same files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from simsched.workloads.sparse import MATRICES, SHIPPED_SEED, make_matrices, statistics_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", type=Path, default=MATRICES, help="where to write the .mtx files")
    parser.add_argument("--seed", type=int, default=SHIPPED_SEED, help="the generator's seed")
    args = parser.parse_args()
    print(statistics_table(make_matrices(args.folder, args.seed)))


if __name__ == "__main__":
    main()
