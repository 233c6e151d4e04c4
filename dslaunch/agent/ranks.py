"""Pure helpers: the argv and environment of each rank."""

from __future__ import annotations

from collections.abc import Mapping

from dslaunch import nesting
from dslaunch.oslib import binding
from dslaunch.plan import LaunchPlan, NodePlan

_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})


def rank_argv(plan: LaunchPlan, local_rank: int, node: NodePlan | None = None) -> list[str]:
    program = plan.program
    # Right after the script, before its own arguments, where DeepSpeed's launcher puts it: a script
    # that collects the rest of its command line (argparse REMAINDER) still parses --local_rank.
    local_rank_arg = [f"--local_rank={local_rank}"] if program.local_rank_arg else []
    if program.no_python:
        argv = [program.target, *local_rank_arg, *program.args]
    else:
        argv = [program.python, "-u", "-m", "dslaunch.bootstrap"]
        argv += ["-m", program.target] if program.module else [program.target]
        argv += [*local_rank_arg, *program.args]
    cores = binding.cores_for(plan.bind_cores, (node or plan.nodes[0]).nproc, local_rank)
    return argv if cores is None else [*binding.numactl_argv(cores), *argv]


def rank_env(
    plan: LaunchPlan,
    node: NodePlan,
    local_rank: int,
    base: Mapping[str, str],
    error_file: str,
) -> dict[str, str]:
    rank = node.ranks[local_rank]
    env = dict(base)
    env.update(plan.env)
    env.update(
        RANK=str(rank),
        LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(plan.world_size),
        LOCAL_WORLD_SIZE=str(node.nproc),
        NODE_RANK=str(node.node_rank),
        GROUP_RANK=str(node.node_rank),
        GROUP_WORLD_SIZE=str(len(plan.nodes)),
        ROLE_RANK=str(rank),
        ROLE_WORLD_SIZE=str(plan.world_size),
        MASTER_ADDR=plan.master_addr,
        MASTER_PORT=str(plan.master_port),
        CROSS_RANK=str(node.node_rank),
        CROSS_SIZE=str(len(plan.nodes)),
        LOCAL_SIZE=str(node.nproc),
        CUDA_VISIBLE_DEVICES=",".join(node.slots),
        DSLAUNCH_RUN_ID=plan.run_id,
        DSLAUNCH_ERROR_FILE=error_file,
        DSLAUNCH_HOST=node.host,
        PYTHONUNBUFFERED="1",
        DSLAUNCH_RESTART_COUNT=str(plan.restarts.count),
        DSLAUNCH_STOP_GRACE=f"{plan.stop_grace:g}",  # a stop's SIGTERM to the rank + this: its group's SIGTERM
        # torchrun's contract (local_elastic_agent.py), with dslaunch's true values: rank 0 hosts the
        # TCPStore itself (no agent store), so torch's env:// init must not wait for one.
        TORCHELASTIC_RUN_ID=plan.run_id,
        ROLE_NAME="default",
        TORCHELASTIC_RESTART_COUNT=str(plan.restarts.count),
        TORCHELASTIC_MAX_RESTARTS=str(plan.restarts.max_restarts),
        TORCHELASTIC_USE_AGENT_STORE="False",
        TORCHELASTIC_ERROR_FILE=error_file,  # @record writes here; the agent reads it for the summary
    )
    if "NCCL_ASYNC_ERROR_HANDLING" not in env:  # torch would read ours over this older name the user set
        env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")  # torchrun's default; base and --export win
    if plan.master_addr in _LOOPBACK and "GLOO_SOCKET_IFNAME" not in env:
        env["GLOO_SOCKET_IFNAME"] = "lo"  # gloo otherwise needs this host's name to resolve
    if node.nproc > 1 and "OMP_NUM_THREADS" not in base and "OMP_NUM_THREADS" not in dict(plan.env):
        env["OMP_NUM_THREADS"] = "1"  # as torchrun: N ranks x all cores oversubscribes the node
    cores = binding.cores_for(plan.bind_cores, node.nproc, local_rank)
    if cores is not None and "OMP_NUM_THREADS" not in base and "OMP_NUM_THREADS" not in dict(plan.env):
        env["OMP_NUM_THREADS"] = str(len(cores))  # one thread per bound core, as DeepSpeed
    # Last: a dslaunch this rank runs forgets exactly these settings, and never takes these run ids.
    env[nesting.CHAIN_VAR] = nesting.chain(env, plan.run_id)
    env[nesting.RECORD_VAR] = nesting.record(env)
    return env
