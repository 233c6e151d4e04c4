"""Kubeflow Trainer's progress API against a real HTTPS server on loopback (tests/observe/status_server.py): the
requests' shape, the Bearer token re-read at each post, TLS verified against the given CA only, a hung server
that costs the observer nothing, the payload's tables, member pods that leave it to the coordinator, and a real
launch whose posts follow its steps to the final state."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dslaunch import wire
from dslaunch.observe import session, trainer_status
from dslaunch.observe.figures import JobFigures
from dslaunch.observe.settings import ObserveSettings
from dslaunch.observe.trainer_status import CA_VAR, TOKEN_VAR, URL_VAR, Endpoint, Poster, payload
from dslaunch.plan import LaunchPlan, NodePlan, Program
from tests.helpers import DSLAUNCH as DSLAUNCH_CMD
from tests.observe.status_server import PATH, Recorded, Request, check_body, make_ca, server_context, serving
from tests.plans import with_launcher

NOW = 1737628245.0  # 2025-01-23T10:30:45Z
NODES = (NodePlan("a", 0, ("0",), (0,)), NodePlan("b", 1, ("0",), (1,)))
PLAN = with_launcher(LaunchPlan("local", "r1", NODES, "a", 29500, Program("t.py")), "node")
ONE = "eyJhbGciOiJSUzI1NiJ9.one.sig"  # the token file's first content
TWO = "eyJhbGciOiJSUzI1NiJ9.two.sig"  # after kubelet rotated it
TOKENS = {ONE, TWO}  # what the server takes


@pytest.fixture
def tls(tmp_path: Path) -> tuple[Path, Any, Path]:
    """The trainer's CA (its bundle, its key) and a token file."""
    ca, key = make_ca(tmp_path, "trainer-ca")
    token = tmp_path / "token"
    token.write_text(ONE + "\n")
    return ca, key, token


def _env(url: str, ca: Path, token: Path) -> dict[str, str]:
    return {URL_VAR: url, CA_VAR: str(ca), TOKEN_VAR: str(token)}


def _warnings(err: str) -> list[str]:
    return [line for line in err.splitlines() if "progress API" in line]


# ---- the payload (pure) ----------------------------------------------------------------------------------------
RUNNING = JobFigures(started=NOW - 100, state="running", ranks=8, nodes=2, ranks_alive=8, step=250, step_rate=12.5)


@pytest.mark.parametrize(
    ("figures", "total", "progress"),
    [
        (RUNNING, None, {}),  # no --total-steps: no progress
        (RUNNING, 1000, {"progressPercentage": 25, "estimatedRemainingSeconds": 60}),  # 750 steps at 12.5/s
        (replace(RUNNING, step_rate=0.0), 1000, {"progressPercentage": 25}),  # no rate yet: no time left
        (replace(RUNNING, step=1200), 1000, {"progressPercentage": 100, "estimatedRemainingSeconds": 0}),
        (replace(RUNNING, step=0, first_step_at=0.0), 1000, {}),  # no step reported (no timers): unknown
        (replace(RUNNING, step=999, step_rate=3.0), 1000, {"progressPercentage": 99, "estimatedRemainingSeconds": 0}),
    ],
)
def test_the_progress_fields(figures: JobFigures, total: int | None, progress: dict[str, int]) -> None:
    status = payload(figures, NOW, total)["trainerStatus"]
    assert {k: v for k, v in status.items() if k not in ("metrics", "lastUpdatedTime")} == progress
    assert status["lastUpdatedTime"] == "2025-01-23T10:30:45Z"


def test_the_metrics_as_strings() -> None:
    f = replace(RUNNING, attempt=1, restarts={"rank_failure": 1, "hang": 1}, stepping=50.0, stragglers=1)
    f = replace(f, first_step_at=NOW - 98.5)
    assert check_body(payload(f, NOW, None)) == {
        "state": "running",
        "attempt": "1",
        "restarts": "2",
        "ranks": "8",
        "ranksAlive": "8",
        "nodes": "2",
        "nodesLost": "0",
        "step": "250",
        "stepsPerSecond": "12.5",
        "goodput": "0.5",
        "stragglers": "1",
        "timeToFirstStepSeconds": "1.5",
    }
    always = {"state", "attempt", "restarts", "ranks", "ranksAlive", "nodes", "nodesLost"}
    assert set(check_body(payload(JobFigures(), NOW, None))) == always  # no step yet: no step figures
    early = payload(JobFigures(), NOW, 10)
    assert set(check_body(early)) == {*always, "totalSteps"} and "progressPercentage" not in early["trainerStatus"]


