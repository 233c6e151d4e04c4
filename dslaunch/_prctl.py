"""Linux parent-death signal, in a module small enough for the launcher to import at once."""

from __future__ import annotations

from typing import Any

_PR_SET_PDEATHSIG = 1
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
