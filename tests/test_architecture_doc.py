"""docs/architecture.md stays true: every module of dslaunch/ is named in its package's row of the package map,
every package has a row, no row names a package that is gone, and the rows are in the layer order of
tests/test_imports.py::PACKAGE_RULES."""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_imports import PACKAGE_RULES

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dslaunch"
DOC = ROOT / "docs" / "architecture.md"


def package_map(text: str) -> list[tuple[list[str], str]]:
    """The package map's rows: the packages (or top-level modules) of the first cell, and the row's text."""
    section = text.split("## Package map", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if not line.startswith("|") or len(cells) < 3 or cells[0] in ("package", "---"):
            continue
        names = [n.rstrip("/") for n in re.findall(r"`([^`]+)`", cells[0])]
        rows.append((names, " | ".join(cells[1:])))
    return rows


def named(text: str) -> set[str]:
    """Every name in backticks in ``text``, also each part of a path (``pods/pod_launcher`` names both)."""
    found = set()
    for quoted in re.findall(r"`([^`]+)`", text):
        for word in re.findall(r"[A-Za-z_][A-Za-z0-9_]*/?", quoted):
            found.add(word)
    return found


def modules() -> list[tuple[str, ...]]:
    """Each module's path under dslaunch/, without .py: ("plan",), ("runners", "ssh", "runner"), ..."""
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        if parts[-1] not in ("__init__", "__main__"):
            out.append(parts)
    return out


def missing_from(rows: list[tuple[list[str], str]], mods: list[tuple[str, ...]]) -> list[str]:
    by_package = {name: text for names, text in rows for name in names}
    missing = []
    for parts in mods:
        if len(parts) == 1:
            if parts[0] not in by_package:
                missing.append(f"{parts[0]} (a top-level module: name it in the first row's first cell)")
            continue
        text = by_package.get(parts[0])
        if text is None:
            missing.append(f"{'/'.join(parts)} (its package {parts[0]}/ has no row)")
            continue
        words = named(text)
        folders = [f"{p}/" for p in parts[1:-1]]
        if parts[-1] not in words or any(f not in words for f in folders):
            missing.append(f"{'/'.join(parts)} (in {parts[0]}/'s row: {' and '.join([*folders, parts[-1]])})")
    return missing


def test_every_module_is_in_its_packages_row() -> None:
    missing = missing_from(package_map(DOC.read_text(encoding="utf-8")), modules())
    assert not missing, "docs/architecture.md's package map does not name:\n" + "\n".join(missing)


def test_no_row_names_a_package_that_is_gone() -> None:
    packages = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    top = {p.stem for p in PACKAGE.glob("*.py")}
    stale = [n for names, _ in package_map(DOC.read_text(encoding="utf-8")) for n in names if n not in packages | top]
    assert not stale, f"the package map names what is gone: {stale}"


def test_the_rows_are_in_layer_order() -> None:
    order = list(PACKAGE_RULES)
    firsts = [names[0] for names, _ in package_map(DOC.read_text(encoding="utf-8"))]
    assert firsts == sorted(firsts, key=order.index), f"rows {firsts} are not in PACKAGE_RULES' order"


def test_the_check_sees_a_missing_module_and_a_missing_folder() -> None:
    rows = [(["plan", "wire"], "vocabulary"), (["runners"], "`local`, `ssh/` (`runner`)")]
    mods = [("plan",), ("mesh",), ("runners", "local"), ("runners", "ssh", "runner"), ("runners", "pdsh", "runner")]
    assert missing_from(rows, mods) == [
        "mesh (a top-level module: name it in the first row's first cell)",
        "runners/pdsh/runner (in runners/'s row: pdsh/ and runner)",
    ]
    assert missing_from([(["job"], "`state`")], [("job", "loop")]) == ["job/loop (in job/'s row: loop)"]
