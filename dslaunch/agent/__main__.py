"""``python -m dslaunch.agent --node-rank N [--plan-file PATH] [--no-control]``, or ``--for-job [--dial-file PATH]``:
a job agent and takes each attempt on its stdin, or on the connection it dials back to the
launcher (agent/job_agent.py, agent/dialback_client.py)."""

from __future__ import annotations

import argparse
import os
import signal
import sys

from dslaunch import wire
from dslaunch.agent import mpi_env
from dslaunch.agent.run_node import read_line, run_node
from dslaunch.oslib import prctl
from dslaunch.plan import LaunchPlan


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dslaunch.agent")
    parser.add_argument("--node-rank", help="N, or 'mpi': this process's rank under mpirun/mpiexec")
    parser.add_argument("--for-job", action="store_true", help="live for the job: each attempt comes on stdin")
    parser.add_argument(
        "--plan-file",
        help=f"read the plan from this file (relative: to $HOME) and delete it; default: ${wire.PLAN_VAR}, "
        "else the first line of stdin",
    )
    parser.add_argument(
        "--dial-file", help="with --for-job: dial back to the launcher as this staged file says (relative: to $HOME)"
    )
    parser.add_argument("--no-control", action="store_true", help="do not watch stdin for stop/EOF")
    args = parser.parse_args(argv)
    if args.for_job:
        return _for_job(args.dial_file)
    if args.node_rank is None:
        parser.error("--node-rank is required (or --for-job)")
    mpi_dial, under_mpi = None, args.node_rank == "mpi"
    try:
        if args.node_rank == "mpi":
            args.node_rank = mpi_env.node_rank(os.environ)
            mpi_env.scrub(os.environ)
            mpi_dial = mpi_env.take_dial(os.environ)
        args.node_rank = int(args.node_rank)
    except (ValueError, mpi_env.MpiEnvError) as exc:
        parser.error(f"--node-rank: {exc}")

    # The launcher's death (even SIGKILL) must tear this node down.
    prctl.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() == 1:
        return 143

    try:
        plan, pending, dial = _read_plan(args.plan_file)
    except wire.WireError as exc:
        print(f"dslaunch agent: {exc}", file=sys.stderr)
        return 2
    if not 0 <= args.node_rank < len(plan.nodes):
        print(f"dslaunch agent: node rank {args.node_rank} is not in 0..{len(plan.nodes) - 1}", file=sys.stderr)
        return 2
    control = None if args.no_control else sys.stdin.buffer
    side = _watch_launcher(plan.run_id, args.node_rank, dial, mpi_dial)
    pid_file = _write_pid(args.plan_file)
    removed = (lambda: _remove(pid_file)) if pid_file is not None else None  # before Done: pdsh may end us then
    try:
        code = run_node(plan, args.node_rank, control, pending, before_done=removed, side_control=side)
    finally:
        if removed is not None:
            removed()
    if args.plan_file:  # pdsh: every host's stderr shares its one pipe; this says this host's is all there
        from dslaunch.agent.node_io import write_attempt_end

        write_attempt_end(2)
    # Under mpirun the code is in the Done event: a nonzero exit would make Open MPI kill every other node's agent at
    # once, before a stop's slower nodes have run on to the job's step (the launcher's fail-fast ends a failed job).
    return 0 if under_mpi else code


def _watch_launcher(
    run_id: str, node_rank: int, dial: str | None, mpi_dial: tuple[str, dict[str, str]] | None
) -> int | None:
    """pdsh, mpirun: no stdin carries a partition's news or the stop step; a dial-back connection does. The pipe it
    writes to (``NodeLoop.watch_side``), or None."""
    if dial is None and mpi_dial is None:
        return None
    from dslaunch.agent.dialback_client import watch_launcher

    side, forward = os.pipe()
    if mpi_dial is not None:
        watch_launcher(
            mpi_dial[0], run_id, mpi_dial[1], forward, name=mpi_env.dial_name(node_rank), node_rank=node_rank
        )
    elif dial is not None:
        watch_launcher(dial, run_id, os.environ, forward, node_rank=node_rank)
    return side


def _read_plan(plan_file: str | None) -> tuple[LaunchPlan, bytes, str | None]:
    """The plan (from a staged file, ``$DSLAUNCH_PLAN``, else stdin's first line), the control bytes that came with
    it, and a staged file's dial-back line."""
    if plan_file:
        plan, dial = wire.staged_from_file(os.path.join(os.path.expanduser("~"), plan_file))
        return plan, b"", dial
    found = wire.plan_from_env(os.environ)
    if found is not None:
        return found, b"", None
    line, pending = read_line(sys.stdin.fileno())
    return wire.plan_from_b64(line.decode("ascii", "replace").strip()), pending, None


def _for_job(dial_file: str | None) -> int:
    from dslaunch.agent.job_agent import serve

    prctl.set_parent_death_signal(signal.SIGTERM)
    if os.getppid() == 1:
        return 143
    try:
        if dial_file is None:
            return serve(sys.stdin.buffer)
        return _dialled(os.path.join(os.path.expanduser("~"), dial_file))
    except KeyboardInterrupt:
        return 130


def _dialled(path: str) -> int:
    """A job agent on the link it dialled back on: its lines, each checked against its MAC, come through a pipe
    (``dialback_client.forward_lines``), whose EOF is the link's end."""
    import threading

    from dslaunch.agent.dialback_client import DialBackError, dial_back, forward_lines
    from dslaunch.agent.job_agent import serve

    try:
        link, host = dial_back(path, os.environ.get("DSLAUNCH_RUN_ID", ""), os.environ)
    except (DialBackError, wire.WireError) as exc:
        print(f"dslaunch agent: {exc}", file=sys.stderr, flush=True)
        return 2
    side, forward = os.pipe()
    threading.Thread(target=forward_lines, args=(link, forward), name="launcher link", daemon=True).start()
    try:
        with open(side, "rb", buffering=0) as control:
            return serve(control, b"", host)
    finally:
        link.close()


def _write_pid(plan_file: str | None) -> str | None:
    """Beside a staged plan (pdsh), this agent's pid, so a stop or a signal is a shell one-liner there
    (``remote/stage.signal_command``) rather than a python that searches /proc."""
    if not plan_file or not plan_file.endswith(".plan"):
        return None
    path = os.path.join(os.path.expanduser("~"), plan_file.removesuffix(".plan") + ".pid")
    try:
        fd = os.open(path + ".new", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(f"{os.getpid()}\n")
        os.replace(path + ".new", path)
    except OSError:
        return None  # a stop then takes the python path (dslaunch.runners.remote.reap --agent-signal)
    return path


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # skip interpreter teardown: the launcher is waiting on us
