"""The rank -> agent window record: round trips, and every malformed payload refused."""

from __future__ import annotations

import json
import os

import pytest

from dslaunch.observe import record
from dslaunch.observe.record import Region, Window

W = Window(3, 2, 10, 5, 0.5, (Region("forward", 0.1, 0.019), Region("backward", 0.05, 0.0099)), 1700000000.5)


def test_round_trip() -> None:
    assert record.decode(record.encode(W)) == W


@pytest.mark.parametrize(
    "payload",
    [
        b"",
        b"[]",
        b'{"r":1,"i":1,"s":5,"n":5,"w":0.5}',  # no regions
        b'{"r":1,"i":1,"s":5,"n":0,"w":0.5,"t":[]}',  # no steps
        b'{"r":-1,"i":1,"s":5,"n":5,"w":0.5,"t":[]}',
        b'{"r":true,"i":1,"s":5,"n":5,"w":0.5,"t":[]}',
        b'{"r":1,"i":1,"s":5,"n":5,"w":"x","t":[]}',
        b'{"r":1,"i":1,"s":5,"n":5,"w":NaN,"t":[]}',
        b'{"r":1,"i":1,"s":5,"n":5,"w":0.5,"t":[["",1,1]]}',
        b'{"r":1,"i":1,"s":5,"n":5,"w":0.5,"t":[["x",-1,1]]}',
        b'{"r":1,"i":1,"s":5,"n":5,"w":0.5,"t":[["x",1]]}',
        b'{"r":1,"i":1,"s":5,"n":5,"w":0.5,"t":[[1,1,1]]}',
        b'{"r":1,"i":1,"s":5,"n":5,"w":0.5,"t":[["' + b"x" * 49 + b'",1,1]]}',
        b'{"r":1,"i":1,"s":5,"n":5,"w":0.5,"t":' + json.dumps([[f"r{i}", 1, 1] for i in range(25)]).encode() + b"}",
    ],
)
def test_malformed_payloads_are_refused(payload: bytes) -> None:
    assert record.decode(payload) is None


def test_a_torn_slot_is_not_read() -> None:
    data = record.frame(7, record.encode(W))
    assert data is not None
    assert record.unframe(data) == (7, record.encode(W))
    torn = data[:-8] + (6).to_bytes(8, "little")  # the tail's seq from the previous write
    assert record.unframe(torn) is None
    assert record.unframe(b"\0" * record.SLOT_SIZE) is None
    assert record.frame(1, b"x" * record.SLOT_SIZE) is None


def test_the_ring_gives_the_new_slots_oldest_first(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "w")
    fd = os.open(path, os.O_RDWR | os.O_CREAT)
    os.ftruncate(fd, record.FILE_SIZE)
    for seq in range(1, 21):  # wraps past SLOTS: 1-4 are overwritten
        record.write_slot(fd, seq, f'"{seq}"'.encode())
    got = record.read_new(fd, 10)
    assert [seq for seq, _ in got] == list(range(11, 21))
    assert got[0][1] == b'"11"'
    assert [seq for seq, _ in record.read_new(fd, 0)] == list(range(5, 21))
    os.close(fd)
