"""timeline.html in a real headless Chromium (DevTools protocol on a pipe, tests/report/browser.py): the page
of a real 4-rank torch job, and a synthetic 1,024-rank one. Each renders one bar per rank with no console error or
uncaught exception, the hover box shows a rank's exact times, and a screenshot is kept as a test artifact (in
$DSLAUNCH_TEST_ARTIFACTS, else tests/artifacts/)."""

from __future__ import annotations

import os
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.helpers import SCRIPTS, run_cli
from tests.output.collapse_check import lines_of
from tests.report import synth
from tests.report.browser import Chromium, Page, find_chromium

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

SCRIPT = SCRIPTS / "timeline_ranks.py"
ARTIFACTS = Path(os.environ.get("DSLAUNCH_TEST_ARTIFACTS") or Path(__file__).resolve().parents[1] / "artifacts")


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[Callable[[], AbstractContextManager[Chromium]]]:
    """Starts Chromium when the test asks (after its job, so they do not compete for the CPU)."""
    if find_chromium() is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is missing on CI: scripts/install-system-deps.sh installs it")
        pytest.skip("chromium is not installed (scripts/install-system-deps.sh installs it)")
    yield lambda: Chromium.start(tmp_path / "profile")


def png_summary(data: bytes) -> tuple[int, int, int]:
    """Width, height and how many distinct byte values its (filtered) pixel rows hold: a page of one colour gives a
    handful, a drawn chart with text hundreds. No image library needed."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width, height = 8, b"", 0, 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height = struct.unpack(">II", body[:8])
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    return width, height, len(set(zlib.decompress(idat)))


def keep_screenshot(page: Page, name: str) -> Path:
    png = page.screenshot()
    width, height, variety = png_summary(png)
    assert width >= 800 and height >= 300 and variety > 32, (width, height, variety)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / name
    path.write_bytes(png)
    return path


def check_page(page: Page, ranks: int) -> None:
    assert page.evaluate("document.body.dataset.ready") == "1", "the page's script did not finish"
    assert page.evaluate("document.querySelectorAll('#timeline g.bar').length") == ranks
    shown = page.evaluate("[...document.querySelectorAll('#timeline g.bar')].map(g => Number(g.dataset.rank))")
    assert shown == list(range(ranks))
    drawn = page.evaluate(
        "[...document.querySelectorAll('#timeline g.bar')].filter(g => g.querySelector('rect.p2')"
        " && g.querySelector('rect.p2').getBoundingClientRect().width > 0).length"
    )
    assert drawn == ranks, "every bar shows its import torch segment"
    assert page.evaluate("getComputedStyle(document.querySelector('rect.p2')).fill") == "rgb(242, 142, 43)"


def hover_text(page: Page, rank: int) -> str:
    box = page.evaluate(
        f"(() => {{ const g = document.querySelector('#timeline g.bar[data-rank=\"{rank}\"] rect.p2');"
        "g.scrollIntoView({block: 'center'}); const b = g.getBoundingClientRect();"
        "return [b.x + b.width / 2, b.y + b.height / 2]; })()"
    )
    page.hover(*box)
    assert page.evaluate("document.getElementById('tip').hidden") is False
    text: str = page.evaluate("document.getElementById('tip').textContent")
    return text


def test_a_thousand_synthetic_ranks_render(
    browser: Callable[[], AbstractContextManager[Chromium]], tmp_path: Path
) -> None:
    log_dir = synth.write(tmp_path / "logs", synth.job(1024))
    proc = run_cli(["--report", str(log_dir)])
    assert proc.returncode == 0, proc.stderr
    with browser() as chromium:
        page = chromium.open((log_dir / "timeline.html").as_uri())
        check_page(page, 1024)
        text = hover_text(page, 1000)
        assert text.startswith("rank 1000 on node125  exit code 0") and "> torch_imported " in text
        assert page.errors == []
        keep_screenshot(page, "timeline-1024-ranks.png")


@pytest.mark.torch
def test_report_of_a_4_rank_torch_job_renders_in_chromium(
    browser: Callable[[], AbstractContextManager[Chromium]], tmp_path: Path
) -> None:
    log_dir = tmp_path / "logs"
    job = run_cli(
        ["--nproc-per-node", "4", "--master-port", "0", "--log-dir", str(log_dir), str(SCRIPT)],
        timeout=180,
        env={"DSLAUNCH_PG_TIMEOUT": "30", "DSLAUNCH_LOG_LEVEL": "", "DSLAUNCH_RESTART_COUNT": ""},
    )
    assert job.returncode == 0, job.stdout + job.stderr
    done = [rank for line in lines_of(job.stdout, "timeline-done 12.0") for rank in line]
    assert sorted(done) == [0, 1, 2, 3], job.stdout  # identical lines of several ranks print once, with a range

    proc = run_cli(["--report", str(log_dir)])
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert re.match(r"launch timeline of run \w+, attempt 0 \(1 attempt\): 4 ranks on 1 host, ", out), out
    for phase in ("spawned", "bootstrap", "torch_imported", "pg_ready", "mesh_ready", "first_step", "exit"):
        row = re.search(rf"^{phase}\s+4/4\s+(\d+\.\d{{3}})s\s+(\d+\.\d{{3}})s\s+([0-3])\s+localhost\s", out, re.M)
        assert row, f"no row for {phase}:\n{out}"
        assert float(row[1]) <= float(row[2])
    assert "exit: 4 exited 0" in out
    page_path = log_dir / "timeline.html"
    assert out.rstrip().endswith(f"timeline: {page_path}")

    with browser() as chromium:
        page = chromium.open(page_path.as_uri())
        check_page(page, 4)
        text = hover_text(page, 2)
        assert text.startswith("rank 2 on localhost  exit code 0"), text
        for phase in ("pg_ready", "mesh_ready", "first_step"):
            assert re.search(rf"^  {phase}\s+\+\d+\.\d{{6}}s  20\d\d-\d\d-\d\dT", text, re.M), text
        assert page.errors == []
        keep_screenshot(page, "timeline-4-rank-torch-job.png")
