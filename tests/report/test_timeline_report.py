"""The launch timeline without a browser: phase records from a real (torch-free) launch, the log parser (tables and
a fuzz), the per-phase table, the page's size and self-containedness, and ``dslaunch --report``'s errors."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch.logs.phases import PHASES
from dslaunch.report import page, table, timeline
from dslaunch.report.timeline import PhaseEvent, parse_line, parse_lines
from tests.helpers import SCRIPTS, run_cli
from tests.plans import cli_error, dry_run_output
from tests.report import synth

STEPS = SCRIPTS / "timer_steps.py"
CLEAN = {"DSLAUNCH_LOG_LEVEL": "", "DSLAUNCH_RESTART_COUNT": ""}

IMPORT_S = 1.5  # the stand-in torch's import time


def phase_records(log_dir: Path) -> list[dict[str, object]]:
    found = []
    for path in sorted(log_dir.glob("*.jsonl")):
        found += [json.loads(line) for line in path.read_text().splitlines() if '"phase"' in line]
    return [r for r in found if r.get("event") == "phase"]


# ---- phase records from a real launch --------------------------------------------------------------------------


@pytest.mark.launch
def test_a_launch_with_a_log_dir_records_each_ranks_phases_at_the_default_level(tmp_path: Path) -> None:
    log_dir = tmp_path / "logs"
    proc = run_cli(["--nproc-per-node", "2", "--log-dir", str(log_dir), str(STEPS)], env=CLEAN)
    assert proc.returncode == 0, proc.stderr
    assert "phase" not in proc.stderr  # file records only: nothing on the console
    records = phase_records(log_dir)
    for rank in (0, 1):
        mine = [r for r in records if r["rank"] == rank]
        assert [r["phase"] for r in mine if r["logger"] == "agent"] == ["spawned", "exit"]
        # no torch in this script: bootstrap and the first timers.step() (recorded once for three steps)
        assert sorted(r["phase"] for r in mine if r["logger"] == "bootstrap") == ["bootstrap", "first_step"]
        assert {r["attempt"] for r in mine} == {0} and {r["host"] for r in mine} == {"localhost"}
        times = {r["phase"]: r["t"] for r in mine}
        assert times["spawned"] <= times["bootstrap"] <= times["first_step"] <= times["exit"]
        assert next(r for r in mine if r["phase"] == "exit")["code"] == 0


@pytest.mark.launch
def test_no_log_dir_no_records_and_the_attempt_comes_from_the_restart_count(tmp_path: Path) -> None:
    proc = run_cli(["--nproc-per-node", "1", str(STEPS)], env=CLEAN, cwd=str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert not list(tmp_path.rglob("*.jsonl"))
    log_dir = tmp_path / "logs"
    flaky = SCRIPTS / "flaky.py"
    proc = run_cli(
        ["--nproc-per-node", "1", "--log-dir", str(log_dir), "--max-restarts", "1", "--restart-delay", "0",
         str(flaky), str(tmp_path), "0", "1", "3"],
        env=CLEAN,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert {r["attempt"] for r in phase_records(log_dir)} == {0, 1}
    assert {r["attempt"] for r in phase_records(log_dir) if r["phase"] == "exit"} == {0, 1}


@pytest.mark.launch
@pytest.mark.parametrize("preloaded", [False, True])
def test_torch_imported_is_recorded_when_the_import_finishes_or_at_once_if_it_already_has(
    tmp_path: Path, preloaded: bool
) -> None:
    """A stand-in ``torch`` package that takes 1.5 s to import (no real torch: this is about the import hook).
    1.5 s, not less: the bootstrap's own work between its two records took 0.22 s on a loaded CI machine."""
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text(f"import time\ntime.sleep({IMPORT_S})\n")
    script = tmp_path / "script.py"
    script.write_text("import torch\n")
    preload = "import sys, types; sys.modules['torch'] = types.ModuleType('torch'); " if preloaded else ""
    code = f"{preload}from dslaunch.bootstrap.run import main; main([{str(script)!r}])"
    env = {
        **os.environ,
        **CLEAN,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]),
        "RANK": "0",
        "WORLD_SIZE": "1",
        "DSLAUNCH_LOG_DIR": str(tmp_path / "logs"),
    }
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    times = {r["phase"]: r["t"] for r in phase_records(tmp_path / "logs")}
    assert list(times) == ["bootstrap", "torch_imported"]
    took = times["torch_imported"] - times["bootstrap"]
    assert (took < IMPORT_S) if preloaded else (took >= IMPORT_S), took


