"""Pure Slurm layout logic: tasks per node, modes, ports, rank facts for the bootstrap."""

from __future__ import annotations

import pytest

from dslaunch.bootstrap.env import detect
from dslaunch.slurmlib import layout
from dslaunch.slurmlib.srun import owned_option

STEP_ENV = {
    "SLURM_JOB_ID": "4242",
    "SLURM_STEP_ID": "3",
    "SLURM_PROCID": "5",
    "SLURM_LOCALID": "1",
    "SLURM_NODEID": "2",
    "SLURM_NTASKS": "6",
    "SLURM_STEP_NUM_TASKS": "6",
    "SLURM_STEP_NODELIST": "gpu[01-03]",
    "SLURM_JOB_NODELIST": "gpu[01-04]",
    "SLURM_STEP_TASKS_PER_NODE": "2(x3)",
    "SLURMD_NODENAME": "gpu03",
    "MASTER_ADDR": "10.0.0.1",  # keeps detect() from resolving gpu01
}


@pytest.mark.parametrize(
    ("text", "counts"),
    [
        ("1", (1,)),
        ("2(x3)", (2, 2, 2)),
        ("2(x2),1", (2, 2, 1)),
        ("4,3,3", (4, 3, 3)),
    ],
)
def test_tasks_per_node(text: str, counts: tuple[int, ...]) -> None:
    assert layout.parse_tasks_per_node(text) == counts


@pytest.mark.parametrize("bad", ["", "x", "2(x)", "2(3)", "-1"])
def test_bad_tasks_per_node(bad: str) -> None:
    with pytest.raises(layout.SlurmLayoutError):
        layout.parse_tasks_per_node(bad)


def test_read_step() -> None:
    step = layout.read_step(STEP_ENV)
    assert step.hosts == ("gpu01", "gpu02", "gpu03")  # the step's nodes, not the job's
    assert (step.job_id, step.step_id, step.procid, step.localid, step.nodeid) == (4242, 3, 5, 1, 2)
    assert step.tasks_per_node == (2, 2, 2) and step.uniform_tasks == 2


def test_step_and_allocation_detection() -> None:
    assert layout.in_step(STEP_ENV)
    batch = {"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_JOB_NODELIST": "n[1-2]"}
    assert layout.in_allocation(batch) and not layout.in_step(batch)  # an sbatch script is no step
    assert not layout.in_allocation({"SLURM_PROCID": "0"})


def _step(tpn: str, hosts: str = "n[1-2]") -> layout.SlurmStep:
    counts = layout.parse_tasks_per_node(tpn)
    env = {
        **STEP_ENV,
        "SLURM_STEP_NODELIST": hosts,
        "SLURM_STEP_TASKS_PER_NODE": tpn,
        "SLURM_STEP_NUM_TASKS": str(sum(counts)),
        "SLURM_PROCID": "0",
        "SLURM_NODEID": "0",
    }
    return layout.read_step(env)


@pytest.mark.parametrize(
    ("tpn", "nproc", "mode"),
    [
        ("1(x2)", None, "node"),
        ("1(x2)", 4, "node"),
        ("1(x2)", "auto", "node"),
        ("2(x2)", None, "rank"),
        ("2(x2)", 1, "rank"),
    ],
)
def test_step_mode(tpn: str, nproc: int | str | None, mode: str) -> None:
    assert layout.step_mode(_step(tpn), nproc) == mode


@pytest.mark.parametrize(
    ("tpn", "nproc", "words"),
    [
        (
            "2(x2)",
            2,
            ["double spawn", "--ntasks-per-node=1 dslaunch --nproc-per-node 2", "--ntasks-per-node=2 dslaunch"],
        ),
        ("4(x2)", "auto", ["double spawn", "without --nproc-per-node"]),
        ("2,1", None, ["different number of tasks", "--ntasks-per-node=1", "--ntasks-per-node=N"]),
    ],
)
def test_ambiguous_layouts_are_refused_with_srun_advice(tpn: str, nproc: int | str | None, words: list[str]) -> None:
    with pytest.raises(layout.SlurmLayoutError) as err:
        layout.step_mode(_step(tpn), nproc)
    for word in words:
        assert word in str(err.value)


def test_port_is_deterministic_in_range_and_distinct_for_nearby_jobs() -> None:
    assert layout.derive_port(1234, 0) == layout.derive_port(1234, 0)
    ports = {layout.derive_port(job, step) for job in range(10_000, 10_375) for step in range(16)}
    assert len(ports) == 375 * 16
    assert all(layout.PORT_BASE <= p < layout.PORT_BASE + layout.PORT_SPAN for p in ports)
    assert max(ports) < 32768  # below Linux's ephemeral range
    # each step's stop channel (the port above its store's) is no other step's store
    channels = {layout.stop_channel_port(p) for p in ports}
    assert not channels & ports and max(channels) < 32768


@pytest.mark.parametrize(("store", "channel"), [(29500, 29501), (20000, 20001), (65535, 65534)])
def test_stop_channel_port_is_next_to_the_stores(store: int, channel: int) -> None:
    assert layout.stop_channel_port(store) == channel


def test_bootstrap_detect_reads_slurm() -> None:
    info = detect(STEP_ENV)
    assert (info.rank, info.local_rank, info.world_size, info.local_world_size, info.node_rank) == (5, 1, 6, 2, 2)
    assert info.master_addr == "10.0.0.1" and info.source == "slurm"
    assert info.master_port == layout.derive_port(4242, 3)
    no_addr = {k: v for k, v in STEP_ENV.items() if k != "MASTER_ADDR"}
    no_addr["SLURM_STEP_NODELIST"] = "localhost,gpu[02-03]"
    assert detect(no_addr).master_addr == "localhost"


def test_bootstrap_detect_ignores_a_batch_script() -> None:
    info = detect({"SLURM_JOB_ID": "7", "SLURM_PROCID": "0", "SLURM_NTASKS": "4", "SLURM_JOB_NODELIST": "n[1-2]"})
    assert info.source == "single" and info.world_size == 1


@pytest.mark.parametrize(
    ("args", "owned"),
    [
        (["--mpi=pmix", "--cpu-bind=cores"], None),
        (["-N", "2"], "-N"),
        (["--nodes=3"], "--nodes=3"),
        (["-n4"], "-n4"),
        (["-wn1"], "-wn1"),
        (["--ntasks-per-node=2"], "--ntasks-per-node=2"),
        (["--nodelist", "n1"], "--nodelist"),
    ],
)
def test_owned_srun_options(args: list[str], owned: str | None) -> None:
    assert owned_option(args) == owned
