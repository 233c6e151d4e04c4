"""A real pty whose master side feeds a pyte terminal emulator: what a person would see on the screen."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import termios
import time

import pyte


class Screen:
    """A pty whose master side feeds a pyte screen."""

    def __init__(self, rows: int = 24, columns: int = 60) -> None:
        self.master, self.slave = pty.openpty()
        os.set_blocking(self.master, False)
        self.screen = pyte.Screen(columns, rows)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = b""
        fcntl.ioctl(self.slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))

    def pump(self, seconds: float = 0.3) -> None:
        end = time.monotonic() + seconds
        while (left := end - time.monotonic()) > 0:
            if select.select([self.master], [], [], left)[0]:
                try:
                    data = os.read(self.master, 65536)
                except OSError:
                    return
                self.raw += data
                self.stream.feed(data)

    def follow(self, proc: subprocess.Popen[str] | subprocess.Popen[bytes], timeout: float) -> int:
        """Read the screen until ``proc`` (writing to it) exits, within ``timeout``; its exit code."""
        deadline = time.monotonic() + timeout
        while proc.poll() is None and time.monotonic() < deadline:
            self.pump(0.2)
        code = proc.wait(timeout=10)
        self.pump(0.5)
        return code

    def lines(self) -> list[str]:
        return [line.rstrip() for line in self.screen.display if line.strip()]

    def close(self) -> None:
        os.close(self.master)
        os.close(self.slave)
