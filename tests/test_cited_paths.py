"""Every path of this repository that the docs, the README or the code's docstrings and comments cite exists.

A cited path is a run of path characters with a ``/`` in it, either
- from one of the repository's top-level folders, ending in a file name with an extension or in ``/``
  (``dslaunch/job/attempts.py``, ``tests/pods/``, ``bench/bench_pods.py``): it must exist from the root, or from a
  folder above the file that cites it (``scripts/engine_api.py`` in a test is ``tests/scripts/engine_api.py``); or
- from a package of ``dslaunch/`` and ending in ``.py`` (``pods/pod_launcher.py``, ``remote/agent_links.py``: the
  package-relative spelling docstrings use): some file of the repository must end with it.
Absolute paths, home and dot paths, URLs and patterns (``tests/<package>/``, ``test_*.py``, ``{log_dir}/...``) are not
the repository's and are skipped, and so is prose with slashes (``dslaunch/torchrun/Slurm``). A path cited with a
name, ``path.py::name`` or ``path.py::Class.name``, must define it (a function, class or assignment, at any depth;
``name`` inside ``Class``). Checked: README.md, docs/*.md, and every .py file of dslaunch/, tests/, bench/ and
testbeds/."""

from __future__ import annotations

import ast
import functools
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("dslaunch", "tests", "bench", "testbeds", "scripts", "docs", "examples", "requirements", "hostfiles", ".ci")
# Files whose tests cite made-up paths on purpose, as their cases.
NOT_SCANNED = {"tests/test_cited_paths.py", "tests/test_doc_links.py", "tests/test_tests_layout.py"}
SOURCES = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *(p for top in ("dslaunch", "tests", "bench", "testbeds") for p in sorted((ROOT / top).rglob("*.py"))),
]
SOURCES = [p for p in SOURCES if p.relative_to(ROOT).as_posix() not in NOT_SCANNED]

# Paths cited although they are not in the repository, each with why. Keep it short.
ALLOWED: dict[str, str] = {
    "tests/artifacts/": "made at run time for tests/report/test_timeline_browser.py's screenshots (git-ignored)",
    "tests/unit/launcher/test_run.py": "DeepSpeed's own tests, which tests/inputs/test_hostfile.py covers",
    "tests/unit/launcher/test_user_args.py": "DeepSpeed's own tests, whose prompts tests/runners/test_local.py uses",
    "docs/_pages/config-json.md": "DeepSpeed's documentation of its config keys (dslaunch/inputs/config.py)",
}

URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
RUN = re.compile(r"[\w.-]*(?:/[\w.-]*)+")  # a run of path characters with a slash
NAME = re.compile(r"::([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)?)")
PATTERN_NEXT = "*<{["  # a run followed by one of these is part of a pattern or a template, not a path
SKIP = {".git", ".venv", ".venv-torch-newest", "__pycache__", ".pytest_cache", ".ruff_cache", ".hypothesis", "build"}


@functools.cache
def packages(root: Path) -> frozenset[str]:
    """The names of dslaunch's packages at any depth (job, runners, remote, preload, ...)."""
    return frozenset(p.parent.name for p in (root / "dslaunch").rglob("__init__.py") if p.parent != root / "dslaunch")


def _is_cited(token: str, names: frozenset[str]) -> bool:
    if "/" not in token or token.startswith(("/", "./", "../")) or "//" in token:
        return False
    first, last = token.split("/", 1)[0], token.rsplit("/", 1)[-1]
    if first in TOP:
        return last == "" or re.fullmatch(r"[\w.-]+\.[A-Za-z]+", last) is not None
    return first in names and token.endswith(".py")


def cited(text: str, names: frozenset[str]) -> list[tuple[int, str, str | None]]:
    """The repository paths ``text`` cites: (line number, path, the name cited in it after ``::`` or None)."""
    found = []
    for number, raw in enumerate(text.splitlines(), 1):
        if "/" not in raw:
            continue
        line = URL.sub(" ", raw)
        for match in RUN.finditer(line):
            token = match.group().rstrip(".")
            end = match.start() + len(token)
            if end < len(line) and line[end] in PATTERN_NEXT:
                continue
            if match.start() > 0 and line[match.start() - 1] in "~$}>":
                continue
            if _is_cited(token, names):
                name = NAME.match(line, end) if token.endswith(".py") else None
                found.append((number, token, name.group(1) if name else None))
    return found


@functools.cache
def files_of(root: Path) -> frozenset[str]:
    """Every file of the repository, as a path from the root (the venvs, caches and git's own files left out)."""
    out = set()
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP and not d.endswith(".egg-info")]
        out.update((Path(folder) / f).relative_to(root).as_posix() for f in files)
    return frozenset(out)


