"""ssh settings as users have them: host keys, ProxyJump, preflight, dry-run masking (manual --node-rank with a
hostfile: tests/runners/test_node_hostfile.py)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest

from testbeds.ssh_cluster import SshCluster
from tests.plans import cli_error, dry_run_json, dry_run_output
from tests.runners.remote.launch import RUNNERS, SCRIPT, base_args, clean_overlay, records, run, wait_until_gone


def _config_with(cluster: SshCluster, tmp_path: Path, known_hosts: Path, extra: str = "") -> Path:
    text = cluster.config.read_text().replace(str(cluster.known_hosts), str(known_hosts))
    path = tmp_path / "ssh_config"
    path.write_text(extra + text)
    return path


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("runner", RUNNERS)
def test_unknown_host_key_is_refused_then_accepted_on_request(
    ssh_cluster: SshCluster, runner: str, tmp_path: Path
) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("")
    config = _config_with(ssh_cluster, tmp_path, known)
    args = base_args(ssh_cluster, runner, ["node1"], slots=1)
    args[args.index("--ssh-config") + 1] = str(config)
    refused = run([*args, SCRIPT, "echo"], cwd=tmp_path)
    assert refused.returncode == 255, refused.stderr
    assert records(refused.stdout) == []
    if runner == "ssh":
        assert "not in known_hosts" in refused.stderr and "--ssh-accept-new-hosts" in refused.stderr
    else:
        assert "Host key verification failed" in refused.stderr
    accepted = run([*args, "--ssh-accept-new-hosts", SCRIPT, "echo"], cwd=tmp_path)
    assert accepted.returncode == 0, accepted.stderr
    assert f"[127.0.0.2]:{ssh_cluster.port}" in known.read_text()
    if runner == "ssh":  # the line paramiko recorded is one OpenSSH and paramiko both accept
        again = run([*args, SCRIPT, "echo"], cwd=tmp_path)
        assert again.returncode == 0, again.stderr
        ssh = subprocess.run(["ssh", "-F", str(config), "node1", "true"], capture_output=True, text=True, timeout=30)
        assert ssh.returncode == 0, ssh.stderr


@pytest.mark.launch
@pytest.mark.cluster
def test_changed_host_key_is_always_refused(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    kind, key = (tmp_path / "other.pub").read_text().split()[:2]
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.2]:{ssh_cluster.port} {kind} {key}\n")
    config = _config_with(ssh_cluster, tmp_path, known)
    args = base_args(ssh_cluster, "ssh", ["node1"], slots=1)
    args[args.index("--ssh-config") + 1] = str(config)
    done = run([*args, "--ssh-accept-new-hosts", SCRIPT, "echo"], cwd=tmp_path)
    assert done.returncode == 255
    assert "does NOT match known_hosts" in done.stderr, done.stderr


@pytest.mark.launch
@pytest.mark.cluster
def test_proxy_jump_and_ssh_port_override(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    extra = "Host behind\n    HostName 127.0.0.4\n    ProxyJump node1\n"
    config = _config_with(ssh_cluster, tmp_path, ssh_cluster.known_hosts, extra)
    args = base_args(ssh_cluster, "ssh", ["behind", "node2"], slots=1)
    args[args.index("--ssh-config") + 1] = str(config)
    done = run([*args, "--ssh-port", str(ssh_cluster.port), SCRIPT, "echo"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    recs = records(done.stdout)
    assert recs[0]["prefix"] == "[behind:rank0]" and recs[0]["conn"].split()[2] == "127.0.0.4"
    # the jump host connects onward, so sshd sees node1's forwarded connection from loopback
    assert recs[0]["master"] == "127.0.0.4"
    wrong = run([*args, "--ssh-port", "1", SCRIPT, "echo"], cwd=tmp_path)
    assert wrong.returncode == 255 and "cannot connect" in wrong.stderr


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("runner", RUNNERS)
def test_unreachable_host_stops_launch_and_names_it(ssh_cluster: SshCluster, runner: str, tmp_path: Path) -> None:
    extra = "Host ghost\n    HostName 127.0.0.9\n"
    config = _config_with(ssh_cluster, tmp_path, ssh_cluster.known_hosts, extra)
    args = base_args(ssh_cluster, runner, ["node1", "ghost"], slots=1)
    args[args.index("--ssh-config") + 1] = str(config)
    run_id = f"ghost{runner}{os.getpid()}"
    done = run([*args, "--run-id", run_id, SCRIPT, "sleep", str(tmp_path)], cwd=tmp_path)
    assert done.returncode == 255
    assert "ghost" in done.stderr and "Traceback" not in done.stderr
    if runner == "ssh":  # nothing starts until every host is connected
        assert "nothing was started" in done.stderr and not (tmp_path / "ready.0").exists()
    assert wait_until_gone(run_id, 5) == []


@pytest.mark.launch
@pytest.mark.cluster
def test_wrong_key_is_an_authentication_error(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "wrong")], check=True)
    config = _config_with(ssh_cluster, tmp_path, ssh_cluster.known_hosts)
    config.write_text(config.read_text().replace(f"{ssh_cluster.base}/id", str(tmp_path / "wrong")))
    args = base_args(ssh_cluster, "ssh", ["node1"], slots=1)
    args[args.index("--ssh-config") + 1] = str(config)
    done = run([*args, SCRIPT, "echo"], cwd=tmp_path)
    assert done.returncode == 255
    assert "authentication failed for root@127.0.0.2" in done.stderr and str(tmp_path / "wrong") in done.stderr


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize("runner", RUNNERS)
def test_preflight_table(ssh_cluster: SshCluster, runner: str, tmp_path: Path) -> None:
    args = base_args(ssh_cluster, runner, ["node1", "node2"], slots=1)
    done = run([*args, "--master-port", "29531", "--preflight"], cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].split()[:3] == ["host", "reach", "python"]
    rows = {line.split()[0]: line for line in lines[2:4]}
    assert rows["node1"].split()[1] == "yes" and rows["node1"].endswith("ok") and "29531 free" in rows["node1"]
    assert rows["node2"].endswith("ok")
    extra = "Host ghost\n    HostName 127.0.0.9\n"
    config = _config_with(ssh_cluster, tmp_path, ssh_cluster.known_hosts, extra)
    args = base_args(ssh_cluster, runner, ["node1", "ghost"], slots=1)
    args[args.index("--ssh-config") + 1] = str(config)
    failing = run([*args, "--preflight"], cwd=tmp_path)
    assert failing.returncode == 1
    ghost = next(line for line in failing.stdout.splitlines() if line.startswith("ghost"))
    assert ghost.split()[1] == "NO" and ghost.endswith("FAIL")


@pytest.mark.launch
@pytest.mark.cluster
def test_dry_run_masks_secrets_and_shows_commands(ssh_cluster: SshCluster, tmp_path: Path) -> None:
    args = base_args(ssh_cluster, "pdsh", ["node1", "node2"], slots=1)
    done = run(
        [
            *args,
            "--export",
            "HF_TOKEN=hf-secret-value",
            "--export",
            "TEST_OK=visible",
            "--dry-run",
            "--json",
            SCRIPT,
            "echo",
        ],
        cwd=tmp_path,
        env={"WANDB_API_KEY": "wandb-secret-value"},
    )
    assert done.returncode == 0, done.stderr
    assert "hf-secret-value" not in done.stdout and "wandb-secret-value" not in done.stdout
    data = json.loads(done.stdout)
    assert data["env"]["TEST_OK"] == "visible"
    assert data["env"]["HF_TOKEN"] == "****"
    assert data["master_addr"] == "127.0.0.2"
    assert "pdsh -S -R ssh" in data["commands"][0] and "--node-rank %n" in data["commands"][0]
    for runner in RUNNERS:  # in-process from here (tests/plans.py)
        args = base_args(ssh_cluster, runner, ["node1", "node2"], slots=1)
        remote = ["--remote-python", "/opt/py 3/bin/python", "--remote-cwd", "/srv/job"]
        text = dry_run_output(
            [*args, "--export", "HF_TOKEN=hf-secret-value", *remote, SCRIPT], env=clean_overlay(), cwd=tmp_path
        )
        assert "hf-secret-value" not in text and "dslaunch.agent" in text
        command = dry_run_json([*args, *remote, SCRIPT], env=clean_overlay(), cwd=tmp_path)["commands"][0]
        remote = shlex.split(command.partition("  # ")[0])[-1] if runner == "pdsh" else command
        assert "cd /srv/job && exec env" in remote and "'/opt/py 3/bin/python' -u -m dslaunch.agent" in remote


@pytest.mark.launch
@pytest.mark.cluster
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--export", "1BAD=x"], "use NAME or NAME=VALUE"),
        (["--export", "TEST_SURELY_UNSET_VAR"], "is not set in the launcher's environment"),
        (["--env-file", "missing.env"], "does not exist"),
        (["--env-file", "bad.env"], "expected NAME=VALUE"),
        (["--ssh-config", "missing_config"], "does not exist"),
        (["--fanout", "0"], "0"),
    ],
)
def test_bad_remote_input_exits_2(ssh_cluster: SshCluster, tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "bad.env").write_text("OK=1\nthis line is wrong\n")
    base = base_args(ssh_cluster, "ssh", ["node1"], slots=1)
    code, err = cli_error([*base, *args, "--dry-run", SCRIPT], env=clean_overlay(), cwd=tmp_path)
    assert code == 2, err
    assert message in err


@pytest.mark.launch
def test_bad_host_name_is_refused(tmp_path: Path) -> None:
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=1\n-oProxyCommand=touch${IFS}pwned slots=1\n")
    done = run(["--hostfile", str(hostfile), "--launcher", "ssh", SCRIPT], cwd=tmp_path)
    assert done.returncode == 2 and "is not valid for a remote launch" in done.stderr
    assert not os.path.exists(tmp_path / "pwned")
