"""Serves its first attempt's forks, then hangs when the launcher asks it, before a restart, whether it can still
fork (a zygote stuck in a preloaded module's code): the launcher must replace it, not wait for it."""

import sys
import time

serving = sys.modules["__main__"]  # the zygote runs as ``python -m dslaunch.agent.preload.server``
_answer = serving.Server._answer


def _hang_on_check(self, data, fds):  # type: ignore[no-untyped-def]
    if data.get("check"):
        time.sleep(3600)
    return _answer(self, data, fds)


serving.Server._answer = _hang_on_check