# ---- the endpoint from the environment -----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({URL_VAR: "http://trainer:8082/status"}, "is not an https:// URL"),
        ({URL_VAR: "https://[::1/x"}, "is not an https:// URL"),
        ({CA_VAR: ""}, f"{CA_VAR} is not set"),
        ({CA_VAR: "/nonexistent/ca.crt"}, f"{CA_VAR}: cannot load /nonexistent/ca.crt as a CA bundle"),
        ({CA_VAR: "TOKEN"}, "no certificate"),  # a file that is not PEM
        ({TOKEN_VAR: "/nonexistent/token"}, f"{TOKEN_VAR}: cannot read /nonexistent/token"),
        ({TOKEN_VAR: "EMPTY"}, "holds no token"),
        ({TOKEN_VAR: "HUGE"}, "is over 64 KiB"),
    ],
)
def test_an_unusable_endpoint_is_one_warning_and_no_posting(
    change: dict[str, str], why: str, tls: tuple[Path, Any, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    ca, _key, token = tls
    (token.parent / "empty").write_text(" \n")
    (token.parent / "huge").write_text("x" * (64 * 1024 + 1))
    files = {"TOKEN": str(token), "EMPTY": str(token.parent / "empty"), "HUGE": str(token.parent / "huge")}
    env = {**_env("https://127.0.0.1:1" + PATH, ca, token), **{k: files.get(v, v) for k, v in change.items()}}
    assert trainer_status.from_env(env) is None
    lines = _warnings(capfd.readouterr().err)
    assert len(lines) == 1 and "not posting" in lines[0] and why in lines[0], lines
    assert "Traceback" not in lines[0]


# ---- posting to a real HTTPS server --------------------------------------------------------------------------------
def test_posts_carry_the_token_and_the_apis_shape_and_a_rotated_token_is_read(tls: tuple[Path, Any, Path]) -> None:
    ca, key, token = tls
    with serving(server_context(ca.parent, "trainer-ca", key), TOKENS) as (url, recorded):
        endpoint = trainer_status.from_env(_env(url, ca, token))
        assert endpoint == Endpoint(url, str(ca), str(token))
        figures = replace(RUNNING, started=time.time())
        poster = Poster(endpoint, every=0.2, total_steps=1000)
        poster.offer(figures)
        recorded.wait_for(1)
        figures.step = 500
        _wait_for(recorded, lambda r: r.status_fields().get("progressPercentage") == 50)
        token.write_text(TWO)  # kubelet rotated it
        _wait_for(recorded, lambda r: r.headers["Authorization"] == f"Bearer {TWO}")
        figures.state = "succeeded"
        poster.close()
        requests = list(recorded.requests)
    assert poster.failed == 0 and poster.posted == len(requests) >= 3
    for r in requests:
        assert (r.method, r.path, r.headers["Content-Type"]) == ("POST", PATH, "application/json")
        assert r.metrics()["ranks"] == "8"
    tokens = [r.headers["Authorization"] for r in requests]
    assert tokens[0] == f"Bearer {ONE}" and tokens[-1] == f"Bearer {TWO}", tokens
    progress = [r.status_fields()["progressPercentage"] for r in requests]
    assert progress[0] == 25 and 50 in progress and progress[-1] == 100, progress
    assert requests[-1].metrics()["state"] == "succeeded"  # close() posted the final state
    assert requests[-1].metrics()["step"] == "500"


def _wait_for(recorded: Recorded, seen: Callable[[Request], bool]) -> None:
    deadline = time.monotonic() + 15
    while not any(seen(r) for r in list(recorded.requests)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert any(seen(r) for r in recorded.requests), recorded.requests


def test_a_server_whose_certificate_another_ca_signed_is_refused(
    tls: tuple[Path, Any, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    ca, _key, token = tls
    _other, other_key = make_ca(ca.parent, "other-ca")
    with serving(server_context(ca.parent, "other-ca", other_key), TOKENS) as (url, recorded):
        endpoint = trainer_status.from_env(_env(url, ca, token))
        assert endpoint is not None
        poster = Poster(endpoint, every=0.1, total_steps=None)
        poster.offer(RUNNING)
        deadline = time.monotonic() + 15
        while poster.failed < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        poster.close()
        assert recorded.requests == [] and poster.posted == 0 and poster.failed >= 3
    lines = _warnings(capfd.readouterr().err)
    assert len(lines) == 1, lines  # once at WARNING, then at debug level
    assert "cannot post to https://127.0.0.1:" in lines[0] and "CERTIFICATE_VERIFY_FAILED" in lines[0], lines


def test_a_hung_server_costs_the_observers_ticks_nothing(
    tls: tuple[Path, Any, Path], capfd: pytest.CaptureFixture[str]
) -> None:
    ca, key, token = tls
    with serving(server_context(ca.parent, "trainer-ca", key), TOKENS, hang=True) as (url, recorded):
        observer = session.Observer(ObserveSettings(trainer_status=True), PLAN)
        observer.begin(PLAN)
        endpoint = trainer_status.from_env(_env(url, ca, token))
        assert endpoint is not None
        observer.trainer = poster = Poster(endpoint, every=0.05, total_steps=None, timeout=1.0)
        observer.tick(time.monotonic())
        assert recorded.arrived.wait(15)  # the first post hangs in the server
        ticks = []
        for _ in range(40):
            t = time.perf_counter()
            observer.tick(time.monotonic())
            ticks.append(time.perf_counter() - t)
            time.sleep(0.01)
        assert max(ticks) < 0.05, ticks
        assert len(recorded.requests) == 1  # one request in flight at most
        t = time.monotonic()
        poster.close()
        assert time.monotonic() - t < 1.0 + 1.5  # the timeout, and at most one more second
    assert poster.failed >= 1
    assert len(_warnings(capfd.readouterr().err)) == 1


# ---- the session: only the coordinator posts -----------------------------------------------------------------------
@pytest.mark.parametrize(("node", "posts"), [(0, True), (1, False)])
def test_only_the_coordinators_launcher_posts(
    node: int, posts: bool, tls: tuple[Path, Any, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    ca, key, token = tls
    plan = replace(PLAN, manual_node=node)
    settings = ObserveSettings(trainer_status=True, status_every=0.05)
    with serving(server_context(ca.parent, "trainer-ca", key), TOKENS) as (url, recorded):
        for name, value in _env(url, ca, token).items():
            monkeypatch.setenv(name, value)
        assert settings.collect
        observer = session.start(settings, replace(plan, manual_node=None))  # an elastic pod: known per attempt
        assert observer is not None and observer.trainer is not None
        session.for_attempt(observer, plan).on_event(wire.Spawned(0, 0, 100, "a"), 0.0)
        observer.tick(time.monotonic())
        observer.attempt_ended(0, "", restarting=False)
        time.sleep(0.2)
        observer.close()
        requests = list(recorded.requests)
    assert bool(requests) is posts
    if posts:
        assert requests[-1].metrics()["state"] == "succeeded" and requests[0].metrics()["ranksAlive"] == "1"


def test_a_fixed_jobs_member_pod_starts_no_poster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(URL_VAR, "https://127.0.0.1:1" + PATH)
    observer = session.start(ObserveSettings(trainer_status=True), replace(PLAN, manual_node=1))
    assert observer is not None and observer.trainer is None
    observer.close()


class _Offers:
    """A poster that only counts what it was offered (no thread, no endpoint)."""

    def __init__(self) -> None:
        self.offers = 0

    def offer(self, figures: JobFigures) -> None:
        self.offers += 1


@pytest.mark.parametrize(
    ("launcher", "node", "member"),
    [
        ("node", None, False),  # one pod alone, or an elastic pod before the coordinator gave it a rank
        ("node", 0, False),  # the coordinator
        ("node", 1, True),
        ("node", 7, True),
        ("local", None, False),  # one launcher for the whole job
        ("ssh", 1, False),  # --node-rank is read by the "node" launcher only
    ],
)
def test_only_node_0_of_a_pod_job_holds_the_job_wide_figures(launcher: str, node: int | None, member: bool) -> None:
    plan = with_launcher(replace(PLAN, manual_node=node), launcher)
    assert session._member_pod(plan) is member
    assert session.Observer(ObserveSettings(trainer_status=True), plan).job_wide is not member


def test_each_attempt_decides_again_which_pod_posts() -> None:
    elastic = replace(PLAN, manual_node=None)  # an elastic pod: its node rank comes with each attempt
    observer = session.Observer(ObserveSettings(trainer_status=True), elastic)
    poster = _Offers()
    observer.trainer = poster  # type: ignore[assignment]
    for node, offered in ((1, 0), (0, 1), (2, 1), (0, 2)):
        observer.begin(replace(elastic, manual_node=node))
        observer.tick(time.monotonic())
        assert (observer.job_wide, poster.offers) == (node == 0, offered), node


# ---- a real launch -----------------------------------------------------------------------------------------------
SCRIPT = str(Path(__file__).parents[1] / "scripts" / "timed_ranks.py")


def _launch(env: dict[str, str], steps: int, total: int) -> subprocess.CompletedProcess[str]:
    """A 2-rank job of ``steps`` 80 ms steps, posting every 0.2 s."""
    args = ["--master-port", "0", "--nproc-per-node", "2", "--trainer-status-every", "0.2", "--total-steps", str(total)]
    return subprocess.run(
        [*DSLAUNCH_CMD, *args, SCRIPT, f"{time.time() + 1.0}", "0.08", str(steps)],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )


@pytest.mark.launch
def test_a_launched_job_posts_its_rising_steps_and_its_final_state(tls: tuple[Path, Any, Path]) -> None:
    ca, key, token = tls
    with serving(server_context(ca.parent, "trainer-ca", key), {ONE}) as (url, recorded):
        job = _launch(_env(url, ca, token), 25, 25)
        requests = list(recorded.requests)
    assert job.returncode == 0, job.stderr
    assert not _warnings(job.stderr), job.stderr
    assert [r.status for r in requests] == [200] * len(requests), [r.problem for r in requests]
    assert all(r.headers["Authorization"] == f"Bearer {ONE}" for r in requests)
    if os.environ.get("TRAINER_STATUS_SHOW"):  # docs/observability.md's example
        print(*(r.body.decode() for r in requests), sep="\n")
    metrics = [r.metrics() for r in requests]
    steps = [int(m["step"]) for m in metrics if "step" in m]
    assert len(steps) >= 3 and steps == sorted(steps) and steps[-1] > steps[0], metrics
    running = [r.status_fields() for r, m in zip(requests, metrics) if m["state"] == "running" and "step" in m]
    assert running and all(0 < s["progressPercentage"] <= 100 for s in running), running
    assert any("estimatedRemainingSeconds" in s for s in running), running
    assert all(m["state"] == "running" for m in metrics[:-2]), metrics  # a period may post the end before close()
    assert metrics[-1]["state"] == "succeeded" and metrics[-1]["ranks"] == "2", metrics[-1]
    # the last step the job saw (the agent relays windows every 0.25 s: the last one may go unread)
    assert metrics[-1]["totalSteps"] == "25" and int(metrics[-1]["step"]) == max(steps) >= 10, metrics[-1]
    final = requests[-1].status_fields()
    assert (final["progressPercentage"], final["estimatedRemainingSeconds"]) == (100, 0), final


@pytest.mark.launch
def test_a_refused_token_costs_the_job_nothing_but_one_warning(tls: tuple[Path, Any, Path]) -> None:
    ca, key, token = tls
    with serving(server_context(ca.parent, "trainer-ca", key), {"another-token"}) as (url, recorded):
        job = _launch(_env(url, ca, token), 12, 100)
        requests = list(recorded.requests)
    assert job.returncode == 0, job.stderr
    assert len(requests) >= 2 and {r.status for r in requests} == {401}, requests  # it went on trying
    lines = _warnings(job.stderr)
    assert len(lines) == 1, job.stderr  # then at debug level
    assert "cannot post to https://127.0.0.1:" in lines[0] and "HTTP 401" in lines[0], lines
    assert "Invalid or expired token" in lines[0] and ONE not in job.stderr, lines
