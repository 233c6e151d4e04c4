"""Pure pieces of remote launches: env files, exports, host names, the remote command, pdsh argv, preflight rows."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dslaunch.cli import remote_envs as envs
from dslaunch.errors import DslaunchError
from dslaunch.plan import LaunchPlan, RemoteSettings
from dslaunch.runners import preflight_probe as probe
from dslaunch.runners.pdsh.dialback import dialback_agent_command
from dslaunch.runners.pdsh.invocation import answers, pdsh_env, pdsh_label, pdsh_labels
from dslaunch.runners.pdsh.runner import pdsh_argv
from dslaunch.runners.remote.agent_command import agent_command, reap_command
from dslaunch.runners.remote.sshconfig import resolve, valid_host
from tests.plans import make_plan

ENV_FILE_CASES = [
    ("A=1", {"A": "1"}),
    ("  A = spaced  ", {"A": "spaced"}),
    ("# only a comment\n\n   \nB=2", {"B": "2"}),
    ("export C=3", {"C": "3"}),
    ("D='single $HOME `x` \"q\"'", {"D": 'single $HOME `x` "q"'}),
    ('E="double \\"q\\" \\\\ \\n"', {"E": 'double "q" \\ \n'}),
    ("F=a=b=c", {"F": "a=b=c"}),
    ("G=value # comment", {"G": "value"}),
    ("H=url#fragment", {"H": "url#fragment"}),
    ("I=", {"I": ""}),
    ("J='x' # comment", {"J": "x"}),
    ("K=1\nK=2", {"K": "2"}),
    ("L=ünï ✓", {"L": "ünï ✓"}),
]


@pytest.mark.parametrize(("text", "expected"), ENV_FILE_CASES)
def test_env_file_lines(text: str, expected: dict[str, str]) -> None:
    assert envs.parse_env_file(text) == expected


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("no equals sign", "expected NAME=VALUE"),
        ("1A=x", "expected NAME=VALUE"),
        ("A='open", "unterminated ' quote"),
        ('A="x" trailing', "unexpected text"),
    ],
)
def test_env_file_errors_name_the_line(text: str, why: str) -> None:
    with pytest.raises(envs.EnvError, match=why) as err:
        envs.parse_env_file("OK=1\n" + text, "f.env")
    assert "f.env:2" in str(err.value)


@pytest.mark.parametrize(
    "line",
    [
        "HF_TOKEN hf_s3cr3tvalue",  # '=' forgotten
        "1HF_TOKEN=hf_s3cr3tvalue",  # bad name
        'HF_TOKEN="x" hf_s3cr3tvalue',  # text after the quotes
        "export HF_TOKEN hf_s3cr3tvalue",
    ],
)
def test_env_file_errors_never_echo_a_value(line: str) -> None:
    with pytest.raises(envs.EnvError) as err:
        envs.parse_env_file(line, "f.env")
    assert "s3cr3t" not in str(err.value)


@pytest.mark.parametrize("spec", ["1HF_TOKEN=hf_s3cr3tvalue", "HF TOKEN=hf_s3cr3tvalue", "=hf_s3cr3tvalue"])
def test_bad_export_never_echoes_the_value(spec: str) -> None:
    with pytest.raises(envs.EnvError) as err:
        envs.parse_export(spec, {})
    assert "s3cr3t" not in str(err.value)


def test_exports_by_prefix_and_never_local_facts() -> None:
    environ = {
        "NCCL_DEBUG": "INFO",
        "WANDB_X": "1",
        "HF_HOME": "/h",
        "PYTHONPATH": "/p",
        "DSLAUNCH_LOG": "x",
        "HOME": "/root",
        "CUDA_VISIBLE_DEVICES": "0",
        "DSLAUNCH_RUN_ID": "r",
        "TORCH_HOME": "/t",
        "OMP_NUM_THREADS": "2",
        "FI_PROVIDER": "efa",
        "PATH": "/bin",
        "MLFLOW_X": "m",
    }
    got = envs.prefixed_exports(environ)
    assert set(got) == {
        "NCCL_DEBUG",
        "WANDB_X",
        "HF_HOME",
        "PYTHONPATH",
        "DSLAUNCH_LOG",
        "TORCH_HOME",
        "OMP_NUM_THREADS",
        "FI_PROVIDER",
        "MLFLOW_X",
    }


def test_parse_export() -> None:
    assert envs.parse_export("A=b=c", {}) == envs.Export("A", "b=c")
    assert envs.parse_export("A", {"A": "from env"}) == envs.Export("A", "from env")
    with pytest.raises(envs.EnvError, match="not set"):
        envs.parse_export("A", {})
    with pytest.raises(envs.EnvError, match="NAME or NAME=VALUE"):
        envs.parse_export("A-B=1", {})


def test_env_file_lookup_order() -> None:
    assert envs.env_file_paths({}, "/home/u", "/work") == ["/home/u/.deepspeed_env", "/work/.deepspeed_env"]
    assert envs.env_file_paths({}, "/same", "/same") == ["/same/.deepspeed_env"]
    assert envs.env_file_paths({"DS_ENV_FILE": "job.env"}, "/h", "/w") == ["/h/job.env", "/w/job.env"]
    assert envs.env_file_paths({"DS_ENV_FILE": "/abs/job.env"}, "/h", "/w") == ["/abs/job.env"]


@pytest.mark.parametrize(
    ("host", "ok"),
    [
        ("node1", True),
        ("user@node-1.example.com", True),
        ("10.0.0.2", True),
        ("::1", True),
        ("fe80::1%eth0", True),
        ("-oProxyCommand=x", False),
        ("$(touch x)", False),
        ("a;b", False),
        ("a,b", False),
        ("node[1-2]", False),
        ("a b", False),
        ("`x`", False),
        ("@host", False),
        ("", False),
    ],
)
def test_valid_host(host: str, ok: bool) -> None:
    assert valid_host(host) is ok


def test_ssh_config_resolution(tmp_path: Path) -> None:
    config = tmp_path / "config"
    config.write_text(
        "Host gpu*\n    HostName 10.1.0.%h\n    User alice\n    Port 2200\n    IdentityFile ~/.ssh/k\n"
        "    ProxyJump bastion\n    UserKnownHostsFile /kh1 /kh2\n    StrictHostKeyChecking accept-new\n"
        "Host *\n    Port 22\n    User nobody\n"
    )
    t = resolve("gpu7", str(config))
    assert (t.hostname, t.port, t.user, t.proxy_jump, t.strict_host_key_checking) == (
        "10.1.0.gpu7",
        2200,
        "alice",
        "bastion",
        "accept-new",
    )
    assert t.identity_files == (os.path.expanduser("~/.ssh/k"),) and t.known_hosts_files == ("/kh1", "/kh2")
    assert t.known_hosts_key == "[10.1.0.gpu7]:2200"
    other = resolve("bob@plain", str(config), port=2022)
    assert (other.hostname, other.port, other.user, other.proxy_jump) == ("plain", 2022, "bob", None)


def _plan(cwd: str, python: str = "/usr/bin/python3", run_id: str = "r1", nodes: int = 2) -> LaunchPlan:
    return make_plan(
        hosts=[f"h{i}" for i in range(nodes)],
        python=python,
        run_id=run_id,
        cwd=cwd,
        env=(("PYTHONPATH", "/lib $(x)"), ("SECRET_TOKEN", "never-in-command")),
    )


def test_agent_command_golden() -> None:
    assert agent_command(_plan("/work dir"), 1, venv_script="/v/bin/activate") == (
        "cd '/work dir' && . /v/bin/activate && exec env DSLAUNCH_RUN_ID=r1 'PYTHONPATH=/lib $(x)' "
        "/usr/bin/python3 -u -m dslaunch.agent --node-rank 1"
    )


_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=30)


@pytest.mark.launch
@settings(max_examples=40, deadline=None)
@given(cwd_part=_TEXT, run_id=_TEXT)
def test_agent_command_runs_nothing_but_the_agent(
    tmp_path_factory: pytest.TempPathFactory, cwd_part: str, run_id: str
) -> None:
    """Whatever the path and run id hold, sh runs exactly the agent argv, in that directory."""
    base = tmp_path_factory.mktemp("q")
    name = cwd_part.replace("/", "_")
    if name in (".", ".."):
        name += "_"
    cwd = base / name
    cwd.mkdir()
    fake_python = base / "py"
    fake_python.write_text('#!/bin/sh\nprintf "%s\\n" "$PWD" "$DSLAUNCH_RUN_ID" "$PYTHONPATH" "$@"\n')
    fake_python.chmod(0o755)
    command = agent_command(_plan(str(cwd), str(fake_python), run_id), 3)
    out = subprocess.run(["sh", "-c", command], capture_output=True, timeout=10, cwd=base)
    assert out.returncode == 0, out.stderr
    expected = [str(cwd), run_id, "/lib $(x)", "-u", "-m", "dslaunch.agent", "--node-rank", "3", ""]
    assert out.stdout == "\n".join(expected).encode()
    assert sorted(p.name for p in base.iterdir()) == sorted([name, "py"])


def test_pdsh_argv_escapes_percent_and_keeps_rank_placeholder() -> None:
    settings_ = RemoteSettings(fanout=4, connect_timeout=7)
    argv = pdsh_argv(_plan("/d %h %n"), settings_)
    assert argv[:10] == ["pdsh", "-S", "-R", "ssh", "-f", "4", "-t", "7", "-w", "h0,h1"]
    assert argv[10] == (
        "cd '/d %%h %%n' && exec env DSLAUNCH_RUN_ID=r1 'PYTHONPATH=/lib $(x)' /usr/bin/python3 -u -m "
        "dslaunch.agent --node-rank %n --plan-file .cache/dslaunch/plans/r1.%n.plan"
    )
    assert "never-in-command" not in " ".join(argv)
    one = pdsh_argv(_plan("/d", nodes=1), settings_)
    assert "--node-rank 0 " in one[-1]
    assert pdsh_argv(_plan("/d", nodes=40), settings_)[5] == "40"  # every agent must run at once


def test_pdsh_env_keeps_user_args_and_adds_ours() -> None:
    s = RemoteSettings(ssh_config="/etc/my_cfg", ssh_port=2222, accept_new_hosts=True)
    env = pdsh_env(s, {"PDSH_SSH_ARGS_APPEND": "-o Compression=yes", "PDSH_SSH_ARGS": "-x %h"})
    assert env["PDSH_SSH_ARGS_APPEND"] == (
        "-o Compression=yes -o BatchMode=yes -o ServerAliveInterval=3 -o ServerAliveCountMax=3 "
        "-F /etc/my_cfg -p 2222 -o StrictHostKeyChecking=accept-new"
    )
    assert "PDSH_SSH_ARGS" not in env
    with pytest.raises(ValueError, match="spaces"):
        pdsh_env(RemoteSettings(ssh_config="/a b/cfg"), {})


EXPECTED = probe.Expected(python="3.11.7", dslaunch="0.1.0", torch="2.13.0", gpus=0, port=29500)


def _probe(**over: object) -> str:
    import json

    data = {
        "python": "3.11.7",
        "executable": "/py",
        "dslaunch": "0.1.0",
        "torch": "2.13.0",
        "gpus": 0,
        "port_free": True,
        **over,
    }
    return "noise\n" + probe.MARK + json.dumps(data) + "\n"


@pytest.mark.parametrize(
    ("status", "output", "master", "ok", "problem"),
    [
        (0, _probe(), True, True, None),
        (0, _probe(python="3.10.1"), False, False, "python 3.10.1"),
        (0, _probe(dslaunch=None), False, False, "dslaunch missing"),
        (0, _probe(torch="2.4.0"), False, False, "torch 2.4.0"),
        (0, _probe(port_free=False), True, False, "master port 29500 is already in use"),
        (0, _probe(port_free=False), False, True, None),
        (0, _probe(gpus=1), False, False, "1 visible GPU(s) for 2 slot(s)"),
        (255, "", False, False, "not usable"),
        (0, "no marker", False, False, "not usable"),
    ],
)
def test_preflight_rows(status: int, output: str, master: bool, ok: bool, problem: str | None) -> None:
    row = probe.evaluate("h", 2, master, EXPECTED, (status, output, "ssh: connect refused"))
    assert row.ok is ok
    if problem:
        assert any(problem in p for p in row.problems), row.problems
    assert row.cells[-1] == ("ok" if ok else "FAIL")


@pytest.mark.launch
def test_preflight_probe_runs_here() -> None:
    out = subprocess.run(
        ["sh", "-c", probe.probe_command(sys.executable, 0)], capture_output=True, text=True, timeout=30
    )
    data = probe.parse_probe(out.stdout)
    assert data is not None and data["dslaunch"] == "0.1.0" and data["port_free"] is None
    assert shlex.split(probe.probe_command("/p y", 5))[0] == "/p y"


def test_master_address_from_ssh_config(tmp_path: Path) -> None:
    from dslaunch.runners.remote.sshconfig import resolve_address

    config = tmp_path / "config"
    config.write_text("Host n1\n    HostName 10.9.8.7\n")
    assert resolve_address("user@n1", str(config)) == "10.9.8.7"
    assert resolve_address("other", str(config)) == "other"


@pytest.mark.launch
def test_reap_kills_only_the_named_run() -> None:
    mine = subprocess.Popen(["sleep", "60"], env={**os.environ, "DSLAUNCH_RUN_ID": "reap-me"})
    other = subprocess.Popen(["sleep", "60"], env={**os.environ, "DSLAUNCH_RUN_ID": "reap-me-not"})
    try:
        out = subprocess.run(
            [sys.executable, "-m", "dslaunch.runners.remote.reap", "reap-me"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert out.returncode == 0 and "1 process(es) of run reap-me killed" in out.stdout
        assert mine.wait(5) == -9
        assert other.poll() is None
    finally:
        for p in (mine, other):
            p.kill()
            p.wait()


@pytest.mark.launch
def test_reap_of_one_host_spares_the_runs_processes_of_another_host_on_the_same_machine() -> None:
    """Hosts of a test bed share one machine: a lost host's reap must not take another host's job agent."""
    env = {**os.environ, "DSLAUNCH_RUN_ID": "reap-host"}
    lost = subprocess.Popen(["sleep", "60"], env={**env, "DSLAUNCH_HOST": "node1"})
    kept = subprocess.Popen(["sleep", "60"], env={**env, "DSLAUNCH_HOST": "node2"})
    try:
        argv = [sys.executable, "-m", "dslaunch.runners.remote.reap", "--host", "node1", "reap-host"]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
        assert out.returncode == 0 and "1 process(es) of run reap-host killed" in out.stdout, out.stderr
        assert lost.wait(5) == -9
        assert kept.poll() is None
    finally:
        for p in (lost, kept):
            p.kill()
            p.wait()


def test_a_job_lifetime_agents_command_golden() -> None:
    assert agent_command(_plan("/w"), 0, for_job=True, host="b;touch x") == (
        "cd /w && exec env DSLAUNCH_RUN_ID=r1 'DSLAUNCH_HOST=b;touch x' 'PYTHONPATH=/lib $(x)' "
        "/usr/bin/python3 -u -m dslaunch.agent --for-job"
    )
    assert reap_command(_plan("/w"), host="b;touch x").endswith("-m dslaunch.runners.remote.reap --host 'b;touch x' r1")


def test_a_pdsh_job_agents_command_golden() -> None:
    """pdsh's %n and %h stay for pdsh, every other '%' is escaped; one host gets its values literally."""
    plan = _plan("/w 100%")
    assert dialback_agent_command(plan, "d3", ["h0", "h1"]) == (
        "cd '/w 100%%' && exec env DSLAUNCH_RUN_ID=r1 DSLAUNCH_HOST=%h 'PYTHONPATH=/lib $(x)' "
        "/usr/bin/python3 -u -m dslaunch.agent --for-job --dial-file .cache/dslaunch/plans/r1.d3-%n.plan"
    )
    assert dialback_agent_command(plan, "d4", ["al%ce@h1"]) == (
        "cd '/w 100%%' && exec env DSLAUNCH_RUN_ID=r1 DSLAUNCH_HOST=al%%ce@h1 'PYTHONPATH=/lib $(x)' "
        "/usr/bin/python3 -u -m dslaunch.agent --for-job --dial-file .cache/dslaunch/plans/r1.d4-0.plan"
    )
    assert "never-in-command" not in dialback_agent_command(plan, "d5", ["h0"])


