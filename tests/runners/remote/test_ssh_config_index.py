"""The ssh_config index (remote/sshconfig.py): a host's lookup in the blocks that can match it is paramiko's lookup
in the whole file, and a config that names every host costs each host only its own block."""

from __future__ import annotations

import paramiko
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch.runners.remote.sshconfig import ConfigIndex, load_paramiko

load_paramiko()

BLOCKS = [
    "Host node1\n    HostName 10.0.0.1\n    Port 2201\n",
    "Host node2 node3\n  HostName=10.0.0.2\n  User alice\n",
    "Host NODE4\n    Port 2204\n",  # paramiko matches names case-sensitively: kept for node4 too, harmlessly
    "host node1\n    User bob\n    Port 9\n",  # a second block for node1: the first value of each key wins
    "Host node*\n    User carol\n    IdentityFile ~/.ssh/k%h\n",
    "Host !node2 *\n    StrictHostKeyChecking no\n",
    "Host node?\n    ProxyJump jump\n",
    'Host "node5"\n    Port 2205\n',
    "Match all\n    Port 2299\n",
    "Host *\n    UserKnownHostsFile /tmp/kh\n",
    "# a comment\n\n",
]
HEAD = "Port 2000\n"
ALIASES = ["node1", "node2", "node3", "node4", "NODE4", "node5", "node10", "other", "10.0.0.1"]


def _lookup(text: str, alias: str) -> dict[str, object]:
    return dict(paramiko.SSHConfig.from_text(text).lookup(alias))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(BLOCKS), max_size=8), st.booleans(), st.sampled_from(ALIASES))
def test_the_index_resolves_as_the_whole_file(blocks: list[str], head: bool, alias: str) -> None:
    text = (HEAD if head else "") + "".join(blocks)
    assert _lookup(ConfigIndex(text).text_for(alias), alias) == _lookup(text, alias)


def test_a_config_naming_every_host_gives_each_host_its_own_block() -> None:
    text = "".join(f"Host node{i}\n    HostName 127.0.0.{i}\n" for i in range(1, 1025)) + "Host *\n    Port 22\n"
    chosen = ConfigIndex(text).text_for("node700")
    assert chosen == "Host node700\n    HostName 127.0.0.700\nHost *\n    Port 22\n"


def test_a_canonicalising_config_is_given_whole() -> None:
    text = "CanonicalizeHostname yes\nCanonicalDomains example.com\nHost a.example.com\n    Port 2\n"
    assert ConfigIndex(text).text_for("a") == text
