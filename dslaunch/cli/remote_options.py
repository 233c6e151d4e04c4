"""Remote options: how node agents reach other hosts (ssh/pdsh), what environment they take, preflight."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import click

from dslaunch.cli.help_sections import DIAGNOSTICS, HOSTS, JOB, PODS, RESTARTS, Option
from dslaunch.cli.types import Seconds, Whole, pet
from dslaunch.errors import DslaunchError
from dslaunch.limits import MAX_WORLD_SIZE

if TYPE_CHECKING:  # imported where used: --help only needs PARAMS
    from dslaunch.plan import RemoteSettings

PARAMS: list[click.Parameter] = [
    Option(
        ["--fanout"],
        section=HOSTS,
        type=Whole(1, 100_000),
        default=32,
        show_default=True,
        metavar="N",
        help="ssh: at most N connections opened at once (pdsh always runs every node at once).",
    ),
    Option(
        ["--remote-python"],
        section=HOSTS,
        metavar="PATH",
        help="Python on the remote nodes [default: this launcher's interpreter, same path].",
    ),
    Option(
        ["--remote-cwd"],
        section=HOSTS,
        metavar="DIR",
        help="Working directory on the remote nodes [default: this one].",
    ),
    Option(
        ["--venv-script", "venv_script"],
        section=HOSTS,
        metavar="PATH",
        help="Source this file on each node before starting (e.g. a venv's bin/activate).",
    ),
    Option(
        ["--ssh-config"],
        section=HOSTS,
        type=click.Path(dir_okay=False),
        metavar="FILE",
        help="ssh client config for both runners [default: ~/.ssh/config].",
    ),
    Option(
        ["--ssh-port", "ssh_port"],
        section=HOSTS,
        type=Whole(1, 65535),
        metavar="PORT",
        help="ssh port, overriding the ssh config.",
    ),
    Option(
        ["--ssh-accept-new-hosts"],
        section=HOSTS,
        is_flag=True,
        help="Trust and record host keys not yet in known_hosts (changed keys are always refused).",
    ),
    Option(
        ["--ssh-connect-timeout"],
        section=HOSTS,
        type=Seconds(0.1, 3600),
        default=10.0,
        show_default=True,
        metavar="SECONDS",
        help="Give up on a host that does not answer ssh within this time.",
    ),
    Option(
        ["--spare-check-interval", "spare_check"],
        section=RESTARTS,
        type=Seconds(1, 86400),
        default=30.0,
        show_default=True,
        metavar="SECONDS",
        help="ssh: how often each spare host, waiting with its agent, is checked as --preflight does; "
        "one that fails is dropped.",
    ),
    Option(
        ["--export", "exports"],
        section=JOB,
        multiple=True,
        metavar="NAME[=VALUE]",
        help="Send this variable to every rank on every node (repeatable); NAME alone sends its current value.",
    ),
    Option(
        ["--env-file", "env_files"],
        section=JOB,
        multiple=True,
        type=click.Path(dir_okay=False),
        metavar="PATH",
        help="NAME=VALUE lines for every rank (repeatable) "
        "[also read: ~/.deepspeed_env, ./.deepspeed_env, $DS_ENV_FILE].",
    ),
    Option(
        ["--node-rank"],
        section=PODS,
        envvar=pet("node_rank"),
        type=Whole(0, MAX_WORLD_SIZE),
        metavar="N",
        help="Manual multi-node mode: start only node N's ranks here, no ssh (needs a fixed --master-port).",
    ),
    Option(
        ["--preflight"],
        section=DIAGNOSTICS,
        is_flag=True,
        help="Check every host (reachable, Python, dslaunch, torch, GPUs vs slots, master port) and exit; "
        "SCRIPT is optional.",
    ),
]


@dataclass(frozen=True)
class RemoteChoices:
    fanout: int
    venv_script: str | None
    ssh_config: str | None  # --ssh-config as given; checked only when hosts are remote
    ssh_port: int | None
    accept_new_hosts: bool
    connect_timeout: float
    spare_check: float
    remote_python: str | None
    remote_cwd: str | None
    explicit_env: tuple[tuple[str, str], ...]  # --env-file lines, then --export, in order
    node_rank: int | None
    preflight: bool

    def settings(self, ssh_config: str | None) -> RemoteSettings:
        from dslaunch.plan import RemoteSettings

        return RemoteSettings(
            fanout=self.fanout,
            venv_script=self.venv_script,
            ssh_config=ssh_config,
            ssh_port=self.ssh_port,
            accept_new_hosts=self.accept_new_hosts,
            connect_timeout=self.connect_timeout,
            spare_check=self.spare_check,
        )


def parse(values: Mapping[str, Any], environ: Mapping[str, str]) -> RemoteChoices:
    explicit: list[tuple[str, str]] = []
    for path in values.get("env_files") or ():
        explicit += read_env_file(os.path.abspath(path), explicit=True).items()
    for spec in values.get("exports") or ():
        from dslaunch.cli import remote_envs  # only with --export: keeps local launches lean

        try:
            item = remote_envs.parse_export(spec, environ)
        except remote_envs.EnvError as exc:
            raise DslaunchError(exc.message, option="--export") from None
        explicit.append((item.name, item.value))
    return RemoteChoices(
        fanout=values["fanout"],
        venv_script=values.get("venv_script"),
        ssh_config=values.get("ssh_config"),
        ssh_port=values.get("ssh_port"),
        accept_new_hosts=bool(values.get("ssh_accept_new_hosts")),
        connect_timeout=values["ssh_connect_timeout"],
        spare_check=values.get("spare_check", 30.0),
        remote_python=values.get("remote_python"),
        remote_cwd=values.get("remote_cwd"),
        explicit_env=tuple(explicit),
        node_rank=values.get("node_rank"),
        preflight=bool(values.get("preflight")),
    )


def read_env_file(path: str, explicit: bool) -> dict[str, str]:
    from dslaunch.cli import remote_envs
    from dslaunch.cli.files import read_option_file

    text = read_option_file(path, "env file", "--env-file", required=explicit)
    if text is None:
        return {}
    try:
        return remote_envs.parse_env_file(text, path)
    except remote_envs.EnvError as exc:
        raise DslaunchError(
            f"{exc.message} (lines are NAME=VALUE, '#' comments, optional quotes)", option="--env-file"
        ) from None


def implicit_env(environ: Mapping[str, str]) -> dict[str, str]:
    """What a multi-node DeepSpeed job sends without being asked: DS-prefixed variables, .deepspeed_env files."""
    from dslaunch.cli import remote_envs

    found = remote_envs.prefixed_exports(environ)
    for path in remote_envs.env_file_paths(environ, os.path.expanduser("~"), os.getcwd()):
        found.update(read_env_file(path, explicit=False))
    return found


def check_hosts(hosts: Sequence[str]) -> None:
    from dslaunch.runners.remote.sshconfig import valid_host

    bad = [host for host in hosts if not valid_host(host)]
    if bad:
        raise DslaunchError(
            f"host name {bad[0]!r} is not valid for a remote launch: use a host name, an IP address "
            "or user@host (letters, digits, '.', '-', '_'; not starting with '-')"
        )


def ssh_config_path(given: str | None) -> str | None:
    """The ssh client config remote runners use: --ssh-config (checked), else the default one."""
    from dslaunch.runners.remote.sshconfig import default_config_path

    if given is None:
        return default_config_path()
    if not os.path.exists(given) or os.path.isdir(given):  # /dev/null is a valid "no config", as for ssh -F
        raise DslaunchError(f"ssh config {given!r} does not exist or is a directory", option="--ssh-config")
    if os.path.realpath(given) != os.devnull:  # read by the runners later: checked, not read, here
        from dslaunch.inputs import userfiles

        userfiles.check_readable(given, "ssh config", option="--ssh-config")
    return os.path.abspath(given)