@pytest.mark.launch
def test_the_agent_takes_a_ranks_attempt_from_the_environment_it_spawned_it_with(tmp_path: Path) -> None:
    code = (
        "from dslaunch.logs import configure, phases\n"
        f"configure('warning', role='agent', log_dir={str(tmp_path)!r}, facts={{'node_rank': 0}})\n"
        "phases.record('spawned', env={'DSLAUNCH_RESTART_COUNT': '2'}, rank=0)\n"
        "phases.record('spawned', env={}, rank=1)\n"
        "phases.record('exit', rank=0, code=0)\n"
        "phases.record('exit', rank=1, code=0)\n"
    )
    env = {**os.environ, "DSLAUNCH_RESTART_COUNT": "5"}  # the agent's own: not the ranks'
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    got = [(r["phase"], r["rank"], r["attempt"]) for r in phase_records(tmp_path)]
    assert got == [("spawned", 0, 2), ("spawned", 1, 0), ("exit", 0, 2), ("exit", 1, 0)]


# ---- the parser --------------------------------------------------------------------------------------------------

GOOD = synth.record("pg_ready", 1.5, 3, "node7")


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (GOOD, PhaseEvent("pg_ready", 1.5, 3, "node7", 0, "run1", None)),
        (synth.record("exit", 9, 0, "h", attempt=2, code=1), PhaseEvent("exit", 9.0, 0, "h", 2, "run1", 1)),
        (synth.record("spawned", 1.0, 0, ""), PhaseEvent("spawned", 1.0, 0, "?", 0, "run1", None)),
        (GOOD[:-5], None),  # half-written last line of a killed rank
        ("", None),
        ('not json at all, but says "phase"', None),
        ('["phase"]', None),
        (GOOD.replace('"event": "phase"', '"event": "other"'), None),
        (GOOD.replace('"pg_ready"', '"warp_drive"'), None),
        (GOOD.replace('"rank": 3', '"rank": true'), None),
        (GOOD.replace('"rank": 3', '"rank": -1'), None),
        (GOOD.replace('"t": 1.5', '"t": "1.5"'), None),
        (GOOD.replace('"t": 1.5', '"t": NaN'), None),
        (GOOD.replace('"t": 1.5', '"t": Infinity'), None),
        (GOOD.replace('"attempt": 0', '"attempt": "x"'), PhaseEvent("pg_ready", 1.5, 3, "node7", 0, "run1", None)),
        ("[" * 100_000 + '"phase"', None),  # too deep for json: RecursionError, still just skipped
    ],
)
def test_parse_line(line: str, expected: PhaseEvent | None) -> None:
    assert parse_line(line) == expected


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
FIELDS = st.fixed_dictionaries(
    {},
    optional={
        "event": st.sampled_from(["phase", "other"]) | JSON,
        "phase": st.sampled_from(PHASES) | JSON,
        "t": st.floats() | JSON,
        "rank": st.integers(-2, 5) | JSON,
        "host": JSON,
        "attempt": JSON,
        "run_id": JSON,
        "code": JSON,
    },
)


@settings(max_examples=300, deadline=None)
@given(garbage=st.lists(st.text() | FIELDS.map(json.dumps) | JSON.map(json.dumps), max_size=8), cut=st.integers(0, 400))
def test_garbage_is_skipped_and_good_lines_are_kept(garbage: list[str], cut: int) -> None:
    """Any text at all between good records: nothing raises, every good record is kept, and whatever else is
    kept is a well-formed event."""
    good = [synth.record(p, 10.0 + i, i, "h") for i, p in enumerate(PHASES)]
    lines = [*garbage, good[0], GOOD[:cut], *good[1:], *garbage]
    events = parse_lines(lines)
    assert all(e in events for e in parse_lines(good))
    for e in events:
        assert e.phase in PHASES and e.rank >= 0 and e.host and e.attempt >= 0
        assert e.t == e.t and abs(e.t) != float("inf")


# ---- building the timeline, the table ----------------------------------------------------------------------------


def test_the_latest_run_and_attempt_are_shown(tmp_path: Path) -> None:
    synth.write(tmp_path, synth.job(2, run_id="old"))
    files = synth.job(2, run_id="new", attempt=0)
    later = {name: [line.replace('"t": 18', '"t": 19') for line in lines] for name, lines in files.items()}
    synth.write(tmp_path, later)  # the same dir, a later run: appended
    retried = synth.job(3, run_id="new", attempt=1, seed=1)
    synth.write(tmp_path, {n: [line.replace('"t": 18', '"t": 19') for line in ls] for n, ls in retried.items()})
    found = timeline.load(str(tmp_path))
    assert (found.run_id, found.attempt, found.attempts, found.runs) == ("new", 1, 2, 2)
    assert [r.rank for r in found.ranks] == [0, 1, 2]
    assert "attempt 1 (2 attempts)" in table.headline(found) and "2 runs in this log dir" in table.headline(found)


