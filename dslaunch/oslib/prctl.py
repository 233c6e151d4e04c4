"""Linux parent-death signal and child subreaper, in a module small enough for the launcher to import at once."""

from __future__ import annotations

from typing import Any

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_prctl: Any = None


def load() -> None:
    """Resolve prctl in the parent, so a fork child only makes the call (no import after fork)."""
    global _prctl
    if _prctl is None:
        try:
            import ctypes

            _prctl = ctypes.CDLL(None, use_errno=True).prctl
        except (OSError, AttributeError):
            _prctl = False


def set_parent_death_signal(sig: int) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent dies (no-op off Linux)."""
    load()
    if _prctl:
        _prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)


def set_child_subreaper() -> bool:
    """Make orphaned descendants (double-forked daemons) this process's children, not init's."""
    load()
    return bool(_prctl) and _prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
