"""The shell command that starts a node agent on a remote host (pure).

The only values that reach the remote shell are paths, the run id and the node
rank; each is quoted with :func:`shlex.quote`. Script arguments and the rank
environment travel inside the plan (stdin, or a staged 0600 file for pdsh),
never on a command line.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from dslaunch.plan import LaunchPlan
from dslaunch.runners.remote.stage import unstage_command

# Exported variables the agent process itself needs (to import dslaunch, say), not only its ranks.
AGENT_ENV_NAMES = ("PYTHONPATH",)


def agent_command(
    plan: LaunchPlan,
    node_rank: int | str,
    *,
    venv_script: str | None = None,
    plan_file: str | None = None,
    for_job: bool = False,
    host: str | None = None,
    dial_file: str | None = None,
) -> str:
    """``cd CWD && [. VENV &&] exec env DSLAUNCH_RUN_ID=.. PYTHON -u -m dslaunch.agent --node-rank N``.

    ``plan_file`` names the staged plan (relative to the remote home) for transports
    without a usable stdin; otherwise the plan is the first line the agent reads. ``for_job``: an agent that
    lives for the job (``--for-job``), which takes each attempt, with its node rank, on its stdin. ``host``: the
    host's name in the plan, as ``DSLAUNCH_HOST`` in the agent's environment (its ranks have it too), so a reap
    of that host finds the agent and its zygote, and only that host's (``reap_command``).
    """
    parts: list[str] = []
    if plan.cwd:
        parts.append(f"cd {shlex.quote(plan.cwd)}")
    if venv_script:
        parts.append(f". {shlex.quote(venv_script)}")
    env: Mapping[str, str] = dict(plan.env)
    assignments = [f"DSLAUNCH_RUN_ID={plan.run_id}", *([f"DSLAUNCH_HOST={host}"] if host is not None else [])]
    assignments += [f"{name}={env[name]}" for name in AGENT_ENV_NAMES if name in env]
    role = ["--for-job"] if for_job else ["--node-rank", str(node_rank)]
    argv = ["env", *assignments, plan.program.python, "-u", "-m", "dslaunch.agent", *role]
    if plan_file is not None:
        argv += ["--plan-file", plan_file]
    if dial_file is not None:
        argv += ["--dial-file", dial_file]
    parts.append("exec " + shlex.join(argv))
    return " && ".join(parts)


def reap_command(
    plan: LaunchPlan, venv_script: str | None = None, *, agent_signal: str | None = None, host: str | None = None
) -> str:
    """Kill whatever of this job is left on a host (by run id, never by name); see dslaunch.runners.remote.reap.

    With ``agent_signal`` (TERM, USR1...) only send that signal to the job's node agent there. With ``host``, only
    the processes of the job that carry ``DSLAUNCH_HOST=host`` (hosts that share a machine, as in a test bed).
    """
    options = ["--agent-signal", agent_signal] if agent_signal else ["--host", host] if host is not None else []
    argv = [plan.program.python, "-m", "dslaunch.runners.remote.reap", *options, plan.run_id]
    prefix = f". {shlex.quote(venv_script)} && " if venv_script else ""
    if not agent_signal:  # the staged plan files first, in shell: the python may be what failed there
        prefix = f"{unstage_command(plan.run_id)}; {prefix}"
    return prefix + "exec " + shlex.join(argv)
