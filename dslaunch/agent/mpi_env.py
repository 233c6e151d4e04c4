"""What a node agent started by ``mpirun``/``mpiexec`` reads from its MPI environment (stdlib only)."""

from __future__ import annotations

from collections.abc import Mapping, MutableMapping

from dslaunch.errors import DslaunchError
from dslaunch.limits import ascii_int

# The process's rank in the MPI job = its node rank (one agent per host): Open MPI, PMIx, MPICH/Hydra.
RANK_VARS = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK")
# MPI's idea of rank and size describes the agents, not the job's ranks: user code must not see it.
IDENTITY_PREFIXES = (
    "OMPI_COMM_WORLD_",
    "OMPI_UNIVERSE_SIZE",
    "PMIX_RANK",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
)


# The launcher's dial-back line (agent/dialback_client.dialback_text) and its address, exported by name to every
# agent: mpirun carries nothing to one agent, so each dials back for a stop's step (runners/mpi.py).
DIAL_VAR = "DSLAUNCH_MPI_DIAL"
DIAL_ADDR_VAR = "DSLAUNCH_DIAL_ADDR"


def dial_name(node_rank: int) -> str:
    """The name an agent gives the launcher's dial-back port: every agent gets the same line."""
    return f"mpi-node-{node_rank}"


def take_dial(env: MutableMapping[str, str]) -> tuple[str, dict[str, str]] | None:
    """The dial-back line and the address to dial, removed from ``env`` so no rank inherits them; None: none."""
    line = env.pop(DIAL_VAR, None)
    address = env.pop(DIAL_ADDR_VAR, None)
    if line is None:
        return None
    return line, ({DIAL_ADDR_VAR: address} if address else {})


class MpiEnvError(DslaunchError):
    pass


def node_rank(env: Mapping[str, str]) -> int:
    for name in RANK_VARS:
        value = env.get(name)
        if value is not None:
            rank = ascii_int(value)
            if rank is None:
                raise MpiEnvError(f"{name}={value!r} is not a rank")
            return rank
    raise MpiEnvError(f"--node-rank mpi: none of {', '.join(RANK_VARS)} is set: start the agent with mpirun/mpiexec")


def scrub(env: MutableMapping[str, str]) -> None:
    """Drop the MPI rank identity so ranks see only dslaunch's RANK/WORLD_SIZE."""
    for name in [n for n in env if n.startswith(IDENTITY_PREFIXES)]:
        del env[name]
