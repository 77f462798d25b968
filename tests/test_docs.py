"""The reference docs stay in step with the code: links resolve, and every name the code accepts is documented."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from simsched.hierarchy import _CACHE_KEYS, _DRAM_KEYS
from simsched.machine import _TOP_LEVEL, SCHEMA
from simsched.noise import NOISE_KEYS
from simsched.schedulers import REGISTRY as SCHEDULERS
from simsched.workloads import REGISTRY as WORKLOADS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.S | re.M)


def prose(path: Path) -> str:
    """A page's text without its fenced code blocks."""
    return FENCE.sub("", path.read_text(encoding="utf-8"))


def anchors(path: Path) -> set[str]:
    """The heading anchors of a Markdown page, as GitHub derives them."""
    found = set()
    for line in prose(path).splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


def links(path: Path) -> list[str]:
    return LINK.findall(prose(path))


def test_there_are_docs():
    names = {p.name for p in DOCS.glob("*.md")}
    assert {"README.md", "schedulers.md", "cost-model.md", "machines.md", "workloads.md",
            "experiments.md"} <= names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    checked = 0
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            continue  # external: see test_external_links_are_publications
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        assert dest.exists(), f"{page.name}: link to {target} does not resolve"
        assert ROOT in dest.parents or dest == ROOT, f"{page.name}: link to {target} leaves the repository"
        if anchor and dest.suffix == ".md":
            assert anchor in anchors(dest), f"{page.name}: no heading #{anchor} in {dest.name}"
        checked += 1
    if page.parent == DOCS:
        assert checked, f"{page.name} links nowhere"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_external_links_are_publications(page):
    for target in links(page):
        if re.match(r"[a-z]+:", target):
            assert target.startswith("https://doi.org/"), f"{page.name}: {target} is not a publication's DOI"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_outside_the_repository(page):
    text = page.read_text(encoding="utf-8")
    # Spelt in parts so that this file itself names no folder outside the repository.
    for outside in ("../" + "shared", "design" + "/"):
        assert outside not in text, f"{page.name} mentions {outside}"


def test_readme_links_the_docs():
    targets = set(links(ROOT / "README.md"))
    for name in ("schedulers.md", "cost-model.md", "machines.md", "workloads.md", "experiments.md"):
        assert f"docs/{name}" in targets


@functools.cache
def listed(kind: str) -> tuple[str, ...]:
    """The names ``simsched schedulers`` or ``simsched workloads`` lists, each a built-in of the registry."""
    names = tuple(row["name"] for row in json.loads(simsched_cli(kind, "--json").stdout))
    registry = {"schedulers": SCHEDULERS, "workloads": WORKLOADS}[kind]
    assert set(names) == {name for name, cls in registry.items() if cls.__module__.startswith("simsched.")}
    return names


def test_every_scheduler_its_parameters_and_counters_are_documented():
    text = prose(DOCS / "schedulers.md")
    headings = {line.lstrip("#").strip() for line in text.splitlines() if line.startswith("#")}
    for name in listed("schedulers"):
        cls = SCHEDULERS[name]
        assert any(name in h.split(", ") for h in headings), f"scheduler {name} has no section"
        assert f"| `{name}` |" in text, f"scheduler {name} is missing from the summary table"
        for param in cls.PARAMS:
            assert f"`{param}`" in text, f"parameter {param} of {name} is not documented"
        for counter in cls.COUNTERS:
            assert f"`{counter}`" in text, f"counter {counter} of {name} is not documented"


def test_every_workload_and_its_parameters_are_documented():
    text = prose(DOCS / "workloads.md")
    for name in listed("workloads"):
        cls = WORKLOADS[name]
        assert f"`{name}`" in text or f"### {name}" in text, f"workload {name} is not documented"
        for param in cls.PARAMS:
            assert f"| `{param}` |" in text, f"parameter {param} of {name} is not documented"


def machine_sections() -> dict[str, str]:
    """docs/machines.md's key tables, by the section their heading names ("" for the top level)."""
    text = prose(DOCS / "machines.md")
    parts = re.split(r"^### ", text, flags=re.M)
    sections = {}
    for part in parts[1:]:
        title, _, body = part.partition("\n")
        named = re.match(r"`\[(\w+)(?:\.lN)?\]`", title)
        if named:
            sections[named.group(1)] = body
        elif title.strip() == "Top level":
            sections[""] = body
    return sections


# Every section a machine file may have, and its keys: the flat schema and the memory hierarchy's tables.
MACHINE_KEYS = {**SCHEMA, "cache": _CACHE_KEYS, "dram": _DRAM_KEYS, "noise": NOISE_KEYS}


def test_every_machine_key_is_documented_in_its_section():
    sections = machine_sections()
    for section, keys in MACHINE_KEYS.items():
        assert section in sections, f"machine section [{section}] has no table"
        for key in keys:
            assert f"| `{key}` |" in sections[section], f"machine key {section}.{key} is not documented"
    for key in _TOP_LEVEL:
        assert f"| `{key}` |" in sections[""], f"top-level machine key {key} is not documented"


def test_documented_machine_keys_exist():
    for section, body in machine_sections().items():
        known = set(_TOP_LEVEL) if section == "" else set(MACHINE_KEYS[section])
        for key in re.findall(r"^\| `(\w+)` \|", body, flags=re.M):
            assert key in known, f"docs/machines.md documents {section}.{key}, which machine files reject"


def simsched_cli(*args) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *map(str, args)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return proc


def section(text: str, heading: str) -> str:
    """The body of the ``### heading`` section of a page."""
    return re.split(r"^### ", text.split(f"### {heading}\n", 1)[1], flags=re.M)[0]


@pytest.mark.parametrize("name", ["omp-guided", "tss", "fac2"])
def test_worked_chunk_sequences_are_what_the_simulator_claims(name, tmp_path):
    body = section(prose(DOCS / "schedulers.md"), name)
    found = re.search(r"For n = 100 and\s+P = 4 the chunks are:\s+([\d,\s]+)\.", body)
    assert found, f"no worked example under {name}"
    documented = [int(x) for x in found.group(1).replace("\n", " ").split(",")]
    chunks = tmp_path / "chunks.csv"
    simsched_cli("run", "--machine", "haswell-e5-2695v3", "--scheduler", name, "--threads", 4,
                 "--workload", "uforall:n=100", "--chunks", chunks)
    table = pd.read_csv(chunks, comment="#").sort_values("lo")
    assert (table["hi"] - table["lo"]).tolist() == documented


def test_example_machine_file_loads(tmp_path):
    example = re.search(r"```toml\n(.*?)```", (DOCS / "machines.md").read_text(encoding="utf-8"), re.S)
    path = tmp_path / "tiny.toml"
    path.write_text(example.group(1), encoding="utf-8")
    described = json.loads(simsched_cli("machines", path, "--json").stdout)
    assert described["name"] == "tiny" and described["cores"] == 4
    assert described["latency_matrix_ns"][0][3] == 50
