"""README.md stays a product page (issue 50): under 12 KB, short lines and table cells, and every file, anchor and
module path it names exists, so a newcomer's first page does not point at what is not there."""

from __future__ import annotations

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.lstrip("#").strip().lower())
    return text.replace(" ", "-")


def _anchors(path: pathlib.Path) -> set[str]:
    return {_slug(line) for line in path.read_text().splitlines() if line.startswith("#")}


def test_readme_is_short_with_short_lines_and_cells():
    text = README.read_text()
    assert len(text.encode()) < 12_000, f"README.md is {len(text.encode())} bytes: move detail to docs/"
    long_lines = [i + 1 for i, line in enumerate(text.splitlines()) if len(line) > 200]
    assert not long_lines, f"README.md lines over 200 characters: {long_lines}"
    for line in text.splitlines():
        if line.startswith("| "):
            cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
            assert all(len(cell) < 200 for cell in cells), line


def test_readme_links_point_at_files_and_headings_that_exist():
    text = README.read_text()
    targets = re.findall(r"\]\(([^)#][^)]*)\)", text) + re.findall(r"^\[[^\]]+\]: (\S+)", text, re.M)
    assert targets
    for target in targets:
        path, _, anchor = target.partition("#")
        assert (ROOT / path).exists(), f"README.md links to {path}, which does not exist"
        if anchor:
            assert anchor in _anchors(ROOT / path), f"README.md links to {target}: no such heading"


def test_the_data_path_names_modules_that_exist():
    text = README.read_text()
    block = text[text.index("\n```\nenv workers"):]
    block = block[:block.index("\n```\n", 5)]
    names = re.findall(r"[\w/]+\.py|seedleague/\w+/|launch/|envs/", block)
    assert len(names) >= 15
    for name in names:  # a bare file name is one of the host's modules, the block's indented list
        path = ROOT / name if "/" in name else ROOT / "seedleague" / "host" / name
        assert path.exists(), f"README.md's data path names {name}, which is not {path.relative_to(ROOT)}"
