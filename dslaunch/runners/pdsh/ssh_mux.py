"""One shared OpenSSH connection per host for the pdsh runner (``ControlMaster``), so a host costs one handshake.

pdsh cannot carry stdin, so a pdsh job opens more than one session a host: staging the plan, pdsh's own session
running the agent, and one per stop or relayed signal (and the reaper's). Each was a new connection: a key
exchange and, on the host, sshd starting over, as costly as the whole session. Here the first of our own ssh
commands to a host (``ControlMaster=auto``) becomes that host's master and every later one, pdsh's clients
included (``ControlMaster=no``: they never become one), is a session on it: a stop is a shell on an open
connection, not a handshake.

The masters are not our children (ssh puts a persisting master in the background), so the runner ends them
itself when the job is over (:meth:`SshMux.close`, by the private socket folder on their command line). A launcher
killed with SIGKILL cannot: its pdsh dies with it, which ends pdsh's sessions, and each master then goes on its
own ``PERSIST`` seconds (60) after its last session.
"""

from __future__ import annotations

import os
import shutil
import signal
import tempfile

# Seconds a master stays after its last session. Staging ends on the first hosts long before pdsh's clients come
# for them (128 hosts on a 2-core test bed: 30 s); a master gone by then costs that host a second handshake, and
# at 10 s half of them were (fail-fast 12 s at 128 hosts, as if unshared). It is also how long a master outlives
# a launcher killed with SIGKILL.
PERSIST = 60


class SshMux:
    def __init__(self) -> None:
        # /tmp, not $TMPDIR: a socket's path must fit in 108 bytes, and %C is 40 of them
        self.dir = tempfile.mkdtemp(prefix="dsl-mux-", dir="/tmp" if os.path.isdir("/tmp") else None)
        self._path = f"ControlPath={self.dir}/%C"

    def options(self) -> list[str]:
        """For our own ssh commands: the first one to a host opens its master, the others share it."""
        return ["-o", self._path, "-o", "ControlMaster=auto", "-o", f"ControlPersist={PERSIST}"]

    def client_options(self) -> list[str]:
        """For pdsh's ssh clients: a session on the host's master when there is one, else their own connection."""
        return ["-o", self._path, "-o", "ControlMaster=no"]

    def close(self) -> None:
        """End every master (and any session still on one), then the socket folder."""
        for pid in processes_naming(self.dir):
            try:
                os.kill(pid, signal.SIGTERM)
            except OSError:
                pass
        shutil.rmtree(self.dir, ignore_errors=True)


def processes_naming(text: str, proc: str = "/proc") -> list[int]:
    """The processes with ``text`` in one of their command-line words (ours: ssh with our ControlPath)."""
    needle = text.encode()
    found = []
    for entry in os.listdir(proc):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"{proc}/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    found.append(int(entry))
        except OSError:
            continue
    return found
