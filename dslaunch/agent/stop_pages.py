"""Each rank's stop page (``dslaunch.should_stop()``): a stand-in until issue 38 item 2 lands.

The node agent creates one :class:`StopPages` per attempt; at a requested stop it marks the stop (with the deadline)
in every rank's page, and the ranks that take part in ``should_stop()`` get no signal: they stop at the agreed step.
This stand-in has no pages and no participants, so every rank gets the stop's signal (docs/stopping.md).
"""

from __future__ import annotations


class StopPages:
    """No pages yet: every rank is a non-participant."""

    def env_for(self, rank: int) -> dict[str, str]:
        return {}

    def request(self, deadline: float) -> None:
        """Mark a stop pending in every rank's page; ``deadline``: wall time the groups get SIGTERM."""

    def participants(self) -> set[int]:
        return set()

    def close(self) -> None:
        pass
