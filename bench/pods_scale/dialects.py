"""How each simulated client speaks and retries, as its real counterpart does today (one place to switch).

A member pod (``pods/member.join``), a Slurm task's stop channel (``runners/slurm/stop_channel.Spoke``) and a
pdsh/MPI agent's dial-back (``agent/dialback_client.connect_back``) differ in who speaks first, whether the lines
after the handshake are sealed (``channel/link.Sealer``, with heartbeats), how they retry, and what makes them
give up. The constants are read from the project where it has them, so a changed bound is followed at once; a
changed *rule* (say, the dial-back moving onto ``channel/``: hello first, sealed lines, retries) is a new
``Dialect`` here, chosen by name (``--dial-dialect``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Dialect:
    name: str
    hello_first: bool  # the client proves itself in its first line (channel/door.py); else the server's challenge
    sealed: bool  # every line after the welcome MACed, heartbeats both ways, silence noticed (channel/link.py)
    retry: tuple[float, float]  # the first and the longest wait between two tries (doubling in between)
    tries: int  # 0: until the deadline
    connect_timeout: float
    handshake_time: float  # from the connection to the welcome
    answer_eof_gives_up: bool  # a connection that ends after the answer is taken as a refusal (no more tries)
    shape: bool  # the answer carries the pod's shape (pods/shape.py)


def pod() -> Dialect:
    """A member pod's launcher (pods/member.join, through channel/dial.py): tries backing off from BACKOFF.first to
    BACKOFF.longest (with jitter) until its join deadline, CONNECT_TRY to connect, HANDSHAKE_TIME to finish."""
    from dslaunch.channel import dial

    retry = (dial.BACKOFF.first, dial.BACKOFF.longest)
    return Dialect("pod", True, True, retry, 0, dial.CONNECT_TRY, dial.HANDSHAKE_TIME, False, True)


def pod_retry() -> Dialect:
    """A member pod that tries again whatever ended a try, until its join deadline (as the issue's own simulator
    did, and as issue 54 item 1 asks of every client): the figures past the join at sizes where ``pod`` gives up."""
    from dataclasses import replace

    return replace(pod(), name="pod, retrying", answer_eof_gives_up=False)


def task() -> Dialect:
    """A Slurm task's stop channel (stop_channel.Spoke, through channel/dial.py): as a pod, for CONNECT_TIME."""
    from dataclasses import replace

    return replace(pod(), name="task", shape=False)


def dial_challenge_first() -> Dialect:
    """Today's dial-back agent (agent/dialback_client.connect_back): one try; the listener sends its challenge
    first; nothing after the welcome is sealed (the control lines carry no MAC)."""
    from dslaunch.agent import dialback_client as dc

    timeout = getattr(dc, "DIALBACK_TIMEOUT", 10.0)
    return Dialect("dial-back, challenge first", False, False, (0.0, 0.0), 1, timeout, timeout, True, False)


def dial_channel() -> Dialect:
    """The dial-back on ``channel/`` (issue 54 item 1): as a Slurm task, hello first, sealed, retried."""
    return Dialect("dial-back on channel/", True, True, (0.05, 0.5), 0, 2.0, 5.0, False, False)


def flood() -> Dialect:
    """A client without the secret: connects, says nothing, reconnects 0.1 s after it is dropped."""
    return Dialect("flood", False, False, (0.1, 0.1), 0, 2.0, 1e9, False, False)


BY_NAME = {
    "pod": pod,
    "pod-retry": pod_retry,
    "task": task,
    "dial-challenge-first": dial_challenge_first,
    "dial-channel": dial_channel,
    "flood": flood,
}
