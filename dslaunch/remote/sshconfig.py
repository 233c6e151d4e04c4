"""Resolve a hostfile host to where and how to connect, as OpenSSH would from ssh_config."""

from __future__ import annotations

import getpass
import os
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Any

DEFAULT_KNOWN_HOSTS = ("~/.ssh/known_hosts", "~/.ssh/known_hosts2")
# A host name, IPv4/IPv6 address or alias, optionally "user@": nothing a shell or ssh option parser could act on.
_HOST = re.compile(
    r"^(?:[A-Za-z0-9_][A-Za-z0-9_.+-]*@)?(?:[A-Za-z0-9_][A-Za-z0-9_.-]*|\[?[0-9A-Fa-f:.]+(?:%[A-Za-z0-9_.-]+)?\]?)$"
)


def valid_host(host: str) -> bool:
    return bool(_HOST.match(host)) and len(host) <= 255


@dataclass(frozen=True)
class SshTarget:
    alias: str  # the name in the hostfile (without user@)
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    known_hosts_files: tuple[str, ...]
    strict_host_key_checking: str  # yes | ask | accept-new | no | off
    proxy_jump: str | None = None

    @property
    def known_hosts_key(self) -> str:
        return self.hostname if self.port == 22 else f"[{self.hostname}]:{self.port}"


def default_config_path() -> str | None:
    path = os.path.expanduser("~/.ssh/config")
    return path if os.path.isfile(path) else None


def load_paramiko() -> ModuleType:
    """paramiko (never at CLI start-up), without the ``invoke`` it imports only to run ssh_config's ``Match exec``:
    that is 80 ms and 6 MB of the launcher's memory. :func:`resolve` hands it over when a config needs it."""
    if "paramiko" not in sys.modules and "invoke" not in sys.modules:
        sys.modules["invoke"] = None  # type: ignore[assignment]  # makes paramiko's "import invoke" fail
        try:
            import paramiko
        finally:
            del sys.modules["invoke"]
    import paramiko

    return paramiko


def _lookup(config: Any, alias: str) -> Any:
    try:
        return config.lookup(alias)
    except ImportError:  # a "Match exec" line: paramiko runs it with invoke
        import invoke
        import paramiko.config

        paramiko.config.invoke = invoke  # type: ignore[attr-defined]
        return config.lookup(alias)


def resolve(host: str, config_path: str | None, port: int | None = None) -> SshTarget:
    """Resolve ``[user@]host`` with ``config_path`` (None: no config); ``port`` overrides the config."""
    paramiko = load_paramiko()
    user, _, alias = host.rpartition("@")
    config = paramiko.SSHConfig.from_path(config_path) if config_path else paramiko.SSHConfig()
    found = _lookup(config, alias)
    known = found.get("userknownhostsfile")
    known_files = (
        tuple(os.path.expanduser(p) for p in known.split())
        if known
        else tuple(os.path.expanduser(p) for p in DEFAULT_KNOWN_HOSTS)
    )
    return SshTarget(
        alias=alias,
        hostname=found.get("hostname", alias),
        port=port or int(found.get("port", 22)),
        user=user or found.get("user") or getpass.getuser(),
        identity_files=tuple(os.path.expanduser(p) for p in found.get("identityfile", ())),
        known_hosts_files=known_files,
        strict_host_key_checking=str(found.get("stricthostkeychecking", "ask")).lower(),
        proxy_jump=found.get("proxyjump") if found.get("proxyjump", "none").lower() != "none" else None,
    )


def resolve_address(host: str, config_path: str | None) -> str:
    """The address ``host`` stands for (ssh_config HostName), cheaply: ``ssh -G`` when ssh exists, else paramiko."""
    import shutil
    import subprocess

    alias = host.rpartition("@")[2]
    ssh = shutil.which("ssh")
    if ssh:
        argv = [ssh, "-G", *(["-F", config_path] if config_path else []), "--", alias]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is not None and done.returncode == 0:
            for line in done.stdout.splitlines():
                key, _, value = line.partition(" ")
                if key == "hostname" and value:
                    return value
    return resolve(host, config_path).hostname
