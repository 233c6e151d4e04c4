"""Safe to fork once: after the zygote's first fork it starts a thread, so it is unsafe from then on."""

import os
import threading
import time

_ZYGOTE = os.getpid()
_forks = [0]


def _after_fork() -> None:
    if os.getpid() != _ZYGOTE:
        return  # a waiter forking its rank
    _forks[0] += 1
    if _forks[0] == 1:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True, name="started-after-fork").start()


os.register_at_fork(after_in_parent=_after_fork)
