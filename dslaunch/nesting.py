"""Nested launches: a rank that runs ``dslaunch`` itself starts a job of its own (stdlib only).

A rank's environment holds what its launcher set for it: ``DSLAUNCH_*`` (logging, run id, log dir, ...) and
the ``PET_*`` settings its own launcher was started with. The dslaunch CLI reads both namespaces as options,
so a dslaunch started in a rank would take the enclosing job's settings for its own, its run id included,
and then its teardown sweep (which keys on the run id) would kill the enclosing job's ranks.

So the agent records, in :data:`RECORD_VAR`, each such name it leaves in a rank's environment with a short
digest of its value (:func:`record`); a dslaunch started in the rank removes exactly the recorded names whose
value is unchanged before it reads any option (:func:`forget_parent_job`). A value the rank changed, or a name
it added, was given by the user and is honoured. :data:`CHAIN_VAR` keeps the run ids of the enclosing jobs,
outermost first, so that no nested job is given one of them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, MutableMapping

RECORD_VAR = "DSLAUNCH_SET_BY_LAUNCHER"
CHAIN_VAR = "DSLAUNCH_RUN_ID_CHAIN"
RECORDED_PREFIXES = ("DSLAUNCH_", "PET_")
# Set by the agent for each rank after the rank environment is built (agent/watch.py, bootstrap/progress.py):
# never a setting of the launcher, always the enclosing rank's own file.
RANK_FILES = ("DSLAUNCH_PROGRESS_FILE", "DSLAUNCH_NCCL_TRACE_FILE", "DSLAUNCH_WINDOW_FILE")


def digest(value: str) -> str:
    return hashlib.blake2b(value.encode("utf-8", "surrogateescape"), digest_size=4).hexdigest()


def record(env: Mapping[str, str]) -> str:
    """The value of :data:`RECORD_VAR` for a rank whose environment is ``env``: ``NAME:digest,...``."""
    names = sorted(n for n in env if n.startswith(RECORDED_PREFIXES) and n not in (RECORD_VAR, CHAIN_VAR))
    return ",".join(f"{name}:{digest(env[name])}" for name in names)


def parse_record(text: str) -> dict[str, str]:
    """``NAME:digest,...`` as a mapping; malformed items are skipped."""
    found = {}
    for item in text.split(","):
        name, sep, value = item.strip().partition(":")
        if sep and name and value:
            found[name] = value
    return found


def chain(env: Mapping[str, str], run_id: str) -> str:
    """:data:`CHAIN_VAR` for a rank of run ``run_id`` whose inherited environment is ``env``."""
    ids = enclosing_run_ids(env)
    return ",".join(ids if ids and ids[-1] == run_id else [*ids, run_id])


def enclosing_run_ids(env: Mapping[str, str]) -> list[str]:
    """The run ids of the jobs this process runs in, outermost first (none outside a dslaunch job)."""
    return [i for i in env.get(CHAIN_VAR, "").split(",") if i]


def inherited(environ: Mapping[str, str]) -> list[str]:
    """The names in ``environ`` that the enclosing job's launcher set and nobody changed since."""
    text = environ.get(RECORD_VAR)
    if text is None:
        return []
    recorded = parse_record(text)
    same = [n for n, d in recorded.items() if n in environ and digest(environ[n]) == d]
    return sorted({RECORD_VAR, *same, *(n for n in RANK_FILES if n in environ)})


def forget_parent_job(environ: MutableMapping[str, str]) -> list[str]:
    """Remove from ``environ`` what :func:`inherited` names (the launcher's first step); returns those names."""
    names = inherited(environ)
    for name in names:
        del environ[name]
    return names
