"""The README and the docs hold together: every relative link and image resolves, every command the README
shows exists with the options it shows, and the project's license and citation agree with pyproject.toml."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted(DOCS.glob("*.md"))]
FENCE = re.compile(r"^ {0,3}(```|~~~).*?^ {0,3}\1[^\n]*$", re.DOTALL | re.MULTILINE)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
# A link or an image, [text](target) or ![alt](target): the target up to a space or the closing parenthesis.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$", re.MULTILINE)


def prose(text: str) -> str:
    """A page's Markdown without fenced code blocks and code spans, where nothing is a link or a heading."""
    return CODE_SPAN.sub("", FENCE.sub("", text))


def slug(title: str) -> str:
    """A heading's anchor as GitHub makes it: lowercase, punctuation but - and _ dropped, spaces to -."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", title)  # a link in a heading anchors by its text
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a Markdown page; a repeated heading's get -1, -2, ... as on GitHub."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, title in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        base = slug(title)
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def relative_links(path: Path) -> list[str]:
    targets = LINK.findall(prose(path.read_text(encoding="utf-8")))
    return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # a scheme: not relative


def test_the_slug_rule():
    assert slug("E4: iCh against self-scheduling") == "e4-ich-against-self-scheduling"
    assert slug("`[cache.lN]` (optional)") == "cacheln-optional"
    assert slug("Why the event count is O(chunks + synchronization operations)") == \
        "why-the-event-count-is-ochunks--synchronization-operations"
    assert slug("Today's machines: epyc-7742-2s, xeon-8375c-2s, graviton3") == \
        "todays-machines-epyc-7742-2s-xeon-8375c-2s-graviton3"


def test_links_are_found_outside_code_only(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("# A title\n\n[one](a.md) ![pic](img/p.png) `[not](x.md)`\n\n"
                    "```md\n[nor](y.md)\n# Not a heading\n```\n"
                    "[two](b.md#a-title) [web](https://doi.org/10.1/x)\n\n## A title\n", encoding="utf-8")
    assert relative_links(page) == ["a.md", "img/p.png", "b.md#a-title"]
    assert anchors(page) == {"a-title", "a-title-1"}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    broken = []
    for target in relative_links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif ROOT not in dest.parents and dest != ROOT:
            broken.append(f"{target}: outside the repository")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
        elif anchor and dest.suffix != ".md":
            broken.append(f"{target}: an anchor into a file that is not Markdown")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_readme_shows_a_figure_of_its_own():
    images = [t for t in LINK.findall(prose((ROOT / "README.md").read_text(encoding="utf-8")))
              if t.endswith(".png")]
    assert images, "the README shows no figure"
    for image in images:
        path = ROOT / image
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"{image} is not a PNG"


@pytest.mark.parametrize("image", sorted((DOCS / "images").glob("*")), ids=lambda p: p.name)
def test_images_stay_small(image):
    assert image.stat().st_size < 200 * 1024, f"{image.name} is {image.stat().st_size} bytes"


def readme_commands() -> list[str]:
    """The ``simsched`` command lines of the README's shell blocks, continuation lines joined."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"^```sh\n(.*?)^```", text, re.DOTALL | re.MULTILINE):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line.startswith("simsched "):
                commands.append(line)
    return commands


def test_the_readme_shows_commands():
    assert len(readme_commands()) >= 5


@pytest.mark.parametrize("command", readme_commands())
def test_each_readme_command_exists_with_its_options(command):
    words = command.split()[1:]
    path = [words[0]]
    if words[0] == "native":
        path.append(words[1])
    proc = subprocess.run([sys.executable, "-m", "simsched.cli", *path, "--help"], check=False,
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    for option in re.findall(r"(?<![\w-])--[a-z][a-z-]*", command):
        found = re.search(rf"(?<![\w-]){option}(?![\w-])", proc.stdout)
        assert found, f"simsched {' '.join(path)} has no {option}"


def test_the_readme_test_command_is_the_ci_one():
    command = 'pip install -e ".[test]" && python -m pytest -n auto'
    assert command in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert command in (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def test_the_license_is_the_one_pyproject_names():
    assert pyproject()["license"] == {"text": "MIT"}
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert text.startswith("MIT License\n")
    assert "Copyright (c) 2026 the simsched authors" in text


def test_the_citation_names_this_version_and_license():
    text = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    fields = dict(re.findall(r"^([a-z-]+):[ \t]*(.*)$", text, re.MULTILINE))
    assert fields["cff-version"] == "1.2.0"
    assert fields["title"] == "simsched"
    assert fields["version"] == pyproject()["version"]
    assert fields["license"] == "MIT"
    assert fields["message"] and "abstract" in fields
    assert re.search(r'^authors:\n  - name: "The simsched authors"$', text, re.MULTILINE)


def test_the_changelog_has_this_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"## {pyproject()['version']} (unreleased)" in text
