"""Put the plan on each pdsh host as a 0600 file before pdsh starts the agents.

pdsh cannot carry stdin, and its command line (like every ssh command line) is readable by
any user of either machine, so the plan, which holds the job's exported secrets, goes ahead
over OpenSSH: one ``ssh HOST 'umask 077 && mkdir -p DIR && cat > FILE'`` per host, in
parallel, the plan on its stdin. The agent reads the file and deletes it
(:func:`dslaunch.wire.plan_from_file`). A file nobody read (the agent could not start there)
goes with the job's reaper, which removes it in shell before it runs any python (the python
may be what is broken). A launcher killed between staging and its agents' start leaves its
files behind: each staging sweeps the files there older than ``STALE_AFTER``, which no agent
can still be on its way to. Staging also finds an unreachable host in ssh's connect time, not
pdsh's minute.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from dslaunch import wire
from dslaunch.plan import LaunchPlan

PLAN_DIR = ".cache/dslaunch/plans"  # relative to the remote $HOME (where the agent looks: not the shell's cwd)
STALE_AFTER = 600  # seconds: a plan file this old was left by a launcher that died before its agents came
# A pid file this old is swept too (a killed agent's; a longer job's stops then take the python path, reap.py)
PID_STALE_AFTER = 86400


def in_home(path: str) -> str:
    """``path`` (relative to the home) for a remote shell: under ``$HOME`` as the agent resolves it, whatever
    directory the session starts in (a shell startup file may ``cd``)."""
    return '"$HOME"/' + shlex.quote(path)


def plan_path(run_id: str, node_rank: int | str) -> str:
    """One file per node: hosts often share one home directory (NFS)."""
    return f"{PLAN_DIR}/{run_id}.{node_rank}.plan"


def pid_path(run_id: str, node_rank: int | str) -> str:
    """Where the agent that read ``plan_path`` keeps its pid while it runs (``python -m dslaunch.agent``)."""
    return f"{PLAN_DIR}/{run_id}.{node_rank}.pid"


def signal_command(run_id: str, node_rank: int, name: str) -> str:
    """Send signal ``name`` (TERM, USR1, ...) to node ``node_rank``'s agent on this host, in shell alone: the pid
    it wrote, and only while that process carries this run's id (a pid file left by a killed agent names a pid
    that may be reused). Prints ``signalled`` when it did; no python starts, so a stop costs only a session."""
    if not name.isalnum():
        raise ValueError(f"not a signal name: {name!r}")
    pid_file = in_home(pid_path(run_id, node_rank))
    mark = shlex.quote(f"DSLAUNCH_RUN_ID={run_id}")
    return (  # one process besides the shell: a stop of every node at once is that many sessions
        f'read -r p < {pid_file} && [ -n "$p" ] && grep -qzxF {mark} "/proc/$p/environ" 2>/dev/null '
        f'&& kill -{name} "$p" && echo signalled'
    )


def upload_command(run_id: str, node_rank: int | str) -> str:
    return f"umask 077 && mkdir -p {in_home(PLAN_DIR)} && cat > {in_home(plan_path(run_id, node_rank))}"


def stage_command(run_id: str, node_rank: int | str) -> str:
    """The upload, then the sweep of stale plan files there (which never fails the staging)."""
    return f"{upload_command(run_id, node_rank)} && {{ {sweep_command()} 2>/dev/null; true; }}"


def sweep_command() -> str:
    minutes = STALE_AFTER // 60
    days = PID_STALE_AFTER // 60
    return (
        f"find {in_home(PLAN_DIR)} -maxdepth 1 -type f "
        f"\\( -name '*.plan' -mmin +{minutes} -o -name '*.pid' -mmin +{days} \\) -exec rm -f {{}} +"
    )


def unstage_command(run_id: str) -> str:
    """Remove this job's plan (and agent pid) files on a host, in shell: nothing there needs to work but ``rm``."""
    stem = in_home(f"{PLAN_DIR}/{run_id}.")
    return f"rm -f -- {stem}*.plan {stem}*.pid"


def ssh_argv(host: str, ssh_options: Sequence[str], command: str) -> list[str]:
    return ["ssh", *ssh_options, "-o", "BatchMode=yes", "-x", "-a", "--", host, command]


def stage_plan(
    plan: LaunchPlan,
    ssh_options: Sequence[str],
    env: Mapping[str, str],
    fanout: int,
    timeout: float,
    *,
    after: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Upload the plan to every host of the plan, and ``after[host]`` as a second line (``dialback_text``,
    agent/dialback_client.py); return ``{host: why}`` for the hosts that failed."""
    payload = wire.plan_to_b64(plan) + "\n"
    files = [(n.host, n.node_rank, (payload + (after or {}).get(n.host, "")).encode()) for n in plan.nodes]
    return stage_files(plan.run_id, files, ssh_options=ssh_options, env=env, fanout=fanout, timeout=timeout)


def stage_files(
    run_id: str,
    files: Sequence[tuple[str, int | str, bytes]],
    *,
    ssh_options: Sequence[str],
    env: Mapping[str, str],
    fanout: int,
    timeout: float,
) -> dict[str, str]:
    """Upload each ``(host, name, payload)`` to ``plan_path(run_id, name)`` there, in parallel; return
    ``{host: why}`` for the hosts that failed."""

    def one(host: str, name: int | str, payload: bytes) -> tuple[str, str | None]:
        try:
            done = subprocess.run(
                ssh_argv(host, ssh_options, stage_command(run_id, name)),
                input=payload,
                capture_output=True,
                env=dict(env),
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return host, f"ssh did not finish within {timeout:.0f} s"
        except OSError as exc:
            return host, f"cannot run ssh: {exc.strerror}"
        if done.returncode != 0:
            why = done.stderr.decode("utf-8", "replace").strip().splitlines()
            return host, (why[-1] if why else f"ssh exited with code {done.returncode}")
        return host, None

    if not files:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(files)))) as pool:
        results = list(pool.map(one, *zip(*files)))
    return {host: why for host, why in results if why is not None}
