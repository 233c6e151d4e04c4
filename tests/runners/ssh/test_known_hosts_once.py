"""known_hosts parsed once per launcher, not once per host, with the keys a client trusts unchanged (in-process)."""

from __future__ import annotations

from pathlib import Path

import paramiko

from dslaunch.runners.remote.sshconfig import SshTarget
from dslaunch.runners.ssh import paramiko_conn


def _target(host: str, *files: Path) -> SshTarget:
    return SshTarget(host, host, 2222, "root", (), tuple(str(f) for f in files), "yes")


def _line(name: str, key: paramiko.PKey) -> str:
    return f"{name} {key.get_name()} {key.get_base64()}\n"


def _trusted(target: SshTarget) -> dict[str, str]:
    client = paramiko.SSHClient()
    paramiko_conn._trust_known_keys(client, target)
    found = client.get_host_keys().lookup(target.known_hosts_key)
    return {t: found[t].get_base64() for t in found.keys()} if found is not None else {}


def test_the_first_file_naming_a_key_type_wins_and_hashed_names_match(tmp_path: Path) -> None:
    first, second = paramiko.ECDSAKey.generate(), paramiko.ECDSAKey.generate()
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text(_line(paramiko.HostKeys.hash_host("[scale-h1]:2222"), first))
    b.write_text(_line("[scale-h1]:2222", second) + _line("[scale-h2]:2222", second))
    assert _trusted(_target("scale-h1", a, b)) == {first.get_name(): first.get_base64()}
    assert _trusted(_target("scale-h2", a, b)) == {second.get_name(): second.get_base64()}
    assert _trusted(_target("scale-h3", a, b)) == {}


def test_parsed_once_until_the_file_changes(tmp_path: Path) -> None:
    key = paramiko.ECDSAKey.generate()
    known = tmp_path / "known_hosts"
    known.write_text("".join(_line(f"[scale-n{i}]:2222", key) for i in range(50)))
    assert _trusted(_target("scale-n1", known))
    parsed = paramiko_conn._KNOWN_HOSTS._parsed[str(known)][1]
    assert _trusted(_target("scale-n49", known))
    assert paramiko_conn._KNOWN_HOSTS._parsed[str(known)][1] is parsed
    with known.open("a") as f:  # what --ssh-accept-new-hosts does while a launch runs
        f.write(_line("[scale-new]:2222", key))
    assert _trusted(_target("scale-new", known))
    assert paramiko_conn._KNOWN_HOSTS._parsed[str(known)][1] is not parsed
