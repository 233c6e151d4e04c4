"""Every relative link in README.md and docs/*.md resolves: the file exists, and a #anchor names one of its headings
(as GitHub makes them). A page named in backticks as `docs/NAME.md` exists too. No network: web links are not
followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

# Pages another session is writing: a link to one may point nowhere until it lands, and is checked once it has.
PENDING: dict[str, str] = {}

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
LINK = re.compile(r"\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
INLINE_CODE = re.compile(r"`[^`]*`")
NAMED_PAGE = re.compile(r"`(docs/[\w.-]+\.md)(?:#[\w-]+)?`")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def prose_lines(text: str) -> list[tuple[int, str]]:
    """The lines outside fenced code blocks, numbered from 1."""
    lines, fenced = [], False
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
        elif not fenced:
            lines.append((number, line))
    return lines


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").replace("*", "")
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(text: str) -> set[str]:
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in prose_lines(text):
        found.update(HTML_ANCHOR.findall(line))
        heading = HEADING.match(line)
        if heading:
            base = slug(heading.group(2))
            count = seen.get(base, 0)
            seen[base] = count + 1
            found.add(base if count == 0 else f"{base}-{count}")  # GitHub numbers a repeated heading
    return found


def broken_links(page: Path, root: Path, pending: dict[str, str]) -> list[str]:
    """``page``'s links that point nowhere, each as 'page:line: target: why'."""
    text = page.read_text(encoding="utf-8")
    where = page.relative_to(root)
    found = []
    for number, line in prose_lines(text):
        targets = [(t, page.parent) for t in LINK.findall(INLINE_CODE.sub("", line))]
        targets += [(t, root) for t in NAMED_PAGE.findall(line)]
        for target, base in targets:
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:: not followed
                continue
            path_part, _, anchor = target.partition("#")
            path = (base / path_part).resolve() if path_part else page
            name = path.relative_to(root).as_posix() if path.is_relative_to(root) else str(path)
            if not path.exists():
                if name not in pending:
                    found.append(f"{where}:{number}: {target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path.read_text(encoding="utf-8")):
                found.append(f"{where}:{number}: {target}: no heading makes #{anchor} in {name}")
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_resolves(page: Path) -> None:
    broken = broken_links(page, ROOT, PENDING)
    assert not broken, "\n".join(broken)


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    listed = {target.partition("#")[0] for target in LINK.findall(index)}
    missing = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "README.md" and p.name not in listed]
    assert not missing, f"docs/README.md says nothing of {missing}: add the questions they answer"


@pytest.mark.parametrize(
    ("heading", "anchor"),
    [
        ("Launcher (`bench/bench_launch.py`)", "launcher-benchbench_launchpy"),
        ("Behaviour that changes for every job", "behaviour-that-changes-for-every-job"),
        ("Moving from `deepspeed` to `dslaunch`", "moving-from-deepspeed-to-dslaunch"),
        ("Restarts: `--max-restarts N`, `--restart-delay S`", "restarts---max-restarts-n---restart-delay-s"),
        ("See [the tour](usage.md) *now*", "see-the-tour-now"),
    ],
)
def test_anchors_are_made_as_github_makes_them(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor


def test_a_broken_link_or_anchor_is_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Twice\n\n## Twice\n", encoding="utf-8")
    page = tmp_path / "README.md"
    page.write_text(
        "[ok](docs/a.md#twice-1) [gone](docs/b.md) [bad anchor](docs/a.md#thrice) [web](https://example.com/x)\n"
        "`docs/c.md` and `docs/a.md` [soon](docs/later.md) [here](#top)\n"
        "```\n[in code](docs/nowhere.md)\n```\n# Top\n",
        encoding="utf-8",
    )
    assert broken_links(page, tmp_path, {"docs/later.md": "being written"}) == [
        "README.md:1: docs/b.md: no such file",
        "README.md:1: docs/a.md#thrice: no heading makes #thrice in docs/a.md",
        "README.md:2: docs/c.md: no such file",
    ]
