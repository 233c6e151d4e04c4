"""docs/mesh.md's getter table says what dslaunch.compat offers, and its "Not provided" list what it does not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dslaunch.compat
from dslaunch.compat import groups

DOC = (Path(__file__).parents[2] / "docs" / "mesh.md").read_text()
SECTION = DOC.split("## Back-compat getters", 1)[1].split("\n## ", 1)[0]


def _names(cell: str) -> list[str]:
    """``get_x_group/rank/world_size`` -> get_x_group, get_x_rank, get_x_world_size (with its module prefix)."""
    found = []
    for code in re.findall(r"`([^`]+)`", cell):
        for part in code.replace(" ", "").split(","):
            head, *rest = part.split("/")
            head = re.sub(r"\(.*", "", head)
            match = re.search(r"((?:groups\.)?_?(?:get|is)_\w+)$", head)
            if not match:
                continue
            first = match.group(1)
            module, _, name = first.rpartition(".")
            stem = name.rsplit("_", 1)[0] if rest else name
            found.append(f"{module}.{name}" if module else name)
            found += [f"{module}.{stem}_{r}" if module else f"{stem}_{r}" for r in rest if re.fullmatch(r"\w+", r)]
    return found


ROWS = [line.split("|")[1] for line in SECTION.splitlines() if line.startswith("| `")]
OFFERED = sorted({n for row in ROWS for n in _names(row)})
NOT_OFFERED = sorted(set(_names(SECTION.split("Not provided:", 1)[1].split("\n\n", 1)[0])))


def _lookup(name: str) -> object:
    module, _, attr = name.rpartition(".")
    return getattr(groups if module == "groups" else dslaunch.compat, attr, None)


def test_the_table_was_read() -> None:
    assert len(OFFERED) > 40 and "get_expert_tensor_parallel_group" in OFFERED and "get_embedding_group" in OFFERED


@pytest.mark.parametrize("name", OFFERED)
def test_every_getter_in_the_table_exists(name: str) -> None:
    assert callable(_lookup(name)), f"docs/mesh.md lists {name}, dslaunch.compat has no such function"


@pytest.mark.parametrize("name", NOT_OFFERED)
def test_what_the_docs_say_is_missing_is_missing(name: str) -> None:
    assert _lookup(name) is None, f"docs/mesh.md says {name} is not provided, but it is"
