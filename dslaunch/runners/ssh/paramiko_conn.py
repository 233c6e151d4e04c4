"""Open paramiko connections the way OpenSSH would: known_hosts checks, identities, ProxyJump.

Imported only by the ssh runner and preflight, never by the CLI at start-up.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dslaunch.limits import ascii_int
from dslaunch.runners.remote.sshconfig import SshTarget, load_paramiko, resolve

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
    third of the launcher's CPU time when the ranks flood their output.

    The socket timeout after which an idle transport thread wakes to check whether it was closed: paramiko's
    0.1 s wakes every idle connection ten times a second, each time for the one GIL, which for hundreds of hosts
    adds up to a share of a core in a job that does nothing (docs/scale.md). Data wakes the thread at once
    whatever the timeout; a close is seen within it (the transport's own keepalive, 5 s, runs on these wakes).
    """

    _preferred_ciphers = _aead_first(paramiko.Transport._preferred_ciphers)  # type: ignore[attr-defined]
    _active_check_timeout = 1.0
    replied_at = 0.0  # time.monotonic() of the peer's last answer to a global request of ours

    def ping(self) -> None:
        """A keepalive that the peer must answer (OpenSSH answers with a failure), sent without waiting for the
        answer: it moves :attr:`replied_at`. One thread can so watch every connection of a job."""
        m = paramiko.Message()
        m.add_byte(paramiko.common.cMSG_GLOBAL_REQUEST)
        m.add_string("keepalive@openssh.com")
        m.add_boolean(True)
        self._send_user_message(m)  # type: ignore[attr-defined]

    def _parse_request_success(self, m: paramiko.Message) -> None:
        self.replied_at = time.monotonic()
        super()._parse_request_success(m)  # type: ignore[misc]

    def _parse_request_failure(self, m: paramiko.Message) -> None:
        self.replied_at = time.monotonic()
        super()._parse_request_failure(m)  # type: ignore[misc]


def _transport(sock: Any, /, **options: Any) -> paramiko.Transport:
    return _Transport(sock, **options)


def _record(files: tuple[str, ...], hostname: str, key: paramiko.PKey) -> None:
    path = next((f for f in files if f != "/dev/null"), None)
    if path is None:
        return
    os.makedirs(os.path.dirname(path) or ".", mode=0o700, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _ParsedKnownHosts:
    """Each known_hosts file parsed once while it stays the same, for every connection of this launcher: a client
    that loads the files itself parses every line (a key object each) per host, quadratic in the hosts: 14 ms a
    connection and a copy of every key in each client at 256 hosts, 79 ms at 1,024."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parsed: dict[str, tuple[tuple[int, int], paramiko.HostKeys]] = {}

    def keys_of(self, path: str, name: str) -> list[tuple[str, paramiko.PKey]]:
        """The (key type, key) pairs that ``path`` holds for ``name`` (``host`` or ``[host]:port``)."""
        with self._lock:
            stat = os.stat(path)
            stamp = (stat.st_mtime_ns, stat.st_size)  # --ssh-accept-new-hosts appends while we run
            seen = self._parsed.get(path)
            if seen is None or seen[0] != stamp:
                keys = paramiko.HostKeys()
                keys.load(path)
                seen = self._parsed[path] = (stamp, keys)
        found = seen[1].lookup(name)
        return [(keytype, found[keytype]) for keytype in found.keys()] if found is not None else []


_KNOWN_HOSTS = _ParsedKnownHosts()


def _trust_known_keys(client: paramiko.SSHClient, target: SshTarget) -> None:
    """The keys known_hosts holds for this host, and only those, as the client's host keys (the first file to
    name a key type wins, as when the client loads the files itself)."""
    trusted = client.get_host_keys()
    added: set[str] = set()
    for path in (*GLOBAL_KNOWN_HOSTS, *target.known_hosts_files):
        if os.path.isfile(path):
            try:
                pairs = _KNOWN_HOSTS.keys_of(path, target.known_hosts_key)
            except (OSError, paramiko.SSHException) as exc:
                raise ConnectError(f"cannot read known_hosts file {path}: {exc}") from None
            for keytype, key in pairs:
                if keytype not in added:
                    added.add(keytype)
                    trusted.add(target.known_hosts_key, keytype, key)


def _client(target: SshTarget, accept_new: bool, timeout: float, sock: Any = None) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    _trust_known_keys(client, target)
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
