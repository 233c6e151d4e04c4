"""Real multi-node launches over a real sshd (loopback aliases), with both runners."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.helpers import SCRIPTS
from tests.output.collapse_check import expand
from tests.runners.remote.launch import (
    RUNNERS,
    SCRIPT,
    base_args,
    job_processes,
    records,
    run,
    start,
    stop,
    wait_ready,
    wait_until_gone,
)

pytestmark = [pytest.mark.launch, pytest.mark.cluster]

PAYLOADS = [
    "$(touch pwned1)",
    "`touch pwned2`",
    "a; touch pwned3",
    "x' ; touch pwned4 '",
    'q"uo"te',
    "new\nline",
    "ünïcödé ✓",
    "--node-rank 1",
    "%n %h %%",
    "&& touch pwned5 &",
    "| touch pwned6",
    "> pwned7",
]


def _remote_agent(run_id: str, addr: str):
    """The node agent that sshd started for a connection to ``addr``."""
    for p in job_processes(run_id):
        if "dslaunch.agent" in " ".join(p.cmdline()) and p.environ().get("SSH_CONNECTION", "").split()[2:3] == [addr]:
            return p
    raise AssertionError(f"no agent of {run_id} behind {addr}")


def _no_pwned(*folders: Path) -> None:
    for folder in folders:
        assert not [p for p in folder.iterdir() if p.name.startswith("pwned")], f"a payload ran in {folder}"


@pytest.mark.parametrize("runner", RUNNERS)
def test_two_nodes_env_and_payloads(ssh_cluster: SshCluster, runner: str, tmp_path: Path) -> None:
    (tmp_path / "vars.env").write_text(
        '# comment\n\nTEST_SPACES=\'with spaces here\'\nexport TEST_DQ="say \\"hi\\" $HOME"\n'
        "TEST_PLAIN=plain value # trailing comment\nTEST_EQ=a=b=c\n"
    )
    (tmp_path / ".deepspeed_env").write_text("TEST_DSENV=from-dot-file\nTEST_SPACES=overridden-by-env-file\n")
    args = [
        *base_args(ssh_cluster, runner, ["node1", "node2"]),
        "--env-file",
        "vars.env",
        "--export",
        "TEST_PAYLOAD=$(touch pwned0); `touch pwned0`",
        "--export",
        "TEST_FROM_ENV",
        "--export",
        "HF_TOKEN=hf-very-secret",
        "--log-dir",
        "logs",
        "--master-port",
        "0",
        SCRIPT,
        "echo",
        *PAYLOADS,
    ]
    env = {"WANDB_PROJECT": "proj one", "NCCL_DEBUG": "INFO", "TEST_FROM_ENV": 'it\'s "here"', "OTHER_UNEXPORTED": "no"}
    done = run(args, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    recs = records(done.stdout)
    assert [r["rank"] for r in recs] == [0, 1, 2, 3]
    assert len({r["port"] for r in recs}) == 1 and recs[0]["port"] not in ("0", "29500")  # picked on node1
    assert [r["prefix"] for r in recs] == ["[node1:rank0]", "[node1:rank1]", "[node2:rank2]", "[node2:rank3]"]
    for r in recs:
        assert r["argv"] == PAYLOADS
        assert r["master"] == "127.0.0.2"  # node1's address from the ssh config, not its alias
        assert r["conn"].split()[2] == ("127.0.0.2" if r["node"] == 0 else "127.0.0.3")
        assert r["cwd"] == str(tmp_path)
        e = r["env"]
        assert e["TEST_SPACES"] == "with spaces here"
        assert e["TEST_DQ"] == 'say "hi" $HOME'
        assert e["TEST_PLAIN"] == "plain value"
        assert e["TEST_EQ"] == "a=b=c"
        assert e["TEST_DSENV"] == "from-dot-file"
        assert e["TEST_PAYLOAD"] == "$(touch pwned0); `touch pwned0`"
        assert e["TEST_FROM_ENV"] == 'it\'s "here"'
        assert e["HF_TOKEN"] == "hf-very-secret"
        assert e["WANDB_PROJECT"] == "proj one" and e["NCCL_DEBUG"] == "INFO"
        assert "OTHER_UNEXPORTED" not in e
    _no_pwned(tmp_path, Path.home(), ssh_cluster.base)
    assert "hf-very-secret" not in done.stderr
    for rank in range(4):  # each node writes its own ranks' files (one shared filesystem here)
        assert f'"rank": {rank}' in (tmp_path / "logs" / f"rank{rank}.stdout.log").read_text()


def test_payload_in_cwd_and_venv_script(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    weird = tmp_path / "dir $(touch pwned8) `touch pwned9`; x"
    weird.mkdir()
    venv = weird / "activate $(touch pwned10)"
    venv.write_text("export TEST_VENV='sourced here'\n")
    args = [
        *base_args(ssh_cluster, "ssh", ["node1", "node2"], slots=1),
        "--fanout",
        "1",
        "--venv-script",
        str(venv),
        SCRIPT,
        "echo",
    ]
    done = run(args, cwd=weird)
    assert done.returncode == 0, done.stderr
    recs = records(done.stdout)
    assert {r["cwd"] for r in recs} == {str(weird)}
    assert {r["env"]["TEST_VENV"] for r in recs} == {"sourced here"}
    _no_pwned(tmp_path, weird, Path.home())


@pytest.mark.parametrize("runner", RUNNERS)
def test_rank_failure_stops_every_node(ssh_cluster: SshCluster, runner: str, tmp_path: Path) -> None:
    run_id = f"ff{runner}{os.getpid()}"
    args = [
        *base_args(ssh_cluster, runner, ["node1", "node2"]),
        "--run-id",
        run_id,
        SCRIPT,
        "fail",
        str(tmp_path),
        "3",
        "7",
    ]
    _fails_fast(args, tmp_path, run_id, "node2")


def _fails_fast(args: list[str], tmp_path: Path, run_id: str, host: str) -> str:
    """Rank 3 on ``host`` exits 7 once all 4 ranks are ready: the job ends within a fraction of a second of it,
    with that code, the rank and host named, and nothing left; returns the launcher's stderr."""
    proc = start(args, cwd=tmp_path)
    assert wait_ready(tmp_path, 4), "ranks did not start"
    failed_at = time.monotonic()
    _out, err = proc.communicate(timeout=30)
    elapsed = time.monotonic() - failed_at
    assert proc.returncode == 7, err
    assert "rank 3" in err and host in err, err
    assert elapsed < 3.0 + 1.5, f"teardown took {elapsed:.1f} s"
    assert wait_until_gone(run_id, 3) == []
    return err


