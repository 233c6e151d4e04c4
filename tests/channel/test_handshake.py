"""The pods' challenge and response (channel/handshake.py), as tables, and fuzzed: nothing but an answer made with
the job's key, to this challenge, for this run id, gets a pod in."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dslaunch.channel import handshake

KEY, RUN = b"k" * 16, "run-1"
SERVER, CLIENT = "a" * 32, "b" * 32


def test_a_right_answer_names_the_pod_and_both_sides_prove_the_key() -> None:
    raw = handshake.answer(KEY, RUN, (3, "pod-3", 2), SERVER, CLIENT).rstrip(b"\n")
    assert handshake.check_answer(KEY, RUN, SERVER, raw) == handshake.Joiner(3, "pod-3", CLIENT, 2)
    welcome = handshake.welcome(KEY, RUN, SERVER, CLIENT).rstrip(b"\n")
    assert handshake.check_welcome(KEY, RUN, SERVER, CLIENT, welcome)
    assert not handshake.check_welcome(b"other", RUN, SERVER, CLIENT, welcome)
    assert handshake.read_challenge(handshake.challenge(SERVER).rstrip(b"\n")) == SERVER


def _forged(field: str, value: object) -> bytes:
    obj = json.loads(handshake.answer(KEY, RUN, (3, "pod-3", 2), SERVER, CLIENT))
    obj[field] = value
    return json.dumps(obj).encode()


REFUSED = {
    "another key": handshake.answer(b"guess", RUN, (3, "pod-3", 2), SERVER, CLIENT),
    "another job": handshake.answer(KEY, "run-2", (3, "pod-3", 2), SERVER, CLIENT),
    "a replay to another challenge": handshake.answer(KEY, RUN, (3, "pod-3", 2), "c" * 32, CLIENT),
    "a changed node rank": _forged("node_rank", 4),
    "a changed host": _forged("host", "pod-4"),
    "a changed attempt": _forged("seen", 5),
    "an attempt below -1": _forged("seen", -2),
    "a node rank as text": _forged("node_rank", "3"),
    "a negative node rank": _forged("node_rank", -1),
    "a huge node rank": _forged("node_rank", 10**30),
    "a bool node rank": _forged("node_rank", True),
    "a long host": _forged("host", "h" * 300),
    "a short nonce": _forged("nonce", "ab"),
    "a MAC as a number": _forged("mac", 5),
    "junk": b"GET / HTTP/1.1",
    "a list": b"[1, 2]",
    "over the size limit": b'{"pad": "' + b"x" * 2000 + b'"}',
    "not UTF-8": b"\xff\xfe{",
}


@pytest.mark.parametrize("raw", REFUSED.values(), ids=REFUSED.keys())
def test_anything_else_is_refused(raw: bytes) -> None:
    assert handshake.check_answer(KEY, RUN, SERVER, raw.rstrip(b"\n")) is None


@given(st.binary(max_size=2048))
def test_any_bytes_are_refused_without_an_exception(raw: bytes) -> None:
    assert handshake.check_answer(KEY, RUN, SERVER, raw) is None
    assert not handshake.check_welcome(KEY, RUN, SERVER, CLIENT, raw)
    handshake.read_challenge(raw)
    handshake.read_refusal(raw)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (handshake.refusal("node 4 is not one of 1..3"), "node 4 is not one of 1..3"),
        (handshake.refusal("x" * 5000), "x" * handshake.MAX_WHY),  # cut to the bound
        (b'{"t":"refused","why":"a"}', "a"),
        (b'{"t":"refused","why":5}', None),
        (b'{"t":"refused"}', None),
        (b'{"t":"refused","why":"a","and":1}', None),
        (b'{"t":"start","why":"a"}', None),
        (handshake.challenge(SERVER), None),
        (b"refused", None),
    ],
)
def test_a_refusal_is_read_only_from_a_refusal(raw: bytes, why: str | None) -> None:
    assert handshake.read_refusal(raw.rstrip(b"\n")) == why


def test_a_hello_proves_the_key_for_this_run_only() -> None:
    raw = handshake.hello(KEY, RUN, CLIENT).rstrip(b"\n")
    assert handshake.check_hello(KEY, RUN, raw) == CLIENT
    assert handshake.check_hello(b"guess", RUN, raw) is None
    assert handshake.check_hello(KEY, "run-2", raw) is None
    forged = json.loads(raw)
    forged["nonce"] = "c" * 32
    assert handshake.check_hello(KEY, RUN, json.dumps(forged).encode()) is None
    assert handshake.check_hello(KEY, RUN, b"x" * 2000) is None


def test_session_keys_are_one_per_direction_and_new_for_each_connection() -> None:
    to_pod, to_coordinator = handshake.session_keys(KEY, RUN, SERVER, CLIENT)
    assert to_pod != to_coordinator and len(to_pod) == 32
    assert handshake.session_keys(KEY, RUN, SERVER, CLIENT) == (to_pod, to_coordinator)
    assert to_pod not in handshake.session_keys(KEY, RUN, "c" * 32, CLIENT)
    assert to_pod not in handshake.session_keys(b"other", RUN, SERVER, CLIENT)
