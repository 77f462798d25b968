"""Print the published matrices' row statistics next to those of their fitted row lengths (a Markdown table).

Run:  python tools/published_matrices.py [--rows N]   (N: the scaled matrices' rows, default 100000)
The table is the same on every run: the fitted counts do not depend on a seed.
"""

from __future__ import annotations

import argparse

from simsched.workloads.published_matrices import TABLE_ROWS, comparison_table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=TABLE_ROWS,
                        help="rows of the scaled matrices (more where a matrix's statistics need more)")
    args = parser.parse_args()
    if args.rows < 1:
        parser.error(f"--rows must be >= 1, got {args.rows}")
    print(comparison_table(args.rows))


if __name__ == "__main__":
    main()
