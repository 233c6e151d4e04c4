"""The job's run id: as given, else agreed by every node's launcher without a word, else drawn at random.

The id tags every process of the job (the teardown sweeps key on it, with the node rank), names its temporary
files and is every rank's ``DSLAUNCH_RUN_ID`` and ``TORCHELASTIC_RUN_ID``. Where one launcher plans every node,
it draws the id and the plan carries it to them. Where each node's launcher plans alone (``--node-rank``, as
torchrun's one launcher per node or a Kubernetes pod each, and a task of the user's own ``srun``), all must
agree without being told: unless the user gave one (``--run-id``, torchrun's ``--rdzv-id`` or ``PET_RDZV_ID``),
the id is a digest of what every node of the job is told alike (:func:`shared_id`).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence

from dslaunch import nesting
from dslaunch.errors import DslaunchError
from dslaunch.plan import NodePlan, Program

# Batch schedulers' ids of the job (and Slurm's step): alike on its every node, different for the next job.
JOB_VARS = ("SLURM_JOB_ID", "SLURM_STEP_ID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID")


def shared_id(
    master_addr: str, master_port: int, nodes: Sequence[NodePlan], program: Program, environ: Mapping[str, str]
) -> str:
    """A digest of what every node's launcher of one job is given alike: the rendezvous address and port, the
    ranks of each node, the program and its arguments, the scheduler's job ids and the enclosing dslaunch jobs'
    run ids. Not the host names (each node knows only its own) nor anything of this machine's."""
    facts = {
        "rendezvous": [master_addr, master_port],
        "ranks": [len(node.ranks) for node in nodes],
        "program": [program.target, list(program.args), program.module, program.no_python],
        "job": {name: environ[name] for name in JOB_VARS if name in environ},
        "enclosing": nesting.enclosing_run_ids(environ),
    }
    text = json.dumps(facts, sort_keys=True, ensure_ascii=True)
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def pick(given: str | None, shared: str | None, environ: Mapping[str, str]) -> str:
    """``given``, else ``shared`` (None where one launcher plans every node), else a random id; never the id
    of a job this launcher runs in, whose processes the new job's teardown would take for its own."""
    run_id = given or shared or os.urandom(6).hex()
    enclosing = nesting.enclosing_run_ids(environ)
    if run_id in enclosing:
        raise DslaunchError(
            f"{run_id!r} is the run id of a job this launcher runs in ({nesting.CHAIN_VAR}={','.join(enclosing)}): "
            "its processes would be taken for this job's; give another --run-id, or none",
            option="--run-id",
        )
    return run_id
