"""What the node agent hears from its launcher (agent/node_control.py): control lines become commands, a channel's
end is the launcher gone, a dial-back carries only the stop and the stop step, and an ssh agent's launcher silent
past the bound counts as gone once (real pipes; the node loop's side is tested with real agents in test_silence)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from dslaunch import wire
from dslaunch.agent.node_control import LauncherChannels
from dslaunch.plan import RemoteSettings
from tests.plans import make_plan

PLAN = make_plan(remote=RemoteSettings(connect_timeout=1.0))  # ssh: heartbeats, so a bound of 3 s


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    r, w = os.pipe()
    os.set_blocking(r, False)
    yield r, w
    for fd in (r, w):
        try:
            os.close(fd)
        except OSError:
            pass


def test_control_lines_become_commands_and_the_channels_end_is_the_launcher_gone(pipe: tuple[int, int]) -> None:
    r, w = pipe
    channels = LauncherChannels(PLAN, os.fdopen(r, "rb", buffering=0, closefd=False))
    assert channels.read() == []  # nothing there yet
    os.write(w, wire.control_stop_at(7) + b"not a command\n" + wire.control_signal(signal.SIGUSR1) + b"sto")
    assert channels.read() == [wire.StopAt(7), int(signal.SIGUSR1)]  # the partial line waits
    os.write(w, b"p\n")
    assert channels.read() == [wire.STOP]
    os.close(w)
    assert channels.read() is None and channels.silent_after is None  # gone: no silence to watch any more


def test_a_dial_back_carries_only_the_stop_and_the_stop_step(pipe: tuple[int, int]) -> None:
    r, w = pipe
    channels = LauncherChannels(PLAN, None)
    os.write(w, wire.control_signal(signal.SIGUSR1) + wire.control_stop_at(3) + wire.control_stop())
    assert channels.read_side(r) == [wire.StopAt(3), wire.STOP]
    os.close(w)
    assert channels.read_side(r) is None


def test_a_silent_launcher_counts_as_gone_once_and_only_with_heartbeats(capfd: pytest.CaptureFixture[str]) -> None:
    r, w = os.pipe()
    control = os.fdopen(r, "rb", buffering=0)
    try:
        channels = LauncherChannels(PLAN, control)
        assert channels.silent_after == 3.0 and channels.due(channels.heard) == 3.0
        assert not channels.silent(channels.heard + 2.9)
        assert channels.silent(channels.heard + 3.1) and not channels.silent(time.monotonic() + 60)
        assert "nothing from the launcher for 3 s: taking it as gone" in capfd.readouterr().err
        assert channels.due(0.0) is None
        quiet = LauncherChannels(make_plan(launcher="pdsh"), control)  # no heartbeats: silence means nothing
        assert quiet.silent_after is None and not quiet.silent(time.monotonic() + 600)
    finally:
        control.close()
        os.close(w)
