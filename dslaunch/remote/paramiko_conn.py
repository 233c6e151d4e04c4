"""Open paramiko connections the way OpenSSH would: known_hosts checks, identities, ProxyJump.

Imported only by the ssh runner and preflight, never by the CLI at start-up.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dslaunch.limits import ascii_int
from dslaunch.remote.sshconfig import SshTarget, load_paramiko, resolve

if TYPE_CHECKING:
    import paramiko
else:
    paramiko = load_paramiko()

GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")  # read, never written


class ConnectError(Exception):
    """Why a host could not be reached; the message is for the user."""


@dataclass
class Connection:
    target: SshTarget
    client: paramiko.SSHClient
    hops: list[paramiko.SSHClient] = field(default_factory=list)

    def close(self) -> None:
        for c in [self.client, *reversed(self.hops)]:
            c.close()


class _KnownHostsPolicy(paramiko.MissingHostKeyPolicy):
    def __init__(self, target: SshTarget, accept_new: bool) -> None:
        self.target = target
        self.accept_new = accept_new

    def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
        mode = self.target.strict_host_key_checking
        if mode in ("no", "off", "false"):
            return
        if self.accept_new or mode == "accept-new":
            _record(self.target.known_hosts_files, hostname, key)
            return
        files = ", ".join(self.target.known_hosts_files)
        port = "" if self.target.port == 22 else f"-p {self.target.port} "
        raise ConnectError(
            f"the host key of {self.target.alias} ({hostname}, {key.get_name()} {key.fingerprint}) is not in "
            f"known_hosts ({files}); check it, then trust it with 'ssh {port}{self.target.alias} true' "
            "(answer yes) or rerun with --ssh-accept-new-hosts"
        )


def _aead_first(ciphers: tuple[str, ...]) -> tuple[str, ...]:
    aead = tuple(c for c in ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com") if c in ciphers)
    return aead + tuple(c for c in ciphers if c not in aead)


class _Transport(paramiko.Transport):
    """AES-GCM first when both sides have it (OpenSSH does): one AEAD call per packet, where paramiko's default,
    AES-CTR with HMAC-SHA2, adds an HMAC object and a Python loop comparing the MAC to every packet, about a
    third of the launcher's CPU time when the ranks flood their output."""

    _preferred_ciphers = _aead_first(paramiko.Transport._preferred_ciphers)  # type: ignore[attr-defined]


def _transport(sock: Any, /, **options: Any) -> paramiko.Transport:
    return _Transport(sock, **options)


def _record(files: tuple[str, ...], hostname: str, key: paramiko.PKey) -> None:
    path = next((f for f in files if f != "/dev/null"), None)
    if path is None:
        return
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


def _client(target: SshTarget, accept_new: bool, timeout: float, sock: Any = None) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    for path in (*GLOBAL_KNOWN_HOSTS, *target.known_hosts_files):
        if os.path.isfile(path):
            try:
                client.load_system_host_keys(path)
            except (OSError, paramiko.SSHException) as exc:
                raise ConnectError(f"cannot read known_hosts file {path}: {exc}") from None
    client.set_missing_host_key_policy(_KnownHostsPolicy(target, accept_new))
    where = f"{target.user}@{target.hostname}:{target.port}"
    try:
        client.connect(
            target.hostname,
            port=target.port,
            username=target.user,
            # paramiko takes a list of key files too; its stub says str
            key_filename=list(target.identity_files) or None,  # type: ignore[arg-type]
            look_for_keys=not target.identity_files,
            allow_agent=True,
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            sock=sock,
            transport_factory=_transport,
        )
    except ConnectError:
        client.close()
        raise
    except paramiko.BadHostKeyException as exc:
        client.close()
        raise ConnectError(
            f"the host key of {target.alias} ({where}) does NOT match known_hosts: expected "
            f"{exc.expected_key.fingerprint}, got {exc.key.fingerprint}; refusing to connect (possible "
            "man-in-the-middle, or the host was reinstalled: fix known_hosts by hand)"
        ) from None
    except paramiko.AuthenticationException as exc:
        client.close()
        keys = ", ".join(target.identity_files) or "default keys and agent"
        raise ConnectError(f"authentication failed for {where} ({keys}): {exc}") from None
    except (TimeoutError, OSError, paramiko.SSHException, EOFError) as exc:
        client.close()
        raise ConnectError(f"cannot connect to {where}: {str(exc) or type(exc).__name__}") from None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(5)
    return client


def _hop_spec(hop: str) -> tuple[str, int | None]:
    """``[user@]host[:port]`` from a ProxyJump list."""
    host, sep, port = hop.rpartition(":")
    if sep and ascii_int(port) is not None and ":" not in host:
        return host, int(port)
    return hop, None


def connect(host: str, config: str | None, port: int | None, accept_new: bool, timeout: float) -> Connection:
    """Connect to ``[user@]host`` through its ProxyJump chain, if any."""
    target = resolve(host, config, port)
    hops: list[paramiko.SSHClient] = []
    sock = None
    try:
        for hop in filter(None, (h.strip() for h in (target.proxy_jump or "").split(","))):
            hop_host, hop_port = _hop_spec(hop)
            hop_target = resolve(hop_host, config, hop_port)
            if hops:
                sock = _forward(hops[-1], hop_target)
            hops.append(_client(hop_target, accept_new, timeout, sock))
        if hops:
            sock = _forward(hops[-1], target)
        return Connection(target, _client(target, accept_new, timeout, sock), hops)
    except BaseException:
        for c in hops:
            c.close()
        raise


def _forward(client: paramiko.SSHClient, dest: SshTarget) -> Any:
    transport = client.get_transport()
    assert transport is not None
    try:
        return transport.open_channel("direct-tcpip", (dest.hostname, dest.port), ("127.0.0.1", 0))
    except (paramiko.SSHException, OSError) as exc:
        raise ConnectError(f"the jump host cannot reach {dest.hostname}:{dest.port}: {exc}") from None
