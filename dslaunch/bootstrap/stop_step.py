"""One stop step for the whole job, the rank's side: :func:`should_stop` and :func:`stop_deadline` (stdlib only).

The node agent gives each rank a shared page of its own, ``DSLAUNCH_STOP_FILE`` (agent/stop_pages.py), of native
64-bit words (the agent maps it on the same machine), mapped here once: a call is a few memory accesses, no system
call:

- ``WORD``, written by the agent: 0 while no stop was requested; ``PENDING`` (1) once one was and the job's stop
  step is not known yet; ``step << 1 | 1`` once it is: the call number at which :func:`should_stop` answers True.
  One word, so a rank never sees a state without its step, on any memory model.
- ``DEADLINE``, written by the agent before ``WORD``: a double, the wall-clock time at which the ranks' process
  groups get SIGTERM (0.0: none).
- ``CALLS``, written by the rank: how many times it called :func:`should_stop`; a rank that has called it is a
  *participant*: at a stop request it gets no signal, it stops at the job's step.

The step is agreed outside the ranks (the agents propose ``max(CALLS) + 1`` of their participants, the launcher
takes the largest, docs/stopping.md), so ranks never wait on each other here: a rank waits only while ``PENDING``,
for the launcher's answer, polling every ``POLL`` seconds, and no longer than the deadline.
"""

from __future__ import annotations

import os
import struct
import time

TYPE_CHECKING = False  # typing is not imported at run time: a rank's import stays cheap
if TYPE_CHECKING:
    import mmap

ENV = "DSLAUNCH_STOP_FILE"
WORD, DEADLINE, CALLS = 0, 1, 2  # word indexes
PAGE_BYTES = 64  # one cache line; the words past CALLS are spare
PENDING = 1
POLL = 0.001

_page: memoryview | None = None  # this rank's page as 64-bit words ("Q"); None until attached
_mapped: mmap.mmap | None = None  # the page itself
_absent = False  # no page (not under dslaunch, or the file is gone): should_stop() is always False
_calls = 0


def target_word(step: int) -> int:
    """``WORD`` once the job's stop step is known."""
    return step << 1 | 1


def decide(word: int, calls: int) -> bool | None:
    """What call number ``calls`` answers, ``WORD`` being ``word``: True (stop now), False (go on), or None (the
    step is not known yet: wait)."""
    if not word:
        return False
    step = word >> 1
    return None if not step else calls >= step


def should_stop() -> bool:
    """True on every rank of the job at the same call, once a stop was requested anywhere in the job.

    Call it once per step, at the same point of the step, on every rank; on True, save and exit. Outside
    dslaunch it is always False.
    """
    global _calls
    _calls += 1
    page = _page if _page is not None else _attach()
    if page is None:
        return False
    page[CALLS] = _calls
    word = page[WORD]
    if not word:
        return False
    return _wait_for_step(page, word)


def stop_deadline() -> float | None:
    """The wall-clock time (``time.time()``) at which the ranks' process groups get SIGTERM; None while no stop
    was requested (or outside dslaunch)."""
    page = _page if _page is not None else _attach()
    if page is None or not page[WORD]:
        return None
    return read_deadline(_mapped) or None


def calls() -> int:
    """How many times this process called :func:`should_stop`."""
    return _calls


def _wait_for_step(page: memoryview, word: int) -> bool:
    """Stop requested: the answer once the job's step is known; True at the deadline if it never comes."""
    while True:
        answer = decide(word, _calls)
        if answer is not None:
            return answer
        deadline = read_deadline(_mapped)
        if deadline and time.time() >= deadline:
            return True  # the groups get SIGTERM now: saving something beats saving nothing
        time.sleep(POLL)
        word = page[WORD]


def read_deadline(mapped: mmap.mmap | None) -> float:
    return float(struct.unpack_from("d", mapped, DEADLINE * 8)[0]) if mapped is not None else 0.0


def write_deadline(mapped: mmap.mmap, deadline: float) -> None:
    struct.pack_into("d", mapped, DEADLINE * 8, deadline)


def _attach() -> memoryview | None:
    global _page, _mapped, _absent
    if _absent:
        return None
    path = os.environ.get(ENV)
    if not path:
        _absent = True
        return None
    import mmap

    try:
        fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        try:
            mapped = mmap.mmap(fd, PAGE_BYTES)
        finally:
            os.close(fd)
    except (OSError, ValueError):
        _absent = True
        return None
    _mapped = mapped
    _page = memoryview(mapped).cast("Q")
    return _page
