"""Remote options: how node agents reach other hosts (ssh/pdsh), what environment they take, preflight."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import click

from dslaunch.cli.draft import PlanDraft
from dslaunch.cli.files import read_option_file
from dslaunch.masking import is_secret_name

PARAMS: list[click.Parameter] = [
    click.Option(
        ["--fanout"],
        type=click.IntRange(min=1),
        default=32,
        show_default=True,
        metavar="N",
        help="ssh: at most N connections opened at once (pdsh always runs every node at once).",
    ),
    click.Option(
        ["--remote-python"],
        metavar="PATH",
        help="Python on the remote nodes [default: this launcher's interpreter, same path].",
    ),
    click.Option(["--remote-cwd"], metavar="DIR", help="Working directory on the remote nodes [default: this one]."),
    click.Option(
        ["--venv-script", "venv_script"],
        metavar="PATH",
        help="Source this file on each node before starting (e.g. a venv's bin/activate).",
    ),
    click.Option(
        ["--ssh-config"],
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="ssh client config for both runners [default: ~/.ssh/config].",
    ),
    click.Option(
        ["--ssh-port", "ssh_port"],
        type=click.IntRange(1, 65535),
        metavar="PORT",
        help="ssh port, overriding the ssh config.",
    ),
    click.Option(
        ["--ssh-accept-new-hosts"],
        is_flag=True,
        help="Trust and record host keys not yet in known_hosts (changed keys are always refused).",
    ),
    click.Option(
        ["--ssh-connect-timeout"],
        type=click.FloatRange(min=0.1),
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        help="Give up on a host that does not answer ssh within this time.",
    ),
    click.Option(
        ["--export", "exports"],
        multiple=True,
        metavar="NAME[=VALUE]",
        help="Send this variable to every rank on every node (repeatable); NAME alone sends its current value.",
    ),
    click.Option(
        ["--env-file", "env_files"],
        multiple=True,
        type=click.Path(dir_okay=False),
        metavar="PATH",
        help="NAME=VALUE lines for every rank (repeatable) "
        "[also read: ~/.deepspeed_env, ./.deepspeed_env, $DS_ENV_FILE].",
    ),
    click.Option(
        ["--node-rank"],
        type=click.IntRange(min=0),
        metavar="N",
        help="Manual multi-node mode: start only node N's ranks here, no ssh (needs a fixed --master-port).",
    ),
    click.Option(
        ["--preflight"],
        is_flag=True,
        help="Check every host (reachable, Python, dslaunch, torch, GPUs vs slots, master port) and exit; "
        "SCRIPT is optional.",
    ),
]


def is_remote(draft: PlanDraft) -> bool:
    from dslaunch.cli.core_options import LOCAL_NAMES

    return draft.launcher in ("ssh", "pdsh") or any(n.host not in LOCAL_NAMES for n in draft.nodes)


def _read_env_file(path: str, explicit: bool) -> dict[str, str]:
    from dslaunch.remote import envs  # keep --help and local launches lean

    text = read_option_file(path, "env file", "'--env-file'", required=explicit)
    if text is None:
        return {}
    try:
        return envs.parse_env_file(text, path)
    except envs.EnvError as exc:
        raise click.BadParameter(
            f"{exc} (lines are NAME=VALUE, '#' comments, optional quotes)", param_hint="'--env-file'"
        ) from None


def _exports(values: dict[str, Any], draft: PlanDraft, remote: bool) -> None:
    from dslaunch.remote import envs

    environ = dict(os.environ)
    implicit: dict[str, str] = {}
    if remote:
        implicit.update(envs.prefixed_exports(environ))
        for path in envs.env_file_paths(environ, os.path.expanduser("~"), os.getcwd()):
            implicit.update(_read_env_file(path, explicit=False))
    explicit: dict[str, str] = {}
    for path in values.get("env_files") or ():
        explicit.update(_read_env_file(os.path.abspath(path), explicit=True))
    for spec in values.get("exports") or ():
        try:
            item = envs.parse_export(spec, environ)
        except envs.EnvError as exc:
            raise click.BadParameter(str(exc), param_hint="'--export'") from None
        explicit[item.name] = item.value
    for name, value in implicit.items():
        draft.env.setdefault(name, value)
    draft.env.update(explicit)
    for name, value in {**implicit, **explicit}.items():
        if is_secret_name(name) and value:
            draft.secrets.add(value)


def _check_hosts(draft: PlanDraft) -> None:
    from dslaunch.remote.sshconfig import valid_host

    bad = [n.host for n in draft.nodes if not valid_host(n.host)]
    if bad:
        raise click.UsageError(
            f"host name {bad[0]!r} is not valid for a remote launch: use a host name, an IP address "
            "or user@host (letters, digits, '.', '-', '_'; not starting with '-')"
        )


def _ssh_config(values: dict[str, Any]) -> str | None:
    from dslaunch.remote.sshconfig import default_config_path

    path: str | None = values.get("ssh_config")
    if path is None:
        return default_config_path()
    if not os.path.exists(path) or os.path.isdir(path):  # /dev/null is a valid "no config", as for ssh -F
        raise click.BadParameter(f"ssh config {path!r} does not exist or is a directory", param_hint="'--ssh-config'")
    return os.path.abspath(path)


def _manual_node(values: dict[str, Any], draft: PlanDraft) -> None:
    node_rank = values["node_rank"]
    if node_rank >= len(draft.nodes):
        raise click.BadParameter(
            f"{node_rank} is not a node of this plan: valid node ranks are 0..{len(draft.nodes) - 1}",
            param_hint="'--node-rank'",
        )
    if draft.master_port == 0:
        raise click.BadParameter(
            "every node must agree on the port: give a fixed --master-port with --node-rank",
            param_hint="'--master-port'",
        )
    draft.launcher = "node"
    draft.runner_options["node_rank"] = node_rank


def contribute(values: dict[str, Any], draft: PlanDraft) -> None:
    remote = is_remote(draft)
    config = None
    if remote:
        _check_hosts(draft)
        config = _ssh_config(values)
        if not values.get("master_addr") and values.get("node_rank") is None:
            from dslaunch.remote.sshconfig import resolve_address

            draft.master_addr = resolve_address(draft.nodes[0].host, config)
    assert draft.program is not None
    if values.get("remote_python"):
        draft.program = dataclasses.replace(draft.program, python=values["remote_python"])
    if values.get("remote_cwd"):
        draft.cwd = values["remote_cwd"]
    _exports(values, draft, remote)
    from dslaunch.remote.command import RemoteSettings

    settings = RemoteSettings(
        fanout=values["fanout"],
        venv_script=values.get("venv_script"),
        ssh_config=config,
        ssh_port=values.get("ssh_port"),
        accept_new_hosts=bool(values.get("ssh_accept_new_hosts")),
        connect_timeout=values["ssh_connect_timeout"],
    )
    draft.runner_options["remote"] = dataclasses.asdict(settings)
    if values.get("node_rank") is not None:
        _manual_node(values, draft)
    if values.get("preflight"):
        _preflight(draft)


def _preflight(draft: PlanDraft) -> None:
    """Check every host of the plan (SCRIPT optional) and exit 0 if all are usable, else 1."""
    from dslaunch.cli.command import choose_launcher
    from dslaunch.runners.preflight import run_preflight

    if draft.program is not None and draft.program.target is None:
        draft.program = dataclasses.replace(draft.program, target="-")
    draft.launcher = choose_launcher(draft)
    code, report = run_preflight(draft.freeze())
    click.echo(report)
    click.get_current_context().exit(code)
