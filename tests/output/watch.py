"""Watch a running launcher: peak RSS (VmHWM) of it and of its node agent, and the agent's CPU time."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import psutil


def _hwm_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Watch:
    """Samples every 20 ms until ``stop``; VmHWM is a high-water mark, so late samples lose nothing."""

    pid: int
    launcher_mb: float = 0.0
    agent_mb: float = 0.0
    agent_cpu: float = 0.0
    _done: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def __enter__(self) -> Watch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        assert self._thread is not None
        self._thread.join()

    def _run(self) -> None:
        launcher = psutil.Process(self.pid)
        while not self._done.is_set():
            try:
                self.launcher_mb = max(self.launcher_mb, _hwm_mb(self.pid))
                for agent in launcher.children():  # local runner: the forked node agent
                    self.agent_mb = max(self.agent_mb, _hwm_mb(agent.pid))
                    cpu = agent.cpu_times()
                    self.agent_cpu = max(self.agent_cpu, cpu.user + cpu.system)
            except (psutil.Error, OSError):
                pass
            time.sleep(0.02)
