"""Fuzz the whole CLI in-process: any hostfile and filter gives a plan (exit 0) or a clean usage error (exit 2)."""

from __future__ import annotations

from pathlib import Path

import click
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.plans import dry_run_json

LINES = st.one_of(
    st.text(alphabet="wab01 =#\tslot", max_size=20),
    st.builds(lambda h, n: f"{h} slots={n}", st.sampled_from(["a", "b", "user@c", "a"]), st.integers(0, 4)),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(LINES, max_size=5),
    flt=st.one_of(st.none(), st.tuples(st.sampled_from(["-i", "-e"]), st.text(alphabet="ab01:,@-", max_size=12))),
    nproc=st.one_of(st.none(), st.sampled_from(["1", "2", "auto", "0", "x", "-1"])),
)
def test_cli_plan_or_usage_error(
    tmp_path: Path, lines: list[str], flt: tuple[str, str] | None, nproc: str | None
) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("\n".join(lines))
    args = ["--launcher", "local", "-H", str(hosts)]
    if flt:
        args += list(flt)
    if nproc:
        args += ["--nproc-per-node", nproc]
    try:
        plan = dry_run_json([*args, "train.py"], env={"CUDA_VISIBLE_DEVICES": ""})
    except click.ClickException as exc:  # anything else is a crash, and fails the test
        assert exc.exit_code == 2 and exc.format_message()
        return
    ranks = [r for node in plan["nodes"] for r in node["ranks"]]
    assert ranks == list(range(plan["world_size"])) and ranks