@pytest.mark.parametrize(
    ("host", "label"),
    [
        ("node1", "node1"),
        ("node1.cluster.test", "node1"),
        ("alice@node1.cluster.test", "node1"),
        ("10.1.2.3", "10.1.2.3"),
        ("bob@127.0.0.2", "127.0.0.2"),
        ("gpu-01.a", "gpu-01"),
    ],
)
def test_pdsh_labels_like_pdsh(host: str, label: str) -> None:
    assert pdsh_label(host) == label


def test_hosts_pdsh_cannot_tell_apart_are_refused() -> None:
    assert pdsh_labels(["node1.a", "node2.a"]) == ["node1", "node2"]
    with pytest.raises(DslaunchError, match=r"'node1\.a' and 'node1\.b' alike"):
        pdsh_labels(["node1.a", "node1.b"])


def test_pdsh_host_queue_spills_output_and_lets_events_pass() -> None:
    from dslaunch.runners.pdsh.demux import HostLines as _Lines

    q = _Lines(budget=10)
    outputs = [f"line {i}\n" for i in range(6)]
    for text in outputs[:3]:
        q.put(text)  # the first fits in memory, the rest spill
    q.put("@event\n", urgent=True)
    for text in outputs[3:]:
        q.put(text)
    q.put(None)
    got = []
    while (item := q.get()) is not None:
        got.append(item)
    assert got[0] == outputs[0] and "@event\n" in got
    assert [g for g in got if g != "@event\n"] == outputs  # output order kept, nothing lost
    assert got.index("@event\n") < got.index(outputs[1])  # the event did not wait behind spilled output
    assert q.spill is None  # the spill file is closed once drained


def test_pdshs_output_split_back_by_host_with_each_hosts_status() -> None:
    """--preflight over pdsh (runners/pdsh/invocation.answers): a host's status is what pdsh says of it."""
    plan = make_plan(hosts=("alice@w1", "w2", "w3", "w4"))
    stdout = "w1: probe says hi\nw2: half\n"
    stderr = (
        "pdsh@here: w2: ssh exited with exit code 127\n"
        "w2: python3: not found\n"
        "pdsh@here: w3: ssh exited with exit code 255\n"
        "w3: ssh: connect to host w3 port 22: Connection refused\n"
        "w1: a warning of its own\n"
    )
    got = answers(plan, stdout, stderr, "here")
    assert got[0] == (0, "probe says hi", "a warning of its own")  # pdsh says nothing of it: 0
    assert got[1] == (127, "half", "ssh exited with exit code 127\npython3: not found")
    assert got[2] == (255, "", "ssh exited with exit code 255\nssh: connect to host w3 port 22: Connection refused")
    assert got[3] == (None, "", "")  # not a word from it
