"""The job's shared secret for the control channels of the pods and of the Slurm tasks: where it comes from, and
what happens without one. (A pdsh or MPI job's launcher makes a secret of its own for its agents' dial-back.)

``DSLAUNCH_JOB_SECRET`` (a Kubernetes Secret mounted as a variable) or ``DSLAUNCH_JOB_SECRET_FILE`` (one mounted
as a file), the same in every pod. The launcher takes the variable out of its environment before anything
starts, so no rank inherits it. Without a secret the channel still keeps two jobs apart (the key is the run id,
which every pod derives alike) but anyone who can reach the port and guess the run id gets in: the launcher says
so once, with how to set one.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from dslaunch.errors import DslaunchError

SECRET_VAR = "DSLAUNCH_JOB_SECRET"
SECRET_FILE_VAR = "DSLAUNCH_JOB_SECRET_FILE"
MAX_SECRET = 4096
UNSET_WARNING = (
    f"dslaunch: warning: the pods' control channel is not authenticated: give every pod of the job the same "
    f"{SECRET_VAR} (or {SECRET_FILE_VAR}), e.g. from a Kubernetes Secret (docs/kubernetes.md)"
)


def take(environ: MutableMapping[str, str]) -> bytes | None:
    """The secret from ``environ`` (the variable removed from it), or None when none is given."""
    value = environ.pop(SECRET_VAR, None)
    path = environ.get(SECRET_FILE_VAR)
    if value:
        return _checked(value.encode(), SECRET_VAR)
    if path:
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_SECRET + 1)
        except OSError as exc:
            raise DslaunchError(f"{SECRET_FILE_VAR}={path}: cannot read the job's secret: {exc.strerror}") from None
        return _checked(data.strip(), f"the file {path}")
    return None


def key(secret: bytes | None, run_id: str) -> bytes:
    """The HMAC key: the secret, or without one the run id (which keeps jobs apart, and nothing more)."""
    return secret if secret is not None else b"dslaunch-no-secret\0" + run_id.encode()


def _checked(data: bytes, where: str) -> bytes:
    if not data or len(data) > MAX_SECRET:
        raise DslaunchError(f"{where}: the job's secret must be 1 to {MAX_SECRET} bytes, got {len(data)}")
    return data
