"""Owner-only folders and files whatever the umask (dslaunch/oslib/owner_only.py): the logs under --log-dir."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from dslaunch.oslib.owner_only import DIR_MODE, FILE_MODE, private_dir, private_open


@pytest.fixture
def open_umask() -> Iterator[None]:
    old = os.umask(0)  # the worst case: nothing masked by the umask
    try:
        yield
    finally:
        os.umask(old)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_every_missing_folder_is_owner_only(tmp_path: Path, open_umask: None) -> None:
    private_dir(str(tmp_path / "a" / "b" / "c"))
    assert [_mode(tmp_path / p) for p in ("a", "a/b", "a/b/c")] == [DIR_MODE] * 3


def test_an_existing_folder_is_left_as_it_is(tmp_path: Path, open_umask: None) -> None:
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o755)
    private_dir(str(shared / "logs"))
    assert _mode(shared) == 0o755 and _mode(shared / "logs") == DIR_MODE


def test_a_created_file_is_owner_only_and_keeps_its_name(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "rank0.jsonl"
    with private_open(str(path), "w", encoding="utf-8") as f:
        f.write("x\n")
        assert f.name == str(path)
    assert _mode(path) == FILE_MODE and path.read_text() == "x\n"


def test_an_existing_file_keeps_its_mode_and_is_appended_to(tmp_path: Path, open_umask: None) -> None:
    path = tmp_path / "old.log"
    path.write_text("a\n")
    path.chmod(0o644)
    with private_open(str(path)) as f:
        f.write("b\n")
    assert _mode(path) == 0o644 and path.read_text() == "a\nb\n"


def test_a_folder_where_a_file_is_meets_an_error(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        private_dir(str(tmp_path / "file" / "logs"))


def test_a_stricter_umask_is_kept(tmp_path: Path) -> None:
    old = os.umask(0o177)  # not even the owner's execute bit on a file; folders still get 0700 at most
    try:
        with private_open(str(tmp_path / "g.bin"), "wb"):
            pass
    finally:
        os.umask(old)
    assert _mode(tmp_path / "g.bin") == FILE_MODE & ~0o177
