"""--preload: ranks forked from a per-node zygote get what exec'd ranks get; every safety check falls back to
exec with one warning and the job still runs (docs/preload.md)."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from dslaunch.agent.preload import client
from dslaunch.cli.core_options import preload_modules
from dslaunch.errors import DslaunchError
from tests.helpers import DSLAUNCH, SCRIPTS, alive, run_cli
from tests.plans import cli_error

WHOAMI = str(SCRIPTS / "whoami.py")
ENGINE = str(SCRIPTS / "engine_ranks.py")
# The preloaded test modules are found on PYTHONPATH, as a user's own package would be.
PATH_ENV = {"PYTHONPATH": os.pathsep.join(p for p in (str(SCRIPTS / "preload"), os.environ.get("PYTHONPATH")) if p)}
LINE = re.compile(r"\[rank(\d)\]: rank=(\d) forked=(\w+) preloaded=(\w+) leader=(\w+) argv=(.*) cwd=(\S+) stdin=(\S+)")


def _launch(*args: str, env: dict[str, str] | None = None, nproc: int = 2) -> subprocess.CompletedProcess[str]:
    return run_cli(
        ["--nproc-per-node", str(nproc), "--master-port", "0", *args, WHOAMI, "x", "--y"],
        env={**PATH_ENV, **(env or {})},
        cwd=str(SCRIPTS),
    )


def _ranks(stdout: str) -> dict[int, tuple[str, ...]]:
    return {int(m[1]): m.groups()[2:] for m in LINE.finditer(stdout)}


@pytest.mark.launch
def test_forked_ranks_get_what_exec_d_ranks_get() -> None:
    result = _launch("--preload", "preload_plain")
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr
    ranks = _ranks(result.stdout)
    assert sorted(ranks) == [0, 1], result.stdout
    assert result.stdout.count(" main=True ") == 2, result.stdout  # the script ran as __main__
    for forked, preloaded, leader, argv, cwd, stdin in ranks.values():
        assert (forked, preloaded, leader) == ("True", "True", "True")
        assert argv == "['x', '--y']"
        assert (cwd, stdin) == (str(SCRIPTS), "/dev/null")


@pytest.mark.launch
def test_log_dir_and_error_files_work_for_forked_ranks(tmp_path: Path) -> None:
    printed = str(tmp_path / "rank0-printed")  # else rank 1's failure may stop rank 0 before it prints
    result = _launch(
        "--preload", "preload_plain", "--log-dir", str(tmp_path), env={"EXIT_RANK_1": "99", "RANK0_PRINTED": printed}
    )
    assert result.returncode == 1, result.stderr
    assert "forked=True" in (tmp_path / "rank0.stdout.log").read_text()
    assert "RuntimeError: rank 1 fails" in (tmp_path / "rank1.stderr.log").read_text()
    assert "whoami.py" in (tmp_path / "rank1.error.json").read_text()


@pytest.mark.launch
def test_without_preload_ranks_are_exec_d() -> None:
    result = _launch()
    assert result.returncode == 0, result.stderr
    assert {v[:2] for v in _ranks(result.stdout).values()} == {("False", "False")}


@pytest.mark.launch
def test_exit_codes_and_crashes_are_reported_as_for_exec_d_ranks() -> None:
    result = _launch("--preload", "preload_plain", env={"EXIT_RANK_1": "7"})
    assert result.returncode == 7, result.stderr
    crashed = _launch("--preload", "preload_plain", env={"EXIT_RANK_0": "99"})
    assert crashed.returncode == 1
    assert "RuntimeError: rank 0 fails" in crashed.stderr
    assert "whoami.py" in crashed.stderr


@pytest.mark.launch
def test_the_environment_switch_turns_it_on() -> None:
    result = _launch(env={"DSLAUNCH_PRELOAD": "preload_plain"})
    assert result.returncode == 0, result.stderr
    assert {v[:2] for v in _ranks(result.stdout).values()} == {("True", "True")}


def _fell_back(result: subprocess.CompletedProcess[str], why: str) -> None:
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning: --preload" in line]
    assert len(warnings) == 1, result.stderr
    assert "this node's ranks exec'd instead" in warnings[0] and why in warnings[0], warnings
    assert {v[0] for v in _ranks(result.stdout).values()} == {"False"}, result.stdout


@pytest.mark.launch
def test_a_thread_in_the_zygote_falls_back_to_exec() -> None:
    _fell_back(_launch("--preload", "preload_plain,preload_thread"), "runs 2 threads")


@pytest.mark.launch
def test_an_initialised_accelerator_falls_back_to_exec() -> None:
    """A fake torch whose cuda says it is initialised (no GPU here); the fd check (/dev/nvidia*) is not tripped."""
    _fell_back(_launch("--preload", "preload_fake_cuda"), "torch.cuda is initialised")


@pytest.mark.launch
def test_a_module_that_cannot_be_imported_falls_back_to_exec() -> None:
    _fell_back(_launch("--preload", "no_such_module_here"), "cannot import no_such_module_here")


@pytest.mark.launch
def test_an_import_time_variable_that_differs_between_ranks_execs_that_rank() -> None:
    result = _launch("--preload", "preload_plain", env={"DSLAUNCH_PRELOAD_ENV": "LOCAL_RANK"})
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "warning: --preload" in line]
    assert warnings == [
        "dslaunch: warning: --preload preload_plain on localhost: rank 1 exec'd instead: LOCAL_RANK differs from "
        "the preloaded process's, and is read at import time"
    ], result.stderr
    assert {r: v[0] for r, v in _ranks(result.stdout).items()} == {0: "True", 1: "False"}


def test_env_difference_covers_the_built_in_list_and_extra_names() -> None:
    base = {"OMP_NUM_THREADS": "1", "RANK": "0", "TORCHELASTIC_ERROR_FILE": "/a", "CUDA_VISIBLE_DEVICES": "0"}
    assert client.env_difference(base, {**base, "RANK": "1", "TORCHELASTIC_ERROR_FILE": "/b"}) is None
    assert client.env_difference(base, {**base, "CUDA_VISIBLE_DEVICES": "1"}) is None  # read at CUDA init
    assert client.env_difference(base, {**base, "OMP_NUM_THREADS": "2"}) == "OMP_NUM_THREADS"
    assert client.env_difference(base, {**base, "LD_PRELOAD": "x.so"}) == "LD_PRELOAD"
    extra = {**base, client.EXTRA_ENV_VAR: "RANK,HF_*"}
    assert client.env_difference(extra, {**extra, "RANK": "1"}) == "RANK"
    assert client.env_difference(extra, {**extra, "HF_HOME": "/x"}) == "HF_HOME"


@pytest.mark.launch
def test_no_python_ignores_it_with_a_warning() -> None:
    result = run_cli(["--nproc-per-node", "2", "--master-port", "0", "--preload", "json", "--no-python", "true"])
    assert result.returncode == 0, result.stderr
    assert "dslaunch: warning: --preload is ignored with --no-python" in result.stderr


@pytest.mark.parametrize(
    ("given", "config", "expected"),
    [
        (None, {}, ()),
        ("torch", {}, ("torch",)),
        (" torch, transformers ,torch", {}, ("torch", "transformers")),
        (None, {"preload": "numpy"}, ("numpy",)),
        (None, {"preload": ["torch", "a.b_c"]}, ("torch", "a.b_c")),
        ("json", {"preload": "numpy"}, ("json",)),  # the command line wins
        ("", {"preload": "numpy"}, ()),  # --preload '' turns the config's off
    ],
)
def test_preload_names(given: str | None, config: dict[str, object], expected: tuple[str, ...]) -> None:
    assert preload_modules(given, config) == expected


@pytest.mark.parametrize(
    ("given", "config"),
    [("1torch", {}), ("torch-x", {}), ("a..b", {}), (None, {"preload": 3}), (None, {"preload": [1]})],
)
def test_bad_preload_names_are_refused(given: str | None, config: dict[str, object]) -> None:
    with pytest.raises(DslaunchError, match=r"module name|give module names"):
        preload_modules(given, config)


def test_a_bad_name_on_the_command_line_exits_2() -> None:
    code, err = cli_error(["--preload", "torch,2fast", "--dry-run", WHOAMI])
    assert code == 2
    assert "'2fast' is not a module name" in err


@pytest.mark.launch
def test_a_killed_agent_takes_the_forked_ranks_with_it(tmp_path: Path) -> None:
    """The forked rank's parent-death signal is set once it is the agent's child: SIGKILL the agent, ranks go."""
    import psutil

    env = {**os.environ, **PATH_ENV, "OUT_DIR": str(tmp_path)}
    argv = ["--nproc-per-node", "2", "--preload", "preload_plain", "--master-port", "0", str(SCRIPTS / "sleepy.py")]
    proc = subprocess.Popen([*DSLAUNCH, *argv], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    grandchildren: list[int] = []
    try:
        found: list[list[str]] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(found) < 2:
            found = [f.read_text().split() for f in tmp_path.glob("rank*.pid")]
            found = [pair for pair in found if len(pair) == 2]
            time.sleep(0.05)
        assert len(found) == 2
        pids = [int(rank) for rank, _ in found]
        grandchildren += [int(child) for _, child in found]  # no parent-death signal: as with exec'd ranks
        agent = psutil.Process(proc.pid).children()[0]
        assert {p.pid for p in agent.children()} == set(pids)  # adopted by the agent; the zygote is gone
        ranks = [psutil.Process(pid) for pid in pids]  # before the kill: a rank may be gone before we look
        agent.kill()
        _, left = psutil.wait_procs(ranks, timeout=10)
        assert not left
        assert proc.wait(timeout=30) != 0
        # their children had no parent-death signal; the launcher, a child subreaper, adopted and ended them
        assert not [pid for pid in grandchildren if alive(pid)]
    finally:
        proc.kill()
        proc.wait()
        for pid in grandchildren:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.torch_api
@pytest.mark.launch
@pytest.mark.torch
def test_torch_ranks_forked_from_a_zygote_that_imported_torch() -> None:
    result = run_cli(
        ["--nproc-per-node", "2", "--master-port", "0", "--preload", "torch", ENGINE],
        env={"DSLAUNCH_PG_TIMEOUT": "60", "CUDA_VISIBLE_DEVICES": "", "MODE": "engine"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "warning" not in result.stderr, result.stderr
    assert result.stdout.count("world=2 device=cpu backend=gloo owns=True sum=3 ok=True") == 2, result.stdout
