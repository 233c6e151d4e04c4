"""A dslaunch job whose merged output is read line by line, with the time each line came."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence


class Job:
    def __init__(self, args: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.lines: list[tuple[float, str]] = []
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dslaunch", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env={**os.environ, **(env or {})},
            start_new_session=True,  # a group of its own, as a terminal's foreground job: killpg is Ctrl-\
        )
        self.ended: float | None = None
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_for(self, predicate, timeout: float) -> bool:  # type: ignore[no-untyped-def]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate(self.text):
                return True
            if self.proc.poll() is not None:
                self._reader.join(5)
                return bool(predicate(self.text))
            time.sleep(0.05)
        return False

    def wait(self, timeout: float) -> int:
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise
        self.ended = time.monotonic()
        self._reader.join(5)
        return code
