"""``simsched breakdown`` on a sweep over several thread counts, run as a user runs it."""

from __future__ import annotations

import json
import re

import pytest

from test_cli import simsched_cli

LONG = "lbs:split=guided,ppt=2,swap_block=16"
EXPERIMENT = f"""\
[experiment]
name = "breakdown-threads"

[grid]
machine = "cell-qs22"
scheduler = ["lbs", "omp-dynamic", "{LONG}"]
threads = [1, 4]
workload = "uforall:n=2000,cost_ns=1000"
seed = 0

[breakdown]
baseline = "lbs"
"""


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    folder = tmp_path_factory.mktemp("breakdown")
    config = folder / "experiment.toml"
    config.write_text(EXPERIMENT, encoding="utf-8")
    simsched_cli("sweep", config, "--out", folder / "out", "--jobs", "1", "--quiet")
    return folder / "out"


def test_one_block_per_thread_count(results):
    text = simsched_cli("breakdown", results).stdout
    headers = re.findall(r"^uforall:n=2000,cost_ns=1000 \(cell-qs22, (\d+) workers", text, flags=re.M)
    assert headers == ["1", "4"], text
    blocks = text.split("\n\n")
    assert len(blocks) == 2
    for block in blocks:
        names = [line.split()[0] for line in block.splitlines()[2:]]
        assert names == ["lbs", "omp-dynamic", LONG], block


def test_columns_align_and_undefined_cells_are_dashes(results):
    text = simsched_cli("breakdown", results).stdout
    assert "nan" not in text.lower()
    table = [line for line in text.splitlines() if line.startswith("  ")]
    # Every header and row ends at the same column, and each value ends where its header does.
    assert len({len(line) for line in table}) == 1, table
    header = table[0]
    ends = [m.end() for m in re.finditer(r"\S+", header)][1:]
    for line in table[1:]:
        assert [m.end() for m in re.finditer(r"\S+", line)][1:] == ends, line
    dynamic = [line for line in table if line.split()[0] == "omp-dynamic"]
    assert dynamic and all(line.split()[-4:] == ["-"] * 4 for line in dynamic)


def test_json_keeps_every_thread_count(results):
    records = json.loads(simsched_cli("breakdown", results, "--json").stdout)
    assert sorted((r["scheduler"], r["threads"]) for r in records) == sorted(
        (s, t) for s in ("lbs", "omp-dynamic", LONG) for t in (1, 4))
    dynamic = [r for r in records if r["scheduler"] == "omp-dynamic"]
    assert all(r["tasks_created"] is None and r["steals"] is None for r in dynamic)