@functools.cache
def defined(path: Path) -> dict[str, frozenset[str]]:
    """The names ``path`` defines at any depth (functions, classes, assignments, imports), each with the names its
    class defines (its methods, class attributes, ``self.x`` assignments)."""

    def names_in(tree: ast.AST) -> set[str]:
        out: set[str] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                out.add(node.name)
            elif isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
                out.add(node.id if isinstance(node, ast.Name) else node.attr)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                out.update((a.asname or a.name).split(".")[0] for a in node.names)
        return out

    tree = ast.parse(path.read_text(encoding="utf-8"))
    classes = {n.name: frozenset(names_in(n)) for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    return {name: classes.get(name, frozenset()) for name in names_in(tree)}


@functools.cache
def _by_tail(files: frozenset[str]) -> dict[str, list[str]]:
    """Each file under every tail of its path (``a/b/c.py``: ``a/b/c.py``, ``b/c.py``, ``c.py``)."""
    out: dict[str, list[str]] = {}
    for f in sorted(files):
        parts = f.split("/")
        for i in range(len(parts)):
            out.setdefault("/".join(parts[i:]), []).append(f)
    return out


def _where(token: str, source: Path, root: Path, files: frozenset[str]) -> list[Path]:
    """The files or folders ``token``, cited in ``source``, may be."""
    if token.split("/", 1)[0] in TOP:
        folders = [root, *(f for f in source.parents if f.is_relative_to(root))]
        return [folder / token for folder in folders if (folder / token).exists()]
    return [root / f for f in _by_tail(files).get(token, [])]


def missing(source: Path, root: Path, names: frozenset[str], files: frozenset[str]) -> list[str]:
    where = source.relative_to(root).as_posix()
    out = []
    for number, token, name in cited(source.read_text(encoding="utf-8"), names):
        if token in ALLOWED:
            continue
        found = _where(token, source, root, files)
        if not found:
            out.append(f"{where}:{number}: {token}")
        elif name and not any(_defines(path, name) for path in found):
            out.append(f"{where}:{number}: {token}::{name} (no {name} there)")
    return out


def _defines(path: Path, name: str) -> bool:
    outer, _, inner = name.partition(".")
    names = defined(path)
    return outer in names and (not inner or inner in names[outer])


def _group(source: Path) -> str:
    """A page of the docs on its own, the code by its top folder (a test each: hundreds of files, one check)."""
    rel = source.relative_to(ROOT)
    return rel.as_posix() if rel.suffix == ".md" else f"{rel.parts[0]}/"


GROUPS = sorted({_group(source) for source in SOURCES})


@pytest.mark.parametrize("group", GROUPS)
def test_every_cited_path_exists(group: str) -> None:
    names, files = packages(ROOT), files_of(ROOT)
    gone = [line for source in SOURCES if _group(source) == group for line in missing(source, ROOT, names, files)]
    assert not gone, "cited, but not in the repository:\n" + "\n".join(gone)


def test_the_allowed_paths_are_still_cited() -> None:
    names = packages(ROOT)
    everywhere = {token for source in SOURCES for _, token, _ in cited(source.read_text(encoding="utf-8"), names)}
    stale = [p for p in ALLOWED if p not in everywhere]
    assert not stale, f"ALLOWED names paths no longer cited: {stale}"
    assert "dslaunch/plan.py" in files_of(ROOT), "the repository's files were not found: the scan is broken"


def test_the_scan_takes_repository_paths_only() -> None:
    text = (
        "see `pods/attempts.py::run` and dslaunch/job/state.py, tests/cli/ (a folder), docs/slurm.md.\n"
        "not: /etc/hosts/x.py ~/.ssh/config $HOME/tests/a.py https://github.com/o/r/blob/main/tests/x.py\n"
        "nor tests/<package>/test_*.py {log_dir}/dslaunch/x.py logs/rank0.log output/x.txt ./tests/y.py agent\n"
        "nor dslaunch/torchrun/Slurm, but tests/ and bench/x.json and job/state.py::JobState.tick.\n"
    )
    assert cited(text, frozenset({"pods", "agent", "output", "job"})) == [
        (1, "pods/attempts.py", "run"),
        (1, "dslaunch/job/state.py", None),
        (1, "tests/cli/", None),
        (1, "docs/slurm.md", None),
        (4, "tests/", None),
        (4, "bench/x.json", None),
        (4, "job/state.py", "JobState.tick"),
    ]


def test_a_cited_name_must_be_defined_there(tmp_path: Path) -> None:
    (tmp_path / "dslaunch" / "job").mkdir(parents=True)
    (tmp_path / "dslaunch" / "job" / "__init__.py").write_text("")
    (tmp_path / "dslaunch" / "job" / "state.py").write_text(
        "import os\nLIMIT = 1\nclass JobState:\n    size: int\n    def tick(self):\n        self.seen = 1\n"
    )
    doc = tmp_path / "docs" / "a.md"
    doc.parent.mkdir()
    doc.write_text(
        "`job/state.py::JobState.tick` `job/state.py::JobState.seen` `dslaunch/job/state.py::LIMIT`\n"
        "`job/state.py::os`\n"
        "`job/state.py::JobState.gone` `job/state.py::gone` `job/attempts.py::run` `tests/x.py`\n"
    )
    names, files = packages(tmp_path), files_of(tmp_path)
    assert missing(doc, tmp_path, names, files) == [
        "docs/a.md:3: job/state.py::JobState.gone (no JobState.gone there)",
        "docs/a.md:3: job/state.py::gone (no gone there)",
        "docs/a.md:3: job/attempts.py",
        "docs/a.md:3: tests/x.py",
    ]
