"""The process groups a rank holds through dslaunch, and their end: destroyed, released, collected, and the gloo
worker threads still alive after that counted (docs/teardown.md, "The fix").

Two callers end them, and neither imports the other: the engine (``Engine.close``, and its own atexit handler where
no bootstrap runs: engine.py) and the bootstrap's last atexit handler (teardown.py). Each hands over the engine it
finds and how to forget it; this module imports neither.
"""

from __future__ import annotations

import gc
import os
import sys

TYPE_CHECKING = False  # typing itself is not imported at run time: every rank imports this module at start-up
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    from dslaunch.bootstrap.mesh_build import BuiltMesh

    class Holder(Protocol):
        """What ending the groups needs of the engine (engine.Engine)."""

        owns_process_group: bool  # it made WORLD (else it adopted the script's)
        built_mesh: BuiltMesh | None  # its mesh, whose groups are dslaunch's own


GLOO_WORKER = "pt_gloo_runloop"  # thread name ProcessGroupGloo gives its workers

# "at_exit": the bootstrap's last atexit handler ends the groups (teardown.install), so the engine's own handler
# leaves them to it; "collected": the groups were ended and the garbage collected (the rank's end skips a second one)
_state = {"at_exit": False, "collected": False}


def end_at_exit() -> None:
    """The bootstrap's last atexit handler will end the groups (teardown.install)."""
    _state["at_exit"] = True


def ended_at_exit() -> bool:
    """Whether the bootstrap's last atexit handler ends the groups (then the engine's own handler does not)."""
    return _state["at_exit"]


def collected() -> bool:
    """Whether :func:`shutdown_distributed` ran and collected the garbage."""
    return _state["collected"]


def gloo_workers() -> list[int]:
    """Thread ids of this process's live gloo worker threads."""
    found = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm", encoding="ascii", errors="replace") as f:
                if f.read().strip() == GLOO_WORKER:
                    found.append(int(tid))
        except OSError:
            continue  # the thread ended while we looked
    return found


def shutdown_distributed(current: Holder | None, release: Callable[[], None], *, destroy_adopted: bool) -> list[int]:
    """Destroy process groups, release dslaunch's references (``release``: forget ``current``, the engine),
    collect; the gloo workers left alive."""
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return []  # torch.distributed never imported: no worker threads can exist
    owned = current is not None and current.owns_process_group
    try:
        if dist.is_available() and dist.is_initialized():
            if destroy_adopted or owned:
                dist.destroy_process_group()  # every group, WORLD included
            elif current is not None and current.built_mesh is not None:
                for group in current.built_mesh.own_groups():  # the user keeps WORLD; the mesh's groups are ours
                    dist.destroy_process_group(group)
    except Exception as exc:  # noqa: BLE001 - a broken group must not turn a clean exit into a traceback
        print(f"dslaunch: destroying process groups at exit failed: {exc}", file=sys.stderr)
    release()
    gc.collect()
    _state["collected"] = True
    return gloo_workers()
