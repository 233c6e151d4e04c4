"""The plan on the wire: JSON, base64 for transports that need one line or one variable.

It carries exported environment values (tokens, keys), so it never travels on a command line, which any user can
read in ``/proc/PID/cmdline``. The launcher sends it on the agent's stdin (local, ssh), in the agent's environment
(srun, mpirun/mpiexec: ``PLAN_VAR``), or in a 0600 file that the agent deletes once read (pdsh, which cannot carry
stdin).
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import MutableMapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from dslaunch.plan import LaunchPlan

PLAN_VAR = "DSLAUNCH_PLAN_B64"


class WireError(ValueError):
    """A plan or message that does not decode."""


def plan_to_b64(plan: LaunchPlan) -> str:
    return base64.urlsafe_b64encode(plan.to_json().encode()).decode()


def plan_from_b64(text: str) -> LaunchPlan:
    from dslaunch.plan import LaunchPlan

    try:
        return LaunchPlan.from_json(base64.urlsafe_b64decode(text.encode()).decode())
    except (binascii.Error, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise WireError(f"the launch plan does not decode: {type(exc).__name__}: {str(exc)[:200]}") from None


def plan_from_env(env: MutableMapping[str, str]) -> LaunchPlan | None:
    """The plan in ``PLAN_VAR``, removed from ``env`` so no rank inherits it; None when absent."""
    text = env.pop(PLAN_VAR, None)
    return None if text is None else plan_from_b64(text)


def plan_from_file(path: str) -> LaunchPlan:
    """Read the plan from a 0600 file and delete it at once: it holds the job's secrets."""
    return staged_from_file(path)[0]


def staged_from_file(path: str) -> tuple[LaunchPlan, str | None]:
    """The plan from a staged 0600 file (deleted at once: it holds the job's secrets), and the ``dialback_text`` line
    after it, if any (pdsh: the way back to the launcher, agent/dialback_client.py)."""
    try:
        with open(path, encoding="ascii") as f:
            text = f.read().strip()
    except OSError as exc:
        raise WireError(f"cannot read the launch plan {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise WireError(f"the launch plan {path} is not ASCII") from None
    finally:
        try:
            os.unlink(path)
        except OSError:
            pass
    plan_line, _, dial = text.partition("\n")
    return plan_from_b64(plan_line.strip()), dial.strip() or None
