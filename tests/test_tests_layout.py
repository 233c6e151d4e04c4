"""tests/ is grouped as docs/development.md ("How the tests are grouped") says, so a module's tests are found where
the rule puts them:

- every folder of tests/ is a package of dslaunch/ at the same path (``tests/runners/remote/``), a top-level module
  with a folder of tests (``tests/mesh/`` for ``dslaunch/mesh.py``), ``tests/gpu/``, or a folder of resources that
  holds no tests (``tests/scripts/``, ``tests/cli/golden/``, ...);
- in a package's folder, ``test_<name>.py`` never names a module of another package (the tests of ``runners/
  slurm/``'s srun line are ``test_srun_line.py``, not ``test_srun.py``, which would be ``slurmlib/srun.py``'s); in a
  top-level module's folder the files are named for what of it they check, never after another top-level module
  (but ``<module>_<part>.py``: ``tests/wire/`` holds ``wire_check.py``'s too);
- a test file at the top of tests/ is a repository-wide check, not named after a module of dslaunch/.
(Every package has tests in its folder: tests/test_code_shape.py.)"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "dslaunch"
TESTS = ROOT / "tests"

# Folders of tests/ that are no package of dslaunch/, each with why; their subfolders are theirs too.
OTHER_FOLDERS = {
    "gpu": "every test that needs CUDA, whatever it checks, so a GPU machine runs one folder (docs/gpu.md)",
    "scripts": "the rank scripts and preload modules the launch tests run: no tests",
    "gpu/scripts": "the GPU tests' rank scripts: no tests",
    "bench": "smoke tests of the benchmarks in bench/: each runs a benchmark briefly so it cannot rot",
    "cli/golden": "the CLI's golden files: no tests",
}


def packages(root: Path) -> set[str]:
    """dslaunch's packages as paths under it (``job``, ``runners/remote``, ...)."""
    return {p.parent.relative_to(root).as_posix() for p in root.rglob("__init__.py") if p.parent != root}


def modules_by_package(root: Path) -> dict[str, set[str]]:
    """Each package's modules by name (``"": {"plan", "wire", ...}`` for the top level)."""
    out: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        if path.stem not in ("__init__", "__main__"):
            folder = path.parent.relative_to(root).as_posix()
            out.setdefault("" if folder == "." else folder, set()).add(path.stem)
    return out


def _folders(tests: Path) -> list[str]:
    return sorted(
        p.relative_to(tests).as_posix()
        for p in tests.rglob("*")
        if p.is_dir() and p.name != "__pycache__" and any(p.glob("*.py"))
    )


def stray_folders(tests: Path, root: Path) -> list[str]:
    """The folders of tests/ the rule has no place for."""
    known = packages(root) | modules_by_package(root).get("", set())
    others = tuple(OTHER_FOLDERS)
    return [f for f in _folders(tests) if f not in known and not f.startswith(tuple(f"{o}/" for o in others) + others)]


def misnamed(tests: Path, root: Path) -> list[str]:
    """Test files named after a module of dslaunch that is not their folder's (or, at the top, any module)."""
    by_package = modules_by_package(root)
    every = {name for names in by_package.values() for name in names}
    top_level = by_package.get("", set())
    out = []
    for path in sorted(tests.rglob("test_*.py")):
        folder = path.parent.relative_to(tests).as_posix()
        name = path.stem.removeprefix("test_")
        if folder == ".":
            if name in every:
                out.append(f"{path.name}: a module's tests go in its package's folder, not at the top of tests/")
        elif folder in by_package and name in every and name not in by_package[folder]:
            elsewhere = sorted(p or "dslaunch/" for p, names in by_package.items() if name in names)
            out.append(f"{folder}/{path.name}: names {name}.py of {', '.join(elsewhere)}, not of {folder}/")
        elif folder in top_level and name in top_level - {folder} and not name.startswith(f"{folder}_"):
            out.append(f"{folder}/{path.name}: {folder}/ is {folder}.py's; {name}.py has no tests there")
    return out


def test_every_folder_of_the_tests_has_its_place() -> None:
    stray = stray_folders(TESTS, PACKAGE)
    assert not stray, (
        f"tests/ folders that are no package of dslaunch/ and not in OTHER_FOLDERS: {stray} "
        "(docs/development.md, 'How the tests are grouped')"
    )


def test_no_test_file_is_named_after_another_packages_module() -> None:
    wrong = misnamed(TESTS, PACKAGE)
    assert not wrong, "rename or move these (docs/development.md, 'How the tests are grouped'):\n" + "\n".join(wrong)


def test_the_other_folders_still_exist() -> None:
    gone = [f for f in OTHER_FOLDERS if not (TESTS / f).is_dir()]
    assert not gone, f"OTHER_FOLDERS names folders that are gone: {gone}"


def test_the_rules_see_a_stray_folder_and_misnamed_files(tmp_path: Path) -> None:
    root, tests = tmp_path / "dslaunch", tmp_path / "tests"
    for path in (
        "__init__.py",
        "plan.py",
        "mesh.py",
        "mesh_x.py",
        "job/__init__.py",
        "job/state.py",
        "slurmlib/__init__.py",
    ):
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("")
    (root / "slurmlib" / "srun.py").write_text("")
    for path in (
        "job/test_state.py",
        "job/test_srun.py",
        "job/test_restarts.py",
        "mesh/test_plan.py",
        "mesh/test_mesh_x.py",
    ):
        (tests / path).parent.mkdir(parents=True, exist_ok=True)
        (tests / path).write_text("")
    for path in ("test_plan.py", "test_imports.py", "jobs/test_x.py", "scripts/preload/p.py", "gpu/test_cuda.py"):
        (tests / path).parent.mkdir(parents=True, exist_ok=True)
        (tests / path).write_text("")
    assert stray_folders(tests, root) == ["jobs"]
    assert misnamed(tests, root) == [
        "job/test_srun.py: names srun.py of slurmlib, not of job/",
        "mesh/test_plan.py: mesh/ is mesh.py's; plan.py has no tests there",
        "test_plan.py: a module's tests go in its package's folder, not at the top of tests/",
    ]
