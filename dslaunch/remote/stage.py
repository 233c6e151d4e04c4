"""Put the plan on each pdsh host as a 0600 file before pdsh starts the agents.

pdsh cannot carry stdin, and its command line (like every ssh command line) is readable by
any user of either machine, so the plan, which holds the job's exported secrets, goes ahead
over OpenSSH: one ``ssh HOST 'umask 077 && mkdir -p DIR && cat > FILE'`` per host, in
parallel, the plan on its stdin. The agent reads the file and deletes it
(:func:`dslaunch.wire.plan_from_file`); the run-id reaper deletes one that was never read.
Staging also finds an unreachable host in ssh's connect time, not pdsh's minute.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor

from dslaunch import wire
from dslaunch.plan import LaunchPlan

PLAN_DIR = ".cache/dslaunch/plans"  # relative to the remote home, where ssh commands start


def plan_path(run_id: str, node_rank: int | str) -> str:
    """One file per node: hosts often share one home directory (NFS)."""
    return f"{PLAN_DIR}/{run_id}.{node_rank}.plan"


def upload_command(run_id: str, node_rank: int) -> str:
    return f"umask 077 && mkdir -p {PLAN_DIR} && cat > {shlex.quote(plan_path(run_id, node_rank))}"


def ssh_argv(host: str, ssh_options: Sequence[str], command: str) -> list[str]:
    return ["ssh", *ssh_options, "-o", "BatchMode=yes", "-x", "-a", "--", host, command]


def stage_plan(
    plan: LaunchPlan, ssh_options: Sequence[str], env: Mapping[str, str], fanout: int, timeout: float
) -> dict[str, str]:
    """Upload the plan to every host of the plan; return ``{host: why}`` for the hosts that failed."""
    payload = (wire.plan_to_b64(plan) + "\n").encode()

    def one(node_rank: int, host: str) -> tuple[str, str | None]:
        try:
            done = subprocess.run(
                ssh_argv(host, ssh_options, upload_command(plan.run_id, node_rank)),
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

    with ThreadPoolExecutor(max_workers=max(1, min(fanout, len(plan.nodes)))) as pool:
        results = list(pool.map(one, [n.node_rank for n in plan.nodes], [n.host for n in plan.nodes]))
    return {host: why for host, why in results if why is not None}
