"""Kubeflow Trainer's progress API (KEP-2779, Trainer v2.2): where the control plane set
``KUBEFLOW_TRAINER_STATUS_URL``, the launcher that holds the job-wide figures posts them there, from a thread of
its own (docs/observability.md).

:func:`payload` is pure; :class:`Poster` is the one seam with side effects: one daemon thread, started at the
first offer, one request in flight at most, every ``--trainer-status-every`` seconds and once more at the end. The
endpoint rate-limits and need not be up: a failed post is logged (once at WARNING) and the next period tries
again; training never waits. This module (``ssl``, ``urllib.request``) is imported only when the variable is set.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from dslaunch.observe.settings import STATUS_URL

if TYPE_CHECKING:
    from dslaunch.observe.figures import JobFigures

URL_VAR = STATUS_URL  # the endpoint, https:// only
CA_VAR = "KUBEFLOW_TRAINER_STATUS_CA_CERT"  # a path to the CA bundle
TOKEN_VAR = "KUBEFLOW_TRAINER_STATUS_TOKEN"  # a path to a projected service-account token, rotated by kubelet
MAX_TOKEN = 64 * 1024
MAX_RESPONSE = 4096
MAX_TEXT = 64  # the API's MaxLength of a metric's name and value
INT32 = 2**31 - 1  # estimatedRemainingSeconds is an int32
TIMEOUT = 5.0


@dataclass(frozen=True)
class Endpoint:
    url: str
    ca_file: str
    token_file: str


# ---- the payload (pure) ----------------------------------------------------------------------------------------
def _num(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def metrics(f: JobFigures, now: float, total_steps: int | None) -> list[tuple[str, str]]:
    """The job's figures as (name, value) pairs, a fixed set (at most 13): the step figures only once some rank
    reported a step."""
    out = [
        ("state", f.state),
        ("attempt", str(f.attempt)),
        ("restarts", str(sum(f.restarts.values()))),
        ("ranks", str(f.ranks)),
        ("ranksAlive", str(f.ranks_alive)),
        ("nodes", str(f.nodes)),
        ("nodesLost", str(f.nodes_lost)),
    ]
    if f.step or f.first_step_at:
        out += [("step", str(f.step)), ("stepsPerSecond", _num(f.step_rate)), ("goodput", _num(f.goodput(now)))]
        out.append(("stragglers", str(f.stragglers)))
    if total_steps:
        out.append(("totalSteps", str(total_steps)))
    if f.first_step_at:
        out.append(("timeToFirstStepSeconds", _num(max(0.0, f.first_step_at - f.started))))
    return [(name, value[:MAX_TEXT]) for name, value in out]


def rfc3339(now: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))


def progress(f: JobFigures, total_steps: int | None) -> dict[str, int]:
    """progressPercentage and estimatedRemainingSeconds, each only where known: a job that succeeded is done;
    else the percentage needs ``--total-steps`` and a step reported, the time left a step rate too."""
    if f.state == "succeeded":
        return {"progressPercentage": 100, "estimatedRemainingSeconds": 0}
    if not total_steps or not (f.step or f.first_step_at):
        return {}
    out = {"progressPercentage": min(100, f.step * 100 // total_steps)}
    if f.step_rate > 0 and f.state != "failed":
        out["estimatedRemainingSeconds"] = min(INT32, max(0, round((total_steps - f.step) / f.step_rate)))
    return out


def payload(figures: JobFigures, now: float, total_steps: int | None) -> dict[str, Any]:
    """The request's body (``now``: wall time), as the API's ``UpdateTrainJobStatusRequest``."""
    status: dict[str, Any] = progress(figures, total_steps)
    status["metrics"] = [{"name": name, "value": value} for name, value in metrics(figures, now, total_steps)]
    status["lastUpdatedTime"] = rfc3339(now)
    return {"trainerStatus": status}


# ---- the endpoint ----------------------------------------------------------------------------------------------
def read_token(path: str) -> str:
    """The token file's content, re-read at each post (kubelet rotates it); ValueError when it is no token."""
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_TOKEN + 1)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_TOKEN:
        raise ValueError(f"{path} is over {MAX_TOKEN // 1024} KiB")
    token = data.decode("ascii", errors="replace").strip()
    if not token or not token.isprintable() or any(c.isspace() or c == "\ufffd" for c in token):
        raise ValueError(f"{path} holds no token (empty, or not one printable ASCII word)")
    return token


def tls_context(ca_file: str) -> ssl.SSLContext:
    """A context that trusts ``ca_file`` alone and checks the host name; ValueError when it cannot load."""
    try:
        return ssl.create_default_context(cafile=ca_file)
    except OSError as exc:  # ssl.SSLError is one
        raise ValueError(f"cannot load {ca_file} as a CA bundle: {exc.strerror or exc}") from None


