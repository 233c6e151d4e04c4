"""Elastic node counts and spares, pure: the layout, the host choice, the options (docs/elastic.md)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from dslaunch.job import elastic
from dslaunch.job.attempts import HostPool, attempts_summary, run_attempts
from dslaunch.job.protocols import Runner
from dslaunch.job.result import JobResult
from dslaunch.mesh import MeshConfigError
from dslaunch.observe.session import Observer
from dslaunch.plan import Candidate, Elastic, LaunchPlan
from tests.plans import cli_error, dry_run_json, make_plan, plan_of

HOSTS = ("a", "b", "c", "d")


def pool_plan(nmin: int, nmax: int, slots: tuple[str, ...] = ("0", "1"), **kw: object) -> LaunchPlan:
    candidates = tuple(Candidate(h, slots) for h in HOSTS)
    base = make_plan(hosts=HOSTS[:nmax], slots=slots, **kw)
    return replace(base, elastic=Elastic(candidates, nmin, nmax))


@pytest.mark.parametrize(
    ("nmin", "nmax", "quarantine", "chosen"),
    [
        (2, 2, {}, ("a", "b")),
        (2, 2, {"a": "lost"}, ("b", "c")),  # a spare takes the lost node's place, in hostfile order
        (2, 2, {"a": "lost", "c": "dead"}, ("b", "d")),
        (2, 3, {"b": "dead"}, ("a", "c", "d")),
        (1, 4, {"a": "x", "b": "x", "c": "x"}, ("d",)),  # shrinks to what is left
        (2, 2, {"a": "x", "b": "x", "c": "x"}, ("d",)),  # below MIN: not enough
    ],
)
def test_choose_hosts_takes_spares_in_order(
    nmin: int, nmax: int, quarantine: dict[str, str], chosen: tuple[str, ...]
) -> None:
    e = pool_plan(nmin, nmax).elastic
    assert elastic.choose_hosts(e, quarantine) == chosen
    assert elastic.enough(e, chosen) == (len(chosen) >= nmin)


@pytest.mark.parametrize(
    ("hosts", "ranks", "world"),
    [(("a", "b"), [(0, 1), (2, 3)], 4), (("b", "d", "c"), [(0, 1), (2, 3), (4, 5)], 6), (("c",), [(0, 1)], 2)],
)
def test_layout_renumbers_ranks_on_the_hosts_chosen(
    hosts: tuple[str, ...], ranks: list[tuple[int, ...]], world: int
) -> None:
    laid = elastic.layout(pool_plan(1, 4), hosts, "addr-of-first")
    assert [n.host for n in laid.nodes] == list(hosts)
    assert [n.ranks for n in laid.nodes] == ranks and [n.node_rank for n in laid.nodes] == list(range(len(hosts)))
    assert laid.world_size == world and laid.master_addr == "addr-of-first"
    assert all(n.slots == ("0", "1") for n in laid.nodes)
    assert laid.elastic == pool_plan(1, 4).elastic  # the candidates stay: a later attempt chooses again


@pytest.mark.parametrize(
    ("mesh", "hosts", "fits"),
    [
        ("dp_shard=-1,tp=2", ("a",), True),
        ("dp_shard=-1,tp=4", ("a",), False),
        ("dp_shard=2,tp=2", ("a", "b", "c"), False),
    ],
)
def test_layout_checks_the_mesh_against_the_new_world(mesh: str, hosts: tuple[str, ...], fits: bool) -> None:
    plan = pool_plan(1, 4, env=(("DSLAUNCH_MESH", mesh),))
    if fits:
        assert elastic.layout(plan, hosts, "x").world_size == 2 * len(hosts)
    else:
        with pytest.raises(MeshConfigError, match=f"{2 * len(hosts)} ranks"):
            elastic.layout(plan, hosts, "x")


class FakeRunner(Runner):
    """Stands in for a runner in these pure checks: each attempt's result from a list, the plans it got kept."""

    name = "fake"

    def __init__(self, results: list[JobResult]) -> None:
        self.results, self.plans = list(results), []  # type: ignore[var-annotated]

    def describe(self, plan: LaunchPlan) -> list[str]:
        return []

    def run(self, plan: LaunchPlan, observer: Observer | None) -> JobResult:
        self.plans.append(plan)
        return self.results.pop(0)


