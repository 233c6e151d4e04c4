"""The agent's relay: each rank's new windows become wire events, once each; torn or forged ones are dropped."""

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
    assert events == [
        wire.TimerWindow(1, 4, 1, 5, 5, 0.5, (("forward", 0.1, 0.02),)),
        wire.TimerWindow(1, 4, 2, 10, 5, 0.5, (("forward", 0.1, 0.02),)),
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
