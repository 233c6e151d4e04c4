"""The agent's relay: its ranks' new windows become one wire event a window number, once each; torn or forged ones
are dropped; a rank that is behind holds the others back one poll at most."""

from __future__ import annotations

import os
from pathlib import Path

from dslaunch import wire
from dslaunch.observe import record
from dslaunch.observe.record import Region, Window
from dslaunch.observe.window_relay import WindowRelay, window_steps
from tests.observe.test_session import PLAN


def test_new_windows_are_relayed_once(tmp_path: Path) -> None:
    relay = WindowRelay(1)
    env: dict[str, str] = {}
    relay.add(4, env, str(tmp_path))
    fd = os.open(env[record.ENV_FILE], os.O_WRONLY)
    for index in (1, 2):
        payload = record.encode(Window(0, index, index * 5, 5, 0.5, (Region("forward", 0.1, 0.02),)))
        record.write_slot(fd, index, payload)
    record.write_slot(fd, 3, record.encode(Window(0, 9, 15, 5, 0.5, ())))  # its index is not its slot's: dropped
    record.write_slot(fd, 4, b"not json")
    events = relay.tick(0.0)
    forward = {"regions": ("forward",), "who": ((),), "totals": (0.1,), "fastest": (0.02,)}
    assert events == [
        wire.NodeWindows(1, 1, (4,), (5,), (5,), (0.5,), **forward),
        wire.NodeWindows(1, 2, (4,), (10,), (5,), (0.5,), **forward),
    ]
    assert relay.tick(0.1) == []  # not due yet
    assert relay.tick(1.0) == []  # nothing new
    assert wire.decode(wire.encode(events[0])) == events[0]
    os.close(fd)
    relay.close()


def test_on_only_when_the_launcher_asks() -> None:
    assert window_steps(PLAN) is None
    from dataclasses import replace

    assert window_steps(replace(PLAN, env=((record.ENV_STEPS, "5"),))) == 5
    assert window_steps(replace(PLAN, env=((record.ENV_STEPS, "x"),))) is None


def test_a_malformed_window_event_is_no_event() -> None:
    good = wire.encode(wire.TimerWindow(0, 1, 1, 5, 5, 0.5, (("forward", 0.1, 0.02),)))
    assert wire.decode(good) is not None
    assert wire.decode(good.replace('[["forward",0.1,0.02]]', '[["forward",0.1]]')) is None
    assert wire.decode(good.replace('[["forward",0.1,0.02]]', '[["forward","x",0.02]]')) is None


def _write(fd: int, index: int, regions: tuple[Region, ...], first: float = 0.0) -> None:
    record.write_slot(fd, index, record.encode(Window(0, index, index * 5, 5, 0.5, regions, first)))


def test_a_nodes_ranks_go_as_one_event_a_window_and_a_rank_behind_waits_one_poll(tmp_path: Path) -> None:
    relay = WindowRelay(2)
    env: dict[str, str] = {}
    fds = []
    for rank in (8, 9, 10):
        relay.add(rank, env, str(tmp_path))
        fds.append(os.open(env[record.ENV_FILE], os.O_WRONLY))
    fwd, ckpt = Region("forward", 0.1, 0.02), Region("ckpt", 1.0, 1.0)
    _write(fds[0], 1, (fwd, Region("forward", 0.2, 0.01)), first=1700.5)  # a region named twice: added up
    _write(fds[1], 1, (fwd, ckpt), first=1700.25)
    assert relay.tick(0.0) == []  # rank 10 has not written window 1: held
    _write(fds[2], 1, (fwd,))
    _write(fds[0], 2, (fwd,))
    one = wire.NodeWindows(
        2,
        1,
        (8, 9, 10),
        (5, 5, 5),
        (5, 5, 5),
        (0.5, 0.5, 0.5),
        regions=("forward", "ckpt"),
        who=((), (1,)),
        totals=(0.1 + 0.2, 0.1, 0.1, 1.0),
        fastest=(0.01, 0.02, 0.02, 1.0),
        first_step_at=1700.25,
    )
    assert relay.tick(1.0) == [one]  # all three had it; window 2 waits for ranks 9 and 10
    assert wire.decode(wire.encode(one)) == one
    two = relay.tick(2.0)  # nobody else wrote window 2: it goes as it is, one poll late
    assert [(w.index, w.ranks) for w in two if isinstance(w, wire.NodeWindows)] == [(2, (8,))]
    assert relay.tick(3.0) == []
    for fd in fds:
        os.close(fd)
    relay.close()
