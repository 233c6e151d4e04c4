"""srun's stderr, passed through to dslaunch's own while srun's error lines are kept (``slurmlib/lost_nodes.py``)."""

from __future__ import annotations

import os
import threading

LINE_CAP = 4096  # longer lines are tasks' output, never srun's one-line reports: not kept
KEPT_CAP = 10_000  # srun error lines kept per step


class SrunErrors:
    """Copies ``fd`` (srun's stderr pipe) to fd 2 on a thread, keeping the lines srun itself wrote."""

    def __init__(self, fd: int, out: int = 2) -> None:
        self.fd = fd
        self.out = out
        self.kept: list[str] = []
        self._partial = b""
        self._thread = threading.Thread(target=self._copy, daemon=True, name="srun-stderr")
        self._thread.start()

    def lines(self, timeout: float) -> list[str]:
        """The srun lines seen, once the pipe ended (or ``timeout`` passed)."""
        self._thread.join(timeout)
        return list(self.kept)

    def _copy(self) -> None:
        try:
            while data := os.read(self.fd, 65536):
                self._write(data)
                self._scan(data)
        except OSError:
            pass
        finally:
            os.close(self.fd)

    def _write(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.out, view) :]
            except InterruptedError:
                continue
            except OSError:
                return  # our stderr is gone: keep reading, so srun never blocks on it

    def _scan(self, data: bytes) -> None:
        *complete, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > LINE_CAP:
            self._partial = b"\xff"  # never starts with "srun: ": the rest of this long line is skipped
        for line in complete:
            if line.startswith(b"srun: ") and len(line) <= LINE_CAP and len(self.kept) < KEPT_CAP:
                self.kept.append(line.decode("utf-8", "replace"))