def test_table_rows_median_and_slowest() -> None:
    t0 = 100.0
    lines = []
    for rank, (host, start, torch_done) in enumerate([("a", 0.0, 4.0), ("a", 0.1, 5.0), ("b", 0.2, 9.0)]):
        lines += [
            synth.record("spawned", t0 + start, rank, host),
            synth.record("torch_imported", t0 + torch_done, rank, host),
            synth.record("exit", t0 + 10, rank, host, code=rank),  # rank 1 and 2 fail
        ]
    found = timeline.build(parse_lines(lines))
    assert found is not None
    rows = {r.phase: r for r in table.rows(found)}
    assert list(rows) == ["spawned", "torch_imported", "exit"]
    torch_row = rows["torch_imported"]
    assert (torch_row.ranks, torch_row.at_median, torch_row.at_max) == (3, 5.0, 9.0)
    assert (torch_row.slowest_rank, torch_row.slowest_host) == (2, "b")
    assert torch_row.took_median == pytest.approx(4.9) and torch_row.took_max == pytest.approx(8.8)
    assert rows["exit"].slowest_rank == 0  # a tie: the lowest rank
    assert rows["spawned"].took_median is None
    text = table.render(found)
    assert re.search(r"^torch_imported\s+3/3\s+5\.000s\s+9\.000s\s+2\s+b\s+4\.900s\s+8\.800s$", text, re.M), text
    assert "rank 1 (a) exited 1, rank 2 (b) exited 2" in text
    assert "3 ranks on 2 hosts" in text


# ---- the page ------------------------------------------------------------------------------------------------------

EXTERNAL = re.compile(
    r"(?i)(?:https?|ftp|wss?|file|data|javascript):|//[\w.-]+\.[a-z]|\bsrc\s*=|\bhref\s*=|url\(|@import"
)


@pytest.mark.parametrize("ranks", [1, 4, 1024])
def test_page_is_self_contained_one_bar_per_rank_and_small(ranks: int) -> None:
    found = timeline.build(parse_lines(line for lines in synth.job(ranks).values() for line in lines))
    assert found is not None
    html = page.render(found, "/some/logs")
    assert not EXTERNAL.findall(html)
    assert html.count('<g class="bar') == ranks
    assert re.findall(r'data-rank="(\d+)"', html) == [str(r) for r in range(ranks)]
    assert len(html) < 700_000, len(html)  # 1024 ranks: about 0.5 MB
    height = int(re.search(r'<svg id="timeline" width="\d+" height="(\d+)"', html).group(1))  # type: ignore[union-attr]
    assert height <= 2 * max(ranks, 360) + 4  # rows shrink to 2 px, then the chart scrolls
    assert html.count("<script") == 2 and html.count("</script>") == 2


def test_page_escapes_hosts() -> None:
    lines = [synth.record("spawned", 1.0, 0, "</script><b>x"), synth.record("exit", 2.0, 0, "</script><b>x", code=0)]
    found = timeline.build(parse_lines(lines))
    assert found is not None
    html = page.render(found)
    assert "<b>x" not in html and html.count("</script>") == 2


# ---- the CLI -------------------------------------------------------------------------------------------------------


@pytest.mark.launch
def test_report_prints_the_table_and_writes_the_page(tmp_path: Path) -> None:
    synth.write(tmp_path, synth.job(16))
    proc = run_cli(["--report", str(tmp_path)], env=CLEAN)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("launch timeline of run run1, attempt 0 (1 attempt): 16 ranks on 2 hosts")
    assert [line.split()[0] for line in lines[3:10]] == list(PHASES)
    assert all(line.split()[1] == "16/16" for line in lines[3:10])
    assert lines[-1] == f"timeline: {tmp_path / 'timeline.html'}"
    assert (tmp_path / "timeline.html").read_text().count('<g class="bar') == 16


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p / "missing", "no such directory"),
        (lambda p: (p / "f").write_text("x") and p / "f", "not a directory"),
        (lambda p: p, "no launch timeline in it"),
        (
            lambda p: synth.write(p, {"rank0.jsonl": ["garbage", '{"event": "phase"}', "\x00\xff"]}),
            "no launch timeline",
        ),
    ],
)
def test_report_bad_log_dir_exits_2_with_one_line(tmp_path: Path, make: object, message: str) -> None:
    log_dir = make(tmp_path)  # type: ignore[operator]
    code, err = cli_error(["--report", str(log_dir)], env=CLEAN)
    assert code == 2, err
    assert message in err
    assert "Error: Invalid value for '--report'" in err


def test_report_is_not_read_from_the_environment(tmp_path: Path) -> None:
    out = dry_run_output(["x.py"], env={**CLEAN, "DSLAUNCH_REPORT": str(tmp_path / "missing")})
    assert out.startswith("dslaunch plan (dry run, nothing started)"), out
