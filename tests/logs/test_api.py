"""The logger API in-process: levels per module, bind children, runtime changes, rendering."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Iterator

import pytest

from dslaunch import logs, mesh
from dslaunch.logs import _core


@pytest.fixture(autouse=True)
def reset() -> Iterator[None]:
    yield
    _core.configure("warning", role="process")


def test_module_levels_bind_and_runtime_changes(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("warning,user=info,comm.ops=debug", role="process", facts={"host": "h"})
    eng, comm, ops = logs.get_logger("user"), logs.get_logger("comm"), logs.get_logger("comm.ops")
    child = eng.bind(step=4)
    child.info("a")
    comm.info("hidden-comm")
    ops.debug("ops-debug")
    logs.set_levels("user=error")
    child.warning("hidden-user")
    eng.error("user-error %d", 5)
    logs.set_levels("off")  # the default only: explicitly set modules keep theirs
    logs.get_logger("mesh").critical("hidden-mesh")
    err = capsys.readouterr().err
    assert " I [h:process] user: a step=4" in err
    assert "ops-debug" in err and "user-error 5" in err
    assert "hidden" not in err
    assert child.is_enabled_for(logs.ERROR) and not child.isEnabledFor(logs.WARNING)


def test_off_silences_even_critical(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("off", role="process")
    log = logs.get_logger("user")
    log.critical("x")
    log.exception("y")
    log.log(logs.CRITICAL, "z")
    assert capsys.readouterr().err == ""


def test_unknown_logger_names_are_rejected_with_a_hint() -> None:
    with pytest.raises(ValueError, match="did you mean 'user'"):
        logs.get_logger("usr")
    with pytest.raises(ValueError, match=r"user\.NAME"):
        logs.get_logger("mytrainer")
    assert logs.get_logger("user.trainer").name == "user.trainer"


def test_json_record_keeps_reserved_keys_and_renames_collisions(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure(
        "info",
        role="rank",
        fmt="json",
        ranks="all",
        facts={"rank": 2, "local_rank": 0, "node_rank": 1, "world_size": 4, "host": "n1", "run_id": "r"},
    )
    logs.get_logger("user").info("evt", rank=9, level="x", payload={"a": [1, 2]})
    rec = json.loads(capsys.readouterr().err)
    assert rec["rank"] == 2 and rec["_rank"] == 9 and rec["level"] == "info" and rec["_level"] == "x"
    assert rec["payload"] == {"a": [1, 2]} and rec["node_rank"] == 1


def test_rank_outside_the_filter_prints_warnings_only(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("debug", role="rank", ranks="0,2-3", facts={"rank": 1, "host": "h"})
    log = logs.get_logger("user")
    log.info("quiet")
    log.warning("loud")
    err = capsys.readouterr().err
    assert "loud" in err and "quiet" not in err
    logs.configure("debug", role="rank", ranks="0,2-3", facts={"rank": 3, "host": "h"})
    log.info("selected")
    assert "selected" in capsys.readouterr().err


def test_comm_record_takes_axis_and_dim_as_its_deprecated_alias(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(mesh, "_DIM_WARNED", set())  # as in a process that has not warned yet
    logs.configure("comm=debug", role="process")
    fields = {"op": "barrier", "group_size": 2, "dtype": "-", "nbytes": 0, "duration_s": 0.0}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        logs.comm_record(axis="tp", **fields)
        for _ in range(2):
            logs.comm_record(dim="dp", **fields)
    assert [(w.category, w.filename) for w in caught] == [(DeprecationWarning, __file__)]
    assert "dslaunch.logs.comm_record(dim=...) is deprecated, use axis='dp'" in str(caught[0].message)
    with pytest.raises(TypeError, match=r"comm_record\(\) got both axis='tp' and dim='dp'"):
        logs.comm_record(axis="tp", dim="dp", **fields)
    logs.flush_comm_summary()
    err = capsys.readouterr().err
    assert "op=barrier dim=tp group_size=2" in err  # the record's field keeps its name
    assert err.count("op=barrier dim=dp group_size=2") == 2


def test_comm_summary_counts_per_op(capsys: pytest.CaptureFixture[str]) -> None:
    logs.configure("comm=info", role="process")
    assert logs.comm_enabled()
    for _ in range(3):
        logs.comm_record(op="all_reduce", axis="dp", group_size=2, dtype="float32", nbytes=100, duration_s=0.001)
    logs.comm_record(op="broadcast", axis=None, group_size=4, dtype="int64", nbytes=8, duration_s=0.002)
    logs.flush_comm_summary()
    lines = capsys.readouterr().err.splitlines()
    assert not any("collective" in line for line in lines)  # per-call records are debug
    assert "op=all_reduce count=3 bytes=300 total_ms=3" in lines[0]
    assert "op=broadcast count=1 bytes=8 total_ms=2" in lines[1]
    logs.configure("warning", role="process")
    assert not logs.comm_enabled() and not logs.timers_enabled()


@pytest.mark.launch
@pytest.mark.parametrize(("rank", "shown"), [("0", True), ("1", False)])
def test_bad_log_ranks_outside_dslaunch_falls_back_to_rank_0(rank: str, shown: bool) -> None:
    # A rank from torchrun, srun or plain python reads DSLAUNCH_LOG_RANKS unchecked by the CLI.
    code = "import dslaunch; dslaunch.get_logger('user').info('hello-info'); print('done')"
    env = {"PATH": "/usr/bin:/bin", "RANK": rank, "DSLAUNCH_LOG_LEVEL": "info", "DSLAUNCH_LOG_RANKS": "garbage"}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert proc.returncode == 0 and proc.stdout.strip() == "done", proc.stderr
    assert "ignoring DSLAUNCH_LOG_RANKS" in proc.stderr and "Traceback" not in proc.stderr
    assert ("hello-info" in proc.stderr) == shown


def test_a_user_field_named_like_a_fact_prints_under_its_own_name() -> None:
    """Under dslaunch and torchrun the record knows its rank: a user's rank=5 stays rank=5 on the console
    (kept as _rank beside the fact in the JSON record), and equal values are not repeated."""
    from dslaunch.logs import render

    static = {"rank": 0, "host": "h"}
    ed = {"ts": 0.0, "level": 30, "logger": "dslaunch.user", "event": "step", "rank": 0, "_rank": 5, "loss": 0.5}
    line = render.console_line(ed, False, "h:0", static)
    assert line.rstrip().endswith("user: step rank=5 loss=0.5")
