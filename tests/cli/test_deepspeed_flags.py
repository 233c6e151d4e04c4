"""DeepSpeed 0.19.8 spellings: the frozen list, one warning per flag, and clear refusals."""

from __future__ import annotations

import os

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dslaunch.cli import deepspeed_flags
from tests.plans import comparable, plan_of

# Every `deepspeed` 0.19.8 launcher flag (deepspeed-launcher.md §1.5.1) plus the removed elastic ones.
# Changing this list is a compatibility decision: update the migration guide with it.
FROZEN_SPELLINGS = (
    "--autotuning",
    "--bind_core_list",
    "--bind_cores_to_rank",
    "--elastic_training",
    "--enable_each_rank_log",
    "--exclude",
    "--force_multi",
    "--hostfile",
    "--include",
    "--launcher",
    "--launcher_args",
    "--log_level",
    "--master_addr",
    "--master_port",
    "--max_elastic_nodes",
    "--min_elastic_nodes",
    "--module",
    "--no_local_rank",
    "--no_python",
    "--no_ssh",
    "--no_ssh_check",
    "--node_rank",
    "--num_accelerators",
    "--num_gpus",
    "--num_nodes",
    "--quiet",
    "--save_pid",
    "--ssh_port",
    "--venv_script",
    "-H",
    "-e",
    "-i",
    "-q",
)

# One command-line use of each flag that warns, and what the same job looks like in v1 spelling.
WARNED_USES: dict[str, tuple[list[str], list[str]]] = {
    "ds_num_nodes": (["--num_nodes", "1"], ["--num-nodes", "1"]),
    "ds_num_gpus": (["--num_gpus", "2"], ["--nproc-per-node", "2"]),
    "ds_num_accelerators": (["--num_accelerators=2"], ["--nproc-per-node", "2"]),
    "ds_master_addr": (["--master_addr", "10.1.2.3"], ["--master-addr", "10.1.2.3"]),
    "ds_master_port": (["--master_port=29600"], ["--master-port", "29600"]),
    "ds_node_rank": (["--node_rank", "0"], ["--node-rank", "0"]),
    "ds_launcher_args": (["--launcher_args", "--mca btl ^openib"], ["--launcher-args", "--mca btl ^openib"]),
    "ds_no_python": (["--no_python"], ["--no-python"]),
    "ds_ssh_port": (["--ssh_port", "2222"], ["--ssh-port", "2222"]),
    "ds_venv_script": (["--venv_script", "/opt/venv/bin/activate"], ["--venv-script", "/opt/venv/bin/activate"]),
    "ds_no_local_rank": (["--no_local_rank"], []),
    "ds_no_ssh": (["--no_ssh", "--node_rank", "0"], ["--node-rank", "0"]),
    "ds_no_ssh_check": (["--no_ssh_check"], []),
    "ds_force_multi": (["--force_multi", "--launcher", "local"], ["--force-multi", "--launcher", "local"]),
    "ds_save_pid": (["--save_pid"], []),  # dry run: nothing written
    "ds_enable_each_rank_log": (["--enable_each_rank_log", "/tmp/ds-logs"], ["--log-dir", "/tmp/ds-logs"]),
    "ds_bind_cores_to_rank": (["--bind_cores_to_rank"], ["--bind-cores-to-rank"]),
    "ds_bind_core_list": (
        ["--bind_cores_to_rank", "--bind_core_list", "0-1"],
        ["--bind-cores-to-rank", "--bind-core-list", "0-1"],
    ),
    "ds_log_level": (["--log_level", "info"], ["--log-level", "info"]),
    "ds_quiet": (["-q"], ["--log-level", "error"]),
    "ds_elastic_training": (["--elastic_training"], []),
    "ds_min_elastic_nodes": (["--min_elastic_nodes", "1"], []),
    "ds_max_elastic_nodes": (["--max_elastic_nodes", "2"], []),
}

BASE = ["--dry-run", "--run-id", "compat", "--launcher", "local"]
ENV = {"CUDA_VISIBLE_DEVICES": "0,1"}


@pytest.fixture(autouse=True)
def _two_local_slots(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)