@pytest.mark.parametrize(
    ("runner", "sig"), [("ssh", signal.SIGKILL), ("pdsh", signal.SIGKILL), ("pdsh", signal.SIGINT)]
)
def test_killed_launcher_leaves_nothing(ssh_cluster: SshCluster, runner: str, sig: int, tmp_path: Path) -> None:
    run_id = f"kill{runner}{sig}{os.getpid()}"
    proc = start(
        [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, SCRIPT, "sleep", str(tmp_path)],
        cwd=tmp_path,
    )
    assert wait_ready(tmp_path, 4)
    assert len([p for p in job_processes(run_id) if "dslaunch.bootstrap" in " ".join(p.cmdline())]) == 4
    stop(proc, sig)
    assert proc.returncode == (-9 if sig == signal.SIGKILL else 130)
    assert wait_until_gone(run_id, 5) == []


def test_sigterm_stops_only_this_job(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    """Two jobs on the same hosts: SIGTERM to one leaves the other running."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    args = base_args(ssh_cluster, "ssh", ["node1", "node2"], slots=1)
    job_a = start([*args, "--run-id", f"joba{os.getpid()}", SCRIPT, "sleep", str(a)], cwd=tmp_path)
    job_b = start([*args, "--run-id", f"jobb{os.getpid()}", SCRIPT, "sleep", str(b)], cwd=tmp_path)
    try:
        assert wait_ready(a, 2) and wait_ready(b, 2)
        job_b.send_signal(signal.SIGTERM)
        _, err = job_b.communicate(timeout=20)
        assert job_b.returncode == 143, err
        assert wait_until_gone(f"jobb{os.getpid()}", 5) == []
        assert (
            len([p for p in job_processes(f"joba{os.getpid()}") if "dslaunch.bootstrap" in " ".join(p.cmdline())]) == 2
        )
    finally:
        stop(job_a, signal.SIGTERM)
    assert wait_until_gone(f"joba{os.getpid()}", 5) == []


@pytest.mark.parametrize("runner", RUNNERS)
def test_lost_agent_is_named_and_others_stopped(ssh_cluster: SshCluster, runner: str, tmp_path: Path) -> None:
    run_id = f"lost{runner}{os.getpid()}"
    proc = start(
        [*base_args(ssh_cluster, runner, ["node1", "node2"]), "--run-id", run_id, SCRIPT, "child", str(tmp_path)],
        cwd=tmp_path,
    )
    try:
        assert wait_ready(tmp_path, 4)
        _remote_agent(run_id, "127.0.0.3").kill()  # its ranks die with it; their children are reaped by run id
        _, err = proc.communicate(timeout=20)
    finally:
        stop(proc)
    assert proc.returncode != 0
    assert "node 1 (node2)" in err, err
    assert wait_until_gone(run_id, 5) == []


def test_dropped_connection_is_named(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    """Kill the sshd process serving node2's session: the connection drops mid-job."""
    import psutil

    run_id = f"drop{os.getpid()}"
    proc = start(
        [*base_args(ssh_cluster, "ssh", ["node1", "node2"]), "--run-id", run_id, SCRIPT, "sleep", str(tmp_path)],
        cwd=tmp_path,
    )
    try:
        assert wait_ready(tmp_path, 4)
        session = psutil.Process(_remote_agent(run_id, "127.0.0.3").ppid())
        assert session.name().startswith("sshd")
        session.kill()
        _, err = proc.communicate(timeout=20)
    finally:
        stop(proc)
    assert proc.returncode != 0
    assert "node2" in err, err
    assert "could not clean up" not in err, err  # the reaper reconnects when the old connection is gone
    assert wait_until_gone(run_id, 5) == []


def test_pdsh_killed_ssh_client_is_named(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    """pdsh's ssh client for node2 dies: node2 is named, and every node is stopped."""
    import psutil

    run_id = f"sshc{os.getpid()}"
    proc = start(
        [*base_args(ssh_cluster, "pdsh", ["node1", "node2"]), "--run-id", run_id, SCRIPT, "sleep", str(tmp_path)],
        cwd=tmp_path,
    )
    try:
        assert wait_ready(tmp_path, 4)
        pdsh = next(c for c in psutil.Process(proc.pid).children() if c.name().startswith("pdsh"))
        next(c for c in pdsh.children() if "node2" in c.cmdline()).kill()
        _, err = proc.communicate(timeout=20)
    finally:
        stop(proc)
    assert proc.returncode != 0
    assert "node 1 (node2)" in err, err
    assert wait_until_gone(run_id, 5) == []


def test_sigusr1_reaches_every_remote_rank(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    from tests.helpers import wait_for_file

    run_id = f"usr1{os.getpid()}"
    proc = start(
        [*base_args(ssh_cluster, "ssh", ["node1", "node2"]), "--run-id", run_id, SCRIPT, "usr1", str(tmp_path)],
        cwd=tmp_path,
    )
    try:
        assert wait_ready(tmp_path, 4)
        proc.send_signal(signal.SIGUSR1)
        assert all(wait_for_file(str(tmp_path / f"usr1.{r}"), 10) for r in range(4))
        assert proc.poll() is None  # forwarded, not a teardown
    finally:
        stop(proc, signal.SIGTERM)
    assert proc.returncode == 143
    assert wait_until_gone(run_id, 5) == []


def _fqdn_cluster_args(cluster: SshCluster, folder: Path, domain: str = "cluster.test") -> list[str]:
    """The test cluster's nodes under fully qualified names (node1.cluster.test -> node1's address)."""
    text = cluster.config.read_text()
    fqdn = re.sub(r"^Host (node\d+)$", rf"Host \1.{domain} \1", text, flags=re.M)
    config = folder / "ssh_config_fqdn"
    config.write_text(fqdn)
    hostfile = folder / "hosts_fqdn"
    hostfile.write_text(f"node1.{domain} slots=2\nnode2.{domain} slots=2\n")
    return ["--hostfile", str(hostfile), "--launcher", "pdsh", "--ssh-config", str(config), "--shutdown-timeout", "2"]


def test_pdsh_with_fully_qualified_names_fails_fast(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    """pdsh labels node1.cluster.test as 'node1': events are still read, and a failing rank ends the job fast."""
    run_id = f"fqdn{os.getpid()}"
    args = [*_fqdn_cluster_args(ssh_cluster, tmp_path), "--run-id", run_id, SCRIPT, "fail", str(tmp_path), "3", "7"]
    err = _fails_fast(args, tmp_path, run_id, "node2.cluster.test")
    assert "@dslaunch-event" not in err, err


@pytest.mark.parametrize("cause", ["rank-failure", "launcher-sigterm"])
@pytest.mark.parametrize("runner", ["local", *RUNNERS])
def test_grace_period_and_one_sigterm_per_rank(
    runner: str, cause: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """Ranks that need 2 s to save after SIGTERM get them (--shutdown-timeout 10) from every runner, pdsh
    included, and each gets SIGTERM exactly once, whether a rank failed or the launcher was told to stop."""
    if runner == "local":
        where = ["--nproc-per-node", "4", "--master-port", "0"]
    else:
        where = base_args(request.getfixturevalue("ssh_cluster"), runner, ["node1", "node2"])
    failing = "3" if cause == "rank-failure" else "-1"
    args = [*where, "--shutdown-timeout", "10", SCRIPT, "grace", str(tmp_path), failing, "7", "2"]
    proc = start(args, cwd=tmp_path)
    assert wait_ready(tmp_path, 4), "ranks did not start"
    if cause == "launcher-sigterm":
        proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=40)
    assert proc.returncode == (7 if cause == "rank-failure" else 143), err
    stopped = [0, 1, 2] if cause == "rank-failure" else [0, 1, 2, 3]
    assert sorted(p.name for p in tmp_path.glob("saved.*")) == [f"saved.{r}" for r in stopped], err
    for rank in stopped:
        assert len((tmp_path / f"sigterm.{rank}").read_text().split()) == 1, f"rank {rank} got SIGTERM more than once"


@pytest.mark.parametrize("runner", ["local", *RUNNERS])
def test_a_killed_node_agent_is_named_and_exits_128_plus_n(
    runner: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    run_id = f"agentkill{runner}{os.getpid()}"
    if runner == "local":
        where = ["--nproc-per-node", "2", "--master-port", "0"]
    else:
        where = base_args(request.getfixturevalue("ssh_cluster"), runner, ["node1", "node2"], slots=1)
    proc = start([*where, "--run-id", run_id, SCRIPT, "sleep", str(tmp_path)], cwd=tmp_path)
    assert wait_ready(tmp_path, 2), "ranks did not start"
    rank1 = next(p for p in job_processes(run_id) if p.environ().get("RANK") == "1")
    agent = rank1.parent()
    assert agent is not None and "dslaunch" in " ".join(agent.cmdline()), agent
    agent.kill()
    _out, err = proc.communicate(timeout=30)
    assert "disappeared" in err, err
    if runner == "local":
        assert proc.returncode == 137 and "its agent was killed by SIGKILL" in err, (proc.returncode, err)
    else:
        assert proc.returncode == 255, (proc.returncode, err)  # ssh's status for a session killed by a signal
    assert wait_until_gone(run_id, 10) == []


@pytest.mark.parametrize("code", [0, 5])
@pytest.mark.parametrize("mode", ["daemon", "chatty"])
@pytest.mark.parametrize("runner", ["local", *RUNNERS])
def test_nothing_a_rank_starts_outlives_the_job(
    runner: str, mode: str, code: int, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    """A double-forked setsid daemon, or a grandchild that keeps printing on the rank's stdout, ends with the
    job: the job ends when its ranks end (the printing one after the grace period), with the ranks' exit code."""
    run_id = f"escape{runner}{mode}{code}{os.getpid()}"
    if runner == "local":
        where = ["--nproc-per-node", "2", "--master-port", "0"]
    else:
        where = base_args(request.getfixturevalue("ssh_cluster"), runner, ["node1", "node2"], slots=1)
    started = time.monotonic()
    done = run(
        [*where, "--run-id", run_id, "--shutdown-timeout", "2", SCRIPT, mode, str(tmp_path), str(code)],
        cwd=tmp_path,
        timeout=60,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == code, done.stderr
    assert elapsed < 15, f"the job took {elapsed:.1f} s"
    assert job_processes(run_id) == [], "a process of the job outlived it"


@pytest.mark.parametrize(("target", "code", "why"), [("/nonexistent/prog", 127, "No such file"), ("/tmp", 126, "")])
@pytest.mark.parametrize("runner", RUNNERS)
def test_a_remote_no_python_target_that_cannot_run(
    runner: str, target: str, code: int, why: str, ssh_cluster: SshCluster, tmp_path: Path
) -> None:
    """Not checkable from the launcher: the agent reports it like a shell would (127 / 126), with no traceback."""
    args = base_args(ssh_cluster, runner, ["node1", "node2"], slots=1)
    done = run([*args, "--no-python", target], cwd=tmp_path, timeout=60)
    assert done.returncode == code, done.stderr
    assert re.search(rf"error:\n  \| cannot start rank [01]: {target}: {why}", done.stderr), done.stderr
    assert "Traceback" not in done.stderr and "disappeared" not in done.stderr


@pytest.mark.parametrize("runner", RUNNERS)
def test_sigquit_prints_every_remote_stack_and_hang_timeout_ends_the_job(
    ssh_cluster: SshCluster, runner: str, tmp_path: Path
) -> None:
    """SIGQUIT reaches each remote agent (ssh: a control line; pdsh: a second ssh signalling the agent): every rank
    prints its stack with its host prefix and the job goes on; then --hang-timeout ends it with 124 (docs/hangs.md)."""
    run_id = f"quit{runner}{os.getpid()}"
    where = base_args(ssh_cluster, runner, ["node1", "node2"])
    waiter = str(SCRIPTS / "waiter.py")
    args = [*where, "--hang-timeout", "4", "--run-id", run_id, waiter, "silent", "1,1,1,1", str(tmp_path)]
    proc = start(args, cwd=tmp_path)
    try:
        assert wait_ready(tmp_path, 4)
        time.sleep(0.5)  # the agents have seen every rank's bootstrap start
        proc.send_signal(signal.SIGQUIT)
        _, err = proc.communicate(timeout=30)
    finally:
        stop(proc)
    assert proc.returncode == 124, err
    shown = re.findall(r'^\[(?:node\d:)?rank([\d,-]+)\]:   File ".*waiter\.py", line \d+ in stuck_here$', err, re.M)
    ranks = sorted(rank for spec in shown for rank in expand(spec))  # the same line of many ranks prints once
    assert ranks == [0, 0, 1, 1, 2, 2, 3, 3], err  # once for SIGQUIT, once for the hang
    assert "dslaunch: hang: no rank made progress for 4 s; least progress: " in err, err
    assert wait_until_gone(run_id, 5) == []
