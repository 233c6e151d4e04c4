"""pdsh's command line, environment and output labels, and its start (pure but for ``start_pdsh``)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Sequence

from dslaunch.errors import DslaunchError
from dslaunch.oslib import prctl
from dslaunch.plan import RemoteSettings
from dslaunch.runners.remote.base import KEEPALIVE_COUNT, keepalive_interval
from dslaunch.runners.remote.sshconfig import default_config_path


def ssh_args(settings: RemoteSettings) -> list[str]:
    """Options for every ssh client pdsh starts, after the user's own PDSH_SSH_ARGS_APPEND."""
    every = keepalive_interval(settings)
    args = ["-o", "BatchMode=yes", "-o", f"ServerAliveInterval={every}", "-o", f"ServerAliveCountMax={KEEPALIVE_COUNT}"]
    if settings.ssh_config and settings.ssh_config != default_config_path():
        args += ["-F", settings.ssh_config]
    if settings.ssh_port:
        args += ["-p", str(settings.ssh_port)]
    if settings.accept_new_hosts:
        args += ["-o", "StrictHostKeyChecking=accept-new"]
    return args


def pdsh_command(settings: RemoteSettings, hosts: Sequence[str], command: str, *, strict: bool = False) -> list[str]:
    """One pdsh over ssh running ``command`` (its ``%`` already escaped) on every host at once.

    ``strict`` (-S) makes pdsh exit with the largest remote status.
    """
    return [
        "pdsh",
        *(["-S"] if strict else []),
        "-R",
        "ssh",
        "-f",
        str(max(settings.fanout, len(hosts))),
        "-t",
        str(max(1, round(settings.connect_timeout))),
        "-w",
        ",".join(hosts),
        command,
    ]


def pdsh_env(settings: RemoteSettings, base: dict[str, str], mux: Sequence[str] = ()) -> dict[str, str]:
    """pdsh's environment: our ssh options (``mux``: a shared connection's) after the user's own."""
    env = dict(base)
    if any(c.isspace() for c in settings.ssh_config or ""):
        raise ValueError(f"pdsh cannot pass an ssh config path with spaces: {settings.ssh_config!r}")
    ours = [*ssh_args(settings), *mux]
    env["PDSH_SSH_ARGS_APPEND"] = " ".join(filter(None, [base.get("PDSH_SSH_ARGS_APPEND", ""), *ours]))
    env.pop("PDSH_SSH_ARGS", None)  # our own -F/-p/-o must not be replaced by a custom template
    return env


def pdsh_label(host: str) -> str:
    """The name pdsh puts before each line of ``host``: no user, and no domain unless it is an IPv4 address."""
    import ipaddress

    name = host.rpartition("@")[2]
    try:
        ipaddress.IPv4Address(name)
        return name
    except ValueError:
        return name.split(".", 1)[0]


def pdsh_labels(hosts: Sequence[str]) -> list[str]:
    """Each host's pdsh label; two hosts that pdsh would label alike cannot be told apart."""
    labels = [pdsh_label(h) for h in hosts]
    seen: dict[str, str] = {}
    for host, label in zip(hosts, labels):
        if label in seen:
            raise DslaunchError(
                f"pdsh labels the output of {seen[label]!r} and {host!r} alike ({label!r}), so it cannot tell "
                "them apart: use --launcher ssh, or host names that differ before the first '.'"
            )
        seen[label] = host
    return labels


def start_pdsh(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    prctl.load()  # before the fork: the child only makes the call
    return subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        preexec_fn=lambda: prctl.set_parent_death_signal(signal.SIGKILL),
    )