def _run(plan: LaunchPlan, results: list[JobResult], dead: dict[str, str]) -> tuple[int, FakeRunner, list[list[str]]]:
    probes: list[list[str]] = []

    def probe(_plan: LaunchPlan, hosts: list[str]) -> dict[str, str]:
        probes.append(list(hosts))
        return {h: dead[h] for h in hosts if h in dead}

    runner = FakeRunner(results)
    pool = HostPool(plan, probe, lambda _plan, host: f"addr-{host}")
    return run_attempts(runner, plan, pool), runner, probes


LOST_A = JobResult(255, "node 0 (a) disappeared", blamed=(("a", "its node agent was lost"),))
RANK_FAILED = JobResult(7, "rank 1 on a exited with code 7")


def test_a_lost_node_is_replaced_by_a_probed_spare(capfd: pytest.CaptureFixture[str]) -> None:
    plan = replace(pool_plan(2, 2), restarts=replace(pool_plan(2, 2).restarts, max_restarts=2, delay=0))
    code, runner, probes = _run(plan, [LOST_A, JobResult(0)], dead={"d": "cannot connect"})
    assert code == 0
    assert [[n.host for n in p.nodes] for p in runner.plans] == [["a", "b"], ["b", "c"]]
    assert [p.restarts.count for p in runner.plans] == [0, 1] and runner.plans[1].world_size == 4
    assert probes == [["a", "b", "c", "d"], ["c"]]  # every candidate first; later only the spare taken
    err = capfd.readouterr().err
    assert "left out: d (cannot connect)" in err and "left out: a (its node agent was lost)" in err
    assert "attempt 2 on b, c: exit 0: succeeded" in err


def test_a_ranks_own_failure_blames_no_host() -> None:
    plan = replace(pool_plan(2, 2), restarts=replace(pool_plan(2, 2).restarts, max_restarts=1, delay=0))
    code, runner, _probes = _run(plan, [RANK_FAILED, JobResult(0)], dead={})
    assert code == 0 and [[n.host for n in p.nodes] for p in runner.plans] == [["a", "b"], ["a", "b"]]


def test_no_spare_left_stops_a_fixed_size_job(capfd: pytest.CaptureFixture[str]) -> None:
    plan = replace(pool_plan(2, 2), restarts=replace(pool_plan(2, 2).restarts, max_restarts=5, delay=0))
    code, runner, _probes = _run(plan, [LOST_A], dead={"c": "cannot connect", "d": "python 3.9 differs"})
    assert code == 255 and len(runner.plans) == 1  # never retried on the same shortfall
    err = capfd.readouterr().err
    assert "the job needs 2 node(s) and only 1 host(s) are usable (b)" in err
    assert "  a: its node agent was lost" in err and "  d: python 3.9 differs" in err
    assert "no spare host is left" in err


def test_an_elastic_job_shrinks_to_min_and_the_master_moves() -> None:
    plan = replace(pool_plan(1, 2), restarts=replace(pool_plan(1, 2).restarts, max_restarts=1, delay=0))
    code, runner, _probes = _run(plan, [LOST_A, JobResult(0)], dead={"c": "x", "d": "x"})
    assert code == 0 and [n.host for n in runner.plans[1].nodes] == ["b"]
    assert runner.plans[1].world_size == 2 and runner.plans[1].master_addr == "addr-b"


def test_a_plan_without_candidates_runs_as_it_is() -> None:
    plan = make_plan(hosts=("a", "b"))
    code, runner, probes = _run(plan, [JobResult(0)], dead={})
    assert code == 0 and probes == [] and runner.plans == [plan.attempt(0)]


def test_the_summary_names_each_attempts_hosts() -> None:
    text = attempts_summary([LOST_A, JobResult(0)], 1, [("a", "b"), ("b", "c")])
    assert text.splitlines()[1:] == [
        "  attempt 1 on a, b: exit 255: node 0 (a) disappeared",
        "  attempt 2 on b, c: exit 0: succeeded",
    ]


# The options, in-process.


