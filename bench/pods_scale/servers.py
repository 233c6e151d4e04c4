"""The two other control channels' servers, each real and in a process of its own, and their figures:

- Slurm's stop channel: node 0's task's ``Hub`` (``runners/slurm/stop_channel.py``) against simulated tasks (the
  ``Spoke``'s side on the wire). Started here, not by srun: a Slurm step of 4,096 tasks is more than this machine's
  test bed runs, and the Hub is the whole of node 0's side of the channel.
- The pdsh/MPI dial-back: the launcher's listener (``runners/remote/agent_links.AgentLinks``) against
  simulated agents, under a flood of connections that hold no secret.

``python -m bench.pods_scale.servers hub|dial ...`` is a server's process (the key in ``BENCH_KEY``, hex): it says
``port P``, then answers one line per command on stdin. ``open_dial_listener`` is the one place that names the
dial-back's server: where the dial-back moves (issue 54 item 1), it changes with it.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from typing import Any

from dslaunch.oslib import prctl
from dslaunch.oslib.ports import listen_port

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


# ---- the servers' processes ------------------------------------------------------------------------------------
def open_dial_listener(run_id: str, key: bytes) -> tuple[int, Any]:
    """The dial-back's server as the launcher opens it: its port, and a function of host names -> how many of them
    have joined."""
    from dslaunch.runners.remote.agent_links import AgentLinks

    links = AgentLinks(run_id, key)
    return links.port, lambda hosts: sum(links.joined(h) for h in hosts)


def _hub(run_id: str, key: bytes, args: list[str]) -> None:
    from dslaunch.runners.slurm.stop_channel import Hub

    nnodes, port = int(args[0]), int(args[1])
    hub = Hub(key, run_id, nnodes, port)
    print(f"port {port}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "connected":
            print(f"connected {len(hub.connected)}", flush=True)
        elif words[0] == "go":  # node 0's own proposal, for attempt 0: the agent's answer is printed when it comes
            hub.begin(0, lambda step: print(f"answer {step} {time.monotonic()}", flush=True))
            hub.propose(int(words[1]))
            print("went", flush=True)
        elif words[0] == "quit":
            break


def _dial(run_id: str, key: bytes, _args: list[str]) -> None:
    port, joined = open_dial_listener(run_id, key)
    print(f"port {port}", flush=True)
    for line in sys.stdin:
        words = line.split()
        if words[0] == "count":
            print(f"count {joined([f'agent-{i}' for i in range(int(words[1]))])}", flush=True)
        elif words[0] == "quit":
            break


def main(argv: list[str]) -> None:
    kind, run_id, *rest = argv
    key = bytes.fromhex(os.environ.pop("BENCH_KEY"))
    {"hub": _hub, "dial": _dial}[kind](run_id, key, rest)


# ---- the benchmark's side -------------------------------------------------------------------------------------
class Server:
    """A server's process: commands in, one line back each, each within ``timeout``."""

    def __init__(self, kind: str, run_id: str, key: bytes, args: list[str]) -> None:
        env = {**os.environ, "BENCH_KEY": key.hex(), "PYTHONPATH": REPO}
        prctl.load()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.pods_scale.servers", kind, run_id, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=REPO,
            start_new_session=True,
            preexec_fn=_die_with_us,
        )
        self.lines: list[str] = []
        self._buf = b""
        self.port = int(self.read("port", 30).split()[1])

    def read(self, word: str, timeout: float) -> str:
        """The next line that starts with ``word`` (other lines are kept in ``lines``)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buf:
                raw, _, self._buf = self._buf.partition(b"\n")
                line = raw.decode(errors="replace").strip()
                if line.startswith(word):
                    return line
                self.lines.append(line)
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError(f"no {word!r} line from the server within {timeout:g} s")
            chunk = os.read(fd, 65536)
            if not chunk:
                raise RuntimeError(f"the server exited ({self.proc.poll()}) before a {word!r} line")
            self._buf += chunk

    def ask(self, command: str, word: str, timeout: float = 30) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")
        self.proc.stdin.flush()
        return self.read(word, timeout)

    def close(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except ProcessLookupError:
            pass
        self.proc.wait(10)


def free_port() -> int:
    return listen_port("127.0.0.1")


if __name__ == "__main__":
    sys.path.insert(0, REPO)
    main(sys.argv[1:])


def _die_with_us() -> None:
    """In the child: SIGKILL when the benchmark dies, however it dies (prctl.load() ran in the parent)."""
    prctl.set_parent_death_signal(signal.SIGKILL)
