"""pdsh's command line, environment and output labels (pure), its start, and one command on each node."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Sequence
from typing import TYPE_CHECKING

from dslaunch.errors import DslaunchError
from dslaunch.oslib import prctl
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.runners.remote.base import KEEPALIVE_COUNT, keepalive_interval
from dslaunch.runners.remote.sshconfig import default_config_path

if TYPE_CHECKING:
    from dslaunch.job.protocols import NodeAnswers

_EXIT_CODE = re.compile(r"exited with exit code (\d+)$")  # pdsh's own line for a host's nonzero status


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


def run_on_each(plan: LaunchPlan, command: str) -> NodeAnswers:
    """``command`` once on each node of ``plan``, by one pdsh (its output split back: :func:`answers`)."""
    settings = plan.remote
    pdsh_labels([n.host for n in plan.nodes])
    argv = pdsh_command(settings, [n.host for n in plan.nodes], command.replace("%", "%%"))
    done = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=pdsh_env(settings, dict(os.environ)),
        timeout=settings.connect_timeout + 60,
        stdin=subprocess.DEVNULL,
    )
    return answers(plan, done.stdout, done.stderr, os.uname().nodename)


def answers(plan: LaunchPlan, stdout: str, stderr: str, here: str) -> NodeAnswers:
    """pdsh's output (run from host ``here``) split back by each node's label: its stdout, its stderr after pdsh's
    own lines about it, and its exit status, what pdsh says of it (0 where pdsh says nothing, None where the host
    wrote nothing at all)."""
    outs: dict[str, list[str]] = {}
    errs: dict[str, list[str]] = {}
    own: dict[str, list[str]] = {}  # pdsh's lines ("ssh exited with exit code 127"): before the host's own words
    pdsh_mark = f"pdsh@{here}: "
    for text, sink in ((stdout, outs), (stderr, errs)):
        for line in text.splitlines():
            host, _, rest = line.removeprefix(pdsh_mark).partition(": ")
            (own if sink is errs and line.startswith(pdsh_mark) else sink).setdefault(host, []).append(rest)
    results: NodeAnswers = {}
    for node in plan.nodes:
        key = pdsh_label(node.host)
        out = "\n".join(outs.get(key, []))
        err = "\n".join(own.get(key, []) + errs.get(key, []))
        codes = [int(m.group(1)) for line in own.get(key, []) if (m := _EXIT_CODE.search(line))]
        results[node.node_rank] = (codes[-1] if codes else 0 if out or err else None, out, err)
    return results