@pytest.fixture
def hostfile(tmp_path: Path) -> str:
    path = tmp_path / "hosts"
    path.write_text("n1 slots=2\nn2 slots=2\nn3 slots=2\n")
    return str(path)


@pytest.mark.parametrize(
    ("args", "nodes", "spares", "nnodes"),
    [
        (["--nnodes", "2:3"], ["n1", "n2", "n3"], [], (2, 3)),
        (["--nnodes", "1:2"], ["n1", "n2"], ["n3"], (1, 2)),
        (["--num-nodes", "2"], ["n1", "n2"], ["n3"], (2, 2)),
        (["--nnodes", "2"], ["n1", "n2"], ["n3"], (2, 2)),
        (["--min_elastic_nodes", "2"], ["n1", "n2", "n3"], [], (2, 3)),
        (["--min_elastic_nodes", "1", "--max_elastic_nodes", "2"], ["n1", "n2"], ["n3"], (1, 2)),
    ],
)
def test_node_ranges_and_spares_in_the_plan(
    hostfile: str, args: list[str], nodes: list[str], spares: list[str], nnodes: tuple[int, int]
) -> None:
    plan = plan_of(["-H", hostfile, "--launcher", "ssh", *args, "x.py"])
    assert [n.host for n in plan.nodes] == nodes and list(plan.elastic.spares) == spares
    assert (plan.elastic.nnodes_min, plan.elastic.nnodes_max) == nnodes
    shown = dry_run_json(["-H", hostfile, "--launcher", "ssh", *args, "x.py"])
    assert shown["spares"] == spares and shown["nnodes"] == list(nnodes)
    assert LaunchPlan.from_json(plan.to_json()) == plan


def test_a_fixed_job_on_every_host_has_no_candidates(hostfile: str) -> None:
    assert plan_of(["-H", hostfile, "--launcher", "ssh", "x.py"]).elastic == Elastic()
    assert "spares" not in dry_run_json(["-H", hostfile, "--launcher", "ssh", "x.py"])
    assert plan_of(["-H", hostfile, "--launcher", "openmpi", "--num-nodes", "2", "x.py"]).elastic == Elastic()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--nnodes", "3:2"], "MIN is above MAX"),
        (["--nnodes", "0:2"], "give N or MIN:MAX"),
        (["--nnodes", "a:b"], "give N or MIN:MAX"),
        (["--nnodes", "4:5"], "at least 4 node(s) but the hostfile has 3"),
        (["--nnodes", "1:2", "--num-nodes", "2"], "not both"),
        (["--nnodes", "1:2", "--node-rank", "0"], "run one dslaunch with -H HOSTFILE --nnodes MIN:MAX"),
        (["--nnodes", "1:2", "--launcher", "openmpi"], "needs --launcher ssh, pdsh or slurm"),
        (["--nnodes", "1:2", "--launcher", "mpich"], "needs --launcher ssh, pdsh or slurm"),
        (["--min_elastic_nodes", "3", "--max_elastic_nodes", "2"], "above --max_elastic_nodes"),
        (["--min_elastic_nodes", "0"], "give a node count from 1"),
    ],
)
def test_bad_node_ranges_are_refused(hostfile: str, args: list[str], needle: str) -> None:
    code, err = cli_error(["-H", hostfile, *args, "x.py"])
    assert code == 2 and needle in err, err


def test_a_range_without_a_hostfile_says_what_to_use() -> None:
    code, err = cli_error(["--nnodes", "1:4", "x.py"], env={"DSLAUNCH_HOSTFILE": None})
    assert code == 2 and "give --rdzv-endpoint HOST[:PORT]" in err and "-H HOSTFILE" in err, err


@pytest.mark.parametrize(
    ("count", "expected"),
    [
        (0, ""),
        (1, "h0"),
        (16, ", ".join(f"h{i}" for i in range(16))),
        (17, ", ".join(f"h{i}" for i in range(16)) + " and 1 more"),
        (16384, ", ".join(f"h{i}" for i in range(16)) + " and 16,368 more"),
    ],
)
def test_a_line_names_at_most_16_hosts_and_counts_the_rest(count: int, expected: str) -> None:
    assert elastic.named([f"h{i}" for i in range(count)]) == expected