def from_env(environ: Mapping[str, str]) -> Endpoint | None:
    """The endpoint the control plane gave; None, with one warning, when it cannot be used."""
    url, ca, token = environ.get(URL_VAR, ""), environ.get(CA_VAR, ""), environ.get(TOKEN_VAR, "")
    why = unusable(url, ca, token)
    if why:
        _log().warning(f"Kubeflow Trainer's progress API: not posting: {why}")
        return None
    return Endpoint(url, ca, token)


def unusable(url: str, ca: str, token: str) -> str:
    """Why the endpoint cannot be used (one line), or ""."""
    try:
        parts = urlsplit(url)
        https = parts.scheme == "https" and bool(parts.hostname)
    except ValueError:
        https = False
    if not https:
        return f"{URL_VAR}={url[:200]!r} is not an https:// URL"
    for name, path, check in ((CA_VAR, ca, tls_context), (TOKEN_VAR, token, read_token)):
        if not path:
            return f"{name} is not set"
        try:
            check(path)
        except ValueError as exc:
            return f"{name}: {exc}"
    return ""


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # the token goes to the given URL only: a redirect is an HTTPError


def post(endpoint: Endpoint, body: bytes, timeout: float) -> int:
    """POST ``body``; the HTTP status (2xx; any other raises). No proxy: the endpoint is an in-cluster service."""
    headers = {"Authorization": f"Bearer {read_token(endpoint.token_file)}", "Content-Type": "application/json"}
    opener = urllib.request.build_opener(
        urllib.request.ProxyHandler({}),
        _NoRedirect(),
        urllib.request.HTTPSHandler(context=tls_context(endpoint.ca_file)),
    )
    request = urllib.request.Request(endpoint.url, data=body, headers=headers, method="POST")
    with opener.open(request, timeout=timeout) as response:
        response.read(MAX_RESPONSE)
        return int(response.status)


def describe(exc: BaseException) -> str:
    """A failed post in one line: an HTTP error with the server's own message (a Kubernetes ``Status``)."""
    if isinstance(exc, urllib.error.HTTPError):
        text = exc.read(MAX_RESPONSE).decode("utf-8", errors="replace")
        exc.close()
        try:
            said = json.loads(text)
            text = str(said.get("message", text)) if isinstance(said, dict) else text
        except ValueError:
            pass
        text = " ".join(text.split())[:200]
        return f"HTTP {exc.code} {exc.reason}" + (f": {text}" if text else "")
    if isinstance(exc, urllib.error.URLError):
        return str(exc.reason)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _log() -> Any:
    from dslaunch.logs import get_logger

    return get_logger("launcher")


# ---- the poster --------------------------------------------------------------------------------------------------
class Poster:
    """Posts the figures it was offered every ``every`` seconds and at :meth:`close`, from a daemon thread.

    The thread only reads files and talks to the endpoint; what went wrong it notes, and the launcher's own
    thread logs it at the next :meth:`offer` (no lock of the logs is ever held by it when an agent is forked)."""

    def __init__(self, endpoint: Endpoint, *, every: float, total_steps: int | None, timeout: float = TIMEOUT):
        self.endpoint, self.every, self.total_steps, self.timeout = endpoint, every, total_steps, timeout
        self.posted = self.failed = 0
        self._said = 0  # failures logged
        self._why = ""  # the last failure's reason
        self._figures: JobFigures | None = None
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    def offer(self, figures: JobFigures) -> None:
        """The figures to post (the live object, read as metrics.py reads it); the first offer starts the thread,
        once the first attempt's agents are forked. Logs what failed since the last call."""
        if self._thread is None:
            self._figures = figures
            self._thread = threading.Thread(target=self._run, name="dslaunch-trainer-status", daemon=True)
            self._thread.start()
        self._say()

    def close(self) -> None:
        """The last post (the job's final state, if figures were ever offered), waited for a bounded time."""
        self._closing.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 1.0)
        self._say()

    def _say(self) -> None:
        failed, why = self.failed, self._why
        if failed == self._said:
            return
        line = f"Kubeflow Trainer's progress API: cannot post to {self.endpoint.url}: {why}"
        if self._said == 0:
            _log().warning(f"{line}; retrying every {self.every:g} s, further failures at debug level")
        else:
            _log().debug(f"{line} ({failed} failed posts)")
        self._said = failed

    def _run(self) -> None:
        while True:
            last = self._closing.is_set()  # read before the post: the one after close() carries the final state
            self._post_now()
            if last:
                return
            self._closing.wait(self.every)

    def _post_now(self) -> None:
        figures = self._figures
        if figures is None:
            return
        try:
            snapshot = replace(figures, restarts=dict(figures.restarts))
            body = json.dumps(payload(snapshot, time.time(), self.total_steps), separators=(",", ":")).encode()
            post(self.endpoint, body, self.timeout)
        except Exception as exc:  # noqa: BLE001 - a failed post never reaches the job; the next period tries again
            self._why = describe(exc)
            self.failed += 1
            return
        self.posted += 1
