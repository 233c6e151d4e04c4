"""The CLI up to the frozen plan, in-process (no subprocess, nothing started), and one plan factory.

Each call builds a fresh click command and overlays ``env`` on ``os.environ`` (values of ``None`` remove a
name, as in click's ``CliRunner``) and changes to ``cwd`` only while it runs; nothing after the decision
(``command._act``: logging set-up, pid file, preflight, the launch) runs, so no state outlives the call.
A few tests per area still run the real ``dslaunch`` in a subprocess, so the two paths stay the same.
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, NoReturn
from unittest import mock

from click.testing import CliRunner, Result

from dslaunch.cli import command
from dslaunch.cli.decide import TRANSPORTS, Choices, Decision
from dslaunch.plan import LaunchPlan, NodePlan, Program
from dslaunch.runners import get_runner

Env = Mapping[str, str | None]


@contextmanager
def as_if(env: Env | None = None, cwd: str | os.PathLike[str] | None = None) -> Iterator[None]:
    """``os.environ`` with ``env`` laid over it, and ``cwd`` as the working directory, until the block ends."""
    saved = {name: os.environ.get(name) for name in env or {}}
    old_cwd = os.getcwd()
    try:
        for name, value in (env or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if cwd is not None:
            os.chdir(cwd)
        yield
    finally:
        os.chdir(old_cwd)
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _decided(args: Sequence[str], env: Env | None, cwd: str | os.PathLike[str] | None) -> tuple[Choices, Decision]:
    with as_if(env, cwd):
        cmd = command.build_command()
        with cmd.make_context("dslaunch", list(args)) as ctx, command.user_errors():
            choices = command.choices_of(dict(ctx.params), os.environ)
            return choices, command.decided(choices)


def decision_of(args: Sequence[str], env: Env | None = None, cwd: str | os.PathLike[str] | None = None) -> Decision:
    """What ``dslaunch ARGS`` decides: user errors propagate as click exceptions, warnings go to stderr."""
    return _decided(args, env, cwd)[1]


def plan_of(args: Sequence[str], env: Env | None = None, cwd: str | os.PathLike[str] | None = None) -> LaunchPlan:
    """The frozen plan ``dslaunch ARGS`` would run."""
    return decision_of(args, env, cwd).plan


def dry_run_output(args: Sequence[str], env: Env | None = None, cwd: str | os.PathLike[str] | None = None) -> str:
    """What ``dslaunch --dry-run ARGS`` prints on stdout (add ``--json`` to ARGS for the JSON form)."""
    choices, decision = _decided(["--dry-run", *args], env, cwd)
    plan = decision.plan
    with as_if(env, cwd):
        commands = get_runner(plan.launcher).describe(plan)
        runner = CliRunner()
        with runner.isolation() as streams:
            command._dry_run(plan, commands, decision.secrets, as_json=choices.core.json)
            return streams[0].getvalue().decode()


def dry_run_json(args: Sequence[str], env: Env | None = None, cwd: str | os.PathLike[str] | None = None) -> Any:
    """``dslaunch --dry-run --json ARGS``, parsed: the plan summary, the runner's commands, the masked env."""
    return json.loads(dry_run_output(["--json", *args], env, cwd))


def _refuse_to_act(choices: Choices, decision: Decision) -> NoReturn:
    raise AssertionError(f"the command line was accepted: it would start a {decision.plan.launcher} job")


def invoke(args: Sequence[str], env: Env | None = None, cwd: str | os.PathLike[str] | None = None) -> Result:
    """``dslaunch ARGS`` through click's CliRunner, stopped (an AssertionError) where it would act on a plan."""
    with as_if(None, cwd), mock.patch.object(command, "_act", _refuse_to_act):
        return CliRunner().invoke(command.build_command(), list(args), env=env, prog_name="dslaunch")


def cli_error(
    args: Sequence[str], env: Env | None = None, cwd: str | os.PathLike[str] | None = None
) -> tuple[int, str]:
    """The exit code and stderr of ``dslaunch ARGS`` refused before anything starts; no exception escaped."""
    result = invoke(args, env, cwd)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(
            f"dslaunch {shlex.join(args)} did not end with a usage error: {result.exception!r}"
        ) from result.exception
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, result.stderr


def comparable(plan: LaunchPlan) -> dict[str, Any]:
    """Everything in the plan but the random run id."""
    data = json.loads(plan.to_json())
    data.pop("run_id")
    return data


def nodes_of(hosts: Sequence[str], slots: Sequence[str] = ("0",)) -> tuple[NodePlan, ...]:
    """One node per host, each with ``slots``, ranks numbered in host order."""
    per = len(slots)
    return tuple(NodePlan(h, i, tuple(slots), tuple(range(i * per, (i + 1) * per))) for i, h in enumerate(hosts))


def make_plan(
    *,
    hosts: Sequence[str] = ("h0",),
    slots: Sequence[str] = ("0",),
    target: str = "t.py",
    args: Sequence[str] = (),
    python: str = "python3",
    **overrides: Any,
) -> LaunchPlan:
    """A plan as a runner gets it: ssh, run r1, one rank per host on slot 0, rendezvous on the first host:29500.

    ``hosts``/``slots`` build ``nodes`` and ``target``/``args``/``python`` the program, unless ``nodes`` or
    ``program`` are given; ``transport`` is the launcher's, as the CLI decides it; every other field of
    :class:`LaunchPlan` can be overridden by name."""
    nodes = overrides.pop("nodes", None) or nodes_of(hosts, slots)
    fields: dict[str, Any] = {
        "launcher": "ssh",
        "run_id": "r1",
        "nodes": nodes,
        "master_addr": nodes[0].host,
        "master_port": 29500,
        "program": Program(target, tuple(args), python=python),
    }
    launcher = overrides.get("launcher", fields["launcher"])
    return LaunchPlan(**{**fields, "transport": TRANSPORTS[launcher], **overrides})


def with_launcher(plan: LaunchPlan, launcher: str) -> LaunchPlan:
    """``plan`` as the CLI would have decided it for ``launcher``: its name and its transport's facts."""
    return replace(plan, launcher=launcher, transport=TRANSPORTS[launcher])
