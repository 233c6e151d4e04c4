"""The --config key table: which keys dslaunch reads, which it passes through for DeepSpeed, the one
warning for any other key, steps_per_print reaching the timers, and the migration guide in step."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dslaunch.bootstrap import timers
from dslaunch.inputs import config as C
from tests.plans import decision_of

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "migration.md"


@pytest.mark.parametrize(
    ("key", "kind"),
    [
        ("log_level", "dslaunch"),
        ("wall_clock_breakdown", "dslaunch"),
        ("steps_per_print", "dslaunch"),
        ("comms_logger", "dslaunch"),
        ("mesh", "dslaunch"),
        ("mesh_param", "dslaunch"),
        ("data_parallel_size", "dslaunch"),
        ("sequence_parallel_size", "dslaunch"),
        ("tensor_parallel", "dslaunch"),
        ("train_batch_size", "deepspeed"),
        ("train_micro_batch_size_per_gpu", "deepspeed"),
        ("gradient_accumulation_steps", "deepspeed"),
        ("optimizer", "deepspeed"),
        ("scheduler", "deepspeed"),
        ("fp16", "deepspeed"),
        ("bf16", "deepspeed"),
        ("zero_optimization", "deepspeed"),
        ("gradient_clipping", "deepspeed"),
        ("flops_profiler", "deepspeed"),
        ("activation_checkpointing", "deepspeed"),
        ("tensorboard", "deepspeed"),
        ("wandb", "deepspeed"),
        ("mesh_parm", "unknown"),
        ("Train_Batch_Size", "unknown"),  # keys are case-sensitive, as in DeepSpeed
        ("", "unknown"),
    ],
)
def test_classify(key: str, kind: str) -> None:
    assert C.classify(key) == kind


def test_the_two_tables_do_not_overlap() -> None:
    assert not set(C.DSLAUNCH_KEYS) & C.DEEPSPEED_KEYS


def test_warnings_name_each_unknown_key_once_with_the_closest_known_key() -> None:
    config = {
        "train_batch_size": 8,
        "mesh_parm": [2, 2],
        "steps_per_print": 10,
        "zero_optimisation": {"stage": 2},
        "my_own_thing": 1,
    }
    assert C.unknown_key_warnings(config) == [
        "dslaunch: warning: config key 'mesh_parm' is not known; did you mean 'mesh_param'?",
        "dslaunch: warning: config key 'zero_optimisation' is not known; did you mean 'zero_optimization'?",
        "dslaunch: warning: config key 'my_own_thing' is not known to dslaunch or DeepSpeed; it is ignored",
    ]
    assert C.unknown_key_warnings({k: 1 for k in (*C.DSLAUNCH_KEYS, *C.DEEPSPEED_KEYS)}) == []


@pytest.mark.parametrize(("value", "every"), [(None, None), (1, 1), (10, 10)])
def test_steps_per_print_values(value: object, every: int | None) -> None:
    assert C.steps_per_print({} if value is None else {"steps_per_print": value}) == every


@pytest.mark.parametrize("value", [0, -3, 2.5, "10", True, [10]])
def test_bad_steps_per_print_is_a_config_error(value: object) -> None:
    with pytest.raises(C.ConfigError, match="steps_per_print must be a positive whole number"):
        C.steps_per_print({"steps_per_print": value})


# ---- the launcher warns, once, and only for unknown keys ----------------------------------------


def _dry_run(tmp_path: Path, data: dict[str, object], capsys: pytest.CaptureFixture[str]) -> str:
    """What the launcher writes to stderr while it decides the plan of a dry run with this config."""
    cfg = tmp_path / "ds_config.json"
    cfg.write_text(json.dumps(data))
    capsys.readouterr()
    decision_of(
        ["--dry-run", "--config", str(cfg), "--nproc-per-node", "2", "script.py"],
        env={"CUDA_VISIBLE_DEVICES": "", "DSLAUNCH_LOG_LEVEL": ""},
    )
    return capsys.readouterr().err


def test_cli_warns_once_for_an_unknown_key(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = _dry_run(tmp_path, {"train_batch_size": 8, "mesh_parm": [1, 2], "zero_optimization": {"stage": 2}}, capsys)
    assert err.count("config key") == 1, err
    assert "dslaunch: warning: config key 'mesh_parm' is not known; did you mean 'mesh_param'?" in err


def test_cli_is_quiet_about_deepspeed_and_dslaunch_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ds = {key: {} for key in C.DEEPSPEED_KEYS}
    err = _dry_run(tmp_path, {**ds, "train_batch_size": 8, "steps_per_print": 5, "log_level": "warning"}, capsys)
    assert "config key" not in err, err


# ---- steps_per_print drives how often the timers channel reports ---------------------------------


@pytest.mark.parametrize(
    ("env", "every"),
    [
        ({}, 1),
        ({"DSLAUNCH_STEPS_PER_PRINT": "10"}, 10),
        ({"DSLAUNCH_STEPS_PER_PRINT": " 3 "}, 3),
        ({"DSLAUNCH_STEPS_PER_PRINT": "0"}, 1),  # set by hand: the launcher would have refused it
        ({"DSLAUNCH_STEPS_PER_PRINT": "x"}, 1),
    ],
)
def test_steps_per_print_from_env(env: dict[str, str], every: int) -> None:
    assert timers.steps_per_print_from_env(env) == every


@pytest.mark.parametrize(
    ("step", "every", "reported"),
    [(1, 1, True), (7, 1, True), (1, 3, False), (2, 3, False), (3, 3, True), (6, 3, True), (0, 3, True)],
)
def test_reports_at(step: int, every: int, reported: bool) -> None:
    assert timers.reports_at(step, every) is reported


def _run_steps(t: timers.Timers, steps: list[int | None], monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    seen: list[int | None] = []
    monkeypatch.setattr(timers.logs, "timers_report", lambda step, data: seen.append(step))
    for step in steps:
        with t("forward"):
            pass
        assert set(t.step(step)) == {"forward"}  # every step still returns its breakdown
    return seen


def test_timers_report_every_n_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _run_steps(timers.Timers(enabled=True, steps_per_print=3), [None] * 7, monkeypatch) == [3, 6]
    assert _run_steps(timers.Timers(enabled=True, steps_per_print=10), [5, 10, 15, 20], monkeypatch) == [10, 20]
    assert _run_steps(timers.Timers(enabled=False, steps_per_print=1), [None] * 3, monkeypatch) == []


def test_timers_default_reports_every_step_and_reads_the_launchers_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DSLAUNCH_STEPS_PER_PRINT", raising=False)
    assert _run_steps(timers.Timers(enabled=True), [None] * 3, monkeypatch) == [1, 2, 3]
    monkeypatch.setenv("DSLAUNCH_STEPS_PER_PRINT", "2")
    assert _run_steps(timers.Timers(enabled=True), [None] * 4, monkeypatch) == [2, 4]


# ---- docs/migration.md lists the same keys as the code ------------------------------------------


def _section() -> str:
    return GUIDE.read_text().split("## ds_config keys", 1)[1].split("\n## ", 1)[0]


def test_migration_guide_table_lists_the_keys_dslaunch_reads() -> None:
    rows = [line for line in _section().splitlines() if line.startswith("| `")]
    documented = [re.fullmatch(r"\| `([a-z_]+)` \|.*", row).group(1) for row in rows]  # type: ignore[union-attr]
    assert sorted(documented) == sorted(C.DSLAUNCH_KEYS)
    assert len(documented) == len(set(documented))


def test_migration_guide_lists_the_deepspeed_keys_passed_through() -> None:
    paragraph = _section().split("passed through quietly:", 1)[1].split("\n\n", 1)[0]
    assert set(re.findall(r"`([a-z0-9_]+)`", paragraph)) == C.DEEPSPEED_KEYS