def _has_option(dest: str) -> bool:
    from dslaunch.cli import command

    return any(p.name == dest for p in command.build_command().params)


def test_accepted_spellings_are_frozen() -> None:
    assert deepspeed_flags.ACCEPTED == tuple(sorted(FROZEN_SPELLINGS))


def test_every_accepted_spelling_is_an_option_of_the_command() -> None:
    from dslaunch.cli import command

    names = {opt for p in command.build_command().params for opt in getattr(p, "opts", ())}
    names |= {opt for p in command.build_command().params for opt in getattr(p, "secondary_opts", ())}
    assert set(FROZEN_SPELLINGS) <= names, set(FROZEN_SPELLINGS) - names


def test_every_table_entry_has_a_warned_use() -> None:
    warned = {f.dest for f in deepspeed_flags.TABLE if not f.reject and not f.external}
    assert warned == set(WARNED_USES)


@pytest.mark.parametrize("dest", sorted(WARNED_USES))
def test_flag_warns_exactly_once_and_maps_to_v1(dest: str, capsys: pytest.CaptureFixture[str]) -> None:
    flag = next(f for f in deepspeed_flags.TABLE if f.dest == dest)
    ds_args, v1_args = WARNED_USES[dest]
    if flag.target and flag.target not in ("local_rank_arg",) and not _has_option(flag.target):
        pytest.skip(f"the v1 option for {flag.names[0]} ({flag.v1}) has not landed")
    if "ds_no_ssh" == dest and not _has_option("node_rank"):
        pytest.skip("--node-rank has not landed")
    ds_plan = plan_of([*BASE, *ds_args, *(ds_args if flag.is_flag else []), "train.py", "--x", "1"])
    err = capsys.readouterr().err
    assert err.count(deepspeed_flags.message(flag)) == 1, err
    assert err.count("dslaunch: warning:") == (
        2 if dest in ("ds_bind_core_list", "ds_no_ssh", "ds_launcher_args") else 1
    ), err
    v1_plan = plan_of([*BASE, *v1_args, "train.py", "--x", "1"])
    assert "DeepSpeed" not in capsys.readouterr().err
    assert comparable(ds_plan) == comparable(v1_plan)


def _shortest_unique_prefix(full: str) -> str:
    others = [n for n in FROZEN_SPELLINGS if n.startswith("--") and n != full]
    for size in range(5, len(full)):  # "--" plus at least 3 letters, as the normaliser asks
        if not any(o.startswith(full[:size]) for o in others):
            return full[:size]
    return full


@pytest.mark.parametrize("dest", sorted(WARNED_USES))
def test_unambiguous_prefixes_work_as_under_deepspeeds_argparse(dest: str) -> None:
    """DeepSpeed's parser took any unambiguous prefix (its own tests spell --launcher_arg): so does dslaunch."""
    ds_args, _ = WARNED_USES[dest]
    full, eq, value = ds_args[0].partition("=")
    if not full.startswith("--") or _shortest_unique_prefix(full) == full:
        pytest.skip(f"{full} has no shorter unambiguous prefix")
    short = [_shortest_unique_prefix(full) + eq + value, *ds_args[1:]]
    flag = next(f for f in deepspeed_flags.TABLE if f.dest == dest)
    tail = ["train.py", "--x", "1"]
    assert comparable(plan_of([*BASE, *short, *(short if flag.is_flag else []), *tail])) == comparable(
        plan_of([*BASE, *ds_args, *(ds_args if flag.is_flag else []), *tail])
    )


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--num_", "2"], "ambiguous option --num_: it could be --num_accelerators, --num_gpus, --num_nodes"),
        (["--mas", "x"], "ambiguous option --mas"),
    ],
)
def test_ambiguous_prefixes_are_refused_naming_the_candidates(args: list[str], needle: str) -> None:
    with pytest.raises(click.UsageError, match=needle):
        plan_of([*BASE, *args, "train.py"])


def test_v1_options_and_script_arguments_are_never_expanded() -> None:
    plan = plan_of([*BASE, "train.py", "--num_g", "4", "--launcher_arg"])
    assert plan.program.args == ("--num_g", "4", "--launcher_arg")  # after SCRIPT: the script's own
    with pytest.raises(click.UsageError, match="No such option"):
        plan_of([*BASE, "--nproc", "2", "train.py"])  # a v1 option is spelled out in full


