"""Resolve a hostfile host to where and how to connect, as OpenSSH would from ssh_config."""

from __future__ import annotations

import getpass
import os
import re
import sys
import threading
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
    config = paramiko.SSHConfig()
    if config_path:
        config = paramiko.SSHConfig.from_text(_CONFIGS.text_for(config_path, alias))
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


class ConfigIndex:
    """An ssh_config file's blocks, indexed by the literal names of their ``Host`` lines.

    paramiko's lookup reads the file and walks every block for every host: with a block per host (a generated
    config naming each node) that is quadratic in the hosts, 59 ms a host at 1,024 blocks. Here the file is read
    once while it stays the same, and a host gets the text of only the blocks that can match it, in their order:
    the lines before the first block, every block with a pattern (``*``, ``?``, ``!``, quotes) or a ``Match``,
    and the blocks that name it literally. A file that canonicalises host names (a second lookup under another
    name) is given whole.
    """

    def __init__(self, text: str) -> None:
        self.head: list[str] = []  # lines before the first Host/Match
        self.blocks: list[str] = []
        self.always: list[int] = []  # blocks that any host may match
        self.named: dict[str, list[int]] = {}  # literal Host name (lower case) -> its blocks
        self.whole = text
        self.canonical = False
        for line in text.splitlines(keepends=True):
            key, value = _keyword(line)
            if key == "canonicalizehostname":
                self.canonical = True
            if key in ("host", "match"):
                self._open(key, value)
            if self.blocks:
                self.blocks[-1] += line
            else:
                self.head.append(line)

    def _open(self, key: str, value: str) -> None:
        index = len(self.blocks)
        self.blocks.append("")
        names = value.split()
        if key == "match" or not names or any(c in value for c in "*?!\"'"):
            self.always.append(index)
            return
        for name in {n.lower() for n in names}:
            self.named.setdefault(name, []).append(index)

    def text_for(self, alias: str) -> str:
        if self.canonical:
            return self.whole
        chosen = sorted({*self.always, *self.named.get(alias.lower(), ())})
        return "".join(self.head) + "".join(self.blocks[i] for i in chosen)


def _keyword(line: str) -> tuple[str, str]:
    """(keyword in lower case, value) of one ssh_config line, ``Key value`` or ``Key=value``; ("", "") if none."""
    match = re.match(r"\s*([A-Za-z]\w*)(?:\s*=\s*|\s+)(.*?)\s*$", line)
    return (match[1].lower(), match[2]) if match else ("", "")


class _ConfigCache:
    """Each ssh_config file read and indexed once per launcher while it stays the same (mtime, size)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: dict[str, tuple[tuple[int, int], ConfigIndex]] = {}

    def text_for(self, path: str, alias: str) -> str:
        with self._lock:
            stat = os.stat(path)
            stamp = (stat.st_mtime_ns, stat.st_size)
            seen = self._files.get(path)
            if seen is None or seen[0] != stamp:
                with open(path, encoding="utf-8", errors="replace") as f:
                    seen = self._files[path] = (stamp, ConfigIndex(f.read()))
        return seen[1].text_for(alias)


_CONFIGS = _ConfigCache()


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