def test_warning_names_the_v1_spelling() -> None:
    flag = next(f for f in deepspeed_flags.TABLE if f.dest == "ds_num_gpus")
    assert deepspeed_flags.message(flag).startswith("warning: --num_gpus is DeepSpeed's spelling; use --nproc-per-node")
    elastic = next(f for f in deepspeed_flags.TABLE if f.dest == "ds_elastic_training")
    assert "ignored" in deepspeed_flags.message(elastic) and "elastic" in deepspeed_flags.message(elastic)


def test_minus_one_means_default(capsys: pytest.CaptureFixture[str]) -> None:
    plan = plan_of([*BASE, "--num_gpus", "-1", "--num_nodes", "-1", "--node_rank", "-1", "train.py"])
    assert comparable(plan) == comparable(plan_of([*BASE, "train.py"]))
    assert capsys.readouterr().err.count("warning:") == 3


def test_enable_each_rank_log_none_string_means_off() -> None:
    plan = plan_of([*BASE, "--enable_each_rank_log", "None", "train.py"])
    assert plan.log_dir is None


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--autotuning", "tune"], "--autotuning is not supported by dslaunch"),
        (["--num_gpus", "1", "--nproc-per-node", "2"], "--num_gpus and --nproc-per-node disagree"),
        (["--num_gpus", "1", "--num_accelerators", "2"], "--num_gpus and --num_accelerators disagree"),
        (["--no_local_rank", "--local-rank-arg"], "--no_local_rank and --local-rank-arg disagree"),
        (["--save_pid", "--save-pid", "/tmp/other.pid"], "--save_pid and --save-pid disagree"),
        (["--no_ssh"], "--no_ssh needs --node_rank N"),
        (["--master_port", "70000"], "70000"),
        (["--bind_cores_to_rank", "--bind_core_list", "3-1"], "runs backwards"),
        (["--bind_core_list", "0-3"], "--bind-core-list needs --bind-cores-to-rank"),
    ],
)
def test_bad_compat_use_is_a_usage_error(args: list[str], needle: str) -> None:
    with pytest.raises(click.ClickException) as info:
        plan_of([*BASE, *args, "train.py"])
    assert info.value.exit_code == 2
    assert needle in info.value.format_message()


def test_same_value_under_both_spellings_is_fine() -> None:
    plan = plan_of([*BASE, "--num_gpus", "2", "--nproc-per-node", "2", "train.py"])
    assert plan.world_size == 2


def test_dslaunch_parses_no_ds_flag_after_the_script() -> None:
    plan = plan_of([*BASE, "train.py", "--num_gpus", "4", "--local_rank=0"])
    assert plan.program.args == ("--num_gpus", "4", "--local_rank=0")
    assert plan.world_size == 2


def test_save_pid_points_at_deepspeeds_file_name() -> None:
    flag = next(f for f in deepspeed_flags.TABLE if f.dest == "ds_save_pid")
    assert flag.convert(True) == f"/tmp/{os.getpid()}.deepspeed"


def test_migration_guide_lists_every_accepted_spelling() -> None:
    from pathlib import Path

    guide = (Path(__file__).resolve().parents[2] / "docs" / "migration.md").read_text()
    table = guide.split("## Flags", 1)[1].split("###", 1)[0]
    missing = [
        name
        for name in FROZEN_SPELLINGS
        if f"`{name}" not in table and f" {name}`" not in table and f"{name}`" not in table
    ]
    assert missing == []


VALUE_FLAGS = sorted(f.names[-1] for f in deepspeed_flags.TABLE if not f.is_flag and not f.external)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(VALUE_FLAGS), value=st.text(max_size=12), bind=st.booleans())
def test_any_value_gives_a_plan_or_a_clean_usage_error(flag: str, value: str, bind: bool) -> None:
    args = [*BASE, *(["--bind_cores_to_rank"] if bind else []), f"{flag}={value}", "train.py"]
    try:
        plan_of(args)
    except click.ClickException as exc:
        assert exc.exit_code == 2 and exc.format_message()
